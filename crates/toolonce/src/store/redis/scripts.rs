//! The Lua scripts every operation but the native claim runs, each assembled at first use from
//! the `.lua` files beside this one: the shared helpers it needs, then its body.

use std::sync::LazyLock;

use ::redis::Script;

/// The scripts, each assembled from the shared helpers it needs. `Script` sends `EVALSHA` and,
/// if the server answers `NOSCRIPT` (it restarted, or `SCRIPT FLUSH` ran), loads the script and
/// retries; [`RedisStore::connect`](super::RedisStore::connect) loads them all up front so the first calls cost one round
/// trip too.
pub(super) struct Scripts {
    pub(super) claim: Script,
    pub(super) read: Script,
    pub(super) renew: Script,
    pub(super) complete: Script,
    pub(super) fail: Script,
    pub(super) resolve: Script,
    /// Loaded at its first use rather than on connect: only an operator's `rm` runs it.
    pub(super) remove: Script,
}

/// A script: the helpers it uses, then its body. Each helper a script defines costs every call
/// (Lua builds its closures afresh), so the settling scripts, which run on every first-time
/// call, take only the fence in `owned.lua`.
macro_rules! script {
    ($name:literal: $($helper:literal),*) => {
        Script::new(concat!(
            $(include_str!(concat!($helper, ".lua")),)*
            include_str!(concat!($name, ".lua"))
        ))
    };
}

pub(super) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    claim: script!("claim": "now", "entry"),
    read: script!("read": "now", "entry"),
    renew: script!("renew": "owned"),
    complete: script!("complete": "now", "owned"),
    fail: script!("fail": "now", "owned"),
    resolve: script!("resolve": "now", "entry"),
    remove: script!("remove": "now", "entry"),
});
