//! A Redis Cluster whose three masters each have one replica, for `replicas=N` on a cluster:
//! the replicas attached with `CLUSTER REPLICATE` and waited for until in sync; stalling one
//! (so that its master's writes reach only the master), reading a key on a replica
//! (`READONLY`), and the failover a crash brings (SIGKILL of a master, `CLUSTER FAILOVER
//! TAKEOVER` on its replica, and the old master's return as the new one's replica).

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use super::cluster::{CLUSTER_TIMEOUT, RedisCluster, cluster_node};
use super::server::{MISSING_SERVER, RedisServer, find_redis_binary};
use crate::process::{POLL, send_signal};
use crate::resp::{self, Reply};

/// The two nodes of a shard: its master (as created) and its replica, or the other way round
/// after a failover.
fn pair(cluster: &RedisCluster, shard: usize) -> [&RedisServer; 2] {
    [&cluster.nodes[shard], &cluster.replicas[shard]]
}

/// The node's `CLUSTER MYID`.
fn id_of(node: &RedisServer) -> String {
    node.command(&["CLUSTER", "MYID"])
}

/// Whether `node` runs and reports `role:master`.
fn is_master(node: &RedisServer) -> bool {
    node.is_running()
        && node
            .try_command(&["INFO", "replication"])
            .is_ok_and(|r| r.to_string().lines().any(|l| l.trim() == "role:master"))
}

impl RedisCluster {
    /// Three masters of `redis-server` from the machine's installation, each with a replica.
    ///
    /// # Panics
    ///
    /// As [`start_program_with_replicas`](Self::start_program_with_replicas).
    pub fn start_with_replicas() -> RedisCluster {
        RedisCluster::start_program_with_replicas(&find_redis_binary(
            "redis-server",
            MISSING_SERVER,
        ))
    }

    /// Three masters of `program` (`redis-server` or `valkey-server`) joined as a cluster,
    /// then a fourth, fifth and sixth node met and made the replica of one master each
    /// (`CLUSTER REPLICATE`); ready once every replica is in sync and every node reports
    /// `cluster_state:ok` with six nodes known.
    ///
    /// # Panics
    ///
    /// If a program is missing, or the cluster is not ready within 30 s.
    pub fn start_program_with_replicas(program: &Path) -> RedisCluster {
        let (mut cluster, _) = RedisCluster::create(program, |_| None);
        let bus = |node: &RedisServer| {
            let map = node.command(&["CLUSTER", "NODES"]);
            let line = map.lines().find(|l| l.contains("myself")).unwrap_or("");
            // `ip:port@bus[,hostname]` in the second field.
            line.split_whitespace()
                .nth(1)
                .and_then(|a| a.split('@').nth(1))
                .and_then(|b| b.split(',').next())
                .map(str::to_owned)
                .unwrap_or_else(|| panic!("no bus port in CLUSTER NODES:\n{map}"))
        };
        let first = &cluster.nodes[0];
        let (first_port, first_bus) = (first.port().to_string(), bus(first));
        for master in 0..cluster.nodes.len() {
            let replica = cluster_node(program);
            let meet = ["CLUSTER", "MEET", "127.0.0.1", &first_port, &first_bus];
            assert_eq!(replica.command(&meet), "OK");
            let id = id_of(&cluster.nodes[master]);
            // The replica must know its master before it can follow it.
            let deadline = Instant::now() + CLUSTER_TIMEOUT;
            loop {
                let answer = replica.command(&["CLUSTER", "REPLICATE", &id]);
                if answer == "OK" {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "CLUSTER REPLICATE {id} kept failing: {answer}"
                );
                thread::sleep(POLL * 4);
            }
            cluster.replicas.push(replica);
        }
        for shard in 0..cluster.nodes.len() {
            cluster.wait_in_sync(shard);
        }
        cluster.wait_ok();
        cluster
    }

    /// The replicas, one per master in the masters' order (empty without replicas).
    pub fn replicas(&self) -> &[RedisServer] {
        &self.replicas
    }

    /// The shard (0, 1 or 2) whose slots hold `key`, by `CLUSTER KEYSLOT` on a running node.
    ///
    /// # Panics
    ///
    /// If no node runs or none of the shards was created with the slot.
    pub fn shard_of(&self, key: &str) -> usize {
        let node = self
            .nodes
            .iter()
            .chain(&self.replicas)
            .find(|n| n.is_running())
            .expect("no node of the cluster is running");
        let slot: u16 = node
            .command(&["CLUSTER", "KEYSLOT", key])
            .parse()
            .expect("CLUSTER KEYSLOT answers a number");
        self.slots
            .iter()
            .position(|ranges| ranges.iter().any(|&(a, b)| (a..=b).contains(&slot)))
            .unwrap_or_else(|| panic!("no shard has slot {slot}: {:?}", self.slots))
    }

    /// The running master of `shard`: the node it was created with, or its replica after a
    /// failover.
    ///
    /// # Panics
    ///
    /// If neither runs as a master.
    pub fn master(&self, shard: usize) -> &RedisServer {
        pair(self, shard)
            .into_iter()
            .find(|n| is_master(n))
            .unwrap_or_else(|| panic!("shard {shard} has no running master"))
    }

    /// The other node of `shard`: its replica (running or not).
    pub fn replica(&self, shard: usize) -> &RedisServer {
        let master = self.master(shard);
        pair(self, shard)
            .into_iter()
            .find(|n| n.port() != master.port())
            .expect("a shard has two nodes")
    }

    /// `GET key` on `shard`'s replica after `READONLY`, on one connection: what the replica
    /// holds, `None` for a missing key.
    ///
    /// # Panics
    ///
    /// If the replica cannot be reached or refuses.
    pub fn get_on_replica(&self, shard: usize, key: &str) -> Option<String> {
        let replica = self.replica(shard);
        let timeout = Duration::from_secs(5);
        let run = || -> std::io::Result<Reply> {
            let stream = TcpStream::connect_timeout(&replica.addr(), timeout)?;
            stream.set_read_timeout(Some(timeout))?;
            let mut request = resp::encode(&["READONLY"]);
            request.extend(resp::encode(&["GET", key]));
            (&stream).write_all(&request)?;
            let mut reader = BufReader::new(&stream);
            let readonly = resp::read_reply(&mut reader)?;
            assert_eq!(readonly.to_string(), "OK", "READONLY on the replica");
            resp::read_reply(&mut reader)
        };
        match run().unwrap_or_else(|e| panic!("GET on replica {}: {e}", replica.port())) {
            Reply::Nil => None,
            reply => match reply.as_text() {
                Some(text) => Some(text),
                None => panic!("GET {key} on replica {}: {reply}", replica.port()),
            },
        }
    }

    /// Stalls `shard`'s replica: SIGSTOP, and its master closes the replication connection, so
    /// the master's writes from now on reach only the master (and `WAIT` counts no replica)
    /// until [`resume_replica`](Self::resume_replica) or [`fail_over`](Self::fail_over).
    pub fn stall_replica(&self, shard: usize) {
        let (master, replica) = (self.master(shard), self.replica(shard));
        send_signal(replica.pid().expect("the replica runs"), "STOP");
        master.command(&["CLIENT", "KILL", "TYPE", "replica"]);
    }

    /// Resumes a stalled replica (SIGCONT) and waits until it is in sync again.
    ///
    /// # Panics
    ///
    /// If it does not resync within 30 s.
    pub fn resume_replica(&self, shard: usize) {
        send_signal(self.replica(shard).pid().expect("the replica runs"), "CONT");
        self.wait_in_sync(shard);
    }

    /// The failover a crash brings, on `shard`: SIGKILL of its master, its replica resumed
    /// if stalled and promoted (`CLUSTER FAILOVER TAKEOVER`, which needs no vote), then a wait
    /// until every running node names the promoted one master of the shard's slots and
    /// reports `cluster_state:ok`. What the replica had not received is lost.
    ///
    /// # Panics
    ///
    /// If the cluster does not agree within 30 s.
    pub fn fail_over(&self, shard: usize) {
        let (old, new) = (self.master(shard), self.replica(shard));
        old.kill();
        send_signal(new.pid().expect("the replica runs"), "CONT");
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        loop {
            match new.command(&["CLUSTER", "FAILOVER", "TAKEOVER"]) {
                ok if ok == "OK" => break,
                // Just resumed, it may still be reading what it had received.
                refused => assert!(Instant::now() < deadline, "TAKEOVER refused: {refused}"),
            }
            thread::sleep(POLL);
        }
        let id = id_of(new);
        loop {
            let running: Vec<&RedisServer> = self
                .nodes
                .iter()
                .chain(&self.replicas)
                .filter(|n| n.is_running())
                .collect();
            let agreed = running.iter().all(|n| {
                let map = n.command(&["CLUSTER", "NODES"]);
                let info = n.command(&["CLUSTER", "INFO"]);
                info.lines().any(|l| l.trim() == "cluster_state:ok")
                    && map.lines().any(|l| {
                        let fields: Vec<&str> = l.split_whitespace().collect();
                        fields.first() == Some(&id.as_str())
                            && fields.get(2).is_some_and(|f| f.contains("master"))
                            && fields.len() > 8
                    })
            });
            if agreed {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not agree on the promoted node {} of shard {shard}",
                new.port()
            );
            thread::sleep(POLL * 4);
        }
    }

    /// After [`fail_over`](Self::fail_over): the old master back, empty (nothing on disk),
    /// taken by the cluster as the promoted node's replica (its `nodes.conf` names it, and the
    /// newer epoch wins), and waited for until in sync and the cluster ok.
    ///
    /// # Panics
    ///
    /// If that does not happen within 30 s.
    pub fn rejoin(&self, shard: usize) {
        let down = pair(self, shard)
            .into_iter()
            .find(|n| !n.is_running())
            .expect("a node of the shard is down");
        down.restart();
        self.wait_in_sync(shard);
        self.wait_ok();
    }

    /// Waits until `shard`'s master counts one replica online and the replica's link is up.
    ///
    /// # Panics
    ///
    /// After 30 s.
    pub fn wait_in_sync(&self, shard: usize) {
        let deadline = Instant::now() + CLUSTER_TIMEOUT;
        loop {
            let [a, b] = pair(self, shard).map(|n| match n.try_command(&["INFO", "replication"]) {
                Ok(reply) => reply.to_string(),
                Err(e) => format!("unreachable: {e}"),
            });
            let synced = |master: &str, replica: &str| {
                master.contains("role:master")
                    && master.contains("connected_slaves:1")
                    && master.contains("state=online")
                    && replica.contains("master_link_status:up")
            };
            if synced(&a, &b) || synced(&b, &a) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "shard {shard} is not in sync:\n{a}\n{b}"
            );
            thread::sleep(POLL * 4);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_with_replicas_copies_each_write_to_its_masters_replica_and_fails_over() {
        let cluster = RedisCluster::start_with_replicas();
        assert_eq!(cluster.replicas().len(), 3);
        let shard = cluster.shard_of("k");
        assert_eq!(cluster.cli(&["SET", "k", "v"]), "OK");
        eventually_on_replica(&cluster, shard, "v");

        cluster.stall_replica(shard);
        assert_eq!(cluster.cli(&["SET", "k", "lost"]), "OK");
        let old = cluster.master(shard).port();
        cluster.fail_over(shard);
        assert_ne!(cluster.master(shard).port(), old);
        assert_eq!(
            cluster.cli(&["GET", "k"]),
            "v",
            "the stalled write survived"
        );
        cluster.rejoin(shard);
        assert_eq!(cluster.replica(shard).port(), old);
        assert_eq!(cluster.cli(&["SET", "k", "w"]), "OK");
        eventually_on_replica(&cluster, shard, "w");
    }

    fn eventually_on_replica(cluster: &RedisCluster, shard: usize, value: &str) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while cluster.get_on_replica(shard, "k").as_deref() != Some(value) {
            assert!(Instant::now() < deadline, "the replica never got {value}");
            thread::sleep(POLL);
        }
    }
}
