//! `toolonce ls | show | purge`: look into a store and tidy it (the commands that settle or
//! delete one entry, `resolve` and `rm`, live in settle.rs). Human tables by default, one JSON
//! document with `--json`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use toolonce::{Entry, EntryState, ListQuery, OperationKey, State, Unreadable, owner_digest};

use crate::args::StoreArg;
use crate::exit;
use crate::output::{self, Align, Table, out, outln};

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
    let state: Option<State> = a.state.as_deref().map(str::parse).transpose()?;
    let store = a.store.open_existing().await?;
    let (entries, matched, unreadable) = newest(&a, state, store.as_ref()).await?;
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

/// The newest `--limit` entries that match the filters, newest first; how many matched; and
/// the entries that could not be read.
async fn newest(
    a: &LsArgs,
    state: Option<State>,
    store: &dyn toolonce::Store,
) -> anyhow::Result<(Vec<Entry>, usize, Unreadables)> {
    // Stores list in key order: every matching entry is read, and the newest `limit` kept, so
    // memory stays bounded by the limit whatever the size of the store.
    let mut newest: BinaryHeap<Reverse<Newest>> = BinaryHeap::new();
    let mut matched = 0usize;
    let mut unreadable = Unreadables::default();
    let mut cursor = None;
    loop {
        let mut query = ListQuery::new().limit(500);
        if let Some(state) = state {
            query = query.state(state);
        }
        if let Some(scope) = &a.scope {
            query = query.scope(scope.clone());
        }
        if let Some(tool) = &a.tool {
            query = query.tool(tool.clone());
        }
        if let Some(c) = cursor.take() {
            query = query.cursor(c);
        }
        let page = store.list(&query).await?;
        unreadable.count += page.unreadable.len();
        unreadable.kept.extend(page.unreadable);
        unreadable.kept.truncate(a.limit.max(1));
        for entry in page.entries.into_iter().filter(|e| listed(a, state, e)) {
            matched += 1;
            newest.push(Reverse(Newest(entry)));
            if newest.len() > a.limit {
                newest.pop();
            }
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    // Newest first.
    let entries = newest
        .into_sorted_vec()
        .into_iter()
        .map(|Reverse(Newest(e))| e)
        .collect();
    Ok((entries, matched, unreadable))
}

/// Whether an entry the store listed matches the filters. The store filters; checked again
/// here so that a store of another implementation (or an older version) that ignores a filter
/// cannot show an operator the wrong entries.
fn listed(a: &LsArgs, state: Option<State>, entry: &Entry) -> bool {
    !(state.is_some_and(|s| entry.state() != s)
        || a.scope
            .as_ref()
            .is_some_and(|s| entry.about.scope.as_ref() != Some(s))
        || a.tool
            .as_ref()
            .is_some_and(|t| entry.about.tool.as_ref() != Some(t)))
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

/// The entries a listing could not decode: the first `--limit` kept, all counted. Shown
/// unless the store could tell the filters exclude them.
#[derive(Default)]
struct Unreadables {
    kept: Vec<Unreadable>,
    count: usize,
}

impl Unreadables {
    fn json(&self) -> Value {
        let kept: Vec<Value> = self
            .kept
            .iter()
            .map(|u| json!({"key": u.key, "reason": u.reason}))
            .collect();
        json!({"entries": kept, "count": self.count})
    }

    fn print(&self) -> anyhow::Result<()> {
        if self.count == 0 {
            return Ok(());
        }
        outln!(
            "\n{} {} cannot be read (stored in a form this version does not decode). A call of \
             such an operation is answered that its outcome cannot be read, never run again, \
             until the entry's retention ends:",
            self.count,
            if self.count == 1 { "entry" } else { "entries" }
        );
        for u in &self.kept {
            outln!("  {}  {}", u.key, u.reason);
        }
        if self.count > self.kept.len() {
            outln!(
                "  ({} more: raise --limit to see them)",
                self.count - self.kept.len()
            );
        }
        Ok(())
    }

    /// Success when every entry was read; otherwise the code of an entry toolonce cannot read
    /// (70), after the whole listing, with the first on stderr for a script's log.
    fn exit_code(&self) -> ExitCode {
        let Some(first) = self.kept.first() else {
            return ExitCode::SUCCESS;
        };
        eprintln!(
            "toolonce: {} listed {} cannot be read; the first: {}",
            self.count,
            if self.count == 1 { "entry" } else { "entries" },
            toolonce::Error::corrupt(&first.key, &first.reason)
        );
        ExitCode::from(exit::INTERNAL)
    }
}

/// An entry ordered by the start of its latest attempt (then by key, so the order is total).
struct Newest(Entry);

impl Newest {
    fn rank(&self) -> (SystemTime, &str) {
        (self.0.started_at, self.0.key.as_str())
    }
}

impl PartialEq for Newest {
    fn eq(&self, other: &Self) -> bool {
        self.rank() == other.rank()
    }
}

impl Eq for Newest {}

impl PartialOrd for Newest {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Newest {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.rank().cmp(&other.rank())
    }
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
