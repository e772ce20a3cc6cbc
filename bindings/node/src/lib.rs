//! The native half of the `toolonce` npm package: stores, keys and write calls of the Rust core
//! exposed to Node.js through N-API (napi-rs). The JavaScript half (`index.js`) gives them the
//! reference design's shape; the semantics (claim, heartbeat, record, replay, `unknown`) live in
//! the core alone, and this crate only maps types and errors across.
//!
//! Values cross as JSON text: JavaScript stringifies the arguments and the handler's result, and
//! parses the answer's. One string each way is cheaper than walking an object through N-API
//! calls, and it is the form the core keys and stores anyway.
//!
//! # The crossings
//!
//! A write call crosses from JavaScript to Rust once and back once, plus once each way when the
//! handler runs, and creates no N-API object per call beyond its values:
//!
//! 1. `NativeWriteTool::run` (synchronous) spawns the call on the addon's Tokio runtime and
//!    returns at once; the call runs the core's `Layer::run_with_verify`.
//! 2. When the layer runs the tool (or asks its verify probe), Rust queues a call of the tool's
//!    dispatcher, a JavaScript function held as a threadsafe function made once per tool. The
//!    dispatcher runs the handler on the JavaScript thread and, once it settles, hands the
//!    outcome back with `NativeWriteTool::settle` (synchronous), which wakes the Rust call
//!    through a oneshot channel. The outcome is an envelope (see [`Envelope`]) saying whether the
//!    handler returned or threw, and whether the throw was permanent.
//! 3. The answer goes back through the tool's answer function, another threadsafe function made
//!    once per tool; `index.js` resolves the caller's promise.
//!
//! Answers and dispatches queued while the JavaScript thread is busy are delivered in one wake,
//! so concurrent calls share crossings. Both threadsafe functions are weak (a wrapped tool does
//! not keep Node alive), except that the answer function holds the event loop open while calls
//! are pending, as a pending promise would.
//!
//! While a handler runs, the layer's heartbeat task renews the lease on the Tokio thread, so a
//! slow handler keeps its claim; one that never settles keeps it as long as the process lives,
//! and when the process ends the lease runs out as after any crash.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use napi::bindgen_prelude::*;
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi_derive::napi;
use serde_json::Value;
use tokio::sync::oneshot;
use toolonce::key::{self, KeyFields};
use toolonce::store::redact_url;
use toolonce::{
    About, ErrorClass, InFlight, Layer, OnExpired, Store, ToolError, Verified, WriteAnswer,
    WriteContext, WriteOptions,
};

/// Gives napi-rs a Tokio runtime of one worker thread before any call. Every task of a call (the
/// call itself, the Redis connection's driver, the heartbeat) then runs on that one thread, so a
/// call costs two thread crossings (JavaScript to the worker and back) instead of hops between
/// workers as well. Nothing on it blocks: handlers run on the JavaScript thread and the SQLite
/// store does its blocking work on Tokio's blocking pool, so one worker keeps every heartbeat on
/// time.
#[napi_derive::module_init]
fn init() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("toolonce")
        .enable_all()
        .build()
        .expect("toolonce: cannot start the Tokio runtime");
    napi::bindgen_prelude::create_custom_tokio_runtime(runtime);
}

/// What the dispatcher is asked to do: run the handler, or ask the verify probe.
const CALL_RUN: u32 = 0;
const CALL_VERIFY: u32 = 1;

/// Arguments of one dispatcher call: (call id, [`CALL_RUN`] or [`CALL_VERIFY`], key, whether an
/// earlier attempt may have run).
type DispatchArgs = FnArgs<(u32, u32, String, bool)>;

/// The tool's dispatcher as Rust calls it: weak, errors not handed to the callee, its return
/// value ignored (the handler's outcome comes back through `settle`).
type Dispatcher =
    ThreadsafeFunction<DispatchArgs, Unknown<'static>, DispatchArgs, Status, false, true>;

/// Arguments of one answer: (call id, answer).
type AnswerArgs = FnArgs<(u32, NativeAnswer)>;

/// The tool's answer function: weak, but referenced while calls are pending.
type Answerer = ThreadsafeFunction<AnswerArgs, Unknown<'static>, AnswerArgs, Status, false, true>;

/// A store opened by URL. Closing it drops the connection; a later call is refused.
#[napi]
pub struct NativeStore {
    slot: Arc<StoreSlot>,
}

struct StoreSlot {
    store: Mutex<Option<Arc<dyn Store>>>,
    /// The URL without its password, for messages.
    url: String,
}

impl StoreSlot {
    fn get(&self) -> Result<Arc<dyn Store>> {
        lock(&self.store).clone().ok_or_else(|| {
            Error::new(
                Status::GenericFailure,
                format!("the store {} is closed", self.url),
            )
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The data (an Option of an Arc) cannot be left half-updated by a panic.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Opens the store `url` names (memory://, sqlite://PATH, redis://, rediss://, redis+cluster://,
/// postgres://): the core's `store::open`, on napi-rs's runtime so that the connections it makes
/// belong to the runtime the calls run on.
#[napi]
pub fn open_store(env: &Env, url: String) -> Result<PromiseRaw<'_, NativeStore>> {
    env.spawn_future(async move {
        let store = toolonce::store::open(&url).await.map_err(core_error)?;
        Ok(NativeStore {
            slot: Arc::new(StoreSlot {
                store: Mutex::new(Some(store)),
                url: redact_url(&url).to_string(),
            }),
        })
    })
}

#[napi]
impl NativeStore {
    /// Drops the store (its connections close when the last call using it ends).
    #[napi]
    pub fn close(&self) {
        lock(&self.slot.store).take();
    }

    /// The URL, without its password.
    #[napi(getter)]
    pub fn url(&self) -> String {
        self.slot.url.clone()
    }
}

/// A core error as a JavaScript error: the report (the error and its sources) as the message.
fn core_error(e: toolonce::Error) -> Error {
    let status = if e.is_store_error() {
        Status::GenericFailure
    } else {
        Status::InvalidArg
    };
    Error::new(status, e.report().to_string())
}

/// `idemKey(runId, toolName, args)`: the operation key of a call, as the core derives it.
#[napi]
pub fn idem_key(
    run_id: String,
    tool: String,
    args_json: String,
    key_fields: Option<Vec<String>>,
) -> Result<String> {
    let args = parse_json(&args_json, "arguments")?;
    let fields = key_fields
        .map(KeyFields::new)
        .transpose()
        .map_err(core_error)?;
    let derived = key::derive(&run_id, &tool, &args, fields.as_ref()).map_err(core_error)?;
    Ok(derived.key.as_str().to_owned())
}

fn parse_json(text: &str, what: &str) -> Result<Value> {
    serde_json::from_str(text)
        .map_err(|e| Error::new(Status::InvalidArg, format!("the {what} are not JSON: {e}")))
}

/// The options of a wrapped tool, as `index.js` normalizes them (durations in milliseconds).
#[napi(object)]
pub struct NativeOptions {
    pub lease_ms: Option<f64>,
    pub retention_ms: Option<f64>,
    /// Absent: reject; present: wait up to this long.
    pub in_flight_wait_ms: Option<f64>,
    /// `hold`, `rerun` or `verify`.
    pub on_expired: Option<String>,
    pub key_fields: Option<Vec<String>>,
}

fn duration(field: &str, ms: f64) -> Result<Duration> {
    if !ms.is_finite() || ms < 0.0 {
        return Err(Error::new(
            Status::InvalidArg,
            format!("{field} must be a non-negative number of milliseconds, not {ms}"),
        ));
    }
    // Saturates far beyond the core's 100-year limit, which then names the option.
    Ok(Duration::try_from_secs_f64(ms / 1000.0).unwrap_or(Duration::MAX))
}

impl NativeOptions {
    fn write_options(&self) -> Result<WriteOptions> {
        let mut options = WriteOptions::new();
        if let Some(ms) = self.lease_ms {
            options = options.lease(duration("lease", ms)?);
        }
        if let Some(ms) = self.retention_ms {
            options = options.retention(duration("retention", ms)?);
        }
        if let Some(ms) = self.in_flight_wait_ms {
            options = options.in_flight(InFlight::Wait(duration("inFlight.wait", ms)?));
        }
        if let Some(policy) = &self.on_expired {
            options = options.on_expired(policy.parse::<OnExpired>().map_err(core_error)?);
        }
        options.validate().map_err(core_error)?;
        Ok(options)
    }
}

/// A write tool bound to a store: its name, options and JavaScript functions.
#[napi]
pub struct NativeWriteTool {
    inner: Arc<ToolInner>,
    /// Shared with the spawned calls; locked for `refer`/`unref`, which N-API types as `&mut`.
    answerer: Arc<Mutex<Answerer>>,
    /// Calls spawned and not yet answered; the answer function holds the event loop while
    /// this is not zero. Only touched on the JavaScript thread.
    pending: u32,
}

struct ToolInner {
    name: String,
    slot: Arc<StoreSlot>,
    options: WriteOptions,
    key_fields: Option<KeyFields>,
    dispatcher: Dispatcher,
    /// The handler outcomes awaited, by call id (a call awaits one at a time).
    waiting: Mutex<HashMap<u32, oneshot::Sender<String>>>,
}

/// How a write call ended, for `index.js` to turn into a value or a typed error.
#[napi(object)]
pub struct NativeAnswer {
    /// The core's outcome word: `executed`, `replayed`, `replayed_failure`, `in_flight`, …
    pub outcome: String,
    /// The operation key; empty when the call was refused before it was keyed.
    pub key: String,
    /// The result as JSON text, when the call has one.
    pub result: Option<String>,
    /// The error's message, when the call failed (the tool's, or the core's explanation).
    pub error_message: Option<String>,
    /// `transient` or `permanent`.
    pub error_class: Option<String>,
    /// The error's structured detail as JSON text, if any.
    pub error_detail: Option<String>,
}

impl NativeAnswer {
    fn from_core(answer: WriteAnswer) -> Self {
        let key = answer.key.as_str().to_owned();
        let outcome = answer.outcome.as_str().to_owned();
        match answer.result {
            Ok(value) => NativeAnswer {
                outcome,
                key,
                result: Some(value.to_string()),
                error_message: None,
                error_class: None,
                error_detail: None,
            },
            Err(e) => NativeAnswer {
                outcome,
                key,
                result: None,
                error_class: Some(
                    match e.class {
                        ErrorClass::Permanent => "permanent",
                        _ => "transient",
                    }
                    .to_owned(),
                ),
                error_detail: e.detail.as_ref().map(Value::to_string),
                error_message: Some(e.message),
            },
        }
    }

    /// A call refused before anything was claimed: arguments that cannot be keyed, a closed
    /// store.
    fn refused(outcome: &str, message: String) -> Self {
        NativeAnswer {
            outcome: outcome.to_owned(),
            key: String::new(),
            result: None,
            error_message: Some(message),
            error_class: Some("permanent".to_owned()),
            error_detail: None,
        }
    }
}

#[napi]
impl NativeWriteTool {
    /// Binds a tool named `name` to `store`. `dispatcher(callId, kind, key, mayHaveRunBefore)`
    /// runs the handler (kind 0) or the verify probe (kind 1) of the call `callId` and hands
    /// its envelope to `settle`; `answer(callId, answer)` receives each call's answer. Invalid
    /// options throw here, before any call.
    #[napi(constructor)]
    pub fn new(
        store: &NativeStore,
        name: String,
        options: NativeOptions,
        dispatcher: Function<'_, DispatchArgs, Unknown<'static>>,
        answer: Function<'_, AnswerArgs, Unknown<'static>>,
    ) -> Result<Self> {
        if name.is_empty() || name.contains('\0') {
            return Err(Error::new(
                Status::InvalidArg,
                "a write tool's name must be a non-empty string without NUL",
            ));
        }
        let write_options = options.write_options()?;
        let key_fields = options
            .key_fields
            .map(KeyFields::new)
            .transpose()
            .map_err(core_error)?;
        let dispatcher = dispatcher
            .build_threadsafe_function::<DispatchArgs>()
            .callee_handled::<false>()
            .weak::<true>()
            .build()?;
        let answerer = answer
            .build_threadsafe_function::<AnswerArgs>()
            .callee_handled::<false>()
            .weak::<true>()
            .build()?;
        Ok(NativeWriteTool {
            inner: Arc::new(ToolInner {
                name,
                slot: store.slot.clone(),
                options: write_options,
                key_fields,
                dispatcher,
                waiting: Mutex::new(HashMap::new()),
            }),
            answerer: Arc::new(Mutex::new(answerer)),
            pending: 0,
        })
    }

    /// Starts one call: `callId` names it to the dispatcher and in its answer, `scope` is the
    /// run id, `argsJson` the validated arguments. Every call is answered exactly once, through
    /// the answer function, whatever its outcome.
    #[napi]
    pub fn run(&mut self, env: &Env, call_id: u32, scope: String, args_json: String) -> Result<()> {
        if self.pending == 0 {
            // Hold the event loop open until the answer, as a pending promise would. (napi-rs
            // deprecates `refer` in favour of cloning, which counts references but does not
            // hold the loop; napi_ref_threadsafe_function is what is meant here.)
            #[allow(deprecated)]
            lock(&self.answerer).refer(env)?;
        }
        let tool = self.inner.clone();
        let answerer = self.answerer.clone();
        napi::bindgen_prelude::spawn(async move {
            let answer = tool.call(call_id, scope, args_json).await;
            // Queued for the JavaScript thread; fails only when Node is shutting down.
            let _ = lock(&answerer).call(
                (call_id, answer).into(),
                ThreadsafeFunctionCallMode::NonBlocking,
            );
        });
        self.pending += 1;
        Ok(())
    }

    /// Tells the tool that the answer of a call was received (called by the answer function):
    /// the last pending call lets the event loop go.
    #[napi]
    pub fn answered(&mut self, env: &Env) -> Result<()> {
        self.pending = self.pending.saturating_sub(1);
        if self.pending == 0 {
            #[allow(deprecated)]
            lock(&self.answerer).unref(env)?;
        }
        Ok(())
    }

    /// Hands the envelope of the handler (or the verify probe) of call `callId` to the Rust
    /// call awaiting it. Returns false if no call awaits it.
    #[napi]
    pub fn settle(&self, call_id: u32, envelope: String) -> bool {
        let sender = lock(&self.inner.waiting).remove(&call_id);
        sender.is_some_and(|s| s.send(envelope).is_ok())
    }
}

impl ToolInner {
    /// One call, from the arguments' JSON text to its answer.
    async fn call(&self, call_id: u32, scope: String, args_json: String) -> NativeAnswer {
        let args = match parse_json(&args_json, "arguments") {
            Ok(args) => args,
            Err(e) => return NativeAnswer::refused("invalid_arguments", e.reason),
        };
        let op = match key::derive(&scope, &self.name, &args, self.key_fields.as_ref()) {
            Ok(op) => op,
            Err(e) => return NativeAnswer::refused("invalid_arguments", e.report().to_string()),
        };
        let store = match self.slot.get() {
            Ok(store) => store,
            Err(e) => return NativeAnswer::refused("store_unavailable", e.reason),
        };
        let about = About::new(scope, self.name.clone());
        let answer = Layer::new(store)
            .run_with_verify(
                &self.name,
                &op,
                &about,
                &self.options,
                |ctx| self.verify(call_id, ctx),
                |ctx| self.execute(call_id, ctx),
            )
            .await;
        NativeAnswer::from_core(answer)
    }

    /// Runs the JavaScript handler of call `call_id` and awaits its envelope.
    async fn execute(
        &self,
        call_id: u32,
        ctx: WriteContext,
    ) -> std::result::Result<Value, ToolError> {
        let envelope = self
            .dispatch(call_id, CALL_RUN, &ctx)
            .await
            .map_err(|reason| {
                ToolError::transient(format!("the JavaScript handler could not be run: {reason}"))
            })?;
        Envelope::parse(&envelope).into_result()
    }

    /// Asks the JavaScript verify probe of call `call_id`; any failure cannot tell (holds).
    async fn verify(&self, call_id: u32, ctx: WriteContext) -> Verified {
        match self.dispatch(call_id, CALL_VERIFY, &ctx).await {
            Ok(envelope) => Envelope::parse(&envelope).into_verified(),
            Err(_) => Verified::CannotTell,
        }
    }

    /// Queues a dispatcher call and awaits the envelope `settle` hands back.
    async fn dispatch(
        &self,
        call_id: u32,
        kind: u32,
        ctx: &WriteContext,
    ) -> std::result::Result<String, String> {
        let (sender, receiver) = oneshot::channel();
        lock(&self.waiting).insert(call_id, sender);
        let args = (
            call_id,
            kind,
            ctx.key().as_str().to_owned(),
            ctx.may_have_run_before(),
        );
        let status = self
            .dispatcher
            .call(args.into(), ThreadsafeFunctionCallMode::NonBlocking);
        if status != Status::Ok {
            lock(&self.waiting).remove(&call_id);
            return Err(format!("the dispatcher call failed ({status})"));
        }
        receiver
            .await
            .map_err(|_| "the dispatcher dropped the call".to_owned())
    }
}

/// The dispatcher's answer, one letter then JSON: `r` + result, `t`/`p` + `{message, detail?}`
/// (a transient or permanent throw), `d` + result (verify: done), `n` (not done), `c` (cannot
/// tell).
enum Envelope {
    Result(Value),
    Threw(ToolError),
    Done(Value),
    NotDone,
    CannotTell,
}

impl Envelope {
    fn parse(text: &str) -> Envelope {
        let (tag, body) = text.split_at(text.len().min(1));
        let json = || serde_json::from_str::<Value>(body);
        match (tag, json()) {
            ("r", Ok(value)) => Envelope::Result(value),
            ("d", Ok(value)) => Envelope::Done(value),
            ("n", _) => Envelope::NotDone,
            ("c", _) => Envelope::CannotTell,
            (tag @ ("t" | "p"), Ok(error)) => {
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("the tool failed")
                    .to_owned();
                let mut e = if tag == "p" {
                    ToolError::permanent(message)
                } else {
                    ToolError::transient(message)
                };
                if let Some(detail) = error.get("detail").filter(|d| !d.is_null()) {
                    e = e.with_detail(detail.clone());
                }
                Envelope::Threw(e)
            }
            // index.js writes the envelope; anything else is a bug there, answered as a
            // transient failure so the operation stays retryable.
            _ => Envelope::Threw(ToolError::transient(format!(
                "toolonce: malformed answer from the JavaScript dispatcher: {text:.80}"
            ))),
        }
    }

    fn into_result(self) -> std::result::Result<Value, ToolError> {
        match self {
            Envelope::Result(value) => Ok(value),
            Envelope::Threw(e) => Err(e),
            _ => Err(ToolError::transient(
                "toolonce: the JavaScript dispatcher answered a run with a verify answer",
            )),
        }
    }

    fn into_verified(self) -> Verified {
        match self {
            Envelope::Done(value) => Verified::Done(value),
            Envelope::NotDone => Verified::NotDone,
            _ => Verified::CannotTell,
        }
    }
}
