//! `toolonce ls | show | purge`: look into a store and tidy it (the commands that settle or
//! delete one entry, `resolve` and `rm`, live in settle.rs). Human tables by default, one JSON
//! document with `--json`.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use toolonce::{Entry, EntryState, OperationKey, State, owner_digest};

use crate::args::StoreArg;
use crate::exit;
use crate::output::{self, Align, Table, out, outln};

mod listing;

pub(crate) use listing::{Filters, Listing, newest};

#[derive(clap::Args)]
pub(crate) struct LsArgs {
    #[command(flatten)]
    store: StoreArg,
    /// Only entries in this state. `unknown`: a run whose lease expired before it recorded an
    /// outcome (it may or may not have taken effect; settle it with `toolonce resolve`).
    #[arg(long, value_parser = ["running", "done", "failed", "unknown"])]
    state: Option<String>,
    /// Only entries of this scope (as recorded by the call that created them).
    #[arg(long, value_name = "SCOPE")]
    scope: Option<String>,
    /// Only entries of this tool (exec: the --name; MCP proxy: the server's tool name).
    #[arg(long, value_name = "TOOL")]
    tool: Option<String>,
    /// Show at most the N newest entries.
    #[arg(long, value_name = "N", default_value_t = 100)]
    limit: usize,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub(crate) struct ShowArgs {
    #[command(flatten)]
    store: StoreArg,
    /// The operation key (`idem:` and 32 hex digits; `toolonce key` prints it).
    key: String,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub(crate) struct PurgeArgs {
    #[command(flatten)]
    store: StoreArg,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn ls(a: LsArgs) -> anyhow::Result<ExitCode> {
    let filters = Filters {
        state: a.state.as_deref().map(str::parse).transpose()?,
        scope: a.scope,
        tool: a.tool,
    };
    let store = a.store.open_existing().await?;
    let Listing {
        entries,
        matched,
        unreadable,
    } = newest(store.as_ref(), &filters, a.limit).await?;
    let more = matched > a.limit;
    let now = SystemTime::now();
    if a.json {
        let list: Vec<Value> = entries.iter().map(|e| summary(e, now)).collect();
        outln!(
            "{}",
            json!({"entries": list, "more": more, "unreadable": unreadable.json()})
        );
        return Ok(unreadable.exit_code());
    }
    if entries.is_empty() {
        outln!("no entries");
        unreadable.print()?;
        return Ok(unreadable.exit_code());
    }
    out!("{}", ls_table(&entries, now).render());
    if more {
        outln!(
            "({} more matching entries: raise --limit to see them)",
            matched - entries.len()
        );
    }
    unreadable.print()?;
    Ok(unreadable.exit_code())
}

/// The listing as a table, one entry a row.
fn ls_table(entries: &[Entry], now: SystemTime) -> Table {
    let mut table = Table::new(
        &[
            ("KEY", Align::Left),
            ("STATE", Align::Left),
            ("SCOPE", Align::Left),
            ("TOOL", Align::Left),
            ("ATTEMPTS", Align::Right),
            ("AGE", Align::Right),
            ("EXPIRES IN", Align::Right),
            ("SIZE", Align::Right),
        ],
        "  ",
    );
    for e in entries {
        table.row(vec![
            e.key.to_string(),
            e.state().to_string(),
            cell(e.about.scope.as_deref()),
            cell(e.about.tool.as_deref()),
            if e.attempts == 0 {
                "-".into()
            } else {
                e.attempts.to_string()
            },
            output::duration(since(e.started_at, now)),
            match (e.state(), e.expires_at) {
                // Its lease is over; it stays until resolved or its retention ends.
                (State::Unknown, _) | (_, None) => "-".into(),
                (_, Some(t)) => output::duration(until(t, now)),
            },
            payload(e).map_or("-".into(), |p| format!("{} B", p.to_string().len())),
        ]);
    }
    table
}

/// The owner as a person is shown it: a digest (see `owner_digest`), `-` when none.
pub(crate) fn owner_cell(owner: Option<&str>) -> String {
    owner.map_or("-".into(), |o| format!("#{}", owner_digest(o)))
}

fn cell(text: Option<&str>) -> String {
    match text {
        Some(t) if !t.is_empty() => t.to_owned(),
        _ => "-".into(),
    }
}

pub(crate) async fn show(a: ShowArgs) -> anyhow::Result<ExitCode> {
    let key: OperationKey = a.key.parse()?;
    let store = a.store.open_existing().await?;
    let Some(entry) = store.get(&key).await? else {
        return absent(&key, a.json);
    };
    let now = SystemTime::now();
    let doc = show_json(&entry, now)?;
    if a.json {
        outln!("{doc}");
        return Ok(ExitCode::SUCCESS);
    }
    print_fields(&entry, now)?;
    print_outcome(&entry)?;
    Ok(ExitCode::SUCCESS)
}

/// `show --json`: the summary, with the owner's digest, the result or the error.
fn show_json(entry: &Entry, now: SystemTime) -> anyhow::Result<Value> {
    let mut doc = summary(entry, now);
    match &entry.state {
        // The owner token is its holder's secret (anyone with it could settle the entry): a
        // digest tells owners apart without giving it away.
        EntryState::Running { owner } | EntryState::Unknown { owner } => {
            doc["owner_digest"] = json!(owner.as_deref().map(owner_digest))
        }
        EntryState::Done { result, .. } => doc["result"] = result.to_value(),
        EntryState::Failed { error, .. } => {
            doc["error"] = serde_json::to_value(error).map_err(exit::internal)?
        }
        _ => {}
    }
    Ok(doc)
}

/// What `show` says of every entry: its names, attempts and times.
fn print_fields(entry: &Entry, now: SystemTime) -> anyhow::Result<()> {
    let at = |t: SystemTime| {
        if t <= now {
            format!(
                "{} ({} ago)",
                output::timestamp(t),
                output::duration(since(t, now))
            )
        } else {
            format!(
                "{} (in {})",
                output::timestamp(t),
                output::duration(until(t, now))
            )
        }
    };
    outln!("key            {}", entry.key);
    outln!("state          {}", entry.state());
    outln!("scope          {}", cell(entry.about.scope.as_deref()));
    outln!("tool           {}", cell(entry.about.tool.as_deref()));
    if let Some(detail) = &entry.about.detail {
        outln!("detail         {detail}");
    }
    if let Some(fp) = &entry.fingerprint {
        outln!("fingerprint    {fp}");
    }
    if entry.attempts > 0 {
        outln!("attempts       {}", entry.attempts);
    }
    if let Some(t) = entry.first_started_at {
        outln!("first started  {}", at(t));
    }
    outln!("started        {}", at(entry.started_at));
    match (entry.state(), entry.expires_at) {
        (State::Running, Some(t)) => outln!("lease until    {}", at(t)),
        (State::Unknown, Some(t)) => outln!("lease ended    {}", at(t)),
        (_, Some(t)) => outln!("expires        {}", at(t)),
        (_, None) => {}
    }
    if let Some(t) = entry.settled_at {
        outln!("settled        {}", at(t));
    }
    Ok(())
}

/// What `show` says of the entry's state: its owner, result, error, or how to settle it.
fn print_outcome(entry: &Entry) -> anyhow::Result<()> {
    match &entry.state {
        EntryState::Running { owner } => {
            outln!("owner          {}", owner_cell(owner.as_deref()));
        }
        EntryState::Unknown { owner } => {
            outln!("owner          {}", owner_cell(owner.as_deref()));
            out!(
                "{}",
                output::wrap(
                    "",
                    &format!(
                        "Its run ended without recording an outcome: it may or may not have \
                         taken effect. Check, then `toolonce resolve {} --done JSON | --failed \
                         MESSAGE | --release`.",
                        entry.key
                    ),
                    96
                )
            );
        }
        EntryState::Done { result, .. } => {
            outln!(
                "result\n{}",
                serde_json::to_string_pretty(result).map_err(exit::internal)?
            );
        }
        EntryState::Failed { error, .. } => {
            outln!(
                "error          {} ({})",
                error.message,
                if error.is_transient() {
                    "transient"
                } else {
                    "permanent"
                }
            );
            if let Some(detail) = &error.detail {
                outln!(
                    "detail\n{}",
                    serde_json::to_string_pretty(detail).map_err(exit::internal)?
                );
            }
        }
        _ => {}
    }
    Ok(())
}

pub(crate) async fn purge(a: PurgeArgs) -> anyhow::Result<ExitCode> {
    let store = a.store.open_existing().await?;
    let removed = store.purge_expired().await?;
    if a.json {
        outln!("{}", json!({"removed": removed}));
    } else {
        outln!("removed {removed} expired entries");
    }
    Ok(ExitCode::SUCCESS)
}

/// The answer for a key without a live entry: exit 66, a message on stderr (and the JSON
/// document on stdout for scripts).
pub(crate) fn absent(key: &OperationKey, json: bool) -> anyhow::Result<ExitCode> {
    if json {
        outln!("{}", json!({"key": key, "found": false}));
    }
    eprintln!("toolonce: no live entry for {key}");
    Ok(ExitCode::from(exit::NOT_FOUND))
}

/// What an entry holds: the result when done, the error when failed.
pub(crate) fn payload(entry: &Entry) -> Option<Value> {
    match &entry.state {
        EntryState::Running { .. } | EntryState::Unknown { .. } => None,
        EntryState::Done { result, .. } => Some(result.to_value()),
        EntryState::Failed { error, .. } => serde_json::to_value(error).ok(),
        _ => None,
    }
}

/// The fields `ls --json` gives for each entry (and `show --json` starts from). A field the
/// writer did not record (an older version, another implementation) is `null`.
pub(crate) fn summary(entry: &Entry, now: SystemTime) -> Value {
    let unknown = entry.state() == State::Unknown;
    json!({
        "key": entry.key,
        "state": entry.state().as_str(),
        "scope": entry.about.scope,
        "tool": entry.about.tool,
        "detail": entry.about.detail,
        "attempts": (entry.attempts > 0).then_some(entry.attempts),
        "fingerprint": entry.fingerprint,
        "first_started_at": entry.first_started_at.map(output::timestamp),
        "started_at": output::timestamp(entry.started_at),
        "age_ms": millis(since(entry.started_at, now)),
        "settled_at": entry.settled_at.map(output::timestamp),
        // An unknown entry's deadline is its lease's, which has passed: it is kept until
        // resolved or its retention ends, which the store does not report.
        "lease_expired_at": entry.expires_at.filter(|_| unknown).map(output::timestamp),
        "expires_at": entry.expires_at.filter(|_| !unknown).map(output::timestamp),
        "expires_in_ms": entry.expires_at.filter(|_| !unknown).map(|t| millis(until(t, now))),
        "size": payload(entry).map(|p| p.to_string().len()),
    })
}

pub(crate) fn since(t: SystemTime, now: SystemTime) -> Duration {
    now.duration_since(t).unwrap_or_default()
}

pub(crate) fn until(t: SystemTime, now: SystemTime) -> Duration {
    t.duration_since(now).unwrap_or_default()
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
