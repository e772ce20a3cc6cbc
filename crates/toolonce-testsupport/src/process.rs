//! Process plumbing shared by the spawners: finding binaries, log files,
//! readiness polling, signals and the watchdog that ends a server when the
//! test process is gone.

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How often readiness and exit conditions are polled.
pub(crate) const POLL: Duration = Duration::from_millis(25);

/// How many fresh ports a spawner tries before giving up on port clashes.
pub(crate) const PORT_ATTEMPTS: usize = 8;

/// The first executable called `name` in a directory of `PATH`.
pub(crate) fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// Whether `path` is a regular file with an execute bit set.
pub(crate) fn is_executable(path: &Path) -> bool {
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Whether this process runs with effective uid 0, read from `/proc`.
pub(crate) fn running_as_root() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .is_some_and(|euid| euid == "0")
}

/// Sends `signal` (a name such as `TERM` or `INT`) to `pid` through the
/// shell's `kill` builtin; std only offers SIGKILL and unsafe code is off.
pub(crate) fn send_signal(pid: u32, signal: &str) {
    let _ = Command::new("sh")
        .arg("-c")
        .arg("kill -s \"$1\" \"$2\" 2>/dev/null")
        .arg("toolonce-signal")
        .arg(signal)
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// A server's log file. Every start appends to it, so a failure can show
/// the part written since that start.
#[derive(Debug)]
pub(crate) struct LogFile {
    path: PathBuf,
}

impl LogFile {
    pub(crate) fn new(path: PathBuf) -> LogFile {
        LogFile { path }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the log for appending and returns the handle (for a child's
    /// stdout and stderr) with the offset where this start's output begins.
    pub(crate) fn open_append(&self) -> io::Result<(File, u64)> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        let offset = file.metadata()?.len();
        Ok((file, offset))
    }

    /// Everything written from `offset` on.
    pub(crate) fn read_since(&self, offset: u64) -> String {
        let mut text = String::new();
        if let Ok(mut file) = File::open(&self.path)
            && file.seek(SeekFrom::Start(offset)).is_ok()
        {
            let mut bytes = Vec::new();
            let _ = file.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        text
    }

    /// The last lines written from `offset` on, for a panic message.
    pub(crate) fn tail_since(&self, offset: u64) -> String {
        tail(&self.read_since(offset), 40)
    }
}

/// The last `lines` lines of `text`.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(lines);
    let mut out = all[start..].join("\n");
    if out.is_empty() {
        out.push_str("(empty)");
    }
    out
}

/// Why one attempt to start a server failed.
#[derive(Debug)]
pub(crate) enum StartError {
    /// The port (or the cluster bus port) was taken: try another one, or
    /// the same one a little later on a restart.
    PortInUse(String),
    /// Anything else: report it.
    Failed(String),
}

/// A background shell that ends a server once the test process is gone.
///
/// The shell blocks reading its stdin, a pipe whose only writer is this
/// process. When this process dies, however it dies, the kernel closes the
/// pipe, `read` returns and the shell runs its clean-up script. Disarming
/// writes `disarm` first, and the shell exits without touching anything.
#[derive(Debug)]
pub(crate) struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Watchdog {
    /// Spawns a watchdog that runs the shell script `on_orphan` (with the
    /// positional parameters `args`) once this process is gone.
    pub(crate) fn spawn(on_orphan: &str, args: &[&OsStr]) -> io::Result<Watchdog> {
        let script = format!(
            "trap '' HUP INT TERM\nread line\n[ \"$line\" = disarm ] && exit 0\n{on_orphan}\n"
        );
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("toolonce-watchdog")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let stdin = child.stdin.take();
        Ok(Watchdog { child, stdin })
    }

    /// Tells the watchdog to exit without acting, and reaps it.
    pub(crate) fn disarm(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"disarm\n");
        }
        let _ = self.child.wait();
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.disarm();
    }
}

/// A running server process and its watchdog. Dropping it disarms the
/// watchdog and SIGKILLs the process.
#[derive(Debug)]
pub(crate) struct Spawned {
    child: Child,
    watchdog: Option<Watchdog>,
}

impl Spawned {
    pub(crate) fn new(child: Child) -> Spawned {
        Spawned {
            child,
            watchdog: None,
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn set_watchdog(&mut self, watchdog: Watchdog) {
        self.watchdog = Some(watchdog);
    }

    /// The exit status if the process has exited.
    pub(crate) fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGKILL, then reap.
    pub(crate) fn kill(mut self) {
        self.kill_now();
    }

    fn kill_now(&mut self) {
        if let Some(mut watchdog) = self.watchdog.take() {
            watchdog.disarm();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends `signal` and waits up to `grace` for the exit, then SIGKILLs.
    /// Returns whether the process exited within the grace period.
    pub(crate) fn terminate(mut self, signal: &str, grace: Duration) -> bool {
        if let Some(mut watchdog) = self.watchdog.take() {
            watchdog.disarm();
        }
        if self.try_wait().is_some() {
            return true;
        }
        send_signal(self.pid(), signal);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.try_wait().is_some() {
                return true;
            }
            thread::sleep(POLL);
        }
        self.kill_now();
        false
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.kill_now();
    }
}

/// Polls until `probe` says the freshly spawned server is ready, the
/// process exits, or `timeout` passes. An exit whose log mentions a taken
/// address is a [`StartError::PortInUse`].
pub(crate) fn wait_ready(
    spawned: &mut Spawned,
    what: &str,
    log: &LogFile,
    log_offset: u64,
    timeout: Duration,
    mut probe: impl FnMut(u32) -> bool,
) -> Result<(), StartError> {
    let started = Instant::now();
    loop {
        if let Some(status) = spawned.try_wait() {
            let text = log.read_since(log_offset);
            let detail = format!(
                "{what} exited during start-up ({status}); its log {}:\n{}",
                log.path().display(),
                tail(&text, 40)
            );
            return Err(if is_port_clash(&text) {
                StartError::PortInUse(detail)
            } else {
                StartError::Failed(detail)
            });
        }
        if probe(spawned.pid()) {
            return Ok(());
        }
        if started.elapsed() > timeout {
            return Err(StartError::Failed(format!(
                "{what} was not ready after {timeout:?}; its log {}:\n{}",
                log.path().display(),
                log.tail_since(log_offset)
            )));
        }
        thread::sleep(POLL);
    }
}

fn is_port_clash(log: &str) -> bool {
    log.contains("Address already in use") || log.contains("could not create any TCP/IP sockets")
}
