//! `toolonce resolve | rm`: the operator commands that settle or delete one entry. Each reads
//! the entry first, says what it saw, and acts only on that (rule 6): the store compares the
//! attempt and owner seen ([`Store::resolve`]), or the settled entry seen ([`Store::remove`]),
//! in the same atomic step as its write, so a claim made after the read (the agent's retry
//! after another operator's release or removal) or a live owner's claim is never settled or
//! deleted by mistake. A write whose answer was lost is reported as such: it may have applied.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::bail;
use serde_json::{Value, json};
use toolonce::{
    Entry, EntryState, OperationKey, Removed, Resolution, Resolved, Seen, SeenSettled, State,
    ToolError,
};

use crate::args::{self, StoreArg};
use crate::exit;
use crate::inspect::{absent, owner_cell, since, until};
use crate::output::{self, outln};

#[derive(clap::Args)]
pub(crate) struct RmArgs {
    #[command(flatten)]
    store: StoreArg,
    /// The operation key. A live claim (running, its lease not over) is refused unless
    /// --force: deleting it lets a duplicate run beside its owner.
    key: String,
    /// Also delete a live claim (its owner is running it): only the attempt read.
    #[arg(long)]
    force: bool,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

const RESOLVE_NOTES: &str = "\
resolve settles an operation whose outcome nobody recorded: an `unknown` entry (its run ended
without recording how, so a duplicate under the hold policy is not run). Check the downstream
system first (was the email sent, the deploy done?), then:

  --done JSON      it took effect: duplicates replay JSON as its result. For `exec`, a record
                   {\"exit_code\": 0, \"stdout\": \"...\", \"stderr\": \"\"} replays as if the
                   command had run; any other value is printed on stdout, exit 0.
  --failed MESSAGE it failed: duplicates replay the failure (exec: MESSAGE on stderr, exit 1).
  --release        it did not take effect: the entry is forgotten and the next call runs the
                   operation again, with the same key.

resolve acts only on the entry it read, and says which (its state, attempt and a digest of its
owner): if the entry changed before the write (taken over, or released by another operator and
claimed again), nothing is changed, exit 68. A `running` entry whose lease is live belongs to
an owner that is alive and renewing it: it is refused with when its lease ends, exit 68; wait,
or, for an owner that is stuck (hung, not dead), add --force, which acts on that attempt only.
resolve never overwrites an outcome: an entry that is done or failed already (perhaps settled
by its own run or another operator since you looked) is left as it is, exit 67.";

#[derive(clap::Args)]
#[command(
    after_long_help = RESOLVE_NOTES,
    group(clap::ArgGroup::new("resolution").required(true).args(["done", "failed", "release"]))
)]
pub(crate) struct ResolveArgs {
    #[command(flatten)]
    store: StoreArg,
    /// The operation key (`toolonce ls --state unknown` lists them).
    key: String,
    /// It took effect: record it as done with this result (JSON).
    #[arg(long, value_name = "JSON")]
    done: Option<String>,
    /// It failed: record it as failed with this message.
    #[arg(long, value_name = "MESSAGE")]
    failed: Option<String>,
    /// It did not take effect: forget it, so the next call runs the operation again.
    #[arg(long)]
    release: bool,
    /// Also settle a live claim (running, its lease not over: its owner is stuck but renewing
    /// it): only the attempt read.
    #[arg(long)]
    force: bool,
    /// How long a recorded outcome is kept and replayed.
    #[arg(long, value_name = "SECONDS", value_parser = args::retention, default_value = "86400")]
    retention: Duration,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn resolve(a: ResolveArgs) -> anyhow::Result<ExitCode> {
    // All input is checked before the store is opened.
    let key: OperationKey = a.key.parse()?;
    let resolution = match (&a.done, &a.failed) {
        (Some(text), _) => Resolution::Done(done_value(text)?),
        (_, Some(message)) if message.trim().is_empty() => {
            bail!("--failed needs a message saying what happened")
        }
        (_, Some(message)) => Resolution::Failed(ToolError::permanent(message.clone())),
        (None, None) => Resolution::Release,
    };
    let store = a.store.open_existing().await?;
    let Some(entry) = store.get(&key).await? else {
        return absent(&key, a.json);
    };
    let seen = match seen_of(&entry, a.force) {
        Ok(seen) => seen,
        Err(refused) => return refusal(&key, refused, a.json),
    };
    let what = described(&entry);
    let seen_doc = json!({
        "state": entry.state().as_str(),
        "attempts": (entry.attempts > 0).then_some(entry.attempts),
        "owner_digest": seen.owner_digest(),
    });
    let resolved = store.resolve(&key, &seen, &resolution, a.retention).await;
    match unknown_if_lost(resolved, "resolution", &key)? {
        Resolved::Applied => {
            let (word, result) = match &resolution {
                Resolution::Done(_) => ("done", "recorded as done: duplicates replay it"),
                Resolution::Failed(_) => ("failed", "recorded as failed: duplicates replay it"),
                _ => (
                    "released",
                    "released: the next call runs the operation again",
                ),
            };
            if a.json {
                outln!(
                    "{}",
                    json!({"key": key, "resolved": word, "seen": seen_doc})
                );
            } else {
                outln!("{key} ({what}) {result}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Resolved::Absent => absent(&key, a.json),
        other => refusal(&key, Refused::from_store(other, &what)?, a.json),
    }
}

pub(crate) async fn rm(a: RmArgs) -> anyhow::Result<ExitCode> {
    let key: OperationKey = a.key.parse()?;
    let store = a.store.open_existing().await?;
    let Some(entry) = store.get(&key).await? else {
        return absent(&key, a.json);
    };
    let what = described(&entry);
    let removed = match SeenSettled::of(&entry) {
        // A settled entry holds no claim: deleting it lets the next call run, which is what
        // `rm` is for. Only the entry read, though: one deleted and claimed again since then
        // is the agent's retry, and deleting it would let a third run happen.
        Some(seen) => match unknown_if_lost(store.remove(&key, &seen).await, "removal", &key)? {
            Removed::Applied => true,
            Removed::Absent => false,
            Removed::Changed(now) => {
                return refusal(&key, Refused::Changed { was: what, now }, a.json);
            }
            _ => return Err(exit::internal(anyhow::anyhow!(UNEXPECTED))),
        },
        // An unsettled one is deleted only as the attempt read: a fenced release.
        None => {
            let seen = match seen_of(&entry, a.force) {
                Ok(seen) => seen,
                Err(refused) => return refusal(&key, refused, a.json),
            };
            let released = store
                .resolve(&key, &seen, &Resolution::Release, Duration::ZERO)
                .await;
            match unknown_if_lost(released, "removal", &key)? {
                Resolved::Applied => true,
                Resolved::Absent => false,
                other => return refusal(&key, Refused::from_store(other, &what)?, a.json),
            }
        }
    };
    if !removed {
        return absent(&key, a.json);
    }
    if a.json {
        outln!("{}", json!({"key": key, "removed": true}));
    } else {
        outln!("removed {key}");
    }
    Ok(ExitCode::SUCCESS)
}

const UNEXPECTED: &str = "unexpected answer from the store to a fenced write";

/// The answer of a fenced write, or, when the store failed before it answered (unreachable,
/// or the reply lost), an error that says so: the write may have been applied, so "nothing
/// was done" would be untrue. Exit 73, as for any outcome nobody can know.
fn unknown_if_lost<T>(
    answer: toolonce::Result<T>,
    what: &str,
    key: &OperationKey,
) -> anyhow::Result<T> {
    match answer {
        Err(e @ (toolonce::Error::Unavailable(_) | toolonce::Error::Store(_))) => {
            let report = toolonce::error_report(&e);
            Err(exit::with_code(
                exit::UNKNOWN,
                anyhow::anyhow!(
                    "the {what} of {key} may or may not have been applied: the store failed \
                     before it answered ({report}). Run `toolonce show {key}` to see the entry \
                     as it is now."
                ),
            ))
        }
        other => Ok(other?),
    }
}

/// Why an operator command did not act, with the entry it found.
enum Refused {
    /// Done or failed already.
    Settled(Entry),
    /// A live claim: its owner is running it.
    Live(Entry),
    /// Another attempt than the one read (`was` describes the one read).
    Changed { was: String, now: Entry },
}

impl Refused {
    fn from_store(answer: Resolved, was: &str) -> anyhow::Result<Refused> {
        Ok(match answer {
            Resolved::Settled(entry) => Refused::Settled(entry),
            Resolved::Live(entry) => Refused::Live(entry),
            Resolved::Changed(now) => Refused::Changed {
                was: was.to_owned(),
                now,
            },
            _ => {
                return Err(exit::internal(anyhow::anyhow!(UNEXPECTED)));
            }
        })
    }
}

/// The attempt to act on: an unknown entry, or a live one with `--force`.
// The refusal is matched at once and never stored: boxing it would only add an allocation.
#[allow(clippy::result_large_err)]
fn seen_of(entry: &Entry, force: bool) -> Result<Seen, Refused> {
    let Some(seen) = Seen::of(entry) else {
        return Err(Refused::Settled(entry.clone()));
    };
    match entry.state() {
        State::Running if !force => Err(Refused::Live(entry.clone())),
        State::Running => Ok(seen.even_if_live()),
        _ => Ok(seen),
    }
}

/// What an entry is, for a person: its state, attempt and owner digest (once settled, when
/// it settled instead of the owner).
fn described(entry: &Entry) -> String {
    let attempt = if entry.attempts == 0 {
        "-".into()
    } else {
        entry.attempts.to_string()
    };
    let holder = match &entry.state {
        EntryState::Running { owner } | EntryState::Unknown { owner } => {
            format!("owner {}", owner_cell(owner.as_deref()))
        }
        _ => match entry.settled_at {
            Some(t) => format!("settled at {}", output::timestamp(t)),
            None => "settled at -".into(),
        },
    };
    format!("{}, attempt {attempt}, {holder}", entry.state())
}

/// Says why nothing was changed, on stderr (and as JSON on stdout with `--json`), and picks
/// the exit code: 67 for a settled entry, 68 for a live claim or a changed one.
fn refusal(key: &OperationKey, refused: Refused, json: bool) -> anyhow::Result<ExitCode> {
    let now = SystemTime::now();
    let (state, code, message) = match &refused {
        Refused::Settled(entry) => {
            let when = entry
                .settled_at
                .map(|t| format!(" (settled {} ago)", output::duration(since(t, now))))
                .unwrap_or_default();
            (
                entry.state(),
                exit::SETTLED,
                format!(
                    "{key} is already {}{when}, perhaps since you last looked; nothing was \
                     changed. `toolonce show {key}` shows its outcome; `toolonce rm {key}` \
                     forgets it.",
                    entry.state()
                ),
            )
        }
        Refused::Live(entry) => {
            let lease = match entry.expires_at {
                Some(t) => format!(
                    "its lease ends in {} (at {})",
                    output::duration(until(t, now)),
                    output::timestamp(t)
                ),
                None => "its writer recorded no lease end".into(),
            };
            (
                State::Running,
                exit::LIVE,
                format!(
                    "{key} is running; {lease}; nothing was changed. Its owner ({}) is alive and \
                     renewing the claim: wait for it to settle, or for its lease to end if it \
                     died. Only for an owner that is stuck (hung, not dead), --force acts on \
                     this claim anyway.",
                    described(entry)
                ),
            )
        }
        Refused::Changed { was, now: entry } => (
            entry.state(),
            exit::LIVE,
            format!(
                "{key} changed since it was read: it was {was}, it is now {}; nothing was \
                 changed. Look again with `toolonce show {key}`.",
                described(entry)
            ),
        ),
    };
    if json {
        let mut doc = json!({"key": key, "resolved": false, "state": state.as_str()});
        if let Refused::Live(entry) = &refused {
            doc["lease_ends_at"] = json!(entry.expires_at.map(output::timestamp));
        }
        outln!("{doc}");
    }
    eprintln!("toolonce: {message}");
    Ok(ExitCode::from(code))
}

/// `--done JSON`; text that does not even start like JSON gets the JSON string it may have
/// meant in the error.
fn done_value(text: &str) -> anyhow::Result<Value> {
    args::read_value(text, "--done").map_err(|e| {
        let starts_like_json = text.trim_start().starts_with(['{', '[', '"']);
        match serde_json::to_string(text) {
            Ok(quoted) if !starts_like_json && text != "-" => anyhow::anyhow!(
                "{e:#}; --done takes JSON: to record a text, give it as a JSON string: --done \
                 '{}'",
                quoted.replace('\'', r"'\''")
            ),
            _ => e,
        }
    })
}
