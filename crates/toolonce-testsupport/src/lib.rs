//! Test support for toolonce: real Redis, Redis Cluster and PostgreSQL
//! servers for the tests and benches of the other crates.
//!
//! Every server is a real process from the machine's installation
//! (`redis-server`, `initdb` and `postgres`), started on a free loopback
//! port in its own temporary directory, never the machine's own services on
//! 6379 or 5432. The API is synchronous (`std::process`), so it works from
//! plain and async tests alike.
//!
//! - [`RedisServer`]: one `redis-server`, with [`kill`](RedisServer::kill)
//!   (SIGKILL, as a crash), [`restart`](RedisServer::restart) on the same
//!   port, and a tiny RESP client ([`RedisServer::command`]); or an older
//!   Redis built by `scripts/install-old-redis`
//!   ([`RedisServer::start_program`]).
//! - [`RedisCluster`]: three cluster-mode masters joined with
//!   `redis-cli --cluster create`, optionally each with a replica
//!   ([`RedisCluster::start_with_replicas`]) to stall or fail over to.
//! - [`PostgresServer`]: `initdb` plus `postgres` with trust
//!   authentication, durability off for speed, `pg_stat_statements`
//!   preloaded where installed, and kill, restart (crash recovery), `psql`
//!   and database helpers. As root, PostgreSQL runs as the `postgres` OS
//!   user.
//! - [`FaultProxy`]: a TCP proxy in front of any of them that drops the
//!   connection instead of forwarding a chosen reply, delays replies, and
//!   refuses or closes connections, to lose a reply after the server
//!   applied the request.
//! - [`Intercepted`]: a toolonce `Store` that forwards every call to a real one except those
//!   its [`Intercept`] takes over, for tests that count, hold or fail some calls.
//! - [`TestCertificates`]: a CA and a server certificate for 127.0.0.1, made by `openssl`.
//! - [`shared_redis`], [`shared_redis_cluster`] and [`shared_postgres`]:
//!   one server per test binary, started by the first test that asks.
//!
//! A missing server program is a loud failure, never a skip: the panic
//! message names `scripts/install-test-deps`, which installs them.
//!
//! # Clean-up
//!
//! Dropping a server ends it and removes its directory. Values that are
//! never dropped (the shared servers live in statics) and servers of a test
//! process that crashes or is killed are ended by a watchdog: a small `sh`
//! per server blocks reading a pipe that only the test process holds, so
//! when that process is gone the pipe closes and the watchdog kills the
//! server and removes its directory.
//!
//! # Example
//!
//! ```no_run
//! use toolonce_testsupport::{PostgresServer, RedisServer};
//!
//! let redis = RedisServer::start();
//! assert_eq!(redis.command(&["SET", "k", "v"]), "OK");
//! redis.kill(); // a crash: the data is gone
//! redis.restart(); // same port, empty
//! assert_eq!(redis.command(&["GET", "k"]), "(nil)");
//!
//! let pg = PostgresServer::start();
//! let url = pg.create_unique_database(); // postgres://postgres@127.0.0.1:PORT/test_..
//! assert_eq!(pg.psql("SELECT 1"), "1");
//! # let _ = url;
//! ```

mod fault_proxy;
mod intercepted;
mod logs;
mod postgres;
mod process;
mod redis;
mod resp;
mod tls;

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Mutex, OnceLock};

pub use crate::fault_proxy::FaultProxy;
pub use crate::intercepted::{Intercept, Intercepted};
pub use crate::logs::Logs;
pub use crate::postgres::PostgresServer;
pub use crate::redis::{RedisCluster, RedisServer, ReplicatedRedis};
pub use crate::resp::Reply;
pub use crate::tls::TestCertificates;

/// A TCP port on 127.0.0.1 that was free a moment ago.
///
/// It binds `127.0.0.1:0`, reads the port the kernel chose and closes the
/// socket. Another process may take the port before the caller binds it
/// (a small race), so the spawners here retry on a fresh port when a server
/// reports its address in use. Within this process, a port is never handed
/// out twice.
///
/// # Panics
///
/// If no loopback socket can be bound at all.
pub fn free_port() -> u16 {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    let mut port = 0;
    for _ in 0..64 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap_or_else(|e| panic!("cannot bind a loopback port: {e}"));
        port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("cannot read a bound port: {e}"))
            .port();
        if handed_out.insert(port) {
            break;
        }
    }
    port
}

/// One [`RedisServer`] for the whole test binary, started on first use.
///
/// Tests that share it should use keys of their own (a per-test prefix)
/// and must not kill, stop or restart it. It dies with the test process.
pub fn shared_redis() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(RedisServer::start)
}

/// One [`RedisCluster`] for the whole test binary, started on first use.
///
/// As with [`shared_redis`]: own keys per test, no kills.
pub fn shared_redis_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(RedisCluster::start)
}

/// One [`PostgresServer`] for the whole test binary, started on first use.
///
/// Tests that share it should each work in a database of their own
/// ([`PostgresServer::create_unique_database`]) and must not kill, stop or
/// restart it. It dies with the test process.
pub fn shared_postgres() -> &'static PostgresServer {
    static SERVER: OnceLock<PostgresServer> = OnceLock::new();
    SERVER.get_or_init(PostgresServer::start)
}

/// The `valkey-server` 8.1 that `scripts/install-valkey` (run by `scripts/install-test-deps`)
/// puts under a test binary's target directory: pass it `env!("CARGO_TARGET_TMPDIR")`, which
/// only test binaries have. One place says where it is and how to get it.
///
/// # Panics
///
/// When it is not there, saying how to install it: a missing server fails, never skips.
pub fn installed_valkey(target_tmpdir: &str) -> std::path::PathBuf {
    let program = std::path::Path::new(target_tmpdir)
        .join("valkey")
        .join("valkey-server");
    assert!(
        crate::process::is_executable(&program),
        "{} is missing: run scripts/install-test-deps, which installs it (scripts/install-valkey)",
        program.display()
    );
    program
}
