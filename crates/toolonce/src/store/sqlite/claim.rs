//! The claim under the write lock (the one operation that is more than a single statement),
//! the rules that say whether a live row answers a claim without writing, and the owner's
//! fence of `renew`, `complete` and `fail`.

use std::time::Duration;

use rusqlite::{Connection, params};

use crate::key::{Fingerprint, OperationKey};
use crate::store::contract::{About, Claim, ClaimRequest, Entry, EntryState};

use super::error::{Fault, JobResult};
use super::row::{after, now_ms, read_live};
use super::sql;
use super::transaction::Transaction;

/// The outcome of [`claim_locked`]: won, or the live row that stopped the claim.
pub(super) enum Claimed {
    Won,
    TookOver,
    Existing(Box<Entry>),
}

/// A claim's request, owned so that it can be sent to the connection thread.
pub(super) struct OwnedClaim {
    pub(super) key: OperationKey,
    pub(super) owner: String,
    pub(super) fingerprint: Fingerprint,
    pub(super) lease: Duration,
    pub(super) retention: Duration,
    pub(super) takeover: bool,
    pub(super) about: About,
}

impl OwnedClaim {
    pub(super) fn of(req: &ClaimRequest<'_>) -> OwnedClaim {
        OwnedClaim {
            key: req.key.clone(),
            owner: req.owner.as_str().to_owned(),
            fingerprint: req.fingerprint.clone(),
            lease: req.lease,
            retention: req.retention,
            takeover: req.takeover,
            about: req.about.clone(),
        }
    }

    pub(super) fn args(&self) -> ClaimArgs<'_> {
        ClaimArgs {
            key: &self.key,
            owner: &self.owner,
            fingerprint: &self.fingerprint,
            lease: self.lease,
            retention: self.retention,
            takeover: self.takeover,
            about: &self.about,
        }
    }
}

/// A claim's request as the statements bind it: borrowed from the caller's request on the
/// inline writer (nothing copied), from an [`OwnedClaim`] on the connection thread.
pub(super) struct ClaimArgs<'a> {
    pub(super) key: &'a OperationKey,
    pub(super) owner: &'a str,
    pub(super) fingerprint: &'a Fingerprint,
    pub(super) lease: Duration,
    pub(super) retention: Duration,
    pub(super) takeover: bool,
    pub(super) about: &'a About,
}

impl<'a> ClaimArgs<'a> {
    pub(super) fn of(req: &ClaimRequest<'a>) -> ClaimArgs<'a> {
        ClaimArgs {
            key: req.key,
            owner: req.owner.as_str(),
            fingerprint: req.fingerprint,
            lease: req.lease,
            retention: req.retention,
            takeover: req.takeover,
            about: req.about,
        }
    }
}

impl From<Claimed> for Claim {
    fn from(claimed: Claimed) -> Claim {
        match claimed {
            Claimed::Won => Claim::Won,
            Claimed::TookOver => Claim::TookOver,
            Claimed::Existing(entry) => Claim::Existing(*entry),
        }
    }
}

/// Whether a claim that finds `entry` is answered by it without writing: a settled entry, a
/// live one held by somebody else, an `unknown` one held by somebody else that the caller does
/// not take over. Everything else (the caller's own entry, a takeover) needs the write lock.
pub(super) fn answers_claim(
    entry: &Entry,
    owner: &str,
    takeover: bool,
    fingerprint: &Fingerprint,
) -> bool {
    match &entry.state {
        EntryState::Running { .. } => !held_by(entry, owner),
        EntryState::Unknown { .. } => {
            !held_by(entry, owner) && !takes_over(entry, takeover, fingerprint)
        }
        _ => true,
    }
}

/// Whether a claim asking for a takeover takes `entry` over: only an `unknown` entry of the
/// same operation. One whose fingerprint differs (other arguments under the same key) is not
/// this caller's to run again: it is the answer, so the caller reports the conflict.
pub(super) fn takes_over(entry: &Entry, takeover: bool, fingerprint: &Fingerprint) -> bool {
    takeover && matches!(entry.state, EntryState::Unknown { .. }) && entry.matches(fingerprint)
}

/// The atomic part of a claim, on the writer connection.
///
/// `BEGIN IMMEDIATE` takes the database's write lock, then [`sql::CLAIM`] decides the common
/// case in one statement: it writes a `running` row owned by the caller if the key has no row
/// or only one that is no longer kept, and changes nothing if the key has a kept row. If it
/// wrote, the caller won: nobody else can have written the key since, because the lock is held
/// until the commit. If it did not, the read that follows runs under the same lock, so it sees
/// exactly the row that stopped the claim (no window in which that row could expire, be
/// settled, deleted or claimed by another process, and a vanished row is never taken for a
/// win), and the rules for that row apply under the same lock: the caller's own entry, live or
/// `unknown`, is renewed and won ([`sql::RECLAIM_OWN`]); an `unknown` entry of the same
/// fingerprint is taken over if the caller asks ([`sql::TAKEOVER`]); anything else is the
/// answer.
pub(super) fn claim_locked(conn: &Connection, req: &ClaimArgs<'_>) -> JobResult<Claimed> {
    let tx = Transaction::immediate(conn)?;
    let claimed = claim_under_lock(conn, req, now_ms())?;
    tx.commit()?;
    Ok(claimed)
}

/// The claim on the inline writer (busy timeout 0, so nothing here waits): the read that
/// answers a replay and, when the row does not answer the claim, [`claim_locked`]'s statements,
/// in one deferred transaction. The read takes the snapshot; the claim's first write upgrades
/// it to the write lock, which SQLite grants only if no other connection holds the lock or has
/// committed since the snapshot (else `SQLITE_BUSY` at once, nothing written, and the caller
/// falls back to the connection thread), so the write decides on the very rows the read saw,
/// under the lock, as [`claim_locked`] does. A read that answers the claim ends the transaction
/// having taken no write lock. One transaction where a read and then `BEGIN IMMEDIATE` took
/// two: a first-time claim takes one WAL read lock, not two (two `fcntl` calls fewer).
pub(super) fn claim_inline(conn: &Connection, req: &ClaimArgs<'_>) -> JobResult<Claimed> {
    let tx = Transaction::deferred(conn)?;
    // Read before the lock, which is never waited for here: `now` is as fresh as
    // `claim_locked`'s.
    let now = now_ms();
    if let Some(entry) = read_live(conn, req.key, now)?
        && answers_claim(&entry, req.owner, req.takeover, req.fingerprint)
    {
        tx.commit()?;
        return Ok(Claimed::Existing(Box::new(entry)));
    }
    let claimed = claim_under_lock(conn, req, now)?;
    tx.commit()?;
    Ok(claimed)
}

/// The statements of a claim, in a transaction that holds (or, on its first write, takes)
/// the write lock.
fn claim_under_lock(conn: &Connection, req: &ClaimArgs<'_>, now: i64) -> JobResult<Claimed> {
    let lease_until = after(now, req.lease);
    let kept_until = after(lease_until, req.retention);
    let wrote = conn.prepare_cached(sql::CLAIM)?.execute(params![
        req.key.as_str(),
        req.owner,
        req.fingerprint.as_str(),
        now,
        lease_until,
        kept_until,
        req.about.scope,
        req.about.tool,
        req.about.detail,
    ])?;
    let claimed = if wrote == 1 {
        Claimed::Won
    } else {
        match read_live(conn, req.key, now)? {
            Some(entry) if held_by(&entry, req.owner) => {
                conn.prepare_cached(sql::RECLAIM_OWN)?.execute(params![
                    req.key.as_str(),
                    req.owner,
                    lease_until,
                    kept_until
                ])?;
                Claimed::Won
            }
            Some(entry) if takes_over(&entry, req.takeover, req.fingerprint) => {
                conn.prepare_cached(sql::TAKEOVER)?.execute(params![
                    req.key.as_str(),
                    req.owner,
                    now,
                    lease_until,
                    kept_until
                ])?;
                Claimed::TookOver
            }
            Some(entry) => Claimed::Existing(Box::new(entry)),
            // Unreachable while the lock is held: the claim saw a kept row a moment ago.
            None => return Err(Fault::Sql(rusqlite::Error::QueryReturnedNoRows)),
        }
    };
    Ok(claimed)
}

/// Whether `entry` is `running` or `unknown` and held by `owner`.
pub(super) fn held_by(entry: &Entry, owner: &str) -> bool {
    matches!(
        &entry.state,
        EntryState::Running { owner: Some(o) } | EntryState::Unknown { owner: Some(o) } if o == owner
    )
}

/// Runs one fenced statement (`renew`, `complete`, `fail`) in its own transaction, with `now`
/// read under the lock. The fence is the statement's `WHERE key = ? AND state = 'running' AND
/// owner = ? AND kept_until > now`: the owner, not the lease. A caller whose entry was taken
/// over, deleted, resolved or settled, or is no longer kept, matches no row, so the statement
/// changes nothing and says so (0 rows); it never overwrites or deletes an entry the caller does
/// not own. A caller whose lease ran out but whom nobody took over still matches: its tool did
/// run, and recording the outcome beats leaving the entry `unknown`.
pub(super) fn fenced(
    conn: &Connection,
    write: impl FnOnce(&Connection, i64) -> rusqlite::Result<usize>,
) -> rusqlite::Result<bool> {
    let tx = Transaction::immediate(conn)?;
    let changed = write(conn, now_ms())?;
    tx.commit()?;
    Ok(changed == 1)
}
