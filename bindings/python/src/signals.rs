//! Keeps asynchronous signals (Ctrl-C's SIGINT, SIGTERM, …) off the threads this module starts,
//! so that the kernel hands them to a thread of Python's.
//!
//! CPython's C-level handler only sets a flag: the Python handler runs later, on the main
//! thread, when it next checks. What makes Ctrl-C prompt while a sync tool sleeps (it runs
//! inline, on the caller's thread) is the main thread's blocking call failing with `EINTR`
//! because the signal was delivered to *that* thread. A process-directed signal may go to any
//! thread that does not block it; a runtime worker that takes it runs the C handler there, the
//! flag is set, and the main thread sleeps on (for an hour, in the test) without ever looking.
//! So every thread of ours blocks them, and since a thread inherits its creator's mask, so do
//! the threads ours start. Synchronous signals (faults) are left alone: they go to the thread
//! that caused them, whatever its mask.

#[cfg(unix)]
use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};

/// The asynchronous signals: all but the faults.
#[cfg(unix)]
fn asynchronous() -> SigSet {
    let mut set = SigSet::all();
    for fault in [
        Signal::SIGSEGV,
        Signal::SIGBUS,
        Signal::SIGFPE,
        Signal::SIGILL,
        Signal::SIGTRAP,
        Signal::SIGABRT,
        Signal::SIGSYS,
    ] {
        set.remove(fault);
    }
    set
}

/// Blocks the asynchronous signals on the current thread (see the module docs).
#[cfg(unix)]
pub(crate) fn keep_off_this_thread() {
    // Fails only for an invalid `how`; glibc silently keeps its own internal signals unblocked.
    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&asynchronous()), None);
}

/// Windows has no per-thread signal masks: Ctrl-C is handled on a thread of its own.
#[cfg(not(unix))]
pub(crate) fn keep_off_this_thread() {}

/// Runs `f` with the asynchronous signals blocked on the calling thread, then restores its
/// mask: for code that may start a thread (opening a SQLite store starts its connection
/// thread), which inherits the mask it starts with. A signal arriving meanwhile stays pending
/// and is delivered once the mask is restored.
#[cfg(unix)]
pub(crate) fn with_blocked<T>(f: impl FnOnce() -> T) -> T {
    let mut old = SigSet::empty();
    let blocked = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&asynchronous()), Some(&mut old));
    let out = f();
    if blocked.is_ok() {
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    }
    out
}

#[cfg(not(unix))]
pub(crate) fn with_blocked<T>(f: impl FnOnce() -> T) -> T {
    f()
}
