//! The persistence check on connect: a server that keeps nothing on disk (no RDB snapshots,
//! `save ""`, and no append-only file, `appendonly no`) forgets every entry when it restarts,
//! and a duplicate call then runs the tool again. That is a legitimate choice (a cache-only
//! Redis with replicas, a test), so it is a one-line warning, never a refusal.
//!
//! Read from `INFO persistence` (`aof_enabled`, `rdb_changes_since_last_save` does not say
//! whether snapshots are configured, so `CONFIG GET save` is asked too): managed services that
//! refuse `CONFIG` get no warning rather than a wrong one.

use ::redis::Value;

use super::conn::RedisStore;
use crate::Result;

impl RedisStore {
    /// Warns once per node that keeps nothing on disk; never fails the connect over it (a
    /// server that cannot be asked is left alone: the eviction check already reached it).
    pub(super) async fn check_persistence(&self) -> Result<()> {
        for node in self.scan_nodes().await? {
            let Ok(info) = self.info(&node, "persistence").await else {
                continue;
            };
            if aof_enabled(&info) != Some(false) {
                continue;
            }
            // Only a single server or the master behind a Sentinel is asked for `save`: on a
            // cluster `CONFIG GET` would go to a random node.
            if node.is_some() {
                continue;
            }
            let reply: std::result::Result<Value, _> = ::redis::cmd("CONFIG")
                .arg("GET")
                .arg("save")
                .query_async(&mut self.conn())
                .await;
            if let Ok(reply) = reply
                && save_is_off(reply)
            {
                tracing::warn!(
                    target: "toolonce",
                    "Redis at {} keeps nothing on disk (save \"\" and appendonly no): a restart \
                     forgets every entry, and duplicates of those calls would run again",
                    self.display
                );
            }
        }
        Ok(())
    }
}

/// `aof_enabled` of an `INFO persistence` reply.
fn aof_enabled(info: &str) -> Option<bool> {
    info.lines()
        .find_map(|line| line.strip_prefix("aof_enabled:"))
        .map(|v| v.trim() == "1")
}

/// Whether a `CONFIG GET save` reply says no snapshots are taken (`save ""`).
fn save_is_off(reply: Value) -> bool {
    let values: Vec<String> = match ::redis::from_redis_value::<Vec<String>>(reply.clone()) {
        Ok(v) => v,
        // RESP3 answers a map.
        Err(_) => {
            match ::redis::from_redis_value::<std::collections::HashMap<String, String>>(reply) {
                Ok(m) => m.into_iter().flat_map(|(k, v)| [k, v]).collect(),
                Err(_) => return false,
            }
        }
    };
    matches!(values.as_slice(), [name, value] if name == "save" && value.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_without_snapshots_or_append_only_file_is_recognised() {
        assert_eq!(
            aof_enabled("# Persistence\r\naof_enabled:0\r\n"),
            Some(false)
        );
        assert_eq!(aof_enabled("aof_enabled:1\r\n"), Some(true));
        assert_eq!(aof_enabled("loading:0\r\n"), None);
        let reply = |v: &str| {
            Value::Array(vec![
                Value::BulkString(b"save".to_vec()),
                Value::BulkString(v.as_bytes().to_vec()),
            ])
        };
        assert!(save_is_off(reply("")));
        assert!(!save_is_off(reply("3600 1 300 100 60 10000")));
        assert!(!save_is_off(Value::Nil));
    }
}
