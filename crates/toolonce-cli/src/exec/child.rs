//! Running the command for `exec`: through the shim (see [`super::shim`]) in a process group of
//! its own, with the SIGINT, SIGTERM and SIGHUP toolonce receives forwarded to that group, a
//! grace period and then SIGKILL for a command that does not stop, and its output teed live
//! into a bounded capture. `exec` ends when the command itself exits: a background process it
//! left behind may keep the pipes open, so they are drained for a moment and then let go.

use std::ffi::OsString;
use std::process::Stdio;
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tokio::time::Instant;
use toolonce::OperationKey;

use super::capture::{self, Capture};
use super::record::Record;
use crate::exit;

/// The variable that tells the command an earlier attempt of its operation may have taken
/// effect, as `WriteContext::may_have_run_before` tells a library tool.
pub(crate) const MAY_HAVE_RUN_BEFORE: &str = "TOOLONCE_MAY_HAVE_RUN_BEFORE";

/// How long the pipes are still read after the command exited (see the module doc).
const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// The last of SIGINT, SIGTERM, SIGHUP that toolonce received, if any; every delivery is a
/// change, even of the same signal.
pub(crate) type Signals = watch::Receiver<Option<Signal>>;

/// From now on SIGINT, SIGTERM and SIGHUP no longer end toolonce: they are reported here, and
/// `exec` decides (forward them to the command, or stop before it started).
pub(crate) fn listen() -> std::io::Result<Signals> {
    let mut streams = Vec::new();
    for (kind, sig) in [
        (SignalKind::interrupt(), Signal::INT),
        (SignalKind::terminate(), Signal::TERM),
        (SignalKind::hangup(), Signal::HUP),
    ] {
        streams.push((signal(kind)?, sig));
    }
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let [(int, _), (term, _), (hup, _)] = &mut streams[..] else {
            unreachable!("three signals")
        };
        loop {
            let sig = tokio::select! {
                _ = int.recv() => Signal::INT,
                _ = term.recv() => Signal::TERM,
                _ = hup.recv() => Signal::HUP,
            };
            tx.send_replace(Some(sig));
        }
    });
    Ok(rx)
}

/// The conventional name of a signal, for messages.
pub(crate) fn name(sig: Signal) -> &'static str {
    match sig {
        Signal::INT => "SIGINT",
        Signal::TERM => "SIGTERM",
        Signal::HUP => "SIGHUP",
        _ => "a signal",
    }
}

/// Why the command did not run to an exit status.
pub(crate) struct NotStarted {
    pub(crate) message: String,
    /// 127 when the program was not found, 126 when it could not be executed, `128 + N` when
    /// toolonce got signal N before it started the command.
    pub(crate) exit_code: u8,
}

/// What `exec` asks of the run.
pub(crate) struct Run<'a> {
    pub(crate) command: &'a [OsString],
    pub(crate) key: &'a OperationKey,
    /// The most bytes stored of each stream.
    pub(crate) max_output: usize,
    /// How long a signalled command has before its process group is killed.
    pub(crate) grace: Duration,
    /// An earlier attempt may have taken effect (`--on-expired rerun` took an `unknown`
    /// operation over): the command gets `TOOLONCE_MAY_HAVE_RUN_BEFORE=1`.
    pub(crate) may_have_run_before: bool,
}

/// Runs the command with the key in its environment, streaming its output through while
/// keeping a bounded copy, and forwarding the signals toolonce receives.
pub(crate) async fn run(run: Run<'_>, mut signals: Signals) -> Result<Record, NotStarted> {
    let status_file = tempfile::NamedTempFile::new().map_err(|e| cannot("create a file", e))?;
    let mut command = shim_command(&run, status_file.path())?;
    // A signal that came before the command started: it is not started at all.
    if let Some(sig) = *signals.borrow_and_update() {
        return Err(stopped_before_start(sig));
    }
    let mut child = command
        .spawn()
        .map_err(|e| cannot("start the command", e))?;
    let group = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(Pid::from_raw);

    let (stop, stopped) = watch::channel(false);
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    let limit = run.max_output;
    let out = tokio::spawn(capture::tee(
        stdout,
        tokio::io::stdout(),
        limit,
        stopped.clone(),
    ));
    let err = tokio::spawn(capture::tee(stderr, tokio::io::stderr(), limit, stopped));

    let status = wait(&mut child, group, &mut signals, run.grace).await;
    let (out, err) = drain(out, err, stop).await;
    let finish = |capture: Result<Capture, _>| capture.map_or((Vec::new(), 0), Capture::finish);
    let ((stdout, stdout_dropped), (stderr, stderr_dropped)) = (finish(out), finish(err));

    let status = status.map_err(|e| cannot("wait for the command", e))?;
    let code = exit::of_status(status);
    // The shim writes this file only when the command could not be started.
    if let Ok(message) = std::fs::read_to_string(status_file.path())
        && !message.is_empty()
    {
        return Err(NotStarted {
            message,
            exit_code: code,
        });
    }
    Ok(Record {
        exit_code: i32::from(code),
        stdout,
        stderr,
        stdout_dropped,
        stderr_dropped,
        command: run
            .command
            .iter()
            .map(|part| part.to_string_lossy().into_owned())
            .collect(),
    })
}

fn cannot(what: &str, e: std::io::Error) -> NotStarted {
    NotStarted {
        message: format!("cannot {what}: {e}"),
        exit_code: exit::CANNOT_EXECUTE,
    }
}

/// The command line that starts the command through the shim (toolonce itself), with the key
/// in its environment and its output piped to toolonce.
fn shim_command(
    run: &Run<'_>,
    status_file: &std::path::Path,
) -> Result<tokio::process::Command, NotStarted> {
    let shim_path = std::env::current_exe().map_err(|e| cannot("find toolonce's own path", e))?;
    let mut command = tokio::process::Command::new(shim_path);
    command
        .arg("__exec-shim")
        .arg("--parent")
        .arg(std::process::id().to_string())
        .arg("--status-file")
        .arg(status_file)
        .arg("--")
        .args(run.command)
        .env("TOOLONCE_KEY", run.key.as_str())
        .env("IDEMPOTENCY_KEY", run.key.as_str())
        // Never inherited: only this operation's own history may set it.
        .env_remove(MAY_HAVE_RUN_BEFORE)
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if run.may_have_run_before {
        command.env(MAY_HAVE_RUN_BEFORE, "1");
    }
    Ok(command)
}

/// Waits for the command to exit, forwarding the signals toolonce gets to its process group,
/// and killing the group once `grace` has passed after the first.
async fn wait(
    child: &mut tokio::process::Child,
    group: Option<Pid>,
    signals: &mut Signals,
    grace: Duration,
) -> std::io::Result<std::process::ExitStatus> {
    let mut listening = true;
    let mut grace_started = false;
    let mut kill_at: Option<Instant> = None;
    loop {
        tokio::select! {
            status = child.wait() => break status,
            changed = signals.changed(), if listening => {
                if changed.is_err() {
                    listening = false;
                    continue;
                }
                let Some(sig) = *signals.borrow_and_update() else { continue };
                tracing::info!(
                    target: "toolonce::exec",
                    signal = name(sig),
                    "forwarding the signal to the command"
                );
                if let Some(group) = group {
                    let _ = kill_process_group(group, sig);
                }
                if !grace_started {
                    grace_started = true;
                    // A grace too long to add to the clock means: never kill.
                    kill_at = Instant::now().checked_add(grace);
                }
            }
            () = tokio::time::sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                kill_at = None;
                tracing::warn!(
                    target: "toolonce::exec",
                    grace = ?grace,
                    "the command did not stop within the grace period; killing its process group"
                );
                if let Some(group) = group {
                    let _ = kill_process_group(group, Signal::KILL);
                }
            }
        }
    }
}

/// The captures of both streams, once the command's pipes close or, when something it
/// started holds them open, after [`DRAIN_GRACE`].
async fn drain(
    out: tokio::task::JoinHandle<Capture>,
    err: tokio::task::JoinHandle<Capture>,
    stop: watch::Sender<bool>,
) -> (
    Result<Capture, tokio::task::JoinError>,
    Result<Capture, tokio::task::JoinError>,
) {
    let both = async { (out.await, err.await) };
    tokio::pin!(both);
    match tokio::time::timeout(DRAIN_GRACE, &mut both).await {
        Ok(both) => both,
        Err(_) => {
            tracing::info!(
                target: "toolonce::exec",
                "the command exited but something it started still holds its output open; \
                 no longer reading it"
            );
            stop.send_replace(true);
            both.await
        }
    }
}

/// The answer when toolonce got a signal before the command started.
pub(crate) fn stopped_before_start(sig: Signal) -> NotStarted {
    NotStarted {
        message: format!("stopped by {} before the command started", name(sig)),
        exit_code: u8::try_from(128 + sig.as_raw()).unwrap_or(exit::INTERNAL),
    }
}
