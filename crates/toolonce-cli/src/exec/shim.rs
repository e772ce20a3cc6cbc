//! `toolonce __exec-shim`: what `exec` starts in the command's place, in a process group of its
//! own, to tie the command's life to toolonce's without `unsafe` code (`pre_exec` is not
//! available to a crate that forbids it).
//!
//! The shim asks the kernel for a signal when its parent dies (Linux: `PR_SET_PDEATHSIG`), checks
//! that toolonce has not already gone, starts the command as its child (same process group,
//! same stdio and environment) and waits for it. When toolonce goes away — even by SIGKILL —
//! the shim kills the whole process group, so no copy of the command runs on without a
//! heartbeat. Elsewhere (macOS, the BSDs) the shim has no parent-death signal and notices that
//! its parent changed within half a second instead.
//!
//! A shim rather than replacing itself with the command (`exec`): the parent-death signal
//! reaches only one process, so a command's own children (a script's current step) would
//! survive; the shim kills the group. The forwarded SIGINT, SIGTERM and SIGHUP reach the shim
//! too (it is in the group): it ignores them and lets the command decide.
//!
//! The shim exits with the command's code, `128 + N` for a command killed by signal N. A
//! command that cannot be started is reported through the status file, not the exit code, so
//! `exec` can tell it from a command that exited 126 or 127 by itself.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};

use crate::exit;

#[derive(clap::Args)]
pub(crate) struct ShimArgs {
    /// The process id of the toolonce that started the shim.
    #[arg(long)]
    parent: u32,
    /// Where to write why the command could not be started.
    #[arg(long)]
    status_file: PathBuf,
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

/// How often the shim checks that its parent is still there.
const PARENT_POLL: Duration = Duration::from_millis(500);

pub(crate) fn run(a: ShimArgs) -> ExitCode {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // SIGTERM rather than SIGKILL: the shim must live to kill the rest of the group.
        let _ =
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM));
    }
    // toolonce may have died before the line above: then no signal will ever come.
    if parent_gone(a.parent) {
        return ExitCode::from(exit::INTERNAL);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return not_started(&a, format!("cannot start the shim's runtime: {e}"), 126),
    };
    runtime.block_on(supervise(&a))
}

async fn supervise(a: &ShimArgs) -> ExitCode {
    // Handlers first: from now on these signals wake the shim instead of ending it. The command
    // starts with the default dispositions (handlers do not survive `execve`).
    let mut signals = Vec::new();
    for kind in [
        SignalKind::terminate(),
        SignalKind::interrupt(),
        SignalKind::hangup(),
    ] {
        match signal(kind) {
            Ok(s) => signals.push(s),
            Err(e) => return not_started(a, format!("cannot handle signals: {e}"), 126),
        }
    }
    let (program, rest) = a.command.split_first().expect("clap requires a command");
    let mut child = match tokio::process::Command::new(program).args(rest).spawn() {
        Ok(child) => child,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                exit::NOT_FOUND_COMMAND
            } else {
                exit::CANNOT_EXECUTE
            };
            let message = format!("cannot run {}: {e}", program.to_string_lossy());
            return not_started(a, message, code);
        }
    };
    let [term, int, hup] = &mut signals[..] else {
        unreachable!("three signals")
    };
    let mut poll = tokio::time::interval(PARENT_POLL);
    loop {
        tokio::select! {
            status = child.wait() => {
                return match status {
                    Ok(status) => ExitCode::from(crate::exit::of_status(status)),
                    Err(_) => ExitCode::from(exit::INTERNAL),
                };
            }
            _ = term.recv() => {}
            _ = int.recv() => {}
            _ = hup.recv() => {}
            _ = poll.tick() => {}
        }
        if parent_gone(a.parent) {
            // Nobody renews the claim any more: end the command and everything it started.
            let _ = rustix::process::kill_current_process_group(rustix::process::Signal::KILL);
        }
    }
}

/// Whether the process that started the shim is gone (the shim was re-parented).
fn parent_gone(parent: u32) -> bool {
    let current = rustix::process::getppid().map(|pid| pid.as_raw_nonzero().get());
    current.and_then(|pid| u32::try_from(pid).ok()) != Some(parent)
}

fn not_started(a: &ShimArgs, message: String, code: u8) -> ExitCode {
    let _ = std::fs::write(&a.status_file, message);
    ExitCode::from(code)
}
