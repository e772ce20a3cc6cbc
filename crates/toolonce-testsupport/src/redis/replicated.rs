//! A primary and one replica on loopback, with the replication link behind a [`FaultProxy`]
//! the test can stall, and the clients' address behind another it can move: what a test of a
//! failover needs to lose exactly the writes it means to lose (stall the link, write, kill the
//! primary, promote the replica).

use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use crate::FaultProxy;

use super::server::{MISSING_SERVER, RedisServer, find_redis_binary};

/// How long the replica may take to finish its first sync.
const SYNC_TIMEOUT: Duration = Duration::from_secs(20);

/// A primary, a replica that replicates from it through `link`, and `front`, the address
/// clients use, which forwards to the primary until [`fail_over`](Self::fail_over) moves it.
pub struct ReplicatedRedis {
    pub primary: RedisServer,
    pub replica: RedisServer,
    /// Between the replica and the primary: [`FaultProxy::stall`] it and the replica stops
    /// receiving what the primary writes.
    pub link: FaultProxy,
    /// Where clients connect: the primary, then the promoted replica.
    pub front: FaultProxy,
    program: PathBuf,
}

impl ReplicatedRedis {
    /// `redis-server` from the machine's installation.
    ///
    /// # Panics
    ///
    /// If it is missing or the replica does not sync within 20 s.
    pub fn start() -> ReplicatedRedis {
        ReplicatedRedis::start_program(&find_redis_binary("redis-server", MISSING_SERVER))
    }

    /// With another server program (`valkey-server`).
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_program(program: &Path) -> ReplicatedRedis {
        let hint = "run scripts/install-test-deps";
        let primary = RedisServer::start_program_with(program, hint, &[]);
        let link = FaultProxy::start(primary.addr());
        let port = link.port().to_string();
        let replica =
            RedisServer::start_program_with(program, hint, &["--replicaof", "127.0.0.1", &port]);
        let front = FaultProxy::start(primary.addr());
        let set = ReplicatedRedis {
            primary,
            replica,
            link,
            front,
            program: program.to_path_buf(),
        };
        set.wait_in_sync();
        set
    }

    /// The server program both run.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// Waits until the primary counts its replica online and the replica's link is up.
    ///
    /// # Panics
    ///
    /// After 20 s.
    pub fn wait_in_sync(&self) {
        let deadline = Instant::now() + SYNC_TIMEOUT;
        loop {
            let primary = self.primary.command(&["INFO", "replication"]);
            let replica = self.replica.command(&["INFO", "replication"]);
            if primary.contains("connected_slaves:1")
                && primary.contains("state=online")
                && replica.contains("master_link_status:up")
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the replica did not sync:\n{primary}\n{replica}\n{}",
                self.replica.log()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The failover a crash brings: SIGKILL of the primary, the replication link cut (what it
    /// held is lost), the replica promoted (`REPLICAOF NO ONE`), and the clients' address
    /// moved to it (its open connections closed, so clients reconnect there).
    pub fn fail_over(&self) {
        self.primary.kill();
        self.link.close_connections();
        assert_eq!(self.replica.command(&["REPLICAOF", "NO", "ONE"]), "OK");
        self.front.retarget(self.replica.addr());
        self.front.close_connections();
    }

    /// After [`fail_over`](Self::fail_over): the old primary back, empty (it kept nothing on
    /// disk), as a replica of the promoted one, and in sync with it; what Sentinel does with a
    /// master that returns.
    ///
    /// # Panics
    ///
    /// If it does not sync within 20 s.
    pub fn rejoin(&self) {
        self.primary.restart();
        let port = self.replica.port().to_string();
        assert_eq!(
            self.primary.command(&["REPLICAOF", "127.0.0.1", &port]),
            "OK"
        );
        let deadline = Instant::now() + SYNC_TIMEOUT;
        loop {
            let promoted = self.replica.command(&["INFO", "replication"]);
            let rejoined = self.primary.command(&["INFO", "replication"]);
            if promoted.contains("connected_slaves:1")
                && promoted.contains("state=online")
                && rejoined.contains("master_link_status:up")
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the old primary did not rejoin:\n{promoted}\n{rejoined}"
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
}
