//! One real `redis-server` on a free loopback port: starting it (on fresh ports until one is
//! free), the RESP commands a test sends it, kill, stop and restart; and finding the Redis
//! binaries, which the cluster uses too.

use std::ffi::OsStr;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::free_port;
use crate::process::{
    LogFile, PORT_ATTEMPTS, Spawned, StartError, Watchdog, find_on_path, is_executable, wait_ready,
};
use crate::resp::{self, Reply};

/// How long a server may take to answer after it is spawned.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout of one request from the built-in RESP client.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `stop()` waits after SIGTERM before it SIGKILLs.
const STOP_GRACE: Duration = Duration::from_secs(10);

pub(super) const MISSING_SERVER: &str =
    "redis-server not found on PATH: run scripts/install-test-deps (Debian package redis-server)";

pub(super) fn find_redis_binary(name: &str, missing: &str) -> PathBuf {
    find_on_path(name)
        .or_else(|| {
            ["/usr/bin", "/usr/local/bin", "/usr/sbin"]
                .iter()
                .map(|dir| Path::new(dir).join(name))
                .find(|p| is_executable(p))
        })
        .unwrap_or_else(|| panic!("{missing}"))
}

/// What the watchdog does when the test process is gone: `$1` is the
/// server's pid, `$2` its temporary directory.
const REDIS_ORPHAN_SCRIPT: &str = r#"kill -9 "$1" 2>/dev/null
sleep 0.2
rm -rf "$2""#;

/// A `redis-server` on a free loopback port, in its own temporary
/// directory, keeping nothing on disk (`--save "" --appendonly no`).
///
/// The server dies with its value (SIGKILL on drop, directory removed) and,
/// through a watchdog, with the test process if the value is never dropped.
/// All methods take `&self`, so a server in an `Arc` can be killed from
/// another thread in the middle of a test.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    bin: PathBuf,
    /// Whether to pass `--enable-debug-command yes`, which servers before 7.0 do not know.
    debug_command: bool,
    extra_args: Vec<String>,
    log: LogFile,
    proc: Mutex<Option<Spawned>>,
    dir: TempDir,
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers.
    ///
    /// # Panics
    ///
    /// If `redis-server` is missing (run `scripts/install-test-deps`) or the
    /// server does not come up within 10 s; the message shows its log.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Like [`RedisServer::start`], with extra `redis-server` arguments
    /// appended to the defaults, such as `["--maxmemory", "10mb"]`.
    ///
    /// # Panics
    ///
    /// As [`RedisServer::start`].
    pub fn start_with(args: &[&str]) -> RedisServer {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let bin = find_redis_binary("redis-server", MISSING_SERVER);
        start_on_free_ports(|port, _| RedisServer::try_start(port, &bin, true, args.clone()))
    }

    /// Like [`RedisServer::start`], with another `redis-server` program: an older version,
    /// such as those `scripts/install-old-redis` builds. It runs without
    /// `--enable-debug-command`, which servers before 7.0 refuse.
    ///
    /// # Panics
    ///
    /// If `program` is not an executable file (the message names `install_hint`, what builds
    /// it), or the server does not come up within 10 s.
    pub fn start_program(program: &Path, install_hint: &str) -> RedisServer {
        assert!(
            is_executable(program),
            "{} is missing: {install_hint}",
            program.display()
        );
        start_on_free_ports(|port, _| RedisServer::try_start(port, program, false, Vec::new()))
    }

    /// Like [`RedisServer::start_program`], for a Valkey `valkey-server` (8.1, as
    /// `scripts/install-valkey` installs it), which knows `--enable-debug-command`.
    ///
    /// # Panics
    ///
    /// As [`RedisServer::start_program`].
    pub fn start_valkey(program: &Path, install_hint: &str) -> RedisServer {
        assert!(
            is_executable(program),
            "{} is missing: {install_hint}",
            program.display()
        );
        start_on_free_ports(|port, _| RedisServer::try_start(port, program, true, Vec::new()))
    }

    pub(super) fn try_start(
        port: u16,
        bin: &Path,
        debug_command: bool,
        extra_args: Vec<String>,
    ) -> Result<RedisServer, StartError> {
        let bin = bin.to_path_buf();
        let dir = tempfile::Builder::new()
            .prefix("toolonce-redis-")
            .tempdir()
            .map_err(|e| StartError::Failed(format!("cannot create a temporary directory: {e}")))?;
        let log = LogFile::new(dir.path().join("redis.log"));
        let server = RedisServer {
            port,
            bin,
            debug_command,
            extra_args,
            log,
            proc: Mutex::new(None),
            dir,
        };
        let spawned = server.spawn()?;
        *server.lock() = Some(spawned);
        Ok(server)
    }

    fn lock(&self) -> MutexGuard<'_, Option<Spawned>> {
        self.proc.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Spawns the process on `self.port` and waits until it is ready.
    fn spawn(&self) -> Result<Spawned, StartError> {
        let failed = |what: &str, e: io::Error| StartError::Failed(format!("{what}: {e}"));
        let (log_file, offset) = self
            .log
            .open_append()
            .map_err(|e| failed("cannot open the redis log", e))?;
        let log_err = log_file
            .try_clone()
            .map_err(|e| failed("cannot open the redis log", e))?;
        let child = Command::new(&self.bin)
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--protected-mode", "no"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(if self.debug_command {
                &["--enable-debug-command", "yes"][..]
            } else {
                &[]
            })
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra_args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(log_err)
            .spawn()
            .map_err(|e| failed(&format!("cannot run {}", self.bin.display()), e))?;
        let mut spawned = Spawned::new(child);
        let pid = spawned.pid().to_string();
        let watchdog = Watchdog::spawn(
            REDIS_ORPHAN_SCRIPT,
            &[OsStr::new(&pid), self.dir.path().as_os_str()],
        )
        .map_err(|e| failed("cannot spawn the watchdog shell", e))?;
        spawned.set_watchdog(watchdog);
        let addr = self.addr();
        wait_ready(
            &mut spawned,
            &format!("redis-server on port {}", self.port),
            &self.log,
            offset,
            READY_TIMEOUT,
            |pid| answers_as(addr, pid),
        )?;
        Ok(spawned)
    }

    /// The TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's temporary directory (its `--dir`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Everything the server has logged since it was first started.
    pub fn log(&self) -> String {
        self.log.read_since(0)
    }

    /// The pid of the running server, `None` after [`kill`](Self::kill)
    /// or [`stop`](Self::stop).
    pub fn pid(&self) -> Option<u32> {
        self.lock().as_ref().map(Spawned::pid)
    }

    /// Whether the process is running (started and not killed or stopped).
    pub fn is_running(&self) -> bool {
        self.lock().as_mut().is_some_and(|s| s.try_wait().is_none())
    }

    /// The commands the server ran since its statistics were last reset (`CONFIG RESETSTAT`),
    /// as sorted `name=calls` from `INFO commandstats`, without `INFO` and `CONFIG` (the
    /// reading and the reset themselves). A script's inner commands count too.
    ///
    /// # Panics
    ///
    /// As [`command`](Self::command).
    pub fn commands_run(&self) -> Vec<String> {
        let info = self.command(&["INFO", "commandstats"]);
        let mut stats: Vec<String> = info
            .lines()
            .filter_map(|line| {
                let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(":calls=")?;
                let calls = rest.split(',').next()?;
                // Redis 7 names a subcommand `config|resetstat`; older servers `config`.
                let counted = name != "info" && name.split('|').next() != Some("config");
                counted.then(|| format!("{name}={calls}"))
            })
            .collect();
        stats.sort();
        stats
    }

    /// Sends one command on a fresh connection and returns its reply.
    ///
    /// # Errors
    ///
    /// An I/O error if the server cannot be reached or the reply is
    /// malformed; an error *reply* is `Ok(Reply::Error(..))`.
    pub fn try_command(&self, args: &[&str]) -> io::Result<Reply> {
        resp::request(self.addr(), args, REQUEST_TIMEOUT)
    }

    /// Sends one command and returns its reply in readable form (see
    /// [`Reply`]'s `Display`): `command(&["INCR", "n"])` gives `"1"`, an
    /// error reply gives `"(error) ..."`, a missing key `"(nil)"`.
    ///
    /// # Panics
    ///
    /// If the server cannot be reached.
    pub fn command(&self, args: &[&str]) -> String {
        match self.try_command(args) {
            Ok(reply) => reply.to_string(),
            Err(e) => panic!("redis command {args:?} on port {} failed: {e}", self.port),
        }
    }

    /// SIGKILLs the server, as a crash would; its data is gone (nothing is
    /// kept on disk). [`restart`](Self::restart) brings it back on the
    /// same port. Does nothing if it is not running.
    pub fn kill(&self) {
        if let Some(spawned) = self.lock().take() {
            spawned.kill();
        }
    }

    /// Stops the server gracefully (SIGTERM, SIGKILL after 10 s).
    pub fn stop(&self) {
        if let Some(spawned) = self.lock().take() {
            spawned.terminate("TERM", STOP_GRACE);
        }
    }

    /// Starts the server again on the same port and waits until it answers,
    /// stopping it first if it is running. Retries for a while if the port
    /// is briefly taken.
    ///
    /// # Panics
    ///
    /// If it does not come back within 10 s.
    pub fn restart(&self) {
        let mut guard = self.lock();
        if let Some(spawned) = guard.take() {
            spawned.terminate("TERM", STOP_GRACE);
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match self.spawn() {
                Ok(spawned) => {
                    *guard = Some(spawned);
                    return;
                }
                Err(StartError::PortInUse(_)) if Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(100));
                }
                Err(StartError::PortInUse(msg) | StartError::Failed(msg)) => {
                    panic!("cannot restart redis-server on port {}: {msg}", self.port)
                }
            }
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // SIGKILL: nothing on disk to flush, and it is quickest.
        self.kill();
    }
}

/// Whether the server on `addr` answers `INFO server` with `pid` as its
/// `process_id`, which proves it is ours and not another one that happens
/// to hold the port.
fn answers_as(addr: SocketAddr, pid: u32) -> bool {
    let Ok(reply) = resp::request(addr, &["INFO", "server"], Duration::from_secs(1)) else {
        return false;
    };
    let Some(info) = reply.as_text() else {
        return false;
    };
    info.lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .is_some_and(|p| p.trim() == pid.to_string())
}

/// Runs `attempt(port, bus_port)` on fresh free ports until one start is
/// not refused for a taken port.
pub(super) fn start_on_free_ports<T>(
    mut attempt: impl FnMut(u16, u16) -> Result<T, StartError>,
) -> T {
    let mut last = String::new();
    for _ in 0..PORT_ATTEMPTS {
        match attempt(free_port(), free_port()) {
            Ok(server) => return server,
            Err(StartError::PortInUse(msg)) => last = msg,
            Err(StartError::Failed(msg)) => panic!("cannot start redis-server: {msg}"),
        }
    }
    panic!("cannot start redis-server: {PORT_ATTEMPTS} ports in a row were taken; last: {last}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(
        expected = "redis-server not found on PATH: run scripts/install-test-deps (Debian package redis-server)"
    )]
    fn a_missing_server_is_a_loud_failure() {
        find_redis_binary("toolonce-no-such-redis-server", MISSING_SERVER);
    }
}
