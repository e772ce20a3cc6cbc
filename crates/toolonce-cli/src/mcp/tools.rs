//! Which tools pass through, and the proxy's own listing of them ([`Listing`]): learnt from the
//! server's `tools/list` answers (the proxy's own
//! listing at start and after `notifications/tools/list_changed`, and the client's as they pass
//! by), overridden by the configuration.
//!
//! A tool marked `readOnlyHint: true` or `idempotentHint: true` passes through: running it
//! again is safe, while replaying a stale answer is not (write v1, v2, v1 again: a replay of
//! the first answer would say "written" and leave v2 in place). Any other tool, and one the
//! server has not listed, is a write, because wrongly deduplicating a read costs a stale answer
//! at worst, while wrongly passing a write through can perform it twice.
//!
//! When to list: protocol 2025-11-25 and earlier open a session (`initialize`, then
//! `notifications/initialized`), after which the proxy lists. Protocol 2026-07-28 has no
//! session: every request names its version in `_meta`, and a server refuses a request without
//! it. There, the proxy lists when a tool call names a version it has not listed for (the first
//! call, or a client that switched versions), with that call's version and client capabilities
//! (see [`Tools::modern_listing`]); the call waits for the listing. A 2026 server hears of no
//! client unless it subscribed, so its `notifications/tools/list_changed` may never come: its
//! listing says instead how long it stays fresh (`ttlMs`), and a call after that lists again
//! first, no more often than once per [`MIN_FRESH`] (a `ttlMs` of 0 would otherwise double the
//! cost of every call).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::watch;

use super::config::{Config, IdempotentHint, Kind};
use super::jsonrpc::{self, IdKey};
use super::route::Router;

/// The classification of the server's tools.
#[derive(Debug)]
pub(crate) struct Tools {
    config: Arc<Config>,
    /// Whether a tool passes through (`readOnlyHint` or `idempotentHint`), as last listed. A std mutex: held for a lookup or an
    /// insert, never across an `.await`.
    read_only: Mutex<HashMap<String, bool>>,
    /// The protocol version (2026-07-28 or later) the proxy last listed for.
    modern: Mutex<Option<Modern>>,
    /// The tools whose listed `inputSchema` has a property of their repeat argument's name:
    /// they keep their own, get none, and the argument is never taken out of their calls.
    own_repeat: Mutex<HashSet<String>>,
}

/// The shortest time a 2026-07-28 listing is taken as fresh, whatever its `ttlMs`.
pub(crate) const MIN_FRESH: Duration = Duration::from_secs(1);

/// The longest: a day, so a huge `ttlMs` neither overflows a clock nor keeps a listing for ever.
const MAX_FRESH: Duration = Duration::from_secs(24 * 60 * 60);

/// The proxy's listing for a protocol version of 2026-07-28 or later.
#[derive(Debug)]
struct Modern {
    version: String,
    /// The `_meta` the proxy's own requests carry for it.
    meta: Value,
    /// Until when the listing is fresh; `None` while one is in progress, or after one failed
    /// (then only a change of version or a `list_changed` lists again).
    fresh_until: Option<Instant>,
}

impl Tools {
    pub(crate) fn new(config: Arc<Config>) -> Self {
        Tools {
            config,
            read_only: Mutex::new(HashMap::new()),
            modern: Mutex::new(None),
            own_repeat: Mutex::new(HashSet::new()),
        }
    }

    /// For a call of protocol 2026-07-28 or later (`version`, and the `_meta` for the proxy's
    /// own requests): the `_meta` to list the tools with, if the proxy has not listed for this
    /// version yet or its listing is stale. Remembered at once, so one listing serves every
    /// call that follows.
    pub(crate) fn modern_listing(&self, version: &str, meta: &Value) -> Option<Value> {
        let mut modern = self.modern.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(listed) = modern.as_mut()
            && listed.version == version
        {
            match listed.fresh_until {
                Some(until) if Instant::now() >= until => {}
                _ => return None,
            }
        }
        *modern = Some(Modern {
            version: version.to_owned(),
            meta: meta.clone(),
            fresh_until: None,
        });
        Some(meta.clone())
    }

    /// A listing with `meta` ended; `ttl` is how long it is fresh (the least `ttlMs` of its
    /// pages), `None` if it failed.
    pub(crate) fn modern_listed(&self, meta: &Value, ttl: Option<Duration>) {
        let mut modern = self.modern.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(listed) = modern.as_mut()
            && listed.meta == *meta
        {
            listed.fresh_until = ttl.map(|ttl| Instant::now() + ttl.clamp(MIN_FRESH, MAX_FRESH));
        }
    }

    /// The `_meta` of the last protocol 2026-07-28 (or later) listing, to list again with when
    /// the server says its tools changed.
    pub(crate) fn modern_meta(&self) -> Option<Value> {
        self.modern
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|listed| listed.meta.clone())
    }

    /// Whether a call of `name` goes through the idempotency layer.
    pub(crate) fn is_write(&self, name: &str) -> bool {
        match self.config.kind(name) {
            Some(kind) => kind == Kind::Write,
            None => !self
                .read_only
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(name)
                .copied()
                .unwrap_or(false),
        }
    }

    /// The repeat argument of a call of `name` (see [`repeat`](super::repeat)): the one its
    /// policy names, unless it is not a write or its schema has a property of that name.
    pub(crate) fn repeat_argument(&self, name: &str) -> Option<String> {
        if !self.is_write(name) {
            return None;
        }
        let argument = self.config.policy(name).options.repeat_argument.clone()?;
        let own = self.own_repeat.lock().unwrap_or_else(|p| p.into_inner());
        (!own.contains(name)).then_some(argument)
    }

    /// Notes whether `tool`'s listed schema has a property named like its repeat argument,
    /// warning (once) when it has.
    fn learn_own_repeat(&self, name: &str, tool: &Value) {
        let Some(argument) = self.config.policy(name).options.repeat_argument.clone() else {
            return;
        };
        let has_own = tool
            .pointer("/inputSchema/properties")
            .and_then(Value::as_object)
            .is_some_and(|properties| properties.contains_key(&argument));
        let mut own = self.own_repeat.lock().unwrap_or_else(|p| p.into_inner());
        if !has_own {
            own.remove(name);
        } else if own.insert(name.to_owned()) {
            tracing::warn!(
                target: "toolonce::mcp",
                tool = name,
                argument = argument.as_str(),
                "the tool's inputSchema already has a property named like the repeat argument; \
                 it keeps its own and gets no repeat argument"
            );
        }
    }

    /// Learns from the `result` of a `tools/list` response (one page of it: pages add up).
    pub(crate) fn learn(&self, result: &Value) {
        let Some(tools) = result.get("tools").and_then(Value::as_array) else {
            return;
        };
        let mut read_only = self.read_only.lock().unwrap_or_else(|p| p.into_inner());
        for tool in tools {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            let hint = |name: &str| {
                tool.pointer(&format!("/annotations/{name}"))
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            };
            // `idempotent_hint = "write"` deduplicates what the hint alone would pass through.
            let idempotent_passes = self.config.proxy.idempotent_hint == IdempotentHint::Pass;
            let (reads, idempotent) = (hint("readOnlyHint"), hint("idempotentHint"));
            let kind = match self.config.kind(name) {
                Some(Kind::Read) => "read (configured)",
                Some(Kind::Write) => "write (configured)",
                None if reads => "read (readOnlyHint)",
                None if idempotent && idempotent_passes => "passes through (idempotentHint)",
                None if idempotent => "write (idempotentHint, idempotent_hint = \"write\")",
                None => "write",
            };
            let hint = reads || (idempotent && idempotent_passes);
            tracing::debug!(target: "toolonce::mcp", tool = name, kind, "tool listed");
            read_only.insert(name.to_owned(), hint);
            self.learn_own_repeat(name, tool);
        }
    }
}

/// How long the proxy waits for the server to answer one of its own `tools/list` requests, and
/// how long a tool call waits for a listing in progress before being classified without it.
const LIST_TIMEOUT: Duration = Duration::from_secs(10);

/// The proxy's own listing of the server's tools, which keeps [`Tools`] up to date whether or
/// not the client lists them. Its requests use string ids with a random prefix no client picks.
#[derive(Debug)]
pub(super) struct Listing {
    pub(super) tools: Tools,
    router: Arc<Router>,
    /// How many of the proxy's own listings are in progress: tool calls wait for none to be.
    in_progress: watch::Sender<usize>,
    /// The prefix of the proxy's own request ids, and their counter.
    own_prefix: String,
    own_count: AtomicU64,
}

impl Listing {
    pub(super) fn new(tools: Tools, router: Arc<Router>) -> anyhow::Result<Self> {
        let mut random = [0u8; 8];
        getrandom::fill(&mut random)
            .map_err(|e| anyhow::anyhow!("no randomness for the proxy's request ids: {e}"))?;
        Ok(Listing {
            tools,
            router,
            in_progress: watch::Sender::new(0),
            own_prefix: format!("toolonce-{:016x}", u64::from_le_bytes(random)),
            own_count: AtomicU64::new(0),
        })
    }

    /// Waits (a bounded time) for the proxy's own listing of the tools, if one is in progress.
    pub(super) async fn listed(&self) {
        let mut listing = self.in_progress.subscribe();
        let _ = tokio::time::timeout(LIST_TIMEOUT, listing.wait_for(|n| *n == 0)).await;
    }

    /// Lists the tools before classifying a call of protocol 2026-07-28 or later, if the proxy
    /// has not listed for its version, or its listing is stale (see the module's documentation).
    pub(super) fn list_for_modern(self: &Arc<Self>, params: Option<&Value>) {
        if let Some((version, meta)) = params.and_then(jsonrpc::own_request_meta)
            && let Some(meta) = self.tools.modern_listing(&version, &meta)
        {
            self.list(Some(meta));
        }
    }

    /// Starts listing the server's tools with the proxy's own requests (every page), so that
    /// classification never depends on whether the client listed them. Tool calls received
    /// from now on wait for it. `meta`: the `params._meta` of each request (protocol
    /// 2026-07-28 or later, whose server refuses a request without one).
    pub(super) fn list(self: &Arc<Self>, meta: Option<Value>) {
        self.in_progress.send_modify(|n| *n += 1);
        let listing = self.clone();
        tokio::spawn(async move {
            let mut cursor: Option<Value> = None;
            // How long the listing stays fresh (2026-07-28): the least `ttlMs` of its pages,
            // absent or negative meaning 0; `None` if it failed.
            let mut ttl = Some(u64::MAX);
            loop {
                let n = listing.own_count.fetch_add(1, Ordering::Relaxed);
                let id = Value::String(format!("{}-{n}", listing.own_prefix));
                let mut params = match &cursor {
                    Some(cursor) => serde_json::json!({"cursor": cursor}),
                    None => serde_json::json!({}),
                };
                if let Some(meta) = &meta {
                    params["_meta"] = meta.clone();
                }
                let request = jsonrpc::line(&serde_json::json!({
                    "jsonrpc": "2.0", "id": id, "method": "tools/list", "params": params,
                }));
                let answer = match listing.router.request(&IdKey::of(&id), &request).await {
                    Some(rx) => tokio::time::timeout(LIST_TIMEOUT, rx)
                        .await
                        .ok()
                        .and_then(Result::ok),
                    None => None,
                };
                let result = answer
                    .and_then(|line| serde_json::from_slice::<Value>(&line).ok())
                    .and_then(|mut message| message.get_mut("result").map(Value::take));
                let Some(result) = result else {
                    ttl = None;
                    listing.router.abandon(&IdKey::of(&id));
                    tracing::warn!(
                        target: "toolonce::mcp",
                        "the server did not list its tools; tools it has not listed are writes"
                    );
                    break;
                };
                listing.tools.learn(&result);
                let page_ttl = result.get("ttlMs").and_then(Value::as_u64).unwrap_or(0);
                ttl = ttl.map(|ttl| ttl.min(page_ttl));
                match result.get("nextCursor") {
                    Some(next) if !next.is_null() && cursor.as_ref() != Some(next) => {
                        cursor = Some(next.clone());
                    }
                    _ => break,
                }
            }
            if let Some(meta) = &meta {
                let ttl = ttl.map(Duration::from_millis);
                listing.tools.modern_listed(meta, ttl);
            }
            listing.in_progress.send_modify(|n| *n -= 1);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools(config: &str) -> Tools {
        Tools::new(Arc::new(Config::from_toml(config).unwrap()))
    }

    #[test]
    fn read_only_and_idempotent_hints_pass_through() {
        let t = tools("");
        t.learn(&json!({"tools": [
            {"name": "get", "annotations": {"readOnlyHint": true}},
            {"name": "idem", "annotations": {"idempotentHint": true}},
            {"name": "plain"},
            {"name": "odd", "annotations": {"readOnlyHint": "yes"}},
        ]}));
        assert!(!t.is_write("get"));
        assert!(!t.is_write("idem"));
        for name in ["plain", "odd", "never_listed"] {
            assert!(t.is_write(name), "{name}");
        }
    }

    #[test]
    fn idempotent_hints_are_writes_when_configured_so_and_reads_still_pass() {
        let t = tools("[proxy]\nidempotent_hint = \"write\"");
        t.learn(&json!({"tools": [
            {"name": "get", "annotations": {"readOnlyHint": true, "idempotentHint": true}},
            {"name": "write_file", "annotations": {"idempotentHint": true}},
        ]}));
        assert!(!t.is_write("get"));
        assert!(t.is_write("write_file"));
        assert_eq!(t.repeat_argument("write_file").as_deref(), Some("repeat"));
        assert!(t.repeat_argument("get").is_none());
    }

    #[test]
    fn configuration_overrides_annotations_both_ways() {
        let t = tools("[tools.get]\nkind = \"write\"\n[tools.graph]\nkind = \"read\"");
        t.learn(&json!({"tools": [
            {"name": "get", "annotations": {"readOnlyHint": true}},
            {"name": "graph"},
        ]}));
        assert!(t.is_write("get"));
        assert!(!t.is_write("graph"));
    }

    #[test]
    fn a_modern_listing_happens_once_per_protocol_version() {
        let t = tools("");
        assert!(t.modern_meta().is_none());
        let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"});
        assert_eq!(t.modern_listing("2026-07-28", &meta), Some(meta.clone()));
        assert_eq!(t.modern_listing("2026-07-28", &meta), None);
        assert_eq!(t.modern_meta(), Some(meta));
        let next = json!({"io.modelcontextprotocol/protocolVersion": "2027-01-01"});
        assert_eq!(t.modern_listing("2027-01-01", &next), Some(next.clone()));
        assert_eq!(t.modern_meta(), Some(next));
    }

    #[test]
    fn a_stale_modern_listing_is_listed_again_and_a_failed_one_is_not() {
        let t = tools("");
        let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"});
        assert!(t.modern_listing("2026-07-28", &meta).is_some());
        // In progress: no second listing.
        assert!(t.modern_listing("2026-07-28", &meta).is_none());
        t.modern_listed(&meta, Some(Duration::from_secs(3600)));
        assert!(t.modern_listing("2026-07-28", &meta).is_none());
        // Stale (forced: a fresh-until in the past).
        t.modern.lock().unwrap().as_mut().unwrap().fresh_until = Some(Instant::now());
        assert!(t.modern_listing("2026-07-28", &meta).is_some());
        t.modern_listed(&meta, None);
        assert!(t.modern_listing("2026-07-28", &meta).is_none());
        // A ttlMs of 0 is fresh for the minimum, a huge one for the maximum.
        let until = |ttl| {
            t.modern_listed(&meta, Some(ttl));
            t.modern
                .lock()
                .unwrap()
                .as_ref()
                .unwrap()
                .fresh_until
                .unwrap()
        };
        let left = |instant: Instant| instant.saturating_duration_since(Instant::now());
        let zero = left(until(Duration::ZERO));
        assert!(zero <= MIN_FRESH && zero > MIN_FRESH / 2, "{zero:?}");
        let huge = left(until(Duration::from_millis(u64::MAX)));
        assert!(huge <= MAX_FRESH && huge > MAX_FRESH / 2, "{huge:?}");
    }

    #[test]
    fn a_later_listing_updates_the_hint() {
        let t = tools("");
        t.learn(&json!({"tools": [{"name": "x", "annotations": {"readOnlyHint": true}}]}));
        assert!(!t.is_write("x"));
        t.learn(&json!({"tools": [{"name": "x", "annotations": {"readOnlyHint": false}}]}));
        assert!(t.is_write("x"));
    }
}
