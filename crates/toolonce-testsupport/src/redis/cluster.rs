//! A three-node Redis Cluster of real `redis-server` processes, joined with
//! `redis-cli --cluster create`, optionally with a [`FaultProxy`] in front of every node.
//! (`cluster_replicas` gives each master a replica.)

use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::server::{MISSING_SERVER, RedisServer, find_redis_binary, start_on_free_ports};
use crate::FaultProxy;
use crate::process::POLL;

/// How long a cluster may take to report `cluster_state:ok`.
pub(super) const CLUSTER_TIMEOUT: Duration = Duration::from_secs(30);
pub(super) const MISSING_CLI: &str =
    "redis-cli not found on PATH: run scripts/install-test-deps (Debian package redis-server)";

/// Three `redis-server --cluster-enabled yes` masters on free ports,
/// joined with `redis-cli --cluster create` (no replicas, the 16384 slots
/// split three ways), ready once every node reports `cluster_state:ok`.
///
/// Each node is a [`RedisServer`] (see [`nodes`](Self::nodes)), so a test
/// can kill and restart one; a restarted node keeps its `nodes.conf` and
/// rejoins, and [`wait_ok`](Self::wait_ok) waits for the cluster to heal.
#[derive(Debug)]
pub struct RedisCluster {
    /// The masters, as created.
    pub(super) nodes: Vec<RedisServer>,
    /// One replica per master, in the masters' order, when started with replicas.
    pub(super) replicas: Vec<RedisServer>,
    /// The slot ranges each master was created with, in the masters' order.
    pub(super) slots: Vec<Vec<(u16, u16)>>,
}

/// The cluster-mode arguments of one node; the bus port is set explicitly,
/// since the default (port + 10000) may be taken or out of range.
pub(super) fn cluster_args(bus_port: u16) -> Vec<String> {
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
        proxy: impl FnMut(&RedisServer) -> Option<FaultProxy>,
    ) -> (RedisCluster, Vec<FaultProxy>) {
        let bin = find_redis_binary("redis-server", MISSING_SERVER);
        Self::create(&bin, proxy)
    }

    /// Starts three nodes of `program` (whose every build here knows `--enable-debug-command`),
    /// lets `proxy` front each, and creates the cluster of masters.
    pub(super) fn create(
        program: &Path,
        mut proxy: impl FnMut(&RedisServer) -> Option<FaultProxy>,
    ) -> (RedisCluster, Vec<FaultProxy>) {
        let cli = find_redis_binary("redis-cli", MISSING_CLI);
        let nodes: Vec<RedisServer> = (0..3).map(|_| cluster_node(program)).collect();
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
        let slots = nodes.iter().map(own_slots).collect();
        let cluster = RedisCluster {
            nodes,
            replicas: Vec::new(),
            slots,
        };
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
    /// the nodes (three, or six with replicas).
    ///
    /// # Panics
    ///
    /// If that does not happen within 30 s; the message shows each node's
    /// `CLUSTER INFO`.
    pub fn wait_ok(&self) {
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        let known = format!(
            "cluster_known_nodes:{}",
            self.nodes.len() + self.replicas.len()
        );
        loop {
            let infos: Vec<String> = self
                .nodes
                .iter()
                .chain(&self.replicas)
                .map(|n| match n.try_command(&["CLUSTER", "INFO"]) {
                    Ok(reply) => reply.to_string(),
                    Err(e) => format!("unreachable: {e}"),
                })
                .collect();
            let ok = |info: &String| {
                let has = |field: &str| info.lines().any(|l| l.trim() == field);
                has("cluster_state:ok") && has(&known)
            };
            if infos.iter().all(ok) {
                return;
            }
            if Instant::now() > deadline {
                let report: Vec<String> = self
                    .nodes
                    .iter()
                    .chain(&self.replicas)
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

/// One cluster-mode node of `program` on free ports.
pub(super) fn cluster_node(program: &Path) -> RedisServer {
    start_on_free_ports(|port, bus| RedisServer::try_start(port, program, true, cluster_args(bus)))
}

/// The slot ranges `node` serves, from the `myself` line of its `CLUSTER NODES`.
fn own_slots(node: &RedisServer) -> Vec<(u16, u16)> {
    let map = node.command(&["CLUSTER", "NODES"]);
    let line = map
        .lines()
        .find(|l| l.contains("myself"))
        .unwrap_or_else(|| panic!("no myself line in CLUSTER NODES:\n{map}"));
    line.split_whitespace()
        .skip(8)
        .filter_map(|range| {
            let (first, last) = range.split_once('-').unwrap_or((range, range));
            Some((first.parse().ok()?, last.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
