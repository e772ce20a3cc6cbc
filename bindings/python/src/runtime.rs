//! The Tokio runtime the module owns, per process, and the one thread that enters Python for
//! it.
//!
//! The core's layer runs on a multi-thread runtime, so the lease heartbeat keeps renewing on a
//! worker whatever the callers do. Two boundaries keep it so:
//!
//! - **The GIL.** No runtime thread ever waits for the GIL: a worker that did would stop every
//!   task queued behind it, the heartbeat included, for as long as some Python thread holds the
//!   GIL (a sync tool in one long C call holds it for seconds). Whatever the runtime has for
//!   Python (events for async callers) is queued to a thread of its own, [`to_python`], which
//!   alone waits for the GIL; a sync caller's thread enters Python itself, as it drives its own
//!   call.
//! - **`fork()`.** A forked child has a copy of the parent's memory but none of its threads: a
//!   runtime built before the fork has no workers in the child, and its heartbeat would never
//!   run. The runtime and the Python thread therefore belong to a process: [`process`] gives
//!   the current process's, building them again in a child (the parent's, whose threads do not
//!   exist here, are kept and never used: dropping them would wait for those threads).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use pyo3::prelude::*;

/// Something for the Python thread to do, with the GIL.
type Job = Box<dyn FnOnce(Python<'_>) + Send>;

/// What one process has: its runtime and its Python thread.
pub(crate) struct Process {
    pid: u32,
    runtime: tokio::runtime::Runtime,
    python: OnceLock<mpsc::Sender<Job>>,
    /// Jobs queued or running on the Python thread, waited for at exit.
    pending: AtomicUsize,
    /// The process forked from this one, in that child's memory (each child has its own copy
    /// of this node and fills it in): the chain from the first process down to this one.
    child: OnceLock<Box<Process>>,
}

/// Set at exit: from then on nothing enters Python from the Python thread.
static CLOSING: AtomicBool = AtomicBool::new(false);

impl Process {
    fn start(pid: u32) -> Process {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .thread_name("toolonce")
            // Signals are for Python's threads (see `signals`).
            .on_thread_start(crate::signals::keep_off_this_thread)
            .enable_all()
            .build()
            .expect("cannot start toolonce's Tokio runtime");
        Process {
            pid,
            runtime,
            python: OnceLock::new(),
            pending: AtomicUsize::new(0),
            child: OnceLock::new(),
        }
    }

    /// The Python thread's queue, starting the thread on first use.
    fn python(&'static self) -> &'static mpsc::Sender<Job> {
        self.python.get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("toolonce-python".into())
                .spawn(move || {
                    crate::signals::keep_off_this_thread();
                    for job in rx.iter() {
                        // A thread that takes the GIL while the interpreter finalizes crashes
                        // the process: after `_shutdown`, jobs are dropped unrun.
                        if CLOSING.load(Ordering::SeqCst) {
                            drop(job);
                            self.pending.fetch_sub(1, Ordering::SeqCst);
                            continue;
                        }
                        // Jobs queued meanwhile run under the same GIL acquisition.
                        Python::attach(|py| {
                            let mut job = Some(job);
                            while let Some(next) = job.take().or_else(|| rx.try_recv().ok()) {
                                next(py);
                                self.pending.fetch_sub(1, Ordering::SeqCst);
                                if CLOSING.load(Ordering::SeqCst) {
                                    break;
                                }
                            }
                        });
                    }
                })
                .expect("cannot start toolonce's Python thread");
            tx
        })
    }
}

static FIRST: OnceLock<Process> = OnceLock::new();

/// The current process's runtime and Python thread (see the module docs).
pub(crate) fn process() -> &'static Process {
    let pid = std::process::id();
    let mut node = FIRST.get_or_init(|| Process::start(pid));
    while node.pid != pid {
        node = node.child.get_or_init(|| Box::new(Process::start(pid)));
    }
    node
}

/// The current process's, if it has built one.
fn built() -> Option<&'static Process> {
    let pid = std::process::id();
    let mut node = FIRST.get()?;
    while node.pid != pid {
        node = node.child.get()?;
    }
    Some(node)
}

/// The current process's runtime.
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    &process().runtime
}

/// Runs `job` with the GIL on the Python thread, never on the caller's: for runtime threads,
/// which must not wait for the GIL. Jobs run one at a time, in the order they were queued.
pub(crate) fn to_python(job: impl FnOnce(Python<'_>) + Send + 'static) {
    let process = process();
    process.pending.fetch_add(1, Ordering::SeqCst);
    if process.python().send(Box::new(job)).is_err() {
        process.pending.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Called at exit (`atexit`, before the interpreter finalizes): from now on nothing enters
/// Python from the Python thread, and a job inside is waited for.
#[pyfunction]
pub(crate) fn _shutdown(py: Python<'_>) {
    CLOSING.store(true, Ordering::SeqCst);
    // A process that never built its own (a forked child that did not use toolonce) has no
    // thread to wait for, and builds none now.
    let Some(process) = built() else {
        return;
    };
    py.detach(|| {
        while process.pending.load(Ordering::SeqCst) > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}
