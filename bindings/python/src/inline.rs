//! The sync pump's native half: [`run_inline`] drives the layer's future on the caller's own
//! thread and calls the Python protocol's runner and verifier inline, so a sync function runs
//! where it was called, without a hand-off between threads.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use serde_json::Value;
use toolonce::{About, ToolError, Verified, WriteContext};

use crate::call::{SIGNAL_CHECK, take};
use crate::event::Event;
use crate::reply::Reply;
use crate::runtime::runtime;
use crate::store::Store;
use crate::tool::Tool;

/// Keeps the first error to raise to the caller once the layer is done.
fn keep(pending: &Mutex<Option<PyErr>>, e: PyErr) {
    pending
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert(e);
}

/// Runs a write call for a sync caller on the caller's own thread: the layer's future is driven
/// here (`block_on`, GIL released) and calls `runner(key, may_have_run_before)` inline when the
/// claim is won, so the function runs on this thread without a hand-off. The runner answers a
/// [`Reply`], or `None` when the function was interrupted (nothing is recorded); `verifier(key)`
/// answers a verdict [`Reply`]. The heartbeat is still a task on the runtime's workers. Returns
/// the `done` event, or `None` when called from inside a running toolonce call on this thread
/// (a write function calling another), where `block_on` cannot nest: the caller then uses
/// [`start`](crate::call::start).
#[pyfunction]
#[pyo3(signature = (store, tool, scope, args, runner, verifier=None))]
pub(crate) fn run_inline(
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
    let derived = tool.derive(py, scope, args)?;
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
                |ctx| async move { verify(verifier.as_ref(), ctx.key().as_str(), pending) },
                // The function is called when the future is first polled, which the layer
                // does after it started the heartbeat.
                |ctx| async move {
                    let reply = if interrupted.load(Ordering::SeqCst) {
                        Some(Err(ToolError::transient(
                            "the caller was interrupted before the tool ran",
                        )))
                    } else {
                        run(runner, &ctx, pending)
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
            pump(call, abandoned, interrupted, pending).await
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

/// What the verifier says of the interrupted attempt of `key`; it cannot tell when there is
/// none, or when it failed (the error is raised afterwards).
fn verify(verifier: Option<&Py<PyAny>>, key: &str, pending: &Mutex<Option<PyErr>>) -> Verified {
    let Some(verifier) = verifier else {
        return Verified::CannotTell;
    };
    Python::attach(|py| {
        let answer = verifier
            .call1(py, (key,))
            .and_then(|v| v.bind(py).cast::<Reply>()?.get().take_verified());
        answer.unwrap_or_else(|e| {
            keep(pending, e);
            Verified::CannotTell
        })
    })
}

/// Calls the runner: the function's result, or `None` when it was interrupted.
fn run(
    runner: &Py<PyAny>,
    ctx: &WriteContext,
    pending: &Mutex<Option<PyErr>>,
) -> Option<Result<Value, ToolError>> {
    Python::attach(|py| {
        let reply = runner
            .call1(py, (ctx.key().as_str(), ctx.may_have_run_before()))
            .and_then(|reply| {
                let reply = reply.bind(py);
                if reply.is_none() {
                    return Ok(None);
                }
                reply.cast::<Reply>()?.get().take_ran().map(Some)
            });
        // The runner itself failed (a bug in the Python layer) after the function may have
        // run: record nothing, as for an interruption.
        reply.unwrap_or_else(|e| {
            keep(pending, e);
            None
        })
    })
}

/// Drives the layer's future `call` to its answer, checking for signals meanwhile; `None` when
/// the function was interrupted mid-run.
async fn pump<F: Future>(
    call: F,
    abandoned: &tokio::sync::Notify,
    interrupted: &AtomicBool,
    pending: &Mutex<Option<PyErr>>,
) -> Option<F::Output> {
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
                    keep(pending, e);
                }
            }
        }
    }
}
