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

mod answer;
mod call;
mod claim;
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
use crate::store::{About, Fenced, OwnerToken, Recorded, Store};
use crate::tool::{ToolError, WriteContext};
use answer::{PANICKED, misconfigured, unavailable, unreadable};
pub(crate) use call::{Claimed, NO_PROBE, WriteCall};
use report::log_write_call;
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
    /// [`key`](WriteContext::key)). [`Verified::Done`](crate::Verified::Done) records its result (fenced, with
    /// [`Store::resolve`]) and replays it; [`Verified::NotDone`](crate::Verified::NotDone) takes the operation over and
    /// runs it; [`Verified::CannotTell`](crate::Verified::CannotTell) holds, as [`OnExpired::Hold`]. The probe is asked at
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

    /// Runs the tool under a lease heartbeat and records its outcome.
    async fn execute(
        &self,
        tool: &str,
        key: &OperationKey,
        claimed: Claimed,
        options: &WriteOptions,
        work: impl ToolFuture,
    ) -> WriteAnswer<Recorded> {
        let (owner, took_over) = claimed.into_parts();
        let (owner, outcome) = self.beating(tool, key, owner, options.lease, work).await;
        let Ok(result) = outcome else {
            return panicked(tool, key);
        };
        let settled = self
            .record(tool, key, &owner, took_over, &result, options)
            .await;
        WriteAnswer {
            outcome: Outcome::Executed,
            key: key.clone(),
            notice: answer::settle_notice(settled),
            replay: None,
            result: result.map(Recorded::from),
        }
    }

    /// Runs `work` while the lease is renewed, catching a panic; the owner token comes back
    /// once the heartbeat has stopped.
    async fn beating(
        &self,
        tool: &str,
        key: &OperationKey,
        owner: OwnerToken,
        lease: Duration,
        work: impl ToolFuture,
    ) -> (OwnerToken, std::thread::Result<Result<Value, ToolError>>) {
        // The layer's heartbeat task renews the lease while the tool runs, so a tool that
        // blocks its thread (a blocking client, `std::thread::sleep`) keeps it. The
        // registration ends when the call does, and when this future is dropped: no lease is
        // renewed for a caller that is gone.
        let started = self.heartbeats.start(&self.store, tool, key, owner, lease);
        if started.must_yield {
            // The heartbeat task was just spawned or woken from this worker, into its LIFO
            // slot, which other workers never steal: if the tool blocked this thread before
            // the task was polled, it would not run. Yielding once lets it run first.
            tokio::task::yield_now().await;
        }
        let outcome = AssertUnwindSafe(work).catch_unwind().await;
        // Stopped before the outcome is recorded (waiting out a renewal in flight): no renew
        // races the complete or fail.
        (started.beating.stop().await, outcome)
    }

    /// Records what the tool returned (or gives a takeover's entry back), once it has run.
    async fn record(
        &self,
        tool: &str,
        key: &OperationKey,
        owner: &OwnerToken,
        took_over: bool,
        result: &Result<Value, ToolError>,
        options: &WriteOptions,
    ) -> Option<Fenced> {
        // The tool ran: what cannot be stored as it is is stored as what stands for it, never
        // released (see `storable`).
        let stored = storable::storable(tool, result);
        if let (Ok(_), Err(instead)) = (result, stored.as_ref()) {
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
        let failure_retention = match (result, stored.as_ref()) {
            (Ok(_), Err(_)) => options.retention,
            _ => options.sticky_retention(),
        };
        let settled = if took_over && is_release(&stored) {
            // The tool's own transient error says this attempt did not take effect; the
            // earlier one it took over may have. Its record is kept: given back, `unknown`.
            self.give_back(tool, key, owner).await
        } else {
            self.settle(tool, key, owner, &stored, options, failure_retention)
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
        settled
    }
}

/// The answer when the tool panicked: it may have had its effect, so nothing is recorded.
fn panicked(tool: &str, key: &OperationKey) -> WriteAnswer<Recorded> {
    tracing::error!(
        target: "toolonce",
        tool,
        key = %key,
        "the tool panicked; its entry stays running until the lease expires, then unknown"
    );
    WriteAnswer {
        outcome: Outcome::Executed,
        key: key.clone(),
        notice: None,
        replay: None,
        result: Err(
            ToolError::transient(crate::texts::Text::Panicked.fill(&[("tool", tool)]))
                .with_detail(serde_json::json!({ PANICKED: true })),
        ),
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
