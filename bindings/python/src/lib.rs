//! `toolonce._native`, the Rust half of the Python package: it maps the core's types and errors
//! to Python and runs the core's [`Layer`] on a multi-thread Tokio runtime the module owns.
//!
//! A write call is a [`Call`]: the layer runs as a task on the runtime and, when it wins the
//! claim, sends a `run` event to the Python caller and waits for its reply. The Python function
//! therefore runs on the caller's own thread (sync) or event loop (async), with its context
//! variables, while the lease heartbeat, a task of the core, keeps renewing on a runtime worker.
//! The decorator and the mapping of outcomes to exceptions live in `python/toolonce/__init__.py`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::Value;
use tokio::sync::oneshot;
use toolonce::key::{Derived, KeyFields};
use toolonce::{About, InFlight, Layer, OnExpired, ToolError, Verified, WriteAnswer, WriteOptions};

/// Nesting deeper than this is refused while converting (the core refuses less deep nesting
/// anyway); it also stops a self-containing list from recursing forever.
const MAX_DEPTH: usize = 200;

/// How often a sync caller blocked on the layer looks for a pending signal (Ctrl-C).
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        // Multi-thread, so the heartbeat keeps running on a worker whatever the callers do.
        tokio::runtime::Builder::new_multi_thread()
            .thread_name("toolonce")
            .enable_all()
            .build()
            .expect("cannot start toolonce's Tokio runtime")
    })
}

/// The exception classes of `toolonce._errors`, looked up once.
fn error_class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    let module = MODULE.get_or_try_init(py, || py.import("toolonce._errors").map(Bound::unbind))?;
    module.bind(py).getattr(name)
}

/// A core error as the Python exception a user can catch.
fn map_error(py: Python<'_>, e: &toolonce::Error) -> PyErr {
    let text = e.report().to_string();
    let class = match e {
        _ if e.is_store_error() => "StoreUnavailableError",
        toolonce::Error::InvalidKeyPart { .. }
        | toolonce::Error::InvalidArguments(_)
        | toolonce::Error::ArgumentsTooLarge { .. }
        | toolonce::Error::TooDeep { .. } => "InvalidArgumentsError",
        _ => "ConfigError",
    };
    match error_class(py, class) {
        Ok(class) => match class.call1((text,)) {
            Ok(exc) => PyErr::from_value(exc),
            Err(err) => err,
        },
        Err(err) => err,
    }
}

/// A store opened from a URL: the core's `Arc<dyn Store>`, shared by every tool given it.
#[pyclass(frozen, module = "toolonce._native")]
struct Store {
    layer: Mutex<Option<Layer>>,
    /// The URL with its secrets masked, for `repr` and messages.
    url: String,
}

impl Store {
    fn layer(&self) -> PyResult<Layer> {
        self.layer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| PyRuntimeError::new_err(format!("the store {} is closed", self.url)))
    }
}

#[pymethods]
impl Store {
    /// Drops this handle's connection pool; calls made with the store afterwards raise.
    fn close(&self) {
        self.layer.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    #[getter]
    fn closed(&self) -> bool {
        self.layer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    fn __repr__(&self) -> String {
        format!("<toolonce.Store {}>", self.url)
    }
}

/// Opens the store `url` names (memory://, sqlite://PATH, redis://…, postgres://…), connecting
/// with the GIL released.
#[pyfunction]
fn open_store(py: Python<'_>, url: &str) -> PyResult<Store> {
    let opened = py.detach(|| runtime().block_on(toolonce::store::open(url)));
    let store = opened.map_err(|e| map_error(py, &e))?;
    Ok(Store {
        layer: Mutex::new(Some(Layer::new(store))),
        url: toolonce::store::redact_url(url),
    })
}

/// A write tool's settings, checked once when the function is decorated.
#[pyclass(frozen, module = "toolonce._native")]
struct Tool {
    name: String,
    options: WriteOptions,
    key_fields: Option<KeyFields>,
}

fn duration(py: Python<'_>, name: &str, seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds).map_err(|_| {
        map_error(
            py,
            &toolonce::Error::Config(format!(
                "{name} must be a non-negative number of seconds, not {seconds}"
            )),
        )
    })
}

#[pymethods]
impl Tool {
    /// `wait` is `None` for "reject", else the seconds a duplicate waits for the running call;
    /// `on_expired` is "hold", "rerun" or "verify".
    #[new]
    #[pyo3(signature = (name, lease, retention, wait, on_expired, key_fields))]
    fn new(
        py: Python<'_>,
        name: String,
        lease: f64,
        retention: f64,
        wait: Option<f64>,
        on_expired: &str,
        key_fields: Option<Vec<String>>,
    ) -> PyResult<Tool> {
        let in_flight = match wait {
            None => InFlight::Reject,
            Some(seconds) => InFlight::Wait(duration(py, "Wait", seconds)?),
        };
        let on_expired: OnExpired = on_expired.parse().map_err(|e| map_error(py, &e))?;
        let options = WriteOptions::new()
            .lease(duration(py, "lease", lease)?)
            .retention(duration(py, "retention", retention)?)
            .in_flight(in_flight)
            .on_expired(on_expired);
        options.validate().map_err(|e| map_error(py, &e))?;
        let key_fields = key_fields
            .map(KeyFields::new)
            .transpose()
            .map_err(|e| map_error(py, &e))?;
        toolonce::key::derive("scope", &name, &Value::Null, None).map_err(|e| map_error(py, &e))?;
        Ok(Tool {
            name,
            options,
            key_fields,
        })
    }

    #[getter]
    fn name(&self) -> &str {
        &self.name
    }
}

/// The operation key of `tool` called in `scope` with `args` (the core's `key::derive`).
#[pyfunction]
#[pyo3(signature = (scope, tool, args, key_fields=None))]
fn derive_key(
    py: Python<'_>,
    scope: &str,
    tool: &str,
    args: &Bound<'_, PyAny>,
    key_fields: Option<Vec<String>>,
) -> PyResult<String> {
    let args = to_json(args, 0)?;
    let fields = key_fields
        .map(KeyFields::new)
        .transpose()
        .map_err(|e| map_error(py, &e))?;
    let derived = toolonce::key::derive(scope, tool, &args, fields.as_ref())
        .map_err(|e| map_error(py, &e))?;
    Ok(derived.key.as_str().to_owned())
}

/// What the layer tells the Python caller.
enum Event {
    /// The claim is won: run the function now and reply with [`Call::reply_ok`] or
    /// [`Call::reply_error`].
    Run {
        key: String,
        may_have_run_before: bool,
    },
    /// The operation is unknown and the policy is verify: ask the probe, reply with
    /// [`Call::reply_verify`].
    Verify { key: String },
    /// The call is over.
    Done(WriteAnswer),
}

impl Event {
    fn into_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let tuple = match self {
            Event::Run {
                key,
                may_have_run_before,
            } => ("run", key, may_have_run_before)
                .into_pyobject(py)?
                .into_any(),
            Event::Verify { key } => ("verify", key).into_pyobject(py)?.into_any(),
            Event::Done(answer) => {
                let key = answer.key.as_str().to_owned();
                let outcome = answer.outcome.as_str();
                match answer.result {
                    Ok(value) => ("done", outcome, key, true, to_py(py, &value)?)
                        .into_pyobject(py)?
                        .into_any(),
                    Err(error) => {
                        let class = if error.is_transient() {
                            "transient"
                        } else {
                            "permanent"
                        };
                        let detail = match &error.detail {
                            Some(detail) => to_py(py, detail)?,
                            None => py.None(),
                        };
                        let error = (error.message, class, detail).into_pyobject(py)?;
                        ("done", outcome, key, false, error)
                            .into_pyobject(py)?
                            .into_any()
                    }
                }
            }
        };
        Ok(tuple.unbind())
    }
}

/// Where the layer's events go: a channel a sync caller blocks on (GIL released), or a Python
/// callable that hands them to an asyncio event loop (`loop.call_soon_threadsafe`).
enum Sink {
    Channel(mpsc::Sender<Event>),
    Callback(Py<PyAny>),
}

impl Sink {
    fn emit(&self, event: Event) {
        match self {
            Sink::Channel(tx) => {
                // A closed channel is a caller that is gone; nothing to tell.
                let _ = tx.send(event);
            }
            Sink::Callback(deliver) => {
                from_runtime_thread(|py| {
                    let result = event
                        .into_py(py)
                        .and_then(|event| deliver.call1(py, (event,)));
                    if let Err(e) = result {
                        e.write_unraisable(py, None);
                    }
                });
            }
        }
    }
}

/// Runtime threads inside Python right now, and whether the interpreter is shutting down.
static IN_PYTHON: AtomicUsize = AtomicUsize::new(0);
static CLOSING: AtomicBool = AtomicBool::new(false);

/// Enters Python from a runtime thread, unless the interpreter is shutting down: a thread that
/// takes or releases the GIL while the interpreter finalizes crashes the process.
fn from_runtime_thread(f: impl FnOnce(Python<'_>)) {
    IN_PYTHON.fetch_add(1, Ordering::SeqCst);
    if !CLOSING.load(Ordering::SeqCst) {
        Python::attach(f);
    }
    IN_PYTHON.fetch_sub(1, Ordering::SeqCst);
}

/// Called at exit (`atexit`, before the interpreter finalizes): from now on runtime threads
/// stay out of Python, and those inside are waited for.
#[pyfunction]
fn _shutdown(py: Python<'_>) {
    CLOSING.store(true, Ordering::SeqCst);
    py.detach(|| {
        while IN_PYTHON.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// One write call in progress (see the module docs).
#[pyclass(frozen, module = "toolonce._native")]
struct Call {
    events: Mutex<Option<mpsc::Receiver<Event>>>,
    run_reply: Mutex<Option<oneshot::Sender<Result<Value, ToolError>>>>,
    verify_reply: Mutex<Option<oneshot::Sender<Verified>>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

fn take<T>(slot: &Mutex<Option<T>>) -> Option<T> {
    slot.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// Starts a write call of `tool` in `scope` with `args` on `store`. With `deliver`, events are
/// passed to it (from a runtime thread, GIL taken); without, the caller reads them with
/// [`Call::wait`].
#[pyfunction]
#[pyo3(signature = (store, tool, scope, args, deliver=None))]
fn start(
    py: Python<'_>,
    store: &Store,
    tool: &Tool,
    scope: &str,
    args: &Bound<'_, PyAny>,
    deliver: Option<Py<PyAny>>,
) -> PyResult<Call> {
    let layer = store.layer()?;
    let args = to_json(args, 0)?;
    let derived: Derived =
        toolonce::key::derive(scope, &tool.name, &args, tool.key_fields.as_ref())
            .map_err(|e| map_error(py, &e))?;
    let (sink, events) = match deliver {
        Some(deliver) => (Sink::Callback(deliver), None),
        None => {
            let (tx, rx) = mpsc::channel();
            (Sink::Channel(tx), Some(rx))
        }
    };
    let (run_tx, run_rx) = oneshot::channel::<Result<Value, ToolError>>();
    let (verify_tx, verify_rx) = oneshot::channel::<Verified>();
    let name = tool.name.clone();
    let options = tool.options.clone();
    let about = About::new(scope, name.as_str());
    let sink = Arc::new(sink);
    let task = runtime().spawn(async move {
        let verify_sink = Arc::clone(&sink);
        let run_sink = Arc::clone(&sink);
        let answer = layer
            .run_with_verify(
                &name,
                &derived,
                &about,
                &options,
                move |ctx| {
                    verify_sink.emit(Event::Verify {
                        key: ctx.key().as_str().to_owned(),
                    });
                    async move {
                        match verify_rx.await {
                            Ok(verified) => verified,
                            // The caller is gone; its task is being aborted.
                            Err(_) => std::future::pending().await,
                        }
                    }
                },
                move |ctx| {
                    run_sink.emit(Event::Run {
                        key: ctx.key().as_str().to_owned(),
                        may_have_run_before: ctx.may_have_run_before(),
                    });
                    async move {
                        match run_rx.await {
                            Ok(result) => result,
                            Err(_) => std::future::pending().await,
                        }
                    }
                },
            )
            .await;
        sink.emit(Event::Done(answer));
    });
    Ok(Call {
        events: Mutex::new(events),
        run_reply: Mutex::new(Some(run_tx)),
        verify_reply: Mutex::new(Some(verify_tx)),
        task: Mutex::new(Some(task)),
    })
}

/// What a sync runner callback answered: `(True, result)`, `(False, message, permanent,
/// detail)`, or `None` when the function was interrupted (nothing is recorded).
fn runner_reply(
    py: Python<'_>,
    reply: &Bound<'_, PyAny>,
    pending: &Mutex<Option<PyErr>>,
) -> Option<Result<Value, ToolError>> {
    if reply.is_none() {
        return None;
    }
    let parsed = (|| -> PyResult<Result<Value, ToolError>> {
        let ok: bool = reply.get_item(0)?.extract()?;
        if ok {
            let result = reply.get_item(1)?;
            return Ok(match to_json(&result, 0) {
                Ok(value) => Ok(value),
                Err(e) => {
                    let message = format!(
                        "the tool ran but its result cannot be stored: {}",
                        e.value(py)
                    );
                    *pending.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(PyTypeError::new_err(message.clone()));
                    Err(ToolError::permanent(message))
                }
            });
        }
        let message: String = reply.get_item(1)?.extract()?;
        let permanent: bool = reply.get_item(2)?.extract()?;
        let detail = reply.get_item(3)?;
        let mut error = if permanent {
            ToolError::permanent(message)
        } else {
            ToolError::transient(message)
        };
        if !detail.is_none()
            && let Ok(detail) = to_json(&detail, 0)
        {
            error = error.with_detail(detail);
        }
        Ok(Err(error))
    })();
    Some(parsed.unwrap_or_else(|e| {
        // The runner itself failed (a bug in the Python layer): the function may have run.
        let message = e.to_string();
        *pending.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
        Err(ToolError::permanent(format!(
            "toolonce could not read the tool's answer: {message}"
        )))
    }))
}

/// Runs a write call for a sync caller on the caller's own thread: the layer's future is driven
/// here (`block_on`, GIL released) and calls `runner(key, may_have_run_before)` inline when the
/// claim is won, so the function runs on this thread without a hand-off. The heartbeat is still
/// a task on the runtime's workers. Returns the `done` event, or `None` when called from inside
/// a running toolonce call on this thread (a write function calling another), where `block_on`
/// cannot nest: the caller then uses [`start`].
#[pyfunction]
#[pyo3(signature = (store, tool, scope, args, runner, verifier=None))]
fn run_inline(
    py: Python<'_>,
    store: &Store,
    tool: &Tool,
    scope: &str,
    args: &Bound<'_, PyAny>,
    runner: Py<PyAny>,
    verifier: Option<Py<PyAny>>,
) -> PyResult<Option<Py<PyAny>>> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Ok(None);
    }
    let layer = store.layer()?;
    let args = to_json(args, 0)?;
    let derived = toolonce::key::derive(scope, &tool.name, &args, tool.key_fields.as_ref())
        .map_err(|e| map_error(py, &e))?;
    let about = About::new(scope, tool.name.as_str());
    let pending: Mutex<Option<PyErr>> = Mutex::new(None);
    let interrupted = AtomicBool::new(false);
    let abandoned = tokio::sync::Notify::new();
    let (pending, interrupted, abandoned, runner, verifier) =
        (&pending, &interrupted, &abandoned, &runner, &verifier);
    let answer = py.detach(|| {
        runtime().block_on(async {
            let call = layer.run_with_verify(
                &tool.name,
                &derived,
                &about,
                &tool.options,
                |ctx| async move {
                    let Some(verifier) = &verifier else {
                        return Verified::CannotTell;
                    };
                    Python::attach(|py| {
                        let answer = verifier
                            .call1(py, (ctx.key().as_str(),))
                            .and_then(|v| verdict(v.bind(py)));
                        answer.unwrap_or_else(|e| {
                            *pending.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                            Verified::CannotTell
                        })
                    })
                },
                // The function is called when the future is first polled, which the layer
                // does after it started the heartbeat.
                |ctx| async move {
                    let reply = if interrupted.load(Ordering::SeqCst) {
                        Some(Err(ToolError::transient(
                            "the caller was interrupted before the tool ran",
                        )))
                    } else {
                        Python::attach(|py| {
                            match runner.call1(py, (ctx.key().as_str(), ctx.may_have_run_before()))
                            {
                                Ok(reply) => runner_reply(py, reply.bind(py), pending),
                                Err(e) => {
                                    *pending.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                                    None
                                }
                            }
                        })
                    };
                    match reply {
                        Some(result) => result,
                        None => {
                            // Interrupted mid-run: record nothing; the heartbeat stops when
                            // the layer's future is dropped.
                            abandoned.notify_one();
                            std::future::pending().await
                        }
                    }
                },
            );
            tokio::pin!(call);
            // A sleep, not an `interval`: an interval's first tick is due at once but still
            // waits for the timer wheel (about 1 ms), which was most of a call's time.
            let check = tokio::time::sleep(SIGNAL_CHECK);
            tokio::pin!(check);
            loop {
                tokio::select! {
                    answer = &mut call => break Some(answer),
                    () = abandoned.notified() => break None,
                    () = &mut check => {
                        check.as_mut().reset(tokio::time::Instant::now() + SIGNAL_CHECK);
                        // Ctrl-C while claiming or waiting: finish the call, but if the claim
                        // is won, release it rather than run the function.
                        if let Err(e) = Python::attach(|py| py.check_signals()) {
                            interrupted.store(true, Ordering::SeqCst);
                            pending.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
                        }
                    }
                }
            }
        })
    });
    if let Some(e) = take(pending) {
        return Err(e);
    }
    match answer {
        Some(answer) => Event::Done(answer).into_py(py).map(Some),
        None => Err(PyRuntimeError::new_err(
            "the toolonce call was abandoned without an error",
        )),
    }
}

/// A verify function's answer as the core's [`Verified`]: the strings "not_done" and
/// "cannot_tell", or `("done", result)`.
fn verdict(v: &Bound<'_, PyAny>) -> PyResult<Verified> {
    if let Ok(word) = v.extract::<String>() {
        return match word.as_str() {
            "not_done" => Ok(Verified::NotDone),
            _ => Ok(Verified::CannotTell),
        };
    }
    let result = v.get_item(1)?;
    Ok(Verified::Done(to_json(&result, 0)?))
}

#[pymethods]
impl Call {
    /// The next event, waiting for it with the GIL released (sync callers only). A pending
    /// signal (Ctrl-C) raises here.
    fn wait(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut guard = self.events.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            return Err(PyRuntimeError::new_err(
                "this call delivers its events to a callback",
            ));
        }
        loop {
            // Moved into the closure and back: a `Receiver` may move between threads but not
            // be shared by them.
            let events = guard.take().expect("checked above");
            let (events, received) = py.detach(move || {
                let received = events.recv_timeout(SIGNAL_CHECK);
                (events, received)
            });
            *guard = Some(events);
            match received {
                Ok(event) => return event.into_py(py),
                Err(mpsc::RecvTimeoutError::Timeout) => py.check_signals()?,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(PyRuntimeError::new_err(
                        "the toolonce call ended without an answer",
                    ));
                }
            }
        }
    }

    /// Replies to a `run` event with the function's result, which must be JSON (dict, list,
    /// str, int, float, bool, None; a pydantic model is dumped). A result that is not is
    /// recorded as a permanent error, since the function ran, and raises `TypeError`.
    fn reply_ok(&self, result: &Bound<'_, PyAny>) -> PyResult<()> {
        let reply = take(&self.run_reply)
            .ok_or_else(|| PyRuntimeError::new_err("this call was already answered"))?;
        match to_json(result, 0) {
            Ok(value) => {
                let _ = reply.send(Ok(value));
                Ok(())
            }
            Err(e) => {
                let message = format!(
                    "the tool ran but its result cannot be stored: {}",
                    e.value(result.py())
                );
                let _ = reply.send(Err(ToolError::permanent(message.clone())));
                Err(PyTypeError::new_err(message))
            }
        }
    }

    /// Replies to a `run` event with an error: `permanent` ones are stored and replayed,
    /// transient ones release the operation. `detail` is kept with a permanent error if it is
    /// JSON.
    #[pyo3(signature = (message, permanent, detail=None))]
    fn reply_error(
        &self,
        message: String,
        permanent: bool,
        detail: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let reply = take(&self.run_reply)
            .ok_or_else(|| PyRuntimeError::new_err("this call was already answered"))?;
        let mut error = if permanent {
            ToolError::permanent(message)
        } else {
            ToolError::transient(message)
        };
        if let Some(detail) = detail.filter(|d| !d.is_none()) {
            error = error.with_detail(to_json(detail, 0)?);
        }
        let _ = reply.send(Err(error));
        Ok(())
    }

    /// Replies to a `verify` event: "done" (with the result to record), "not_done" or
    /// "cannot_tell".
    #[pyo3(signature = (verdict, result=None))]
    fn reply_verify(&self, verdict: &str, result: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let verified = match verdict {
            "done" => Verified::Done(match result {
                Some(result) => to_json(result, 0)?,
                None => Value::Null,
            }),
            "not_done" => Verified::NotDone,
            "cannot_tell" => Verified::CannotTell,
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown verdict {other:?}: expected done, not_done or cannot_tell"
                )));
            }
        };
        let reply = take(&self.verify_reply)
            .ok_or_else(|| PyRuntimeError::new_err("this call was already verified"))?;
        let _ = reply.send(verified);
        Ok(())
    }

    /// The caller stops waiting before the function ran (cancelled, interrupted): if the layer
    /// wins the claim, it gets a transient error at once and releases the operation. The call
    /// finishes in the background.
    fn cancel(&self) {
        if let Some(reply) = take(&self.run_reply) {
            let _ = reply.send(Err(ToolError::transient(
                "the caller was cancelled before the tool ran",
            )));
        }
        if let Some(reply) = take(&self.verify_reply) {
            let _ = reply.send(Verified::CannotTell);
        }
        take(&self.task);
    }

    /// The caller stops while the function runs (cancelled, interrupted): whether it took
    /// effect is not known, so nothing is recorded. The heartbeat stops; the operation is
    /// `unknown` when its lease expires.
    fn abandon(&self) {
        if let Some(task) = take(&self.task) {
            task.abort();
        }
    }

    /// Marks the call finished (its `done` event was read), so dropping it aborts nothing.
    fn finish(&self) {
        take(&self.task);
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        // A call dropped unfinished was abandoned by its caller.
        if let Some(task) = take(&self.task) {
            task.abort();
        }
    }
}

/// A Python value as JSON: dict (str keys), list, tuple, str, int (64-bit), float (finite),
/// bool, None, and objects with pydantic's `model_dump`.
fn to_json(obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!(
            "the value nests deeper than {MAX_DEPTH} levels (or contains itself)"
        )));
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(Value::from(i));
        }
        if let Ok(u) = obj.extract::<u64>() {
            return Ok(Value::from(u));
        }
        return Err(PyValueError::new_err(format!(
            "the integer {obj} does not fit in 64 bits; pass it as a string"
        )));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        let f = f.value();
        return serde_json::Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| PyValueError::new_err(format!("{f} is not a JSON number")));
    }
    if obj.is_instance_of::<PyString>() {
        return Ok(Value::String(obj.extract::<String>()?));
    }
    if let Ok(dict) = obj.cast::<PyDict>() {
        let mut map = serde_json::Map::with_capacity(dict.len());
        for (k, v) in dict.iter() {
            if !k.is_instance_of::<PyString>() {
                return Err(PyTypeError::new_err(format!(
                    "JSON object keys must be str, not {}",
                    k.get_type().name()?
                )));
            }
            map.insert(k.extract::<String>()?, to_json(&v, depth + 1)?);
        }
        return Ok(Value::Object(map));
    }
    if let Ok(list) = obj.cast::<PyList>() {
        return list
            .iter()
            .map(|v| to_json(&v, depth + 1))
            .collect::<PyResult<_>>()
            .map(Value::Array);
    }
    if let Ok(tuple) = obj.cast::<PyTuple>() {
        return tuple
            .iter()
            .map(|v| to_json(&v, depth + 1))
            .collect::<PyResult<_>>()
            .map(Value::Array);
    }
    if obj.hasattr("model_dump")? && !obj.is_instance_of::<pyo3::types::PyType>() {
        let kwargs = PyDict::new(obj.py());
        kwargs.set_item("mode", "json")?;
        let dumped = obj.call_method("model_dump", (), Some(&kwargs))?;
        return to_json(&dumped, depth + 1);
    }
    Err(PyTypeError::new_err(format!(
        "a value of type {} is not JSON (dict, list, tuple, str, int, float, bool, None or a \
         pydantic model)",
        obj.get_type().name()?
    )))
}

/// JSON as Python: dict, list, str, int, float, bool, None.
fn to_py(py: Python<'_>, value: &Value) -> PyResult<Py<PyAny>> {
    Ok(match value {
        Value::Null => py.None(),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any().unbind(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any().unbind()
            } else if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any().unbind()
            } else {
                n.as_f64()
                    .unwrap_or(f64::NAN)
                    .into_pyobject(py)?
                    .into_any()
                    .unbind()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any().unbind(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any().unbind()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, v) in map {
                dict.set_item(k, to_py(py, v)?)?;
            }
            dict.into_any().unbind()
        }
    })
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Store>()?;
    m.add_class::<Tool>()?;
    m.add_class::<Call>()?;
    m.add_function(wrap_pyfunction!(open_store, m)?)?;
    m.add_function(wrap_pyfunction!(derive_key, m)?)?;
    m.add_function(wrap_pyfunction!(start, m)?)?;
    m.add_function(wrap_pyfunction!(run_inline, m)?)?;
    m.add_function(wrap_pyfunction!(_shutdown, m)?)?;
    Ok(())
}
