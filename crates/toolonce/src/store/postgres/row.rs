//! Rows as entries: the decoding of the entry columns, and a fenced write's row count as its
//! outcome.

use std::fmt;
use std::time::SystemTime;

use deadpool_postgres::tokio_postgres::Row;

use crate::store::contract::{About, Entry, EntryState, Fenced};
use crate::store::json::read_stored;
use crate::store::recorded::Recorded;
use crate::store::settled_by::SettledBy;

use crate::key::{Fingerprint, OperationKey};
use crate::{Error, Result};

/// Decodes the entry columns (`statements/entry_columns.sql`) starting at column `at`.
pub(super) fn decode(key: OperationKey, row: &Row, at: usize) -> Result<Entry> {
    let corrupt = |what: &str, e: &dyn fmt::Display| Error::corrupt(&key, format!("{what}: {e}"));
    // The state and the fingerprint are read in place (`&str`): neither is kept as text, so
    // an owned `String` would be an allocation per replay for nothing.
    let state: &str = row.try_get(at).map_err(|e| corrupt("state", &e))?;
    let owner: Option<String> = row.try_get(at + 1).map_err(|e| corrupt("owner", &e))?;
    let fingerprint: Option<&str> = row
        .try_get(at + 2)
        .map_err(|e| corrupt("fingerprint", &e))?;
    let started_at: SystemTime = row.try_get(at + 3).map_err(|e| corrupt("started_at", &e))?;
    // NULL only for a running row nobody gave a lease (the schema's check forbids it).
    let expires_at: Option<SystemTime> =
        row.try_get(at + 4).map_err(|e| corrupt("expires_at", &e))?;
    let settled_at: Option<SystemTime> =
        row.try_get(at + 5).map_err(|e| corrupt("settled_at", &e))?;
    let fingerprint = fingerprint
        .map(|f| f.parse::<Fingerprint>())
        .transpose()
        .map_err(|e| corrupt("fingerprint", &e))?;
    // A settled row keeps the owner of the attempt that settled it (older versions cleared it).
    let mut owner = owner;
    let settled_by = if matches!(state, "done" | "failed") {
        owner.take().map(SettledBy::new)
    } else {
        None
    };
    let state = match state {
        "running" => EntryState::Running { owner },
        "unknown" => EntryState::Unknown { owner },
        "done" => {
            let text: Option<&str> = row.try_get(at + 6).map_err(|e| corrupt("result", &e))?;
            let text = text.ok_or_else(|| Error::corrupt(&key, "a done entry without a result"))?;
            EntryState::Done {
                result: Recorded::read(text).map_err(|e| corrupt("result", &e))?,
                completed_at: settled_at,
            }
        }
        "failed" => {
            let text: Option<&str> = row.try_get(at + 7).map_err(|e| corrupt("error", &e))?;
            let text =
                text.ok_or_else(|| Error::corrupt(&key, "a failed entry without an error"))?;
            EntryState::Failed {
                error: read_stored(text).map_err(|e| corrupt("error", &e))?,
                failed_at: settled_at,
            }
        }
        other => return Err(Error::corrupt(&key, format!("unknown state {other:?}"))),
    };
    let text = |i: usize, what: &str| -> Result<Option<String>> {
        row.try_get(at + i).map_err(|e| corrupt(what, &e))
    };
    let about = About::empty()
        .with_scope(text(8, "scope")?)
        .with_tool(text(9, "tool")?)
        .with_detail(text(10, "detail")?);
    let first_started_at: Option<SystemTime> = row
        .try_get(at + 11)
        .map_err(|e| corrupt("first_started_at", &e))?;
    let attempts: i32 = row.try_get(at + 12).map_err(|e| corrupt("attempts", &e))?;
    let attempts = u32::try_from(attempts).map_err(|e| corrupt("attempts", &e))?;
    Ok(Entry::new(key, fingerprint, started_at, expires_at, state)
        .with_about(about)
        .with_first_started_at(first_started_at)
        .with_attempts(attempts)
        .with_settled_at(settled_at)
        .with_settled_by(settled_by))
}

pub(super) fn fenced(rows: u64) -> Fenced {
    if rows == 0 {
        Fenced::NotOwner
    } else {
        Fenced::Applied
    }
}
