//! The async pump's native half on an event loop that can watch a file descriptor (asyncio's
//! selector loops, uvloop): the layer's future is polled on the event loop's own thread, as
//! `inline.rs` drives it on a sync caller's, so a call costs no hand-off to a runtime worker
//! and no trip through the `to_python` thread. `call.rs` stays for the other loops.
//!
//! A [`Polled`] call is polled with the GIL released and the runtime entered. When it cannot
//! progress, the coroutine parks its awaitable on it (`_pump._Wake`); its waker, called on any
//! thread (a runtime worker, the I/O driver), never takes the GIL nor waits for the loop: it
//! queues the call on its loop's [`Pump`] and writes a byte to a socket the loop watches
//! (`loop.add_reader`), and [`Pump::drain`], run by the loop, hands back the parked awaitables,
//! whose tasks `_pump._drain` steps then and there. The lease heartbeat is the layer's runtime
//! task, as for every call: a coroutine that blocks the loop stops only its own call's
//! progress, never a renewal.

use std::future::Future;
#[cfg(unix)]
use std::io::{ErrorKind, Read, Write};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};

#[cfg(not(unix))]
use pyo3::exceptions::PyNotImplementedError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use serde_json::Value;
use tokio::sync::oneshot;
use toolonce::{About, ToolError, Verified, WriteAnswer};

use crate::call::{refuse_pending, take};
use crate::event::Event;
use crate::reply::{Answer, Reply};
use crate::runtime::runtime;
use crate::store::Store;
use crate::tool::Tool;

/// Polls in a row on the loop's thread while the future wakes itself (a yield, a reply just
/// sent): past this the loop gets its turn and the call is queued like any woken one.
const INLINE_POLLS: usize = 16;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

type Layered = Pin<Box<dyn Future<Output = WriteAnswer> + Send>>;

/// One event loop's queue of woken calls, and the socket pair that wakes the loop.
#[cfg(unix)]
struct Wakes {
    woken: Mutex<Vec<Arc<Shared>>>,
    reader: std::os::unix::net::UnixStream,
    writer: std::os::unix::net::UnixStream,
}

#[cfg(unix)]
impl Wakes {
    /// Called on any thread: a lock held for a push, and a write that never blocks (a full
    /// socket already holds a wake for the loop).
    fn push(&self, shared: Arc<Shared>) {
        let first = {
            let mut woken = lock(&self.woken);
            woken.push(shared);
            woken.len() == 1
        };
        if first {
            let _ = (&self.writer).write(&[1]);
        }
    }
}

/// `toolonce._native.Pump`: the wake-ups of one event loop (see the module docs).
#[pyclass(frozen, module = "toolonce._native")]
pub(crate) struct Pump {
    #[cfg(unix)]
    wakes: Arc<Wakes>,
}

#[pymethods]
impl Pump {
    /// A pump; raises `NotImplementedError` where there is no socket pair (the caller then
    /// uses `call.rs`'s pump).
    #[new]
    fn new() -> PyResult<Pump> {
        #[cfg(unix)]
        {
            let (reader, writer) = std::os::unix::net::UnixStream::pair()?;
            reader.set_nonblocking(true)?;
            writer.set_nonblocking(true)?;
            Ok(Pump {
                wakes: Arc::new(Wakes {
                    woken: Mutex::new(Vec::new()),
                    reader,
                    writer,
                }),
            })
        }
        #[cfg(not(unix))]
        Err(PyNotImplementedError::new_err("no socket pair here"))
    }

    /// The descriptor the loop watches for reading.
    fn fileno(&self) -> PyResult<i64> {
        #[cfg(unix)]
        {
            use std::os::fd::AsRawFd;
            Ok(i64::from(self.wakes.reader.as_raw_fd()))
        }
        #[cfg(not(unix))]
        Err(PyNotImplementedError::new_err("no socket pair here"))
    }

    /// Run by the loop when the socket is readable: the awaitables parked on the calls woken
    /// since, to resolve. The socket is emptied before the queue is taken, so a wake queued
    /// meanwhile leaves a byte for the next round rather than being lost.
    fn drain(&self) -> Vec<Py<PyAny>> {
        let mut out = Vec::new();
        #[cfg(unix)]
        {
            let mut buf = [0u8; 256];
            loop {
                match (&self.wakes.reader).read(&mut buf) {
                    Ok(n) if n == buf.len() => continue,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    _ => break,
                }
            }
            let woken = std::mem::take(&mut *lock(&self.wakes.woken));
            for shared in woken {
                let mut state = lock(&shared.state);
                state.queued = false;
                if let Some(parked) = state.parked.take() {
                    out.push(parked);
                }
            }
        }
        out
    }
}

/// What a call's waker and its loop share (see the module docs).
struct Shared {
    #[cfg(unix)]
    wakes: Arc<Wakes>,
    state: Mutex<State>,
    /// The `run` or `verify` event the layer's callbacks recorded during a poll.
    event: Mutex<Option<Event>>,
}

#[derive(Default)]
struct State {
    /// Woken since the last poll began.
    woken: bool,
    /// In its pump's queue.
    queued: bool,
    /// Being polled on the loop's thread, which looks at `woken` before it stops.
    polling: bool,
    /// What the coroutine awaits until the call is woken (`_pump._Wake`).
    parked: Option<Py<PyAny>>,
}

impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut state = lock(&self.state);
        state.woken = true;
        if state.polling || state.queued {
            return;
        }
        state.queued = true;
        drop(state);
        #[cfg(unix)]
        self.wakes.push(Arc::clone(self));
    }
}

/// One write call polled on its event loop's thread (see the module docs).
#[pyclass(frozen, module = "toolonce._native")]
pub(crate) struct Polled {
    shared: Arc<Shared>,
    future: Mutex<Option<Layered>>,
    run_reply: Mutex<Option<oneshot::Sender<Result<Value, ToolError>>>>,
    verify_reply: Mutex<Option<oneshot::Sender<Verified>>>,
}

/// Prepares a write call of `tool` in `scope` with `args` on `store`, woken through `pump`;
/// nothing runs until it is first polled.
#[pyfunction]
pub(crate) fn begin(
    py: Python<'_>,
    pump: &Pump,
    store: &Store,
    tool: &Tool,
    scope: &str,
    args: &Bound<'_, PyAny>,
) -> PyResult<Polled> {
    #[cfg(not(unix))]
    let _ = pump;
    let layer = store.layer()?;
    let derived = tool.derive(py, scope, args)?;
    let shared = Arc::new(Shared {
        #[cfg(unix)]
        wakes: Arc::clone(&pump.wakes),
        state: Mutex::new(State::default()),
        event: Mutex::new(None),
    });
    let (run_tx, run_rx) = oneshot::channel::<Result<Value, ToolError>>();
    let (verify_tx, verify_rx) = oneshot::channel::<Verified>();
    let name = tool.name.clone();
    let options = tool.options.clone();
    let about = About::new(scope, name.as_str());
    let (verify_shared, run_shared) = (Arc::clone(&shared), Arc::clone(&shared));
    let future: Layered = Box::pin(async move {
        layer
            .run_with_verify(
                &name,
                &derived,
                &about,
                &options,
                move |ctx| async move {
                    *lock(&verify_shared.event) = Some(Event::Verify {
                        key: ctx.key().as_str().to_owned(),
                    });
                    match verify_rx.await {
                        Ok(verified) => verified,
                        // Never: a cancelled caller answers CannotTell before it lets go.
                        Err(_) => std::future::pending().await,
                    }
                },
                // Recorded when the future is first polled, which the layer does after it
                // started the heartbeat.
                move |ctx| async move {
                    *lock(&run_shared.event) = Some(Event::Run {
                        key: ctx.key().as_str().to_owned(),
                        may_have_run_before: ctx.may_have_run_before(),
                    });
                    match run_rx.await {
                        Ok(result) => result,
                        Err(_) => std::future::pending().await,
                    }
                },
            )
            .await
    });
    Ok(Polled {
        shared,
        future: Mutex::new(Some(future)),
        run_reply: Mutex::new(Some(run_tx)),
        verify_reply: Mutex::new(Some(verify_tx)),
    })
}

impl Polled {
    /// Polls until the layer has an event or would wait, with the GIL released; `before` runs
    /// first, with `polling` set, so a wake it causes (a reply sent) is seen here, not queued.
    fn drive(&self, py: Python<'_>, before: impl FnOnce() + Send) -> PyResult<Option<Py<PyAny>>> {
        let mut slot = lock(&self.future);
        let Some(future) = slot.as_mut() else {
            return Err(PyRuntimeError::new_err("this call is over"));
        };
        let shared = &self.shared;
        let answer = py.detach(|| {
            let _runtime = runtime().enter();
            {
                let mut state = lock(&shared.state);
                state.polling = true;
                state.woken = false;
            }
            before();
            let waker = Waker::from(Arc::clone(shared));
            let mut cx = Context::from_waker(&waker);
            let mut polls = 0;
            loop {
                polls += 1;
                if let Poll::Ready(answer) = future.as_mut().poll(&mut cx) {
                    lock(&shared.state).polling = false;
                    return Some(answer);
                }
                let mut state = lock(&shared.state);
                let has_event = lock(&shared.event).is_some();
                if state.woken && !has_event && polls < INLINE_POLLS {
                    state.woken = false;
                    continue;
                }
                state.polling = false;
                if state.woken && !has_event && !state.queued {
                    // Still busy after its inline turns: queued, so the loop polls it again.
                    state.queued = true;
                    drop(state);
                    #[cfg(unix)]
                    shared.wakes.push(Arc::clone(shared));
                }
                return None;
            }
        });
        if let Some(answer) = answer {
            *slot = None;
            return Event::Done(answer).into_py(py).map(Some);
        }
        drop(slot);
        match lock(&self.shared.event).take() {
            Some(event) => event.into_py(py).map(Some),
            None => Ok(None),
        }
    }
}

#[pymethods]
impl Polled {
    /// Polls the call: its next event, or `None` when it must wait (park an awaitable on it).
    fn poll(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.drive(py, || ())
    }

    /// Parks `future`, woken by the pump once the call is woken; `False` when it already
    /// was (poll again now).
    fn park(&self, future: Py<PyAny>) -> bool {
        let mut state = lock(&self.shared.state);
        if state.woken {
            return false;
        }
        state.parked = Some(future);
        true
    }

    /// Replies to a `run` or `verify` event (a [`Reply`]) and polls on: the next event, or
    /// `None`, as [`poll`](Self::poll).
    fn reply(&self, py: Python<'_>, reply: &Reply) -> PyResult<Option<Py<PyAny>>> {
        match reply.take()? {
            Answer::Ran(outcome) => {
                let slot = take(&self.run_reply)
                    .ok_or_else(|| PyRuntimeError::new_err("this call was already answered"))?;
                self.drive(py, move || {
                    let _ = slot.send(outcome);
                })
            }
            Answer::Verified(verified) => {
                let slot = take(&self.verify_reply)
                    .ok_or_else(|| PyRuntimeError::new_err("this call was already verified"))?;
                self.drive(py, move || {
                    let _ = slot.send(verified);
                })
            }
        }
    }

    /// The caller stops waiting before the function ran, or while its outcome is recorded
    /// (cancelled, interrupted): as `Call.cancel`, a won claim gets a transient error at once
    /// and is released, and the call finishes on the runtime, where it is moved.
    fn cancel(&self) {
        refuse_pending(&self.run_reply, &self.verify_reply);
        if let Some(future) = take(&self.future) {
            drop(runtime().spawn(future));
        }
    }

    /// The caller stops while the function runs: nothing is recorded; the layer's future is
    /// dropped, which stops the heartbeat (the operation is `unknown` once its lease expires).
    fn abandon(&self, py: Python<'_>) {
        if let Some(future) = take(&self.future) {
            py.detach(move || {
                let _runtime = runtime().enter();
                drop(future);
            });
        }
    }
}

impl Drop for Polled {
    fn drop(&mut self) {
        // A call dropped unfinished was abandoned by its caller (as `Call`'s aborted task).
        if let Some(future) = take(&self.future) {
            let _runtime = runtime().enter();
            drop(future);
        }
    }
}
