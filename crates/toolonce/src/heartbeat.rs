//! The lease heartbeat: one long-lived task per layer and Tokio runtime renews the lease of
//! every write call running there, instead of a task spawned per call.
//!
//! A call registers when its tool starts (an insert under a mutex) and deregisters before its
//! outcome is recorded. Spawning a task per call cost more than the rest of a first-time call
//! on the memory store: the spawn, often a wake of an idle worker (a system call and another
//! core's time), a yield so the task is polled before the tool could block the thread, and an
//! abort and join at the end. Here a registration wakes the task only when it is the first or
//! its renewal is due before the task's next wake-up, which a stream of calls with the same
//! lease never is.
//!
//! The guarantees are the per-call task's:
//! - A tool that blocks its thread keeps its lease on a multi-thread runtime: the task is
//!   polled on whichever worker is free. A registration that wakes or spawns it from this
//!   worker is followed by a yield, so it is polled before the tool can block the worker whose
//!   non-stealable LIFO slot it then sits in. Later wake-ups come from its timer, and are
//!   queued on the worker that drives the timer, which is not blocked in a tool.
//! - Renewals run concurrently, each on its own schedule: a slow one delays no other call's.
//! - A lost lease is logged once and no longer renewed; a renewal error is logged and retried
//!   at the next period.
//! - Deregistering waits out a renewal of that call in flight, so no renewal races the
//!   complete or fail that follows. A dropped call deregisters at once (a renewal already in
//!   flight may still land, as an aborted per-call task's could).
//! - One task per runtime: a call renews on the runtime that polls it, so a current-thread
//!   runtime renews exactly while it is driven, as before.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::key::OperationKey;
use crate::store::{OwnerToken, Store};

/// The heartbeats of one layer (shared by its clones): a hub per runtime it runs on.
#[derive(Default)]
pub(crate) struct Heartbeats {
    hubs: Mutex<Vec<Arc<Hub>>>,
}

impl std::fmt::Debug for Heartbeats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heartbeats").finish_non_exhaustive()
    }
}

impl Drop for Heartbeats {
    fn drop(&mut self) {
        // No call can register any more (calls borrow the layer): the tasks end.
        let hubs = self.hubs.get_mut().unwrap_or_else(|p| p.into_inner());
        for hub in hubs.drain(..) {
            hub.lock().closed = true;
            hub.wake.notify_one();
        }
    }
}

/// One runtime's heartbeat task and the calls it renews.
struct Hub {
    runtime: tokio::runtime::Id,
    state: Mutex<State>,
    /// To the task: a registration is due before its next wake-up, or the layer is gone.
    wake: Notify,
    /// To deregistrations waiting out a renewal in flight: one has finished.
    renewed: Notify,
}

struct State {
    /// The registered calls; a slot is reused once its call deregistered.
    beats: Vec<Option<Beat>>,
    free: Vec<usize>,
    /// Whether the task is alive (it is spawned on the first registration, and again if it
    /// ended: its runtime shut down, or it panicked).
    running: bool,
    /// When the task wakes next on its own; `None` when it waits for a registration.
    wake_at: Option<Instant>,
    /// Whether a call registered since the task last looked: an idle task then keeps its timer
    /// for one more period, so that calls coming one after another do not each wake it.
    registered: bool,
    /// The renewal period of the latest registration.
    idle_period: Duration,
    closed: bool,
}

struct Beat {
    tool: Box<str>,
    key: OperationKey,
    owner: OwnerToken,
    lease: Duration,
    /// When the next renewal is due.
    due: Instant,
    renewing: bool,
    /// The store said the lease is lost: not renewed any more.
    lost: bool,
    /// The call was dropped while a renewal was in flight: the task frees the slot.
    dropped: bool,
}

fn period_of(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(1))
}

impl Hub {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update under this lock is a plain assignment: a poisoned state is consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn free(state: &mut State, slot: usize) -> Option<Beat> {
        state.free.push(slot);
        state.beats[slot].take()
    }

    /// Registers `beat`, due in `period`: its slot, and whether the hub's task must be
    /// spawned, or else woken to renew it in time.
    fn register(&self, beat: Beat, period: Duration) -> (usize, bool, bool) {
        let due = beat.due;
        let mut state = self.lock();
        let slot = match state.free.pop() {
            Some(slot) => {
                state.beats[slot] = Some(beat);
                slot
            }
            None => {
                state.beats.push(Some(beat));
                state.beats.len() - 1
            }
        };
        state.registered = true;
        state.idle_period = period;
        let spawn = !state.running;
        let wake = !spawn && state.wake_at.is_none_or(|at| at > due);
        if spawn {
            state.running = true;
        }
        if spawn || wake {
            state.wake_at = Some(due);
        }
        (slot, spawn, wake)
    }

    fn in_use(&self) -> bool {
        let state = self.lock();
        state.running || state.beats.iter().any(Option::is_some)
    }
}

impl Heartbeats {
    /// The hub of the runtime `id`, made on its first call.
    fn hub_of(&self, id: tokio::runtime::Id) -> Arc<Hub> {
        let mut hubs = self.hubs.lock().unwrap_or_else(|p| p.into_inner());
        // A hub whose task ended with nothing registered belongs to a runtime that shut
        // down (or will be restarted below): drop it.
        hubs.retain(|h| h.runtime == id || h.in_use());
        match hubs.iter().find(|h| h.runtime == id) {
            Some(hub) => Arc::clone(hub),
            None => {
                let hub = Arc::new(Hub {
                    runtime: id,
                    state: Mutex::new(State {
                        beats: Vec::new(),
                        free: Vec::new(),
                        running: false,
                        wake_at: None,
                        registered: false,
                        idle_period: Duration::ZERO,
                        closed: false,
                    }),
                    wake: Notify::new(),
                    renewed: Notify::new(),
                });
                hubs.push(Arc::clone(&hub));
                hub
            }
        }
    }

    /// Starts renewing `owner`'s lease of `key` every third of `lease`, on the current runtime.
    /// The caller must yield once before running the tool when `must_yield` says so.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime, as spawning a task does.
    pub(crate) fn start(
        &self,
        store: &Arc<dyn Store>,
        tool: &str,
        key: &OperationKey,
        owner: OwnerToken,
        lease: Duration,
    ) -> Started {
        let runtime = tokio::runtime::Handle::current();
        let id = runtime.id();
        let hub = self.hub_of(id);
        let period = period_of(lease);
        let due = Instant::now() + period;
        let beat = Beat {
            tool: tool.into(),
            key: key.clone(),
            owner,
            lease,
            due,
            renewing: false,
            lost: false,
            dropped: false,
        };
        let (slot, spawn, wake) = hub.register(beat, period);
        if spawn {
            runtime.spawn(drive(Arc::clone(&hub), Arc::clone(store)));
        } else if wake {
            hub.wake.notify_one();
        }
        Started {
            beating: Beating {
                hub,
                slot,
                stopped: false,
            },
            must_yield: spawn || wake,
        }
    }
}

/// A registration just made.
pub(crate) struct Started {
    pub(crate) beating: Beating,
    /// The heartbeat task was spawned or woken from this thread: it sits in this worker's
    /// LIFO slot, which other workers never steal, so the caller must yield once to let it be
    /// polled before a tool that blocks the thread runs.
    pub(crate) must_yield: bool,
}

/// A call's registration; dropping it deregisters at once.
pub(crate) struct Beating {
    hub: Arc<Hub>,
    slot: usize,
    stopped: bool,
}

impl Beating {
    /// Deregisters, waiting out a renewal of this call in flight, so that none races the
    /// complete or fail that follows. Gives the owner token back.
    pub(crate) async fn stop(mut self) -> OwnerToken {
        // Almost always no renewal is in flight: no waiter to register.
        if let Some(owner) = self.try_stop() {
            return owner;
        }
        let hub = Arc::clone(&self.hub);
        loop {
            let renewed = hub.renewed.notified();
            tokio::pin!(renewed);
            // Registered before the check, so a renewal finishing in between is not missed.
            renewed.as_mut().enable();
            if let Some(owner) = self.try_stop() {
                return owner;
            }
            renewed.await;
        }
    }

    /// Deregisters unless a renewal of this call is in flight.
    fn try_stop(&mut self) -> Option<OwnerToken> {
        let mut state = self.hub.lock();
        if state.beats[self.slot].as_ref().is_some_and(|b| b.renewing) {
            return None;
        }
        self.stopped = true;
        let beat = Hub::free(&mut state, self.slot);
        Some(
            beat.expect("a registered call's slot is held until it stops")
                .owner,
        )
    }
}

impl Drop for Beating {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        let mut state = self.hub.lock();
        match &mut state.beats[self.slot] {
            // The task frees it when the renewal returns, and renews it no more.
            Some(beat) if beat.renewing => beat.dropped = true,
            _ => {
                Hub::free(&mut state, self.slot);
            }
        }
    }
}

/// What a renewal answered.
struct Renewed {
    slot: usize,
    tool: Box<str>,
    key: OperationKey,
    result: crate::Result<bool>,
}

type Renewal = Pin<Box<dyn Future<Output = Renewed> + Send>>;

/// Marks the hub's task gone when it ends, however it ends (its runtime shutting down drops
/// it), so the next registration spawns another.
struct Alive(Arc<Hub>);

impl Drop for Alive {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.running = false;
        state.wake_at = None;
        // Renewals in flight are gone with the task: nobody may wait for them.
        for slot in 0..state.beats.len() {
            match &mut state.beats[slot] {
                Some(beat) if beat.dropped => {
                    Hub::free(&mut state, slot);
                }
                Some(beat) => beat.renewing = false,
                None => {}
            }
        }
        drop(state);
        self.0.renewed.notify_waiters();
    }
}

/// The heartbeat task of one hub.
async fn drive(hub: Arc<Hub>, store: Arc<dyn Store>) {
    let alive = Alive(hub);
    let hub = &alive.0;
    let mut renewals: FuturesUnordered<Renewal> = FuturesUnordered::new();
    let sleep = tokio::time::sleep_until(Instant::now());
    tokio::pin!(sleep);
    loop {
        let now = Instant::now();
        let next = {
            let mut state = hub.lock();
            if state.closed {
                return;
            }
            for (slot, beat) in state.beats.iter_mut().enumerate() {
                let Some(beat) = beat else { continue };
                if beat.renewing || beat.lost || beat.due > now {
                    continue;
                }
                beat.renewing = true;
                let (store, tool, key) = (Arc::clone(&store), beat.tool.clone(), beat.key.clone());
                let (owner, lease) = (beat.owner.duplicate(), beat.lease);
                renewals.push(Box::pin(async move {
                    let result = store.renew(&key, &owner, lease).await;
                    Renewed {
                        slot,
                        tool,
                        key,
                        result,
                    }
                }));
            }
            let next = state
                .beats
                .iter()
                .flatten()
                .filter(|b| !b.renewing && !b.lost)
                .map(|b| b.due)
                .min();
            state.wake_at = match next {
                Some(at) => Some(at),
                // Idle: keep the timer one more period if calls came lately, so the next one
                // need not wake the task; after a quiet period, wait for a registration.
                None if state.registered => Some(now + state.idle_period),
                None => None,
            };
            state.registered = false;
            state.wake_at
        };
        if let Some(at) = next {
            sleep.as_mut().reset(at);
        }
        let woken = hub.wake.notified();
        tokio::select! {
            Some(renewed) = renewals.next(), if !renewals.is_empty() => {
                settle_renewal(hub, renewed);
                hub.renewed.notify_waiters();
            }
            () = &mut sleep, if next.is_some() => {}
            () = woken => {}
        }
    }
}

/// Applies a renewal's answer to its call, and logs what the operator must know.
fn settle_renewal(hub: &Hub, renewed: Renewed) {
    let Renewed {
        slot,
        tool,
        key,
        result,
    } = renewed;
    {
        let mut state = hub.lock();
        let Some(beat) = state.beats[slot].as_mut() else {
            return;
        };
        beat.renewing = false;
        if beat.dropped {
            Hub::free(&mut state, slot);
            return;
        }
        match &result {
            Ok(true) | Err(_) => beat.due = Instant::now() + period_of(beat.lease),
            Ok(false) => beat.lost = true,
        }
    }
    match result {
        Ok(true) => {}
        Ok(false) => tracing::warn!(
            target: "toolonce",
            tool = &*tool,
            key = %key,
            "lease lost while the tool runs: a duplicate may run the operation again"
        ),
        Err(e) => tracing::warn!(
            target: "toolonce",
            tool = &*tool,
            key = %key,
            error = %e.report(),
            "could not renew the lease; trying again at the next heartbeat"
        ),
    }
}
