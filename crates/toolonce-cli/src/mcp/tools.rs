//! Which tools pass through: learnt from the server's `tools/list` answers (the proxy's own
//! listing at start and after `notifications/tools/list_changed`, and the client's as they pass
//! by), overridden by the configuration.
//!
//! A tool marked `readOnlyHint: true` or `idempotentHint: true` passes through: running it
//! again is safe, while replaying a stale answer is not (write v1, v2, v1 again: a replay of
//! the first answer would say "written" and leave v2 in place). Any other tool, and one the
//! server has not listed, is a write, because wrongly deduplicating a read costs a stale answer
//! at worst, while wrongly passing a write through can perform it twice.

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
}

impl Tools {
    pub(crate) fn new(config: Arc<Config>) -> Self {
        Tools {
            config,
            read_only: Mutex::new(HashMap::new()),
        }
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
    fn a_later_listing_updates_the_hint() {
        let t = tools("");
        t.learn(&json!({"tools": [{"name": "x", "annotations": {"readOnlyHint": true}}]}));
        assert!(!t.is_write("x"));
        t.learn(&json!({"tools": [{"name": "x", "annotations": {"readOnlyHint": false}}]}));
        assert!(t.is_write("x"));
    }
}
