//! Real `redis-server` processes: a single server and a three-node cluster.

use std::ffi::OsStr;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::process::{
    LogFile, POLL, PORT_ATTEMPTS, Spawned, StartError, Watchdog, find_on_path, is_executable,
    wait_ready,
};
use crate::resp::{self, Reply};
use crate::{FaultProxy, free_port};

/// How long a server may take to answer after it is spawned.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a cluster may take to report `cluster_state:ok`.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(30);
/// Timeout of one request from the built-in RESP client.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `stop()` waits after SIGTERM before it SIGKILLs.
const STOP_GRACE: Duration = Duration::from_secs(10);

const MISSING_SERVER: &str =
    "redis-server not found on PATH: run scripts/install-test-deps (Debian package redis-server)";
const MISSING_CLI: &str =
    "redis-cli not found on PATH: run scripts/install-test-deps (Debian package redis-server)";

fn find_redis_binary(name: &str, missing: &str) -> PathBuf {
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

    fn try_start(
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
fn start_on_free_ports<T>(mut attempt: impl FnMut(u16, u16) -> Result<T, StartError>) -> T {
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

/// Three `redis-server --cluster-enabled yes` masters on free ports,
/// joined with `redis-cli --cluster create` (no replicas, the 16384 slots
/// split three ways), ready once every node reports `cluster_state:ok`.
///
/// Each node is a [`RedisServer`] (see [`nodes`](Self::nodes)), so a test
/// can kill and restart one; a restarted node keeps its `nodes.conf` and
/// rejoins, and [`wait_ok`](Self::wait_ok) waits for the cluster to heal.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

/// The cluster-mode arguments of one node; the bus port is set explicitly,
/// since the default (port + 10000) may be taken or out of range.
fn cluster_args(bus_port: u16) -> Vec<String> {
    [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "2000",
        "--cluster-port",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .chain([bus_port.to_string()])
    .collect()
}

impl RedisCluster {
    /// Starts three nodes, creates the cluster and waits until it is ok.
    ///
    /// # Panics
    ///
    /// If `redis-server` or `redis-cli` is missing, or the cluster is not ok
    /// within 30 s.
    pub fn start() -> RedisCluster {
        Self::start_announcing(|_| None).0
    }

    /// Starts a cluster whose every client connection goes through a
    /// [`FaultProxy`] of its own, one per node: each node announces its
    /// proxy's port (`cluster-announce-port`), so the slot map, `MOVED` and
    /// `ASK` send clients to the proxies, while the nodes' own bus traffic
    /// stays direct. The proxies are in node order.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start), and if the nodes do not all announce
    /// their proxies within 30 s.
    pub fn start_behind_proxies() -> (RedisCluster, Vec<FaultProxy>) {
        let (cluster, proxies) =
            Self::start_announcing(|node| Some(FaultProxy::start(node.addr())));
        let ports: Vec<String> = proxies.iter().map(|p| p.port().to_string()).collect();
        // Every node must know every other one by its announced port before a client asks.
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        loop {
            let maps: Vec<String> = cluster
                .nodes
                .iter()
                .map(|n| n.command(&["CLUSTER", "NODES"]))
                .collect();
            let announced = maps.iter().all(|map| {
                map.lines().filter(|l| !l.trim().is_empty()).all(|line| {
                    line.split_whitespace()
                        .nth(1)
                        .and_then(|addr| addr.split('@').next())
                        .and_then(|addr| addr.rsplit(':').next())
                        .is_some_and(|port| ports.iter().any(|p| p == port))
                })
            });
            if announced {
                return (cluster, proxies);
            }
            assert!(
                Instant::now() < deadline,
                "the cluster nodes do not announce their proxies' ports {ports:?}:\n{}",
                maps.join("\n")
            );
            thread::sleep(POLL * 4);
        }
    }

    /// Starts the nodes, lets `proxy` put a proxy in front of each (whose
    /// port the node then announces), and creates the cluster.
    fn start_announcing(
        mut proxy: impl FnMut(&RedisServer) -> Option<FaultProxy>,
    ) -> (RedisCluster, Vec<FaultProxy>) {
        let cli = find_redis_binary("redis-cli", MISSING_CLI);
        let bin = find_redis_binary("redis-server", MISSING_SERVER);
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                start_on_free_ports(|port, bus| {
                    RedisServer::try_start(port, &bin, true, cluster_args(bus))
                })
            })
            .collect();
        let mut proxies = Vec::new();
        for node in &nodes {
            if let Some(p) = proxy(node) {
                let port = p.port().to_string();
                node.command(&["CONFIG", "SET", "cluster-announce-port", &port]);
                proxies.push(p);
            }
        }
        let output = Command::new(&cli)
            .args(["--cluster", "create"])
            .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())))
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", cli.display()));
        if !output.status.success() {
            panic!(
                "redis-cli --cluster create failed ({}):\n{}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let cluster = RedisCluster { nodes };
        cluster.wait_ok();
        (cluster, proxies)
    }

    /// The three nodes.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The nodes' ports.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisServer::port).collect()
    }

    /// The nodes' URLs, `redis://127.0.0.1:PORT/` each.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Runs `redis-cli -c` (cluster mode: follows redirections) against the
    /// first running node and returns its trimmed stdout.
    ///
    /// # Panics
    ///
    /// If `redis-cli` is missing or fails, or no node is running.
    pub fn cli(&self, args: &[&str]) -> String {
        let cli = find_redis_binary("redis-cli", MISSING_CLI);
        let node = self
            .nodes
            .iter()
            .find(|n| n.is_running())
            .expect("no node of the cluster is running");
        let output = Command::new(&cli)
            .args(["-c", "-h", "127.0.0.1", "-p"])
            .arg(node.port().to_string())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", cli.display()));
        assert!(
            output.status.success(),
            "redis-cli -c {args:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout)
            .trim_end()
            .to_owned()
    }

    /// Waits until every node reports `cluster_state:ok` and knows all
    /// three nodes.
    ///
    /// # Panics
    ///
    /// If that does not happen within 30 s; the message shows each node's
    /// `CLUSTER INFO`.
    pub fn wait_ok(&self) {
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        loop {
            let infos: Vec<String> = self
                .nodes
                .iter()
                .map(|n| match n.try_command(&["CLUSTER", "INFO"]) {
                    Ok(reply) => reply.to_string(),
                    Err(e) => format!("unreachable: {e}"),
                })
                .collect();
            let ok = |info: &String| {
                let has = |field: &str| info.lines().any(|l| l.trim() == field);
                has("cluster_state:ok") && has("cluster_known_nodes:3")
            };
            if infos.iter().all(ok) {
                return;
            }
            if Instant::now() > deadline {
                let report: Vec<String> = self
                    .nodes
                    .iter()
                    .zip(&infos)
                    .map(|(n, info)| format!("node {}:\n{info}", n.port()))
                    .collect();
                panic!(
                    "redis cluster not ok after {CLUSTER_TIMEOUT:?}:\n{}",
                    report.join("\n")
                );
            }
            thread::sleep(POLL * 4);
        }
    }
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

    #[test]
    fn a_cluster_behind_proxies_sends_clients_through_them() {
        let (_cluster, proxies) = RedisCluster::start_behind_proxies();
        let before: u64 = proxies.iter().map(FaultProxy::replies).sum();
        // A client following redirections through the first proxy only: every key's slot is
        // served, and whichever node owns it is reached through its proxy.
        let cli = find_redis_binary("redis-cli", MISSING_CLI);
        for key in ["a", "b", "c", "d", "e", "f"] {
            let output = Command::new(&cli)
                .args(["-c", "-h", "127.0.0.1", "-p"])
                .arg(proxies[0].port().to_string())
                .args(["SET", key, "1"])
                .stdin(Stdio::null())
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "OK");
        }
        let through: Vec<u64> = proxies.iter().map(FaultProxy::replies).collect();
        assert!(through.iter().sum::<u64>() >= before + 6, "{through:?}");
        assert!(
            through.iter().filter(|n| **n > 0).count() >= 2,
            "redirections went through other nodes' proxies: {through:?}"
        );
    }

    #[test]
    fn cluster_nodes_get_an_explicit_bus_port() {
        let args = cluster_args(40001);
        assert_eq!(args[args.len() - 2..], ["--cluster-port", "40001"]);
    }
}
