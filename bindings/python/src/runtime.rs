//! The Tokio runtime the module owns, and the one way its threads enter Python.
//!
//! The core's layer runs on this multi-thread runtime, so the lease heartbeat keeps renewing
//! on a worker whatever the callers do. A runtime thread enters Python only through
//! [`from_runtime_thread`], which stays out once the interpreter is shutting down.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use pyo3::prelude::*;

pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
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

/// Runtime threads inside Python right now, and whether the interpreter is shutting down.
static IN_PYTHON: AtomicUsize = AtomicUsize::new(0);
static CLOSING: AtomicBool = AtomicBool::new(false);

/// Enters Python from a runtime thread, unless the interpreter is shutting down: a thread that
/// takes or releases the GIL while the interpreter finalizes crashes the process.
pub(crate) fn from_runtime_thread(f: impl FnOnce(Python<'_>)) {
    IN_PYTHON.fetch_add(1, Ordering::SeqCst);
    if !CLOSING.load(Ordering::SeqCst) {
        Python::attach(f);
    }
    IN_PYTHON.fetch_sub(1, Ordering::SeqCst);
}

/// Called at exit (`atexit`, before the interpreter finalizes): from now on runtime threads
/// stay out of Python, and those inside are waited for.
#[pyfunction]
pub(crate) fn _shutdown(py: Python<'_>) {
    CLOSING.store(true, Ordering::SeqCst);
    py.detach(|| {
        while IN_PYTHON.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}
