//! Which tools pass through: learnt from the server's `tools/list` answers (the proxy's own
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
//! (see [`Tools::modern_listing`]); the call waits for the listing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::config::{Config, Kind};

/// The classification of the server's tools.
#[derive(Debug)]
pub(crate) struct Tools {
    config: Arc<Config>,
    /// Whether a tool passes through (`readOnlyHint` or `idempotentHint`), as last listed. A std mutex: held for a lookup or an
    /// insert, never across an `.await`.
    read_only: Mutex<HashMap<String, bool>>,
    /// The protocol version (2026-07-28 or later) the proxy last listed for, and the `_meta`
    /// its own requests carry for it.
    modern: Mutex<Option<(String, Value)>>,
}

impl Tools {
    pub(crate) fn new(config: Arc<Config>) -> Self {
        Tools {
            config,
            read_only: Mutex::new(HashMap::new()),
            modern: Mutex::new(None),
        }
    }

    /// For a call of protocol 2026-07-28 or later (`version`, and the `_meta` for the proxy's
    /// own requests): the `_meta` to list the tools with, if the proxy has not listed for this
    /// version yet. Remembered at once, so one listing serves every call that follows.
    pub(crate) fn modern_listing(&self, version: &str, meta: &Value) -> Option<Value> {
        let mut modern = self.modern.lock().unwrap_or_else(|p| p.into_inner());
        if modern.as_ref().is_some_and(|(listed, _)| listed == version) {
            return None;
        }
        *modern = Some((version.to_owned(), meta.clone()));
        Some(meta.clone())
    }

    /// The `_meta` of the last protocol 2026-07-28 (or later) listing, to list again with when
    /// the server says its tools changed.
    pub(crate) fn modern_meta(&self) -> Option<Value> {
        self.modern
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(_, meta)| meta.clone())
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
            let (reads, idempotent) = (hint("readOnlyHint"), hint("idempotentHint"));
            let kind = match self.config.kind(name) {
                Some(Kind::Read) => "read (configured)",
                Some(Kind::Write) => "write (configured)",
                None if reads => "read (readOnlyHint)",
                None if idempotent => "passes through (idempotentHint)",
                None => "write",
            };
            let hint = reads || idempotent;
            tracing::debug!(target: "toolonce::mcp", tool = name, kind, "tool listed");
            read_only.insert(name.to_owned(), hint);
        }
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
    fn a_later_listing_updates_the_hint() {
        let t = tools("");
        t.learn(&json!({"tools": [{"name": "x", "annotations": {"readOnlyHint": true}}]}));
        assert!(!t.is_write("x"));
        t.learn(&json!({"tools": [{"name": "x", "annotations": {"readOnlyHint": false}}]}));
        assert!(t.is_write("x"));
    }
}
