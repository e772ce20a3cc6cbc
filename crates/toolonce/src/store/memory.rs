//! The in-memory store: one process, no persistence. For tests, single-process agents and
//! benchmarks. Its clock is injectable so tests can expire leases without sleeping.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde_json::Value;

use super::{
    Claim, ClaimRequest, Entry, EntryState, Fenced, ListQuery, OwnerToken, Page, Resolution,
    Resolved, Store,
};
use crate::Result;
use crate::key::OperationKey;
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
/// [`MAX_DURATION`](crate::layer::MAX_DURATION) (100 years) is capped to it, as the other
/// stores cap theirs, and the sum never overflows `SystemTime`.
fn expiry(now: SystemTime, d: Duration) -> SystemTime {
    add_saturating(now, d.min(crate::layer::MAX_DURATION))
}

struct Slot {
    entry: Entry,
    expires_at: SystemTime,
}

impl Slot {
    fn live(&self, now: SystemTime) -> bool {
        now < self.expires_at
    }
}

/// A [`Store`] in the process's memory.
///
/// All entries sit behind one `std::sync::Mutex`: every operation is a short critical section
/// with no `.await` inside, which is what makes each one atomic, and a std mutex is cheaper
/// than an async one when nothing awaits while holding it. Expiry is checked on every access
/// (an expired slot counts as absent) and [`purge_expired`](Store::purge_expired) reclaims the
/// memory.
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

    /// The owned, live, running slot of `key`, if `owner` holds it.
    fn owned<'a>(
        map: &'a mut BTreeMap<OperationKey, Slot>,
        key: &OperationKey,
        owner: &OwnerToken,
        now: SystemTime,
    ) -> Option<&'a mut Slot> {
        map.get_mut(key).filter(|slot| {
            slot.live(now)
                && matches!(&slot.entry.state,
                    EntryState::Running { owner: Some(o) } if o == owner.as_str())
        })
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<Claim> {
        let (key, fingerprint, owner, lease) = (req.key, req.fingerprint, req.owner, req.lease);
        let now = self.clock.now();
        let mut map = self.lock();
        // The caller's own running entry: an earlier attempt of this claim applied.
        if let Some(slot) = Self::owned(&mut map, key, owner, now) {
            slot.expires_at = now + lease;
            slot.entry.expires_at = Some(slot.expires_at);
            return Ok(Claim::Won);
        }
        if let Some(slot) = map.get(key).filter(|s| s.live(now)) {
            let mut entry = slot.entry.clone();
            entry.expires_at = Some(slot.expires_at);
            return Ok(Claim::Existing(entry));
        }
        let expires_at = expiry(now, lease);
        let entry = Entry::new(
            key.clone(),
            Some(fingerprint.clone()),
            now,
            Some(expires_at),
            EntryState::Running {
                owner: Some(owner.as_str().to_owned()),
            },
        );
        map.insert(key.clone(), Slot { entry, expires_at });
        Ok(Claim::Won)
    }

    async fn renew(&self, key: &OperationKey, owner: &OwnerToken, lease: Duration) -> Result<bool> {
        let now = self.clock.now();
        let mut map = self.lock();
        Ok(match Self::owned(&mut map, key, owner, now) {
            Some(slot) => {
                slot.expires_at = expiry(now, lease);
                slot.entry.expires_at = Some(slot.expires_at);
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
                slot.entry.state = EntryState::Done {
                    result: result.clone(),
                    completed_at: Some(now),
                };
                slot.expires_at = expiry(now, retention);
                slot.entry.expires_at = Some(slot.expires_at);
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
                slot.entry.state = EntryState::Failed {
                    error: error.clone(),
                    failed_at: Some(now),
                };
                slot.expires_at = expiry(now, retention);
                slot.entry.expires_at = Some(slot.expires_at);
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
            .map(|s| s.entry.clone()))
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
            if !slot.live(now) || !query.admits(&slot.entry) {
                continue;
            }
            if entries.len() == size {
                more = true;
                break;
            }
            entries.push(slot.entry.clone());
        }
        let next = if more {
            entries.last().map(|e: &Entry| e.key.as_str().to_owned())
        } else {
            None
        };
        Ok(Page::new(entries, next))
    }

    async fn resolve(
        &self,
        _key: &OperationKey,
        _resolution: &Resolution,
        _retention: Duration,
    ) -> Result<Resolved> {
        Err(crate::Error::Store("resolve is not implemented yet".into()))
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
