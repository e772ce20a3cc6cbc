//! A hot standby of a running [`PostgresServer`]: its data directory is a `pg_basebackup` of
//! the primary (`-R`: it follows the primary by streaming replication, read-only), for tests of
//! what a store does against a standby and of synchronous replication.

use std::fs;
use std::process::Stdio;
use std::time::Instant;

use super::PostgresServer;
use crate::process::tail;

impl PostgresServer {
    /// Starts a hot standby of this server, streaming from it. The primary needs nothing
    /// beyond its defaults (`wal_level=replica`, `max_wal_senders=10`, and trust for
    /// replication connections from loopback, as `initdb -A trust` writes it).
    ///
    /// # Panics
    ///
    /// If `pg_basebackup` is missing or fails, or the standby does not come up within 30 s.
    pub fn start_standby(&self) -> PostgresServer {
        PostgresServer::start_from(None, Some(self))
    }

    /// Fills this (not yet started) server's data directory with a base backup of `primary`,
    /// configured to stream from it (`-R`). Prints how long the backup took: the cost a test
    /// with a standby pays.
    pub(super) fn base_backup_of(&self, primary: &PostgresServer) {
        let bin = self.bins.client("pg_basebackup").unwrap_or_else(|| {
            panic!("pg_basebackup not found beside postgres: run scripts/install-test-deps")
        });
        let log_path = self.dir.path().join("basebackup.log");
        let log = fs::File::create(&log_path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log_path.display()));
        let log_err = log
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log_path.display()));
        let started = Instant::now();
        let status = self
            .command_as_server_user(&bin)
            .args(["-h", "127.0.0.1", "-U", "postgres", "-p"])
            .arg(primary.port().to_string())
            .arg("-D")
            .arg(&self.data_dir)
            // Fast checkpoint: the backup starts at once instead of at the next checkpoint.
            .args(["-R", "-X", "stream", "-c", "fast", "--no-sync"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .status()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
        if !status.success() {
            let text = fs::read_to_string(&log_path).unwrap_or_default();
            panic!(
                "pg_basebackup failed ({status}); its output:\n{}",
                tail(&text, 40)
            );
        }
        eprintln!(
            "pg_basebackup of the primary on port {} took {} ms",
            primary.port(),
            started.elapsed().as_millis()
        );
    }
}
