//! The async pump's native half, also used by a sync write call nested in another's run:
//! [`start`] spawns the layer on the runtime, and a [`Call`] hands its events to Python (to a
//! callback that resolves an asyncio future, or to [`Call::wait`]) and takes the replies back.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use serde_json::Value;
use tokio::sync::oneshot;
use toolonce::{About, ToolError, Verified};

use crate::event::Event;
use crate::reply::{Answer, Reply};
use crate::runtime::{runtime, to_python};
use crate::store::Store;
use crate::tool::Tool;

/// How often a sync caller blocked on the layer looks for a pending signal (Ctrl-C).
pub(crate) const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// Where the layer's events go: a channel a sync caller blocks on (GIL released), or a Python
/// callable that hands them to an asyncio event loop (`loop.call_soon_threadsafe`).
enum Sink {
    Channel(mpsc::Sender<Event>),
    Callback(Py<PyAny>),
}

impl Sink {
    /// Called on a runtime thread, which must never wait for the GIL: a callback is queued to
    /// the Python thread.
    fn emit(self: &Arc<Self>, event: Event) {
        match &**self {
            Sink::Channel(tx) => {
                // A closed channel is a caller that is gone; nothing to tell.
                let _ = tx.send(event);
            }
            Sink::Callback(_) => {
                let sink = Arc::clone(self);
                to_python(move |py| {
                    let Sink::Callback(deliver) = &*sink else {
                        return;
                    };
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

/// One write call in progress (see the module docs).
#[pyclass(frozen, module = "toolonce._native")]
pub(crate) struct Call {
    events: Mutex<Option<mpsc::Receiver<Event>>>,
    run_reply: Mutex<Option<oneshot::Sender<Result<Value, ToolError>>>>,
    verify_reply: Mutex<Option<oneshot::Sender<Verified>>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

pub(crate) fn take<T>(slot: &Mutex<Option<T>>) -> Option<T> {
    slot.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// Answers the replies a cancelled caller will never give, for both pumps: a run not started
/// gets a transient error (nothing ran, so the layer releases the claim), a verify probe
/// "cannot tell" (the entry stays `unknown`). A reply already taken, the run's once the
/// function was called, is left alone: its outcome is the layer's to record.
pub(crate) fn refuse_pending(
    run: &Mutex<Option<oneshot::Sender<Result<Value, ToolError>>>>,
    verify: &Mutex<Option<oneshot::Sender<Verified>>>,
) {
    if let Some(reply) = take(run) {
        let _ = reply.send(Err(ToolError::transient(
            "the caller was cancelled before the tool ran",
        )));
    }
    if let Some(reply) = take(verify) {
        let _ = reply.send(Verified::CannotTell);
    }
}

/// Starts a write call of `tool` in `scope` with `args` on `store`. With `deliver`, events are
/// passed to it (from a runtime thread, GIL taken); without, the caller reads them with
/// [`Call::wait`].
#[pyfunction]
#[pyo3(signature = (store, tool, scope, args, deliver=None))]
pub(crate) fn start(
    py: Python<'_>,
    store: &Store,
    tool: &Tool,
    scope: &str,
    args: &Bound<'_, PyAny>,
    deliver: Option<Py<PyAny>>,
) -> PyResult<Call> {
    let layer = store.layer()?;
    let derived = tool.derive(py, scope, args)?;
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

    /// Replies to a `run` event with the tool's outcome, or to a `verify` event with the
    /// probe's verdict (a [`Reply`], converted when it was made).
    fn reply(&self, reply: &Reply) -> PyResult<()> {
        match reply.take()? {
            Answer::Ran(outcome) => {
                let slot = take(&self.run_reply)
                    .ok_or_else(|| PyRuntimeError::new_err("this call was already answered"))?;
                let _ = slot.send(outcome);
            }
            Answer::Verified(verified) => {
                let slot = take(&self.verify_reply)
                    .ok_or_else(|| PyRuntimeError::new_err("this call was already verified"))?;
                let _ = slot.send(verified);
            }
        }
        Ok(())
    }

    /// The caller stops waiting before the function ran (cancelled, interrupted): if the layer
    /// wins the claim, it gets a transient error at once and releases the operation. The call
    /// finishes in the background.
    fn cancel(&self) {
        refuse_pending(&self.run_reply, &self.verify_reply);
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
