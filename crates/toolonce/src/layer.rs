//! The idempotency layer: what a write call does. Claim the key, run the tool once with a lease
//! heartbeat, record the result or the error, and answer duplicates from the store — all
//! without letting a store outage or a tool panic become a crash of the agent loop.
//!
//! The layer is the one place that decides what an attempt's outcome means for the operation
//! (record it, replay it, release it, or leave it `unknown`); surfaces (the `toolonce` command,
//! the MCP proxy, the bindings) hand it facts. Its parts: `answer` (outcomes and the texts
//! the model reads), `settle` (recording outcomes), `report` (logs and metrics); the policy it
//! applies lives in [`crate::policy`].

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use serde_json::Value;
use tokio::time::Instant;

mod answer;
mod call;
mod release;
mod replay;
mod report;
mod settle;
mod storable;

pub use answer::{Outcome, STORE_ERROR, WriteAnswer};
pub use call::{ProbeFuture, ToolFuture};
pub use replay::{ReplayNote, utc_seconds};
pub use report::{CALLS_METRIC, DURATION_METRIC, TAKEOVERS_METRIC};
pub(crate) use report::{count_call, count_unlisted_call};

use crate::heartbeat::Heartbeats;
use crate::key::{Derived, OperationKey};
pub use crate::policy::{InFlight, MAX_DURATION, MIN_LEASE, OnExpired, WriteOptions};
use crate::store::{
    About, Claim, ClaimRequest, EntryState, Fenced, OwnerToken, Recorded, Resolution, Resolved,
    Seen, Store,
};
use crate::tool::{ToolError, Verified, WriteContext};
use answer::{PANICKED, conflict, held, in_flight, misconfigured, unavailable, unreadable};
pub(crate) use call::{Claimed, NO_PROBE, WriteCall};
use report::{count_takeover, log_write_call};
use storable::is_release;

/// Runs write operations at most once per key on a [`Store`].
///
/// [`Toolbox`](crate::Toolbox) is the usual way in; use `Layer` directly to put arbitrary
/// futures behind a key, as the `toolonce` command does for shell commands and MCP servers.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::sync::Arc;
/// use toolonce::{key, Layer, MemoryStore, Outcome, WriteOptions};
///
/// let layer = Layer::new(Arc::new(MemoryStore::new()));
/// let args = serde_json::json!({"to": "ada@example.com", "subject": "Hi"});
/// let op = key::derive("run-1", "send_email", &args, None).unwrap();
///
/// for expected in [Outcome::Executed, Outcome::Replayed] {
///     let answer = layer
///         .run("send_email", &op, &WriteOptions::new(), |ctx| async move {
///             // Hand the key downstream: ctx.idempotency_header()
///             Ok(serde_json::json!({"message_id": ctx.key().as_str()}))
///         })
///         .await;
///     assert_eq!(answer.outcome, expected);
/// }
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Layer {
    store: Arc<dyn Store>,
    /// The lease heartbeats of the calls running on this layer (and its clones).
    heartbeats: Arc<Heartbeats>,
}

impl Layer {
    /// A layer on `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Layer {
            store,
            heartbeats: Arc::default(),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Runs `run` at most once for the operation `op` (see the crate docs for the whole
    /// protocol). `tool` names the tool in messages and logs.
    ///
    /// Options that fail [`WriteOptions::validate`] are answered with
    /// [`Outcome::InvalidArguments`] before anything is claimed; a wait beyond
    /// [`MAX_DURATION`] waits that long.
    ///
    /// # Cancellation
    ///
    /// Dropping the returned future while the tool runs drops the tool's future too and stops
    /// the heartbeat: the entry stays `running` until its lease expires, then `unknown`, and a
    /// duplicate does what the options' [`OnExpired`] policy says (by default it holds: the
    /// operation is not run again until a person settles it). A panic in the tool is caught and
    /// leaves the entry the same way, since the tool may have had its effect.
    ///
    /// # Runtime
    ///
    /// Must be called within a Tokio runtime: the lease heartbeat is a task of the layer's on
    /// that runtime (one for all the calls running there, spawned with the first), so it keeps
    /// renewing even while the tool's own task is not polled. On a **multi-thread** runtime a
    /// tool that blocks its thread (a blocking HTTP client, `std::thread::sleep`, heavy
    /// computation) keeps its lease, because the heartbeat runs on another worker — though it
    /// still takes a worker away from every other task. On
    /// a **current-thread** runtime there is no other worker: a tool that blocks for longer
    /// than the lease stops the heartbeat with everything else, the lease expires, and a
    /// duplicate may run the operation beside it. There, run blocking work with
    /// [`tokio::task::spawn_blocking`] (and await it), or use a multi-thread runtime.
    pub async fn run<Fut: ToolFuture>(
        &self,
        tool: &str,
        op: &Derived,
        options: &WriteOptions,
        run: impl FnOnce(WriteContext) -> Fut,
    ) -> WriteAnswer {
        let about = About::empty().with_tool(Some(tool.to_owned()));
        self.run_with_about(tool, op, &about, options, run).await
    }

    /// [`run`](Layer::run), recording `about` in the entry the claim creates (its scope, tool,
    /// and whatever identifies the operation for a person: `toolonce exec` records the command
    /// line), for operators listing entries and for the `unknown` warning.
    ///
    /// Under [`OnExpired::Verify`] there is no probe to ask here, so an `unknown` operation is
    /// held; use [`run_with_verify`](Layer::run_with_verify) to give one.
    pub async fn run_with_about<Fut: ToolFuture>(
        &self,
        tool: &str,
        op: &Derived,
        about: &About,
        options: &WriteOptions,
        run: impl FnOnce(WriteContext) -> Fut,
    ) -> WriteAnswer {
        let call = WriteCall {
            tool,
            op,
            about,
            options,
        };
        self.run_call(call, NO_PROBE, run).await.into_values()
    }

    /// [`run_with_about`](Layer::run_with_about) with a verify probe, asked under
    /// [`OnExpired::Verify`] whether the interrupted earlier attempt of an `unknown` operation
    /// took effect: a read against the downstream system by the key (the context's
    /// [`key`](WriteContext::key)). [`Verified::Done`] records its result (fenced, with
    /// [`Store::resolve`]) and replays it; [`Verified::NotDone`] takes the operation over and
    /// runs it; [`Verified::CannotTell`] holds, as [`OnExpired::Hold`]. The probe is asked at
    /// most once per call, and never under the other policies.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::sync::Arc;
    /// use toolonce::{key, About, Layer, MemoryStore, OnExpired, Verified, WriteOptions};
    ///
    /// let layer = Layer::new(Arc::new(MemoryStore::new()));
    /// let args = serde_json::json!({"customer": "c_1", "cents": 500});
    /// let op = key::derive("run-1", "charge", &args, None).unwrap();
    /// let about = About::new("run-1", "charge");
    /// let options = WriteOptions::new().on_expired(OnExpired::Verify);
    /// let answer = layer
    ///     .run_with_verify(
    ///         "charge",
    ///         &op,
    ///         &about,
    ///         &options,
    ///         // Ask the payment provider for a charge with this idempotency key.
    ///         |_ctx| async { Verified::NotDone },
    ///         |ctx| async move { Ok(serde_json::json!({"charge": ctx.key().as_str()})) },
    ///     )
    ///     .await;
    /// assert!(answer.result.is_ok());
    /// # }
    /// ```
    pub async fn run_with_verify<Fut: ToolFuture, VFut: ProbeFuture>(
        &self,
        tool: &str,
        op: &Derived,
        about: &About,
        options: &WriteOptions,
        verify: impl FnOnce(WriteContext) -> VFut,
        run: impl FnOnce(WriteContext) -> Fut,
    ) -> WriteAnswer {
        let call = WriteCall {
            tool,
            op,
            about,
            options,
        };
        self.run_call(call, Some(verify), run).await.into_values()
    }

    /// Checks the options, runs the call, and reports it (log line and metrics), answering
    /// with the result as the store kept it (the toolbox's way in: a replayed result reaches
    /// the model without being decoded).
    pub(crate) async fn run_call<Fut: ToolFuture, VFut: ProbeFuture>(
        &self,
        call: WriteCall<'_>,
        verify: Option<impl FnOnce(WriteContext) -> VFut>,
        run: impl FnOnce(WriteContext) -> Fut,
    ) -> WriteAnswer<Recorded> {
        let began = std::time::Instant::now();
        let answer = match call.options.effective() {
            Ok(options) => {
                let call = WriteCall {
                    options: &options,
                    ..call
                };
                let answer = self.run_inner(call, verify, run).await;
                log_write_call(call.tool, call.about, &answer);
                answer
            }
            Err(e) => misconfigured(call.tool, call.op, &e),
        };
        count_call(call.tool, answer.outcome, began.elapsed());
        answer
    }

    async fn run_inner<Fut: ToolFuture, VFut: ProbeFuture>(
        &self,
        call: WriteCall<'_>,
        verify: Option<impl FnOnce(WriteContext) -> VFut>,
        run: impl FnOnce(WriteContext) -> Fut,
    ) -> WriteAnswer<Recorded> {
        let WriteCall {
            tool,
            op,
            about,
            options,
        } = call;
        let key = &op.key;
        let repeat_argument = options.repeat_argument.as_deref();
        let answer = |outcome, result| WriteAnswer {
            outcome,
            key: key.clone(),
            notice: None,
            replay: None,
            result,
        };
        let deadline = match options.in_flight {
            InFlight::Wait(timeout) => Some(Instant::now() + timeout),
            InFlight::Reject => None,
        };
        let mut run = Some(run);
        let mut verify = verify;
        let mut reclaimed = false;
        // Under `rerun` the first claim already asks to take an `unknown` entry over: one round
        // trip. Otherwise only a probe that answered "not done" asks for it.
        let policy = options.expired_policy();
        let mut takeover = policy == OnExpired::Rerun;
        // Made before the claim, so a claim whose reply is lost is still ours to retry (the
        // store answers `Won` to its own token) or to release.
        let owner = OwnerToken::generate();
        loop {
            let request = ClaimRequest::new(key, &op.fingerprint, &owner, options.lease)
                .retention(options.retention)
                .takeover(takeover)
                .about(about);
            let claim = match self.store.claim(&request).await {
                Ok(claim) => claim,
                Err(e) => {
                    if e.is_retryable() {
                        // The store may have applied the claim before the reply was lost: give
                        // it back, never deleting an earlier attempt it may have taken over.
                        self.give_up_claim(tool, key, &owner, takeover).await;
                    }
                    return store_failed(tool, key, &e);
                }
            };
            let entry = match claim {
                Claim::Won => {
                    let run = run.take().expect("a won claim runs the tool once");
                    let ctx = WriteContext::new(key.clone(), reclaimed);
                    let claimed = Claimed::Fresh(owner);
                    return self.execute(tool, key, claimed, options, run(ctx)).await;
                }
                Claim::TookOver => {
                    count_takeover(tool);
                    tracing::warn!(
                        target: "toolonce",
                        tool,
                        scope = about.scope.as_deref(),
                        key = %key,
                        policy = policy.as_str(),
                        "took over an operation whose earlier attempt was interrupted; running it \
                         again with the same key"
                    );
                    let run = run.take().expect("a won claim runs the tool once");
                    let ctx = WriteContext::new(key.clone(), true);
                    let claimed = Claimed::TookOver(owner);
                    return self.execute(tool, key, claimed, options, run(ctx)).await;
                }
                Claim::Existing(entry) => entry,
            };
            if !entry.matches(&op.fingerprint) {
                return answer(Outcome::Conflict, Err(conflict(tool, key)));
            }
            // The attempt a verify probe looks at: what it finds is recorded on that attempt
            // only (none for a settled entry, which allocates nothing).
            let seen = Seen::of(&entry);
            match entry.state {
                EntryState::Done {
                    result,
                    completed_at,
                } => {
                    let note = ReplayNote::new(tool, op, false, completed_at, repeat_argument);
                    return replayed(answer(Outcome::Replayed, Ok(result)), note);
                }
                EntryState::Failed { error, failed_at } => {
                    let note = ReplayNote::new(tool, op, true, failed_at, repeat_argument);
                    return replayed(answer(Outcome::ReplayedFailure, Err(error)), note);
                }
                EntryState::Unknown { .. } => {
                    // Under `rerun` the claim asked to take over and the store refused (it
                    // would have, had it been able to): hold rather than loop.
                    let probe = match policy {
                        OnExpired::Verify if !takeover => verify.take(),
                        _ => None,
                    };
                    let Some(probe) = probe else {
                        return answer(Outcome::Unknown, Err(held(tool, key)));
                    };
                    match probe(WriteContext::new(key.clone(), true)).await {
                        Verified::Done(value) => {
                            let seen = seen.expect("an unknown entry is unsettled");
                            return self.record_verified(tool, op, &seen, value, options).await;
                        }
                        Verified::NotDone => {
                            takeover = true;
                            continue;
                        }
                        Verified::CannotTell => {
                            return answer(Outcome::Unknown, Err(held(tool, key)));
                        }
                    }
                }
                EntryState::Running { .. } => {}
            }
            let Some(deadline) = deadline else {
                return answer(Outcome::InFlight, Err(in_flight(tool, key)));
            };
            // Wait for the running entry to settle, vanish or turn unknown, polling with a
            // growing pause: stores have no portable change notification, and a poll is one
            // cheap read.
            let mut pause = Duration::from_millis(5);
            loop {
                let now = Instant::now();
                if now >= deadline {
                    return answer(Outcome::InFlight, Err(in_flight(tool, key)));
                }
                tokio::time::sleep(pause.min(deadline - now)).await;
                pause = (pause * 2).min(Duration::from_millis(200));
                match self.store.get(key).await {
                    Err(e) => return store_failed(tool, key, &e),
                    Ok(Some(e)) if matches!(e.state, EntryState::Running { .. }) => continue,
                    // Settled: the next claim returns the settled entry. Unknown: the next claim
                    // applies the policy.
                    Ok(Some(_)) => break,
                    // Gone: the owner failed transiently (or an operator released it), and the
                    // next claim runs it.
                    Ok(None) => {
                        reclaimed = true;
                        break;
                    }
                }
            }
        }
    }

    /// Records what a verify probe found (the earlier attempt took effect with `value`), fenced
    /// so it never overwrites an entry that settled meanwhile, and answers as a duplicate.
    async fn record_verified(
        &self,
        tool: &str,
        op: &Derived,
        seen: &Seen,
        value: Value,
        options: &WriteOptions,
    ) -> WriteAnswer<Recorded> {
        let key = &op.key;
        let note =
            |failed, at| ReplayNote::new(tool, op, failed, at, options.repeat_argument.as_deref());
        let answer = |outcome, result| WriteAnswer {
            outcome,
            key: key.clone(),
            notice: None,
            replay: None,
            result,
        };
        let resolution = Resolution::Done(value.clone());
        match self
            .store
            .resolve(key, seen, &resolution, options.retention)
            .await
        {
            // Settled meanwhile (its late owner recorded it, or an operator did): that record
            // wins, as it would for any duplicate.
            Ok(Resolved::Settled(entry)) => match entry.state {
                EntryState::Failed { error, failed_at } => replayed(
                    answer(Outcome::ReplayedFailure, Err(error)),
                    note(true, failed_at),
                ),
                EntryState::Done {
                    result,
                    completed_at,
                } => replayed(
                    answer(Outcome::Replayed, Ok(result)),
                    note(false, completed_at),
                ),
                // Not a settled state: a store that answers so breaks the contract; hold.
                _ => answer(Outcome::Unknown, Err(held(tool, key))),
            },
            Ok(Resolved::Applied) => {
                tracing::info!(
                    target: "toolonce",
                    tool,
                    key = %key,
                    "the verify probe found the interrupted attempt took effect; its result is \
                     recorded"
                );
                let at = Some(std::time::SystemTime::now());
                replayed(answer(Outcome::Replayed, Ok(value.into())), note(false, at))
            }
            // Released, expired, taken over or renewed meanwhile (that attempt is not the one
            // probed, so it is left alone), or the store failed: the downstream system said it
            // is done, so it is answered as done (nothing runs), just not recorded.
            other => {
                if let Err(e) = &other {
                    tracing::warn!(
                        target: "toolonce",
                        tool,
                        key = %key,
                        error = %e.report(),
                        "could not record what the verify probe found; answering with it anyway"
                    );
                }
                replayed(
                    answer(Outcome::Replayed, Ok(value.into())),
                    note(false, None),
                )
            }
        }
    }

    async fn execute(
        &self,
        tool: &str,
        key: &OperationKey,
        claimed: Claimed,
        options: &WriteOptions,
        work: impl ToolFuture,
    ) -> WriteAnswer<Recorded> {
        let (owner, took_over) = claimed.into_parts();
        // The layer's heartbeat task renews the lease while the tool runs, so a tool that
        // blocks its thread (a blocking client, `std::thread::sleep`) keeps it. The
        // registration ends when the call does, and when this future is dropped: no lease is
        // renewed for a caller that is gone.
        let started = self
            .heartbeats
            .start(&self.store, tool, key, owner, options.lease);
        if started.must_yield {
            // The heartbeat task was just spawned or woken from this worker, into its LIFO
            // slot, which other workers never steal: if the tool blocked this thread before
            // the task was polled, it would not run. Yielding once lets it run first.
            tokio::task::yield_now().await;
        }
        let outcome = AssertUnwindSafe(work).catch_unwind().await;
        // Stopped before the outcome is recorded (waiting out a renewal in flight): no renew
        // races the complete or fail.
        let owner = started.beating.stop().await;
        let result = match outcome {
            Ok(result) => result,
            Err(_panic) => {
                tracing::error!(
                    target: "toolonce",
                    tool,
                    key = %key,
                    "the tool panicked; its entry stays running until the lease expires, then unknown"
                );
                return WriteAnswer {
                    outcome: Outcome::Executed,
                    key: key.clone(),
                    notice: None,
                    replay: None,
                    result: Err(ToolError::transient(
                        crate::texts::Text::Panicked.fill(&[("tool", tool)]),
                    )
                    .with_detail(serde_json::json!({ PANICKED: true }))),
                };
            }
        };
        // The tool ran: what cannot be stored as it is is stored as what stands for it, never
        // released (see `storable`).
        let stored = storable::storable(tool, &result);
        if let (Ok(_), Err(instead)) = (&result, stored.as_ref()) {
            tracing::warn!(
                target: "toolonce",
                tool,
                key = %key,
                reason = %instead.message,
                "the tool ran but its result cannot be stored; recorded as a failure instead"
            );
        }
        // A failure that stands for a result the tool produced is kept as long as a result;
        // the tool's own permanent errors for the (maybe shorter) failure retention.
        let failure_retention = match (&result, stored.as_ref()) {
            (Ok(_), Err(_)) => options.retention,
            _ => options.sticky_retention(),
        };
        let settled = if took_over && is_release(&stored) {
            // The tool's own transient error says this attempt did not take effect; the
            // earlier one it took over may have. Its record is kept: given back, `unknown`.
            self.give_back(tool, key, &owner).await
        } else {
            self.settle(tool, key, &owner, &stored, options, failure_retention)
                .await
        };
        if settled == Some(Fenced::NotOwner) {
            tracing::warn!(
                target: "toolonce",
                tool,
                key = %key,
                "the claim was lost while the tool ran (lease expired); the result was not recorded"
            );
        }
        WriteAnswer {
            outcome: Outcome::Executed,
            key: key.clone(),
            notice: answer::settle_notice(settled),
            replay: None,
            result: result.map(Recorded::from),
        }
    }
}

/// The answer when the store failed a claim or a read. An entry that is there but cannot be
/// decoded is not "nothing happened": the operation was begun, perhaps done, by a writer this
/// reader cannot follow, so it is held as `unknown` for a person. Anything else is the store
/// being unavailable, which the claim never got past: nothing ran.
fn store_failed<R>(tool: &str, key: &OperationKey, e: &crate::Error) -> WriteAnswer<R> {
    let (outcome, error) = match e {
        crate::Error::Corrupt { .. } => (Outcome::Unknown, unreadable(tool, key, e)),
        _ => (Outcome::StoreUnavailable, unavailable(tool, e)),
    };
    WriteAnswer {
        outcome,
        key: key.clone(),
        notice: None,
        replay: None,
        result: Err(error),
    }
}

/// `answer` with the note a replay tells the model.
fn replayed<R>(answer: WriteAnswer<R>, note: ReplayNote) -> WriteAnswer<R> {
    WriteAnswer {
        replay: Some(note),
        ..answer
    }
}
