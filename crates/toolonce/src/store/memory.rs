//! The in-memory store: one process, no persistence. For tests, single-process agents and
//! benchmarks. Its clock is injectable so tests can expire leases without sleeping.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde_json::Value;

use crate::Result;
use crate::key::OperationKey;
use crate::store::contract::{
    Census, Claim, ClaimRequest, Entry, EntryState, Fenced, ListQuery, Page, Removed, Resolution,
    Resolved, Seen, SeenSettled, Store,
};
use crate::store::owner::OwnerToken;
use crate::store::settled_by::SettledBy;
use crate::tool::ToolError;

/// A source of the current time for [`MemoryStore`].
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> SystemTime;
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that moves only when told to, for tests.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<SystemTime>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: SystemTime) -> Arc<Self> {
        Arc::new(ManualClock {
            now: Mutex::new(start),
        })
    }

    /// Moves the clock forward by `by`, or as far as `SystemTime` goes.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        *now = add_saturating(*now, by);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `now` plus `d`, or the latest time `SystemTime` can represent if that is beyond it.
fn add_saturating(now: SystemTime, d: Duration) -> SystemTime {
    if let Some(t) = now.checked_add(d) {
        return t;
    }
    // Approach the limit in halving steps; each step size succeeds at most twice.
    let (mut t, mut step) = (now, d);
    while !step.is_zero() {
        match t.checked_add(step) {
            Some(later) => t = later,
            None => step /= 2,
        }
    }
    t
}

/// When an entry written at `now` for `d` expires: a lease or retention beyond
/// [`MAX_DURATION`](crate::policy::MAX_DURATION) (100 years) is capped to it, as the other
/// stores cap theirs, and the sum never overflows `SystemTime`.
fn expiry(now: SystemTime, d: Duration) -> SystemTime {
    add_saturating(now, d.min(crate::policy::MAX_DURATION))
}

/// One key's entry. The entry as stored keeps `Running` after its lease: whether it is
/// `unknown` is decided by the clock at each read ([`Slot::view`]), as the other stores decide
/// it in their queries.
struct Slot {
    entry: Entry,
    /// The lease deadline while running (meaningless once settled).
    lease_until: SystemTime,
    /// How long the entry is kept as `unknown` after `lease_until`.
    unknown_retention: Duration,
    /// When the slot is gone: `lease_until + unknown_retention` while running, the end of the
    /// retention once settled.
    gone_at: SystemTime,
}

impl Slot {
    fn live(&self, now: SystemTime) -> bool {
        now < self.gone_at
    }

    /// Whether the entry is running (or unknown) and held by `owner`.
    fn held_by(&self, owner: &OwnerToken) -> bool {
        matches!(&self.entry.state, EntryState::Running { owner: Some(o) } if o == owner.as_str())
    }

    fn running(&self) -> bool {
        matches!(self.entry.state, EntryState::Running { .. })
    }

    /// The entry as a reader sees it at `now`: a running entry past its lease is `unknown`,
    /// and `expires_at` is the lease deadline while running or unknown, the retention's end
    /// once settled.
    fn view(&self, now: SystemTime) -> Entry {
        let mut entry = self.entry.clone();
        match &entry.state {
            EntryState::Running { owner } => {
                if now >= self.lease_until {
                    entry.state = EntryState::Unknown {
                        owner: owner.clone(),
                    };
                }
                entry.expires_at = Some(self.lease_until);
            }
            _ => entry.expires_at = Some(self.gone_at),
        }
        entry
    }

    /// Starts a lease of `lease` from `now`, kept as `unknown` for `retention` after it.
    fn lease(&mut self, now: SystemTime, lease: Duration, retention: Duration) {
        self.lease_until = expiry(now, lease);
        self.unknown_retention = retention;
        self.gone_at = expiry(self.lease_until, retention);
        self.entry.expires_at = Some(self.lease_until);
    }

    /// Settles the entry as `state` for `retention` from `now`.
    fn settle(&mut self, now: SystemTime, state: EntryState, retention: Duration) {
        // Which attempt settled it, as the SQL stores keep it: a removal compares it.
        if let EntryState::Running { owner } = &self.entry.state {
            self.entry.settled_by = owner.clone().map(SettledBy::new);
        }
        self.entry.state = state;
        self.entry.settled_at = Some(now);
        self.gone_at = expiry(now, retention);
        self.entry.expires_at = Some(self.gone_at);
    }
}

/// A [`Store`] in the process's memory.
///
/// All entries sit behind one `std::sync::Mutex`: every operation is a short critical section
/// with no `.await` inside, which is what makes each one atomic, and a std mutex is cheaper
/// than an async one when nothing awaits while holding it. Expiry is checked on every access
/// (an expired slot counts as absent) and [`purge_expired`](Store::purge_expired) reclaims the
/// memory. A running entry past its lease is read as `unknown` and kept for its claim's
/// retention after the lease; like every entry here, it is lost with the process.
///
/// A `BTreeMap` keeps keys ordered so listings can page by key with a stable cursor.
pub struct MemoryStore {
    entries: Mutex<BTreeMap<OperationKey, Slot>>,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("entries", &self.lock().len())
            .field("clock", &self.clock)
            .finish()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store on the system clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// An empty store on the given clock (for example a [`ManualClock`]).
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        MemoryStore {
            entries: Mutex::new(BTreeMap::new()),
            clock,
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<OperationKey, Slot>> {
        // A panic while holding the lock cannot leave a slot half-written (every update is a
        // single assignment), so a poisoned map is still consistent.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live slot of `key` if it is running (lease live or expired: unknown) and `owner`
    /// holds it. Owner fencing, not lease fencing: a takeover replaces the token, so only an
    /// owner nobody took over from gets here after its lease.
    fn owned<'a>(
        map: &'a mut BTreeMap<OperationKey, Slot>,
        key: &OperationKey,
        owner: &OwnerToken,
        now: SystemTime,
    ) -> Option<&'a mut Slot> {
        map.get_mut(key)
            .filter(|slot| slot.live(now) && slot.held_by(owner))
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<Claim> {
        let now = self.clock.now();
        let mut map = self.lock();
        if let Some(slot) = map.get_mut(req.key).filter(|s| s.live(now)) {
            // The caller's own running (or unknown) entry: an earlier attempt of this claim
            // applied. The lease is renewed; it is the same attempt, so nothing is counted.
            if slot.held_by(req.owner) {
                slot.lease(now, req.lease, req.retention);
                return Ok(Claim::Won);
            }
            let unknown = slot.running() && now >= slot.lease_until;
            // A takeover: same operation (the fingerprint matches), lease expired unsettled.
            if unknown && req.takeover && slot.entry.matches(req.fingerprint) {
                slot.entry.state = EntryState::Running {
                    owner: Some(req.owner.as_str().to_owned()),
                };
                slot.entry.started_at = now;
                slot.entry.attempts = slot.entry.attempts.saturating_add(1);
                slot.lease(now, req.lease, req.retention);
                return Ok(Claim::TookOver);
            }
            return Ok(Claim::Existing(slot.view(now)));
        }
        let entry = Entry::new(
            req.key.clone(),
            Some(req.fingerprint.clone()),
            now,
            None,
            EntryState::Running {
                owner: Some(req.owner.as_str().to_owned()),
            },
        )
        .with_about(req.about.clone())
        .with_first_started_at(Some(now))
        .with_attempts(1);
        let mut slot = Slot {
            entry,
            lease_until: now,
            unknown_retention: req.retention,
            gone_at: now,
        };
        slot.lease(now, req.lease, req.retention);
        map.insert(req.key.clone(), slot);
        Ok(Claim::Won)
    }

    async fn renew(&self, key: &OperationKey, owner: &OwnerToken, lease: Duration) -> Result<bool> {
        let now = self.clock.now();
        let mut map = self.lock();
        Ok(match Self::owned(&mut map, key, owner, now) {
            Some(slot) => {
                let retention = slot.unknown_retention;
                slot.lease(now, lease, retention);
                true
            }
            None => false,
        })
    }

    async fn complete(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        result: &Value,
        retention: Duration,
    ) -> Result<Fenced> {
        let now = self.clock.now();
        let mut map = self.lock();
        Ok(match Self::owned(&mut map, key, &owner, now) {
            Some(slot) => {
                let state = EntryState::Done {
                    result: result.clone().into(),
                    completed_at: Some(now),
                };
                slot.settle(now, state, retention);
                Fenced::Applied
            }
            None => Fenced::NotOwner,
        })
    }

    async fn fail(
        &self,
        key: &OperationKey,
        owner: OwnerToken,
        error: &ToolError,
        sticky: Option<Duration>,
    ) -> Result<Fenced> {
        let now = self.clock.now();
        let mut map = self.lock();
        let Some(slot) = Self::owned(&mut map, key, &owner, now) else {
            return Ok(Fenced::NotOwner);
        };
        match sticky {
            Some(retention) => {
                let state = EntryState::Failed {
                    error: error.clone(),
                    failed_at: Some(now),
                };
                slot.settle(now, state, retention);
            }
            None => {
                map.remove(key);
            }
        }
        Ok(Fenced::Applied)
    }

    async fn get(&self, key: &OperationKey) -> Result<Option<Entry>> {
        let now = self.clock.now();
        Ok(self
            .lock()
            .get(key)
            .filter(|s| s.live(now))
            .map(|s| s.view(now)))
    }

    async fn list(&self, query: &ListQuery) -> Result<Page> {
        let now = self.clock.now();
        let map = self.lock();
        let start = match &query.cursor {
            Some(c) => std::ops::Bound::Excluded(c.parse::<OperationKey>()?),
            None => std::ops::Bound::Unbounded,
        };
        let size = query.page_size();
        let mut entries = Vec::with_capacity(size.min(64));
        let mut more = false;
        for (_, slot) in map.range((start, std::ops::Bound::Unbounded)) {
            if !slot.live(now) {
                continue;
            }
            let entry = slot.view(now);
            if !query.admits(&entry) {
                continue;
            }
            if entries.len() == size {
                more = true;
                break;
            }
            entries.push(entry);
        }
        let next = if more {
            entries.last().map(|e: &Entry| e.key.as_str().to_owned())
        } else {
            None
        };
        Ok(Page::new(entries, next))
    }

    /// One pass over the map under its lock, reading each slot in place (no entry copied).
    async fn census(&self) -> Result<Option<Census>> {
        let now = self.clock.now();
        let map = self.lock();
        let mut census = Census::default();
        let mut oldest: Option<SystemTime> = None;
        for slot in map.values().filter(|slot| slot.live(now)) {
            match &slot.entry.state {
                EntryState::Running { .. } if now >= slot.lease_until => {
                    census.unknown += 1;
                    oldest = Some(oldest.map_or(slot.lease_until, |o| o.min(slot.lease_until)));
                }
                EntryState::Running { .. } => census.running += 1,
                EntryState::Done { .. } => census.done += 1,
                EntryState::Failed { .. } => census.failed += 1,
                // The map stores running entries; `view` makes them unknown.
                EntryState::Unknown { .. } => census.unknown += 1,
            }
        }
        let waited = oldest.map(|at| now.duration_since(at).unwrap_or_default());
        Ok(Some(census.oldest_unknown(waited)))
    }

    async fn resolve(
        &self,
        key: &OperationKey,
        seen: &Seen,
        resolution: &Resolution,
        retention: Duration,
    ) -> Result<Resolved> {
        let now = self.clock.now();
        let mut map = self.lock();
        let Some(slot) = map.get_mut(key).filter(|s| s.live(now)) else {
            return Ok(Resolved::Absent);
        };
        // Compared and written under the one lock: the entry acted on is the one judged.
        let entry = slot.view(now);
        if !seen.admits(&entry) {
            return Ok(seen.refusal(entry));
        }
        match resolution {
            Resolution::Done(value) => {
                let state = EntryState::Done {
                    result: value.clone().into(),
                    completed_at: Some(now),
                };
                slot.settle(now, state, retention);
            }
            Resolution::Failed(error) => {
                let state = EntryState::Failed {
                    error: error.clone(),
                    failed_at: Some(now),
                };
                slot.settle(now, state, retention);
            }
            Resolution::Release => {
                map.remove(key);
            }
        }
        Ok(Resolved::Applied)
    }

    async fn remove(&self, key: &OperationKey, seen: &SeenSettled) -> Result<Removed> {
        let now = self.clock.now();
        let mut map = self.lock();
        let Some(slot) = map.get(key).filter(|s| s.live(now)) else {
            return Ok(Removed::Absent);
        };
        // Compared and deleted under the one lock: the entry deleted is the one judged.
        let entry = slot.view(now);
        if !seen.is(&entry) {
            return Ok(Removed::Changed(entry));
        }
        map.remove(key);
        Ok(Removed::Applied)
    }

    async fn delete(&self, key: &OperationKey) -> Result<bool> {
        let now = self.clock.now();
        Ok(self.lock().remove(key).is_some_and(|s| s.live(now)))
    }

    async fn purge_expired(&self) -> Result<u64> {
        let now = self.clock.now();
        let mut map = self.lock();
        let before = map.len();
        map.retain(|_, slot| slot.live(now));
        Ok((before - map.len()) as u64)
    }
}
