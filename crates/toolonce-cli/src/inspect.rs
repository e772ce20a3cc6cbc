//! `toolonce ls | show | rm | purge`: look into a store and tidy it. Human tables by default,
//! one JSON document with `--json`.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use toolonce::{Entry, EntryState, ListQuery, OperationKey, State};

use crate::args::StoreArg;
use crate::exit;
use crate::output::{self, Align, Table, out, outln};

#[derive(clap::Args)]
pub(crate) struct LsArgs {
    #[command(flatten)]
    store: StoreArg,
    /// Only entries in this state.
    #[arg(long, value_parser = ["running", "done", "failed"])]
    state: Option<String>,
    /// Show at most N entries (in key order).
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
pub(crate) struct RmArgs {
    #[command(flatten)]
    store: StoreArg,
    /// The operation key. Deleting a running entry lets a duplicate run at once.
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
    let store = a.store.open().await?;
    let mut entries = Vec::new();
    let mut cursor = None;
    let mut more = false;
    // Page through until the limit; one extra entry tells whether there are more.
    while entries.len() <= a.limit {
        let mut query = ListQuery::new().limit((a.limit + 1 - entries.len()).min(500));
        if let Some(state) = state {
            query = query.state(state);
        }
        if let Some(c) = cursor.take() {
            query = query.cursor(c);
        }
        let page = store.list(&query).await?;
        entries.extend(page.entries);
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    if entries.len() > a.limit {
        entries.truncate(a.limit);
        more = true;
    }
    let now = SystemTime::now();
    if a.json {
        let list: Vec<Value> = entries.iter().map(|e| summary(e, now)).collect();
        outln!("{}", json!({"entries": list, "more": more}));
        return Ok(ExitCode::SUCCESS);
    }
    if entries.is_empty() {
        outln!("no entries");
        return Ok(ExitCode::SUCCESS);
    }
    let mut table = Table::new(
        &[
            ("KEY", Align::Left),
            ("STATE", Align::Left),
            ("AGE", Align::Right),
            ("EXPIRES IN", Align::Right),
            ("SIZE", Align::Right),
        ],
        "  ",
    );
    for e in &entries {
        table.row(vec![
            e.key.to_string(),
            e.state().to_string(),
            output::duration(since(e.started_at, now)),
            e.expires_at
                .map_or("-".into(), |t| output::duration(until(t, now))),
            payload(e).map_or("-".into(), |p| format!("{} B", p.to_string().len())),
        ]);
    }
    out!("{}", table.render());
    if more {
        outln!("(more entries: raise --limit to see them)");
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn show(a: ShowArgs) -> anyhow::Result<ExitCode> {
    let key: OperationKey = a.key.parse()?;
    let store = a.store.open().await?;
    let Some(entry) = store.get(&key).await? else {
        return absent(&key, a.json);
    };
    let now = SystemTime::now();
    let mut doc = summary(&entry, now);
    match &entry.state {
        EntryState::Running { owner } | EntryState::Unknown { owner } => {
            doc["owner"] = json!(owner)
        }
        EntryState::Done { result, .. } => doc["result"] = result.clone(),
        EntryState::Failed { error, .. } => {
            doc["error"] = serde_json::to_value(error).map_err(exit::internal)?
        }
        _ => {}
    }
    if a.json {
        outln!("{doc}");
        return Ok(ExitCode::SUCCESS);
    }
    outln!("key          {}", entry.key);
    outln!("state        {}", entry.state());
    if let Some(fp) = &entry.fingerprint {
        outln!("fingerprint  {fp}");
    }
    outln!(
        "started      {} ({} ago)",
        output::timestamp(entry.started_at),
        output::duration(since(entry.started_at, now))
    );
    if let Some(t) = entry.expires_at {
        outln!(
            "expires      {} (in {})",
            output::timestamp(t),
            output::duration(until(t, now))
        );
    }
    match &entry.state {
        EntryState::Running { owner } | EntryState::Unknown { owner } => {
            outln!("owner        {}", owner.as_deref().unwrap_or("-"));
        }
        EntryState::Done { result, .. } => {
            outln!(
                "result\n{}",
                serde_json::to_string_pretty(result).map_err(exit::internal)?
            );
        }
        EntryState::Failed { error, .. } => {
            outln!(
                "error        {} ({})",
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
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn rm(a: RmArgs) -> anyhow::Result<ExitCode> {
    let key: OperationKey = a.key.parse()?;
    let store = a.store.open().await?;
    if !store.delete(&key).await? {
        return absent(&key, a.json);
    }
    if a.json {
        outln!("{}", json!({"key": key, "removed": true}));
    } else {
        outln!("removed {key}");
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn purge(a: PurgeArgs) -> anyhow::Result<ExitCode> {
    let store = a.store.open().await?;
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
fn absent(key: &OperationKey, json: bool) -> anyhow::Result<ExitCode> {
    if json {
        outln!("{}", json!({"key": key, "found": false}));
    }
    eprintln!("toolonce: no live entry for {key}");
    Ok(ExitCode::from(exit::NOT_FOUND))
}

/// What an entry holds: the result when done, the error when failed.
fn payload(entry: &Entry) -> Option<Value> {
    match &entry.state {
        EntryState::Running { .. } | EntryState::Unknown { .. } => None,
        EntryState::Done { result, .. } => Some(result.clone()),
        EntryState::Failed { error, .. } => serde_json::to_value(error).ok(),
        _ => None,
    }
}

/// The fields `ls --json` gives for each entry (and `show --json` starts from).
fn summary(entry: &Entry, now: SystemTime) -> Value {
    json!({
        "key": entry.key,
        "state": entry.state().as_str(),
        "fingerprint": entry.fingerprint,
        "started_at": output::timestamp(entry.started_at),
        "age_ms": millis(since(entry.started_at, now)),
        "expires_at": entry.expires_at.map(output::timestamp),
        "expires_in_ms": entry.expires_at.map(|t| millis(until(t, now))),
        "size": payload(entry).map(|p| p.to_string().len()),
    })
}

fn since(t: SystemTime, now: SystemTime) -> Duration {
    now.duration_since(t).unwrap_or_default()
}

fn until(t: SystemTime, now: SystemTime) -> Duration {
    t.duration_since(now).unwrap_or_default()
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
