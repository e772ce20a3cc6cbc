//! Rows as entries: the decoding of a selected row (by position, see `sql`), the point read of
//! a key's live row, and the store's clock (milliseconds since the epoch, saturating).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, params};

use crate::Error;
use crate::key::{Fingerprint, OperationKey};
use crate::store::contract::{About, Entry, EntryState, millis};
use crate::store::json::read_stored;
use crate::store::recorded::Recorded;
use crate::store::settled_by::SettledBy;
use crate::tool::ToolError;

use super::error::{Fault, JobResult};
use super::sql;

/// The current time in milliseconds since the epoch.
pub(super) fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// `now` plus `d`, saturating.
pub(super) fn after(now: i64, d: Duration) -> i64 {
    now.saturating_add(i64::try_from(millis(d)).unwrap_or(i64::MAX))
}

/// Decodes the entry in a row of [`sql::SELECT_LIVE`] or [`sql::LIST`], reading text straight
/// from SQLite's buffers and copying only what the entry keeps. `key` is the key the caller
/// asked for, when it did (it is the row's key, so it need not be parsed again). `now` tells a
/// `running` row whose lease has passed (`unknown`) from a live one.
pub(super) fn entry_from(
    r: &rusqlite::Row<'_>,
    key: Option<&OperationKey>,
    now: i64,
) -> JobResult<Entry> {
    let key = match key {
        Some(k) => k.clone(),
        None => key_of(r)?,
    };
    let cells = Cells { r, key: &key };
    let corrupt = |reason: String| cells.corrupt(reason);
    let text = |column: usize| cells.text(column);
    let time = |column: usize, what: &str| cells.time(column, what);
    let fingerprint = text(3)?
        .map(str::parse::<Fingerprint>)
        .transpose()
        .map_err(|e| corrupt(e.to_string()))?;
    let started_at = time(4, "started_at")?.ok_or_else(|| corrupt("no started_at".into()))?;
    let lease_until = cells.millis(5)?;
    let settled_at = time(7, "settled_at")?;
    let state = text(1)?.unwrap_or_default();
    let payload = || -> JobResult<&str> {
        text(8)?.ok_or_else(|| corrupt(format!("a {state} entry without its payload")))
    };
    let (state, expires_at) = match state {
        "running" => {
            let lease =
                lease_until.ok_or_else(|| corrupt("a running entry without a lease".into()))?;
            let owner = r.get(2)?;
            let state = if lease <= now {
                EntryState::Unknown { owner }
            } else {
                EntryState::Running { owner }
            };
            (state, time(5, "lease_until")?)
        }
        "done" => (
            EntryState::Done {
                result: Recorded::read(payload()?)
                    .map_err(|e| corrupt(format!("result is not JSON: {e}")))?,
                completed_at: settled_at,
            },
            time(6, "kept_until")?,
        ),
        "failed" => (
            EntryState::Failed {
                error: read_stored::<ToolError>(payload()?)
                    .map_err(|e| corrupt(format!("error is not a tool error: {e}")))?,
                failed_at: settled_at,
            },
            time(6, "kept_until")?,
        ),
        other => return Err(corrupt(format!("unknown state {other:?}"))),
    };
    let about = About::empty()
        .with_scope(text(9)?.map(str::to_owned))
        .with_tool(text(10)?.map(str::to_owned))
        .with_detail(text(11)?.map(str::to_owned));
    let attempts = cells.millis(13)?.unwrap_or(0);
    let attempts = u32::try_from(attempts).map_err(|_| corrupt(format!("{attempts} attempts")))?;
    let first_started_at = time(12, "first_started_at")?;
    // A settled row keeps the owner of the attempt that settled it (older versions cleared it).
    let settled_by = match state {
        EntryState::Done { .. } | EntryState::Failed { .. } => text(2)?.map(SettledBy::new),
        _ => None,
    };
    Ok(Entry::new(key, fingerprint, started_at, expires_at, state)
        .with_about(about)
        .with_first_started_at(first_started_at)
        .with_attempts(attempts)
        .with_settled_at(settled_at)
        .with_settled_by(settled_by))
}

/// The key of a row listed (not asked for by key), parsed.
fn key_of(r: &rusqlite::Row<'_>) -> JobResult<OperationKey> {
    let stored = r
        .get_ref(0)?
        .as_str()
        .map_err(|e| Fault::Corrupt(Error::corrupt("(a key that is not text)", e)))?;
    stored
        .parse()
        .map_err(|e: Error| Fault::Corrupt(Error::corrupt(stored, e)))
}

/// The cells of one row of `key`, read by column; a cell that cannot be what its column holds
/// makes the entry corrupt.
struct Cells<'a, 'r> {
    r: &'a rusqlite::Row<'r>,
    key: &'a OperationKey,
}

impl<'a> Cells<'a, '_> {
    fn corrupt(&self, reason: String) -> Fault {
        Fault::Corrupt(Error::corrupt(self.key, reason))
    }

    fn text(&self, column: usize) -> JobResult<Option<&'a str>> {
        self.r
            .get_ref(column)?
            .as_str_or_null()
            .map_err(|e| self.corrupt(format!("column {column}: {e}")))
    }

    fn millis(&self, column: usize) -> JobResult<Option<i64>> {
        Ok(self.r.get::<_, Option<i64>>(column)?)
    }

    fn time(&self, column: usize, what: &str) -> JobResult<Option<SystemTime>> {
        let Some(ms) = self.millis(column)? else {
            return Ok(None);
        };
        u64::try_from(ms)
            .ok()
            .and_then(|ms| UNIX_EPOCH.checked_add(Duration::from_millis(ms)))
            .map(Some)
            .ok_or_else(|| self.corrupt(format!("{what} {ms} is not a time")))
    }
}

/// The live entry of `key`, read in one statement (so from one consistent snapshot).
pub(super) fn read_live(
    conn: &Connection,
    key: &OperationKey,
    now: i64,
) -> JobResult<Option<Entry>> {
    let mut stmt = conn.prepare_cached(sql::SELECT_LIVE)?;
    let mut rows = stmt.query(params![key.as_str(), now])?;
    match rows.next()? {
        Some(row) => Ok(Some(entry_from(row, Some(key), now)?)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_saturates_instead_of_overflowing() {
        assert_eq!(after(1_000, Duration::from_millis(500)), 1_500);
        assert_eq!(after(i64::MAX - 1, Duration::from_secs(10)), i64::MAX);
        assert_eq!(after(0, Duration::MAX), i64::MAX);
    }
}
