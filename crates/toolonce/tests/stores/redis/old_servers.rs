//! The Redis store on the older servers it supports, real ones that `scripts/install-old-redis`
//! builds from source: Redis 5.0, the oldest, and 6.2, the last without `SET … NX GET` (6.2
//! refuses `NX` and `GET` together). On both, `connect` must find no native claim, so that
//! every claim is the claim script; the whole conformance suite then runs unchanged.

use crate::{conformance, redis_round_trips};

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use toolonce::store::redis::RedisStore;
use toolonce_testsupport::RedisServer;

/// Where `scripts/install-old-redis` (run by `scripts/install-test-deps`) puts the
/// `redis-server` of `version`.
fn program(version: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("old-redis")
        .join(format!("redis-{version}"))
        .join("redis-server")
}

fn start(version: &str) -> RedisServer {
    RedisServer::start_program(
        &program(version),
        "run scripts/install-test-deps, which builds it (scripts/install-old-redis)",
    )
}

/// A store of its own (a key prefix per store) on `server`.
async fn store_on(server: &RedisServer) -> RedisStore {
    static N: AtomicU64 = AtomicU64::new(0);
    RedisStore::builder(server.url())
        .prefix(format!(
            "test-old-{}-{}:",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ))
        .connect()
        .await
        .unwrap()
}

/// The version the server reports, from `INFO server`.
fn version_of(server: &RedisServer) -> String {
    server
        .command(&["INFO", "server"])
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .expect("INFO server names the version")
        .trim()
        .to_owned()
}

macro_rules! on_server {
    ($module:ident, $version:literal) => {
        mod $module {
            use std::sync::{Arc, OnceLock};

            use toolonce_testsupport::RedisServer;

            use super::conformance;

            /// One server of this version for the whole test binary; each store has its own
            /// key prefix.
            fn server() -> &'static RedisServer {
                static SERVER: OnceLock<RedisServer> = OnceLock::new();
                SERVER.get_or_init(|| super::start($version))
            }

            #[test]
            fn the_server_is_the_version_under_test() {
                let version = super::version_of(server());
                assert!(
                    version.starts_with(concat!($version, ".")),
                    "expected Redis {}, the server says {version}",
                    $version
                );
            }

            #[tokio::test]
            async fn every_claim_is_the_claim_script_and_a_replay_one_call_of_it() {
                // A server of its own: the counts are the server's, and the other tests of
                // this version share `server()` in parallel (a store connecting there showed
                // up here as `client=2`).
                let own = super::start($version);
                let store = super::store_on(&own).await;
                let (write, replay) = super::redis_round_trips::commands_of_a_write_and_its_replay(
                    &own,
                    store,
                    "old-server",
                )
                .await;
                // Two EVALSHA for the write, the claim (GET, SET) and the complete (GET, TIME,
                // SET); one for the replay, the claim (GET, PTTL). No native claim: a `set`
                // outside a script would show as a third SET.
                assert_eq!(write, ["evalsha=2", "get=2", "set=2", "time=1"]);
                assert_eq!(replay, ["evalsha=1", "get=1", "pttl=1"]);
            }

            crate::store_conformance!(async { Arc::new(super::store_on(server()).await) }, census: false);
        }
    };
}

on_server!(redis_5_0, "5.0");
on_server!(redis_6_2, "6.2");
