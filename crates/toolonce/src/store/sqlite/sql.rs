//! The statements the store runs, private to it (no benchmark or other crate uses them: the
//! CLI's raw SQLite floor writes its own SQL).
//!
//! Every write runs between [`BEGIN`] and [`COMMIT`]: `BEGIN IMMEDIATE` takes the database's
//! write lock up front (waiting up to the busy timeout for another connection or process to
//! release it), so nothing else can write between the statements of one operation, and the
//! clock is read only once the lock is held (a wait for the lock cannot make `now` stale).
//!
//! A row counts as absent once `kept_until <= now` (see the schema); a `running` row whose
//! `lease_until <= now` is `unknown`. Every `SELECT` returns the same columns in the same order,
//! which the store decodes by position.

/// Takes the write lock for the operation's transaction.
pub(super) const BEGIN: &str = "BEGIN IMMEDIATE";
/// Begins the inline writer's claim, a read that becomes a write only when the row does not
/// answer it (see `claim_inline`).
pub(super) const BEGIN_DEFERRED: &str = "BEGIN";
/// Ends it.
pub(super) const COMMIT: &str = "COMMIT";

/// The live entry of a key: `?1` key, `?2` now.
pub(super) const SELECT_LIVE: &str = "SELECT key, state, owner, fingerprint, started_at, lease_until, \
     kept_until, settled_at, payload, scope, tool, detail, first_started_at, attempts \
     FROM toolonce_entries WHERE key = ?1 AND kept_until > ?2";

/// The decisive statement of a claim: `?1` key, `?2` owner, `?3` fingerprint, `?4` now, `?5`
/// lease deadline, `?6` when the row stops being kept (the lease deadline plus the retention),
/// `?7` scope, `?8` tool, `?9` detail. It inserts a `running` row (first attempt, started now)
/// if the key has none, overwrites the row if it is no longer kept, and leaves a kept row
/// (`running`, `unknown` or settled) alone; the number of changed rows (1 or 0) says which.
/// (`RETURNING` would not help: it returns no row in exactly the case where the row is needed,
/// when the `DO UPDATE`'s `WHERE` is false.)
pub(super) const CLAIM: &str = "INSERT INTO toolonce_entries \
     (key, state, owner, fingerprint, started_at, lease_until, kept_until, settled_at, payload, \
      scope, tool, detail, first_started_at, attempts) \
     VALUES (?1, 'running', ?2, ?3, ?4, ?5, ?6, NULL, NULL, ?7, ?8, ?9, ?4, 1) \
     ON CONFLICT (key) DO UPDATE SET state = 'running', owner = excluded.owner, \
     fingerprint = excluded.fingerprint, started_at = excluded.started_at, \
     lease_until = excluded.lease_until, kept_until = excluded.kept_until, settled_at = NULL, \
     payload = NULL, scope = excluded.scope, tool = excluded.tool, detail = excluded.detail, \
     first_started_at = excluded.first_started_at, attempts = 1 \
     WHERE toolonce_entries.kept_until <= ?4";

/// A claim re-sent with the token that holds the entry, live or `unknown`: renews the lease and
/// keeps the row at least as long as a new claim would. `?1` key, `?2` owner, `?3` lease
/// deadline, `?4` lease deadline plus retention.
pub(super) const RECLAIM_OWN: &str = "UPDATE toolonce_entries \
     SET lease_until = ?3, kept_until = MAX(kept_until, ?4) \
     WHERE key = ?1 AND state = 'running' AND owner = ?2";

/// A takeover of an `unknown` entry: a new owner and lease, one more attempt (an unknown count,
/// `0`, stays unknown), the first start, what the entry is and its fingerprint kept. `?1` key,
/// `?2` new owner, `?3` now, `?4` lease deadline, `?5` lease deadline plus retention.
pub(super) const TAKEOVER: &str = "UPDATE toolonce_entries \
     SET owner = ?2, started_at = ?3, lease_until = ?4, kept_until = ?5, \
     attempts = CASE WHEN attempts = 0 THEN 0 ELSE attempts + 1 END \
     WHERE key = ?1 AND state = 'running' AND lease_until <= ?3 AND kept_until > ?3";

/// Extends the lease of a running (or `unknown`) entry the caller holds, keeping the row as
/// long after the new lease as it was after the old one: `?1` key, `?2` owner, `?3` new lease
/// deadline, `?4` now.
pub(super) const RENEW: &str = "UPDATE toolonce_entries SET lease_until = ?3, \
     kept_until = CASE WHEN kept_until - lease_until > 9223372036854775807 - ?3 \
         THEN 9223372036854775807 ELSE ?3 + (kept_until - lease_until) END \
     WHERE key = ?1 AND state = 'running' AND owner = ?2 AND kept_until > ?4";

/// Records a result: `?1` key, `?2` owner, `?3` result JSON, `?4` now, `?5` retention end. The
/// fence is the owner, not the lease: an owner whose lease ran out and whom nobody took over
/// still records what its tool did.
pub(super) const COMPLETE: &str = "UPDATE toolonce_entries SET state = 'done', owner = NULL, \
     lease_until = NULL, payload = ?3, settled_at = ?4, kept_until = ?5 \
     WHERE key = ?1 AND state = 'running' AND owner = ?2 AND kept_until > ?4";

/// Records a permanent error, same parameters as [`COMPLETE`] with the error JSON as `?3`.
pub(super) const FAIL_STICKY: &str = "UPDATE toolonce_entries SET state = 'failed', owner = NULL, \
     lease_until = NULL, payload = ?3, settled_at = ?4, kept_until = ?5 \
     WHERE key = ?1 AND state = 'running' AND owner = ?2 AND kept_until > ?4";

/// Drops an owned entry after a transient error: `?1` key, `?2` owner, `?3` now.
pub(super) const FAIL_DELETE: &str = "DELETE FROM toolonce_entries \
     WHERE key = ?1 AND state = 'running' AND owner = ?2 AND kept_until > ?3";

/// An operator settles the `running` or `unknown` entry it saw (the store has judged it in the
/// same transaction): `?1` key, `?2` the new state (`done` or `failed`), `?3` payload JSON, `?4`
/// now, `?5` retention end, `?6` the owner seen (`IS`: NULL matches a row without one), `?7`
/// the attempts seen. A settled, absent or other attempt's row matches nothing.
pub(super) const RESOLVE_SETTLE: &str = "UPDATE toolonce_entries SET state = ?2, owner = NULL, \
     lease_until = NULL, payload = ?3, settled_at = ?4, kept_until = ?5 \
     WHERE key = ?1 AND state = 'running' AND kept_until > ?4 AND owner IS ?6 AND attempts = ?7";

/// An operator forgets the `running` or `unknown` entry it saw, so the next call runs: `?1`
/// key, `?2` now, `?3` the owner seen, `?4` the attempts seen.
pub(super) const RESOLVE_RELEASE: &str = "DELETE FROM toolonce_entries \
     WHERE key = ?1 AND state = 'running' AND kept_until > ?2 AND owner IS ?3 AND attempts = ?4";

/// An operator deletes the settled entry it read, and no other (`toolonce rm`): `?1` key, `?2`
/// now, `?3` the state seen (`done` or `failed`), `?4` the attempts seen, `?5` the start seen,
/// `?6` the settling time seen (`IS`: NULL matches a row without one). A row deleted and
/// claimed again since the read (running, or settled anew at another time) matches nothing.
pub(super) const REMOVE_SETTLED: &str = "DELETE FROM toolonce_entries \
     WHERE key = ?1 AND kept_until > ?2 AND state = ?3 AND attempts = ?4 AND started_at = ?5 \
     AND settled_at IS ?6";

/// Deletes a key whatever its state, saying whether its row was live: `?1` key, `?2` now.
pub(super) const DELETE: &str =
    "DELETE FROM toolonce_entries WHERE key = ?1 RETURNING kept_until > ?2";

/// Deletes rows no longer kept (never an `unknown` one within its retention): `?1` now.
pub(super) const PURGE: &str = "DELETE FROM toolonce_entries WHERE kept_until <= ?1";

/// A page of live entries: `?1` keys after this one, `?2` now, `?3` state (`running`,
/// `unknown`, `done`, `failed`) or NULL for all, `?4` how many, `?5` scope or NULL, `?6` tool or
/// NULL.
pub(super) const LIST: &str = "SELECT key, state, owner, fingerprint, started_at, lease_until, \
     kept_until, settled_at, payload, scope, tool, detail, first_started_at, attempts \
     FROM toolonce_entries \
     WHERE key > ?1 AND kept_until > ?2 \
     AND (?3 IS NULL OR ?3 = CASE WHEN state = 'running' AND lease_until <= ?2 \
         THEN 'unknown' ELSE state END) \
     AND (?5 IS NULL OR scope = ?5) AND (?6 IS NULL OR tool = ?6) \
     ORDER BY key LIMIT ?4";
