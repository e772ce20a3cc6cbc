//! The idempotency layer: what a write call does. Claim the key, run the tool once with a lease
//! heartbeat, record the result or the error, and answer duplicates from the store — all
//! without letting a store outage or a tool panic become a crash of the agent loop.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;

use crate::heartbeat::Heartbeats;
use crate::key::{Derived, OperationKey};
use crate::store::{
    About, Claim, ClaimRequest, EntryState, Fenced, OwnerToken, Resolution, Resolved, Store,
};
use crate::tool::{ToolError, Verified, WriteContext};

/// How a write call ended. Every answer carries one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// The tool ran (successfully or not) in this call. Read tools always end here.
    Executed,
    /// A duplicate: the stored result of the first run was returned; nothing ran.
    Replayed,
    /// A duplicate of an operation that failed permanently: the stored error was returned.
    ReplayedFailure,
    /// The same operation is running elsewhere right now; this call did not run it.
    InFlight,
    /// The key fields match an earlier operation but the other arguments differ; not run.
    Conflict,
    /// The arguments did not fit the tool's schema (or the limits), or the call's
    /// [`WriteOptions`] are invalid; nothing was claimed or run.
    InvalidArguments,
    /// No tool of that name is registered.
    UnknownTool,
    /// The store could not be used, so the write tool was not run (fail closed).
    StoreUnavailable,
    /// An earlier attempt of this operation was interrupted (its lease expired without a
    /// result), so whether it took effect is unknown, and the tool's [`OnExpired`] policy said
    /// not to run it again: nothing ran. A person must check and settle it
    /// (`toolonce resolve`, [`Store::resolve`]).
    Unknown,
}

impl Outcome {
    /// The outcome as a `snake_case` word, as logs and JSON spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Executed => "executed",
            Outcome::Replayed => "replayed",
            Outcome::ReplayedFailure => "replayed_failure",
            Outcome::InFlight => "in_flight",
            Outcome::Conflict => "conflict",
            Outcome::InvalidArguments => "invalid_arguments",
            Outcome::UnknownTool => "unknown_tool",
            Outcome::StoreUnavailable => "store_unavailable",
            Outcome::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What to do when a duplicate finds its operation still running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InFlight {
    /// Answer at once with an `in_flight` result telling the model not to retry (the default).
    Reject,
    /// Wait up to this long for the running call to settle, then answer as a duplicate of it.
    /// If the owner fails transiently, the waiter claims the operation and runs it itself; if
    /// the owner's lease expires, the operation is `unknown` and the waiter does what the
    /// [`OnExpired`] policy says.
    Wait(Duration),
}

/// What a duplicate does when it finds its operation `unknown`: an earlier attempt was
/// claimed and its lease expired without a result, so it may or may not have taken effect.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OnExpired {
    /// Do not run it again: answer [`Outcome::Unknown`], telling the model the first attempt may
    /// have taken effect and a person must check. The default, since running twice is only
    /// safe when the downstream system drops the second attempt by its key.
    #[default]
    Hold,
    /// Take it over and run it again with the same key: right when the downstream system
    /// honours the key (a payment API with `Idempotency-Key`), so a second attempt cannot take
    /// effect twice.
    Rerun,
    /// Ask the tool's verify probe (a read against the downstream system by the key): done
    /// records and replays its result, not done reruns, cannot tell holds.
    Verify,
}

impl OnExpired {
    /// The policy's name as configuration spells it: `hold`, `rerun` or `verify`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnExpired::Hold => "hold",
            OnExpired::Rerun => "rerun",
            OnExpired::Verify => "verify",
        }
    }
}

impl std::fmt::Display for OnExpired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for OnExpired {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        match s {
            "hold" => Ok(OnExpired::Hold),
            "rerun" => Ok(OnExpired::Rerun),
            "verify" => Ok(OnExpired::Verify),
            other => Err(crate::Error::Config(format!(
                "unknown on_expired policy {other:?}: expected hold, rerun or verify"
            ))),
        }
    }
}

/// The shortest lease accepted: the heartbeat renews it every third of its length, so a
/// shorter one leaves no time for a renewal to reach the store.
pub const MIN_LEASE: Duration = Duration::from_millis(30);

/// The longest lease or retention accepted: 100 years, which is as good as forever and still
/// adds to any clock without overflowing. A longer [`InFlight::Wait`] is not an error: it means
/// "wait for as long as it takes" and is shortened to this.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// The shortest retention accepted: a result kept for no time at all is never replayed.
const MIN_RETENTION: Duration = Duration::from_millis(1);

/// Per-tool settings of the layer.
///
/// The fields are checked when they are used ([`WriteOptions::validate`]): by
/// [`ToolboxBuilder::build`](crate::ToolboxBuilder::build), and by [`Layer::run`], which
/// refuses to run a call with invalid options.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct WriteOptions {
    /// How long a claim lives without a heartbeat. Short, so a crashed caller's operation can
    /// be retried soon; the heartbeat renews it every third of it while the tool runs.
    pub lease: Duration,
    /// How long a result (or a permanent error) is kept and replayed.
    pub retention: Duration,
    /// What a duplicate does while the operation runs.
    pub in_flight: InFlight,
    /// What a duplicate does when an earlier attempt's lease expired without a result.
    /// `None` (the default) means the tool's own declaration ([`WriteTool::on_expired`](
    /// crate::WriteTool::on_expired)) when registered in a [`Toolbox`](crate::Toolbox), and
    /// [`OnExpired::Hold`] for [`Layer::run`].
    pub on_expired: Option<OnExpired>,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            lease: Duration::from_secs(60),
            retention: Duration::from_secs(24 * 60 * 60),
            in_flight: InFlight::Reject,
            on_expired: None,
        }
    }
}

impl WriteOptions {
    /// The defaults: a 60 s lease, 24 h retention, in-flight duplicates rejected.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets the lease.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }
    /// Sets the retention.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }
    /// Sets the in-flight policy.
    pub fn in_flight(mut self, policy: InFlight) -> Self {
        self.in_flight = policy;
        self
    }
    /// Sets what a duplicate of an `unknown` operation does (over the tool's declaration).
    pub fn on_expired(mut self, policy: OnExpired) -> Self {
        self.on_expired = Some(policy);
        self
    }

    /// The policy the layer applies: the one set, else [`OnExpired::Hold`].
    pub fn expired_policy(&self) -> OnExpired {
        self.on_expired.unwrap_or_default()
    }

    /// Checks the durations: the lease must be between [`MIN_LEASE`] and [`MAX_DURATION`], the
    /// retention between 1 ms and [`MAX_DURATION`]. Any [`InFlight::Wait`] is valid: one longer
    /// than [`MAX_DURATION`] waits that long, which is to say for as long as it takes.
    ///
    /// # Errors
    ///
    /// [`Error::Config`](crate::Error::Config) naming the option, its value and the range.
    pub fn validate(&self) -> crate::Result<()> {
        check_range("lease", self.lease, MIN_LEASE, "30ms")?;
        check_range("retention", self.retention, MIN_RETENTION, "1ms")?;
        Ok(())
    }

    /// The options as the layer runs them: validated, with a wait beyond [`MAX_DURATION`]
    /// shortened to it, so no deadline computed from them can overflow a clock.
    fn effective(&self) -> crate::Result<std::borrow::Cow<'_, WriteOptions>> {
        self.validate()?;
        Ok(match self.in_flight {
            InFlight::Wait(wait) if wait > MAX_DURATION => {
                std::borrow::Cow::Owned(self.clone().in_flight(InFlight::Wait(MAX_DURATION)))
            }
            _ => std::borrow::Cow::Borrowed(self),
        })
    }
}

fn check_range(field: &str, value: Duration, min: Duration, min_text: &str) -> crate::Result<()> {
    if (min..=MAX_DURATION).contains(&value) {
        return Ok(());
    }
    Err(crate::Error::Config(format!(
        "{field} {value:?} is out of range: it must be between {min_text} and 100 years"
    )))
}

/// The answer of [`Layer::run`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct WriteAnswer {
    /// How the call ended.
    pub outcome: Outcome,
    /// The operation key.
    pub key: OperationKey,
    /// The tool's result, or the error to show the model (the tool's own, or the layer's
    /// explanation for `in_flight`, `conflict` and `store_unavailable`). The layer's texts are
    /// written for a model; for `store_unavailable` the store's own error, for an operator, is
    /// in the error's `detail` under [`STORE_ERROR`].
    pub result: Result<Value, ToolError>,
}

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

/// No verify probe (the type `run_inner` needs when there is none).
type NoProbe = fn(WriteContext) -> std::future::Ready<Verified>;
const NO_PROBE: Option<NoProbe> = None;

/// How often a complete or fail is retried when the store is briefly unreachable: the tool has
/// already run, so giving up means a duplicate will run it again (with the same key).
const SETTLE_RETRIES: u32 = 3;

/// How long a claim that may have applied unseen is retried for release (see
/// [`Layer::release`]): long enough to ride out a dropped connection or a quick restart, short
/// enough that the caller soon gets its `store_unavailable` answer.
const RELEASE_FOR: Duration = Duration::from_secs(3);

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
    pub async fn run<F, Fut>(
        &self,
        tool: &str,
        op: &Derived,
        options: &WriteOptions,
        run: F,
    ) -> WriteAnswer
    where
        F: FnOnce(WriteContext) -> Fut,
        Fut: Future<Output = Result<Value, ToolError>> + Send,
    {
        let about = About::empty().with_tool(Some(tool.to_owned()));
        self.run_with_about(tool, op, &about, options, run).await
    }

    /// [`run`](Layer::run), recording `about` in the entry the claim creates (its scope, tool,
    /// and whatever identifies the operation for a person: `toolonce exec` records the command
    /// line), for operators listing entries and for the `unknown` warning.
    ///
    /// Under [`OnExpired::Verify`] there is no probe to ask here, so an `unknown` operation is
    /// held; use [`run_with_verify`](Layer::run_with_verify) to give one.
    pub async fn run_with_about<F, Fut>(
        &self,
        tool: &str,
        op: &Derived,
        about: &About,
        options: &WriteOptions,
        run: F,
    ) -> WriteAnswer
    where
        F: FnOnce(WriteContext) -> Fut,
        Fut: Future<Output = Result<Value, ToolError>> + Send,
    {
        self.run_checked(tool, op, about, options, NO_PROBE, run)
            .await
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
    pub async fn run_with_verify<F, Fut, V, VFut>(
        &self,
        tool: &str,
        op: &Derived,
        about: &About,
        options: &WriteOptions,
        verify: V,
        run: F,
    ) -> WriteAnswer
    where
        F: FnOnce(WriteContext) -> Fut,
        Fut: Future<Output = Result<Value, ToolError>> + Send,
        V: FnOnce(WriteContext) -> VFut,
        VFut: Future<Output = Verified> + Send,
    {
        self.run_checked(tool, op, about, options, Some(verify), run)
            .await
    }

    /// Checks the options, runs the call, and reports it (log line and metrics).
    async fn run_checked<F, Fut, V, VFut>(
        &self,
        tool: &str,
        op: &Derived,
        about: &About,
        options: &WriteOptions,
        verify: Option<V>,
        run: F,
    ) -> WriteAnswer
    where
        F: FnOnce(WriteContext) -> Fut,
        Fut: Future<Output = Result<Value, ToolError>> + Send,
        V: FnOnce(WriteContext) -> VFut,
        VFut: Future<Output = Verified> + Send,
    {
        let answer = match options.effective() {
            Ok(options) => {
                let answer = self.run_inner(tool, op, about, &options, verify, run).await;
                log_write_call(tool, about, &answer);
                answer
            }
            Err(e) => misconfigured(tool, op, &e),
        };
        count_call(tool, answer.outcome);
        answer
    }

    async fn run_inner<F, Fut, V, VFut>(
        &self,
        tool: &str,
        op: &Derived,
        about: &About,
        options: &WriteOptions,
        verify: Option<V>,
        run: F,
    ) -> WriteAnswer
    where
        F: FnOnce(WriteContext) -> Fut,
        Fut: Future<Output = Result<Value, ToolError>> + Send,
        V: FnOnce(WriteContext) -> VFut,
        VFut: Future<Output = Verified> + Send,
    {
        let key = &op.key;
        let answer = |outcome, result| WriteAnswer {
            outcome,
            key: key.clone(),
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
                        // The store may have applied the claim before the reply was lost.
                        self.release(tool, key, &owner).await;
                    }
                    return answer(Outcome::StoreUnavailable, Err(unavailable(tool, &e)));
                }
            };
            let entry = match claim {
                Claim::Won => {
                    let run = run.take().expect("a won claim runs the tool once");
                    let ctx = WriteContext::new(key.clone(), reclaimed);
                    return self.execute(tool, key, owner, options, run(ctx)).await;
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
                    return self.execute(tool, key, owner, options, run(ctx)).await;
                }
                Claim::Existing(entry) => entry,
            };
            if !entry.matches(&op.fingerprint) {
                return answer(Outcome::Conflict, Err(conflict(tool, key)));
            }
            match entry.state {
                EntryState::Done { result, .. } => return answer(Outcome::Replayed, Ok(result)),
                EntryState::Failed { error, .. } => {
                    return answer(Outcome::ReplayedFailure, Err(error));
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
                            return self.record_verified(tool, key, value, options).await;
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
                    Err(e) => {
                        return answer(Outcome::StoreUnavailable, Err(unavailable(tool, &e)));
                    }
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
        key: &OperationKey,
        value: Value,
        options: &WriteOptions,
    ) -> WriteAnswer {
        let answer = |outcome, result| WriteAnswer {
            outcome,
            key: key.clone(),
            result,
        };
        let resolution = Resolution::Done(value.clone());
        match self
            .store
            .resolve(key, &resolution, options.retention)
            .await
        {
            // Settled meanwhile (its late owner recorded it, or an operator did): that record
            // wins, as it would for any duplicate.
            Ok(Resolved::Settled(entry)) => match entry.state {
                EntryState::Failed { error, .. } => answer(Outcome::ReplayedFailure, Err(error)),
                EntryState::Done { result, .. } => answer(Outcome::Replayed, Ok(result)),
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
                answer(Outcome::Replayed, Ok(value))
            }
            // Released or expired meanwhile, or the store failed: the downstream system said it
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
                answer(Outcome::Replayed, Ok(value))
            }
        }
    }

    async fn execute<Fut>(
        &self,
        tool: &str,
        key: &OperationKey,
        owner: OwnerToken,
        options: &WriteOptions,
        work: Fut,
    ) -> WriteAnswer
    where
        Fut: Future<Output = Result<Value, ToolError>> + Send,
    {
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
                    result: Err(ToolError::transient(format!(
                        "The tool `{tool}` failed unexpectedly (it panicked), so whether it took \
                         effect is unknown. The operation stays locked until its lease expires; \
                         after that an identical call either runs it again with the same \
                         idempotency key or reports its outcome as unknown, depending on the tool."
                    ))
                    .with_detail(serde_json::json!({ PANICKED: true }))),
                };
            }
        };
        let settled = self.settle(tool, key, &owner, &result, options).await;
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
            result,
        }
    }

    /// Records the outcome with a fenced complete or fail, retrying a few times while the
    /// store is unreachable. `None` means it could not be recorded at all: the entry then
    /// becomes `unknown` when its lease expires.
    ///
    /// A write whose reply was lost may have applied: the layer's own retry (after an error),
    /// or the driver's (redis-rs re-sends a script on a cluster by itself, unseen), then finds
    /// the entry already settled, and the fenced write answers `NotOwner`. Rather than make the
    /// stores remember the owner of settled entries (which would change every store's format,
    /// the wire format shared with other implementations included), the layer reads the entry
    /// on `NotOwner` and counts the write as applied when it holds exactly what was written:
    /// `done` with this result, `failed` with this error, or, for a transient failure (a
    /// delete), no entry at all. So "the claim was lost" is logged only when it was. (A
    /// duplicate that took over after this caller's lease expired and recorded an identical
    /// result looks the same; the heartbeat has then already warned that the lease was lost,
    /// and the entry replays exactly what this caller got.)
    async fn settle(
        &self,
        tool: &str,
        key: &OperationKey,
        owner: &OwnerToken,
        result: &Result<Value, ToolError>,
        options: &WriteOptions,
    ) -> Option<Fenced> {
        let mut pause = Duration::from_millis(50);
        for attempt in 1..=SETTLE_RETRIES {
            let written = match result {
                Ok(value) => {
                    let retention = options.retention;
                    self.store
                        .complete(key, owner.duplicate(), value, retention)
                        .await
                }
                Err(error) => {
                    let sticky = (!error.is_transient()).then_some(options.retention);
                    self.store.fail(key, owner.duplicate(), error, sticky).await
                }
            };
            match written {
                Ok(Fenced::NotOwner) => return Some(self.applied_before(key, result).await),
                Ok(Fenced::Applied) => return Some(Fenced::Applied),
                Err(e) if e.is_retryable() && attempt < SETTLE_RETRIES => {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                Err(e) => {
                    tracing::error!(
                        target: "toolonce",
                        tool,
                        key = %key,
                        error = %e.report(),
                        "could not record the outcome; the entry becomes unknown when its lease expires"
                    );
                    return None;
                }
            }
        }
        None
    }

    /// Whether a settle that answered `NotOwner` had in fact been applied by an earlier
    /// sending of the same write whose reply was lost (see [`Layer::settle`]).
    async fn applied_before(
        &self,
        key: &OperationKey,
        result: &Result<Value, ToolError>,
    ) -> Fenced {
        let applied = match self.store.get(key).await {
            Ok(Some(entry)) => match (&entry.state, result) {
                (EntryState::Done { result: stored, .. }, Ok(value)) => stored == value,
                (EntryState::Failed { error: stored, .. }, Err(error)) => {
                    !error.is_transient() && stored == error
                }
                _ => false,
            },
            // The delete of a transient failure: the key is free, as the write wanted.
            Ok(None) => matches!(result, Err(error) if error.is_transient()),
            Err(e) => {
                tracing::warn!(
                    target: "toolonce",
                    key = %key,
                    error = %e.report(),
                    "could not read the entry back to learn whether the outcome was recorded"
                );
                false
            }
        };
        if applied {
            Fenced::Applied
        } else {
            Fenced::NotOwner
        }
    }

    /// Releases a claim whose answer was an error after which it may have applied (the store
    /// was unreachable mid-request): a fenced transient `fail` with the caller's token deletes
    /// the entry if, and only if, the claim did write it. Best effort, retried for at most
    /// [`RELEASE_FOR`]; without it the entry would stay `running` for its lease, and every
    /// retry would be told the operation is in flight although it never ran.
    async fn release(&self, tool: &str, key: &OperationKey, owner: &OwnerToken) {
        let deadline = Instant::now() + RELEASE_FOR;
        let reason = ToolError::transient("the reply to the claim was lost; claim released");
        let mut pause = Duration::from_millis(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let attempt = self.store.fail(key, owner.duplicate(), &reason, None);
            match tokio::time::timeout(left, attempt).await {
                Ok(Ok(Fenced::Applied)) => {
                    tracing::info!(
                        target: "toolonce",
                        tool,
                        key = %key,
                        "released a claim whose reply was lost; the tool was not run"
                    );
                    return;
                }
                // The claim never applied (or its entry is gone): nothing to release.
                Ok(Ok(Fenced::NotOwner)) => return,
                Ok(Err(e)) if e.is_retryable() => {}
                Ok(Err(_)) | Err(_) => break,
            }
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::time::sleep(pause.min(left)).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        }
        tracing::warn!(
            target: "toolonce",
            tool,
            key = %key,
            "could not release a claim whose reply was lost; if it was written, it stays running \
             until its lease expires"
        );
    }
}

/// The answer to a call whose options are invalid: nothing is claimed or run. A mistake of the
/// program, not of the model, so the operator hears of it loudly.
fn misconfigured(tool: &str, op: &Derived, e: &crate::Error) -> WriteAnswer {
    tracing::error!(
        target: "toolonce",
        tool,
        key = %op.key,
        outcome = Outcome::InvalidArguments.as_str(),
        error = %e.report(),
        "write call refused: its write options are invalid; nothing was claimed or run"
    );
    WriteAnswer {
        outcome: Outcome::InvalidArguments,
        key: op.key.clone(),
        result: Err(ToolError::permanent(format!(
            "Not executed: `{tool}` is misconfigured in this program ({e}), so it was not run. \
             Retrying will not help; continue without it."
        ))),
    }
}

/// The key of [`ToolError::detail`] under which an answer the layer wrote carries, for the
/// operator, the store's own error (`store_unavailable`).
pub const STORE_ERROR: &str = "store_error";

/// The key of [`ToolError::detail`] marking the answer to a tool that panicked.
const PANICKED: &str = "panicked";

/// The one event of every write call, in operator wording: what happened, the tool, the key,
/// the outcome, and the tool's own error or the store's where there is one. The text written
/// for the model ("you must not retry it…") stays in the answer and is never logged.
fn log_write_call(tool: &str, about: &About, answer: &WriteAnswer) {
    let error = answer.result.as_ref().err();
    let detail = |field: &str| {
        error
            .and_then(|e| e.detail.as_ref())
            .and_then(|d| d.get(field))
    };
    let panicked = detail(PANICKED).is_some();
    let what = match answer.outcome {
        Outcome::Executed if panicked => "the tool panicked; whether it took effect is unknown",
        Outcome::Executed if error.is_some() => "the tool ran and returned an error",
        Outcome::Executed => "the tool ran",
        Outcome::Replayed => "duplicate: the recorded result was returned, the tool did not run",
        Outcome::ReplayedFailure => {
            "duplicate of a failed operation: the recorded error was returned, the tool did not run"
        }
        Outcome::InFlight => {
            "the operation is running elsewhere (or a run was interrupted and its lease has not \
             expired): the tool did not run"
        }
        Outcome::Conflict => {
            "the key fields match an earlier operation with other arguments: the tool did not run"
        }
        Outcome::StoreUnavailable => "the store could not be used: the tool did not run",
        Outcome::InvalidArguments => "invalid arguments or options: the tool did not run",
        Outcome::UnknownTool => "unknown tool: nothing ran",
        Outcome::Unknown => {
            "an earlier attempt was interrupted and may have taken effect; held for a person to \
             check: the tool did not run"
        }
    };
    // The tool's own error: from this run, or recorded by the first one.
    let tool_error = match answer.outcome {
        Outcome::Executed if !panicked => error.map(|e| e.message.as_str()),
        Outcome::ReplayedFailure => error.map(|e| e.message.as_str()),
        _ => None,
    };
    let store_error = detail(STORE_ERROR).and_then(serde_json::Value::as_str);
    if answer.outcome == Outcome::Unknown {
        // A person must act: louder than the other outcomes, with what they need to find it.
        tracing::warn!(
            target: "toolonce",
            tool,
            scope = about.scope.as_deref(),
            key = %answer.key,
            outcome = answer.outcome.as_str(),
            "write call: {what}; settle it with `toolonce resolve {}`",
            answer.key
        );
        return;
    }
    tracing::info!(
        target: "toolonce",
        tool,
        key = %answer.key,
        outcome = answer.outcome.as_str(),
        // `Option` fields are left out when `None`.
        tool_error,
        store_error,
        "write call: {what}"
    );
}

/// The answer when the store cannot be used. The store's error is in the text (the model may
/// pass it on) and, for the operator's log and the `toolonce` command, in the detail under
/// [`STORE_ERROR`].
fn unavailable(tool: &str, e: &crate::Error) -> ToolError {
    let report = e.report().to_string();
    ToolError::transient(format!(
        "Not executed: `{tool}` was not run because the idempotency store is unavailable \
         ({report}), and running it without the store could perform it twice. Nothing \
         happened; it is safe to try again later."
    ))
    .with_detail(serde_json::json!({ STORE_ERROR: report }))
}

/// The answer under `hold` (or a probe that cannot tell): written for the model, which must
/// neither retry nor assume either way.
fn held(tool: &str, key: &OperationKey) -> ToolError {
    ToolError::permanent(format!(
        "Outcome unknown: an earlier identical call of `{tool}` (operation {key}) was \
         interrupted before its result was recorded, so it may already have taken effect. This \
         call was not executed, and you must not retry it: running it again could perform it \
         twice. A person must check whether it took effect and settle it (`toolonce resolve \
         {key}`). Tell the user it needs checking, and do not assume it happened or did not."
    ))
}

/// The counter of write calls, by tool and outcome.
pub const CALLS_METRIC: &str = "toolonce_calls_total";
/// The counter of takeovers of `unknown` operations, by tool.
pub const TAKEOVERS_METRIC: &str = "toolonce_takeovers_total";

pub(crate) fn count_call(tool: &str, outcome: Outcome) {
    metrics::counter!(
        CALLS_METRIC,
        "tool" => tool.to_owned(),
        "outcome" => outcome.as_str()
    )
    .increment(1);
}

fn count_takeover(tool: &str) {
    metrics::counter!(TAKEOVERS_METRIC, "tool" => tool.to_owned()).increment(1);
}

fn in_flight(tool: &str, key: &OperationKey) -> ToolError {
    ToolError::transient(format!(
        "Already in progress: an identical call of `{tool}` (operation {key}) is running right \
         now. This call was not executed, and you must not retry it: the operation will take \
         effect once. Continue with other work, or check its outcome later."
    ))
}

fn conflict(tool: &str, key: &OperationKey) -> ToolError {
    ToolError::permanent(format!(
        "Conflict: an earlier call of `{tool}` with the same identifying fields (operation \
         {key}) had different other arguments. This call was not executed. If you meant the \
         earlier operation, it has already been done; if you meant a new one, change an \
         identifying field."
    ))
}
