//! An operator's fenced removal of a settled entry ([`Store::remove`](crate::Store::remove)):
//! what the caller saw of the entry ([`SeenSettled`]) and the store's answer ([`Removed`]).
//! Kept apart from [`Seen`](crate::store::Seen), the attempt of an unsettled entry that a
//! resolve acts on: the two compare different things, and keeping them apart means a resolve
//! cannot be handed a settled entry, nor a removal a claim.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::store::entry::{Entry, State};
use crate::store::settled_by::SettledBy;

/// The settled entry (`done` or `failed`) the caller of [`Store::remove`](crate::Store::remove)
/// read, and the only one it deletes: the store compares its state, attempt count, start,
/// settling time and settling attempt ([`SettledBy`]) with the entry's in the same atomic step
/// as the delete. An entry deleted and claimed again since the read is running (or `unknown`),
/// or settled anew by another attempt (even within the same millisecond), so it is never this
/// one. Each is compared as the store reported it, a member its writer did
/// not record as absent (0 attempts, no settling time).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SeenSettled {
    state: State,
    attempts: u32,
    started_at: SystemTime,
    settled_at: Option<SystemTime>,
    settled_by: Option<SettledBy>,
}

impl SeenSettled {
    /// The settled entry `entry` is, if it is `done` or `failed`; `None` while it is unsettled
    /// (`running` or `unknown`: that is a [`Seen`](crate::store::Seen), for a release).
    pub fn of(entry: &Entry) -> Option<SeenSettled> {
        match entry.state() {
            State::Done | State::Failed => Some(SeenSettled {
                state: entry.state(),
                attempts: entry.attempts,
                started_at: entry.started_at,
                settled_at: entry.settled_at,
                settled_by: entry.settled_by.clone(),
            }),
            _ => None,
        }
    }

    /// `done` or `failed`.
    pub fn state(&self) -> State {
        self.state
    }

    /// How many attempts the entry had started (0: not recorded by its writer).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// When its last attempt started.
    pub fn started_at(&self) -> SystemTime {
        self.started_at
    }

    /// When it settled; `None` when its writer did not record it.
    pub fn settled_at(&self) -> Option<SystemTime> {
        self.settled_at
    }

    /// Which attempt settled it; `None` when its writer did not record it.
    pub fn settled_by(&self) -> Option<&SettledBy> {
        self.settled_by.as_ref()
    }

    /// Whether `entry` is the settled entry seen: the same state, attempts, start, settling
    /// time and settling attempt.
    pub fn is(&self, entry: &Entry) -> bool {
        SeenSettled::of(entry).as_ref() == Some(self)
    }
}

/// The answer of [`Store::remove`](crate::Store::remove). Only [`Applied`](Removed::Applied)
/// deleted anything.
#[derive(Clone, Debug, PartialEq)]
#[must_use]
// Matched at once and never stored, as `Claim`.
#[allow(clippy::large_enum_variant)]
#[non_exhaustive]
pub enum Removed {
    /// The entry was the settled entry seen, and it is deleted: the next call runs the
    /// operation again.
    Applied,
    /// There is no live entry: nothing was deleted.
    Absent,
    /// The live entry is not the settled entry seen (it was deleted and claimed again since it
    /// was read: a claim, running or `unknown`, or the outcome that claim recorded): nothing was
    /// deleted. The entry as found in the same atomic step.
    Changed(Entry),
}

/// Whole milliseconds since the epoch of `t`, as the SQLite and Redis stores keep times (0
/// before the epoch, saturating after `i64::MAX`).
#[cfg_attr(not(any(feature = "sqlite", feature = "redis")), allow(dead_code))]
pub(crate) fn epoch_millis(t: SystemTime) -> i64 {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}
