//! The eviction check on connect. Every entry has an expiry (the lease, then the retention), so
//! under any `maxmemory-policy` but `noeviction` — `allkeys-*` and `volatile-*` alike — Redis
//! may delete a live entry when memory runs short, and a duplicate call then runs the tool
//! again. [`RedisStore::check_eviction`] refuses such a server unless the user accepted the risk.
//!
//! The policy is read from `INFO memory` (`maxmemory_policy`), not `CONFIG GET`: managed Redis
//! services (ElastiCache, MemoryDB, Azure Cache and others) disable or rename `CONFIG`, while
//! `INFO` answers there.

use ::redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use ::redis::{RedisError, Value};

use super::conn::RedisStore;
use super::error::{refused_setup, to_error};
use super::link::Conn;
use crate::{Error, Result};

/// The only policy under which Redis never deletes a key before it expires.
const SAFE_POLICY: &str = "noeviction";

/// What one node said about its policy.
enum Policy {
    Known(String),
    /// `INFO memory` was refused or did not report it.
    Unknown(String),
}

impl RedisStore {
    /// Reads `maxmemory-policy` on the server, or on every master of a cluster, and refuses
    /// ([`Error::Config`]) any node that may evict, or whose policy cannot be read, unless
    /// `allow` is set; then it logs a warning instead.
    pub(super) async fn check_eviction(&self, allow: bool) -> Result<()> {
        for node in self.scan_nodes().await? {
            let place = match &node {
                None => format!("Redis at {}", self.display),
                Some((host, port)) => {
                    format!("the Redis node {host}:{port} of {}", self.display)
                }
            };
            let policy = match self.info(&node, "memory").await {
                Ok(info) => match parse_policy(&info) {
                    Some(policy) => Policy::Known(policy),
                    None => Policy::Unknown("INFO memory does not report maxmemory_policy".into()),
                },
                Err(e) => {
                    // No password where one is needed: say so, not that INFO is refused.
                    if let Some(refused) = refused_setup(&e, &place) {
                        return Err(refused);
                    }
                    let error = to_error(e);
                    if error.is_retryable() {
                        return Err(error);
                    }
                    Policy::Unknown(format!("INFO memory failed: {}", error.report()))
                }
            };
            match (policy, allow) {
                (Policy::Known(policy), _) if policy == SAFE_POLICY => {}
                (Policy::Known(policy), false) => {
                    return Err(Error::Config(format!(
                        "{place} has maxmemory-policy {policy}: when its memory is full it evicts \
                         keys before they expire, toolonce's entries among them, and a duplicate \
                         call then runs the tool again. Set maxmemory-policy to {SAFE_POLICY} \
                         (`CONFIG SET maxmemory-policy {SAFE_POLICY}` plus redis.conf, or your \
                         provider's parameter group), or accept the risk with \
                         `allow_eviction=true` in the store URL \
                         (`RedisStoreBuilder::allow_eviction(true)` in code)"
                    )));
                }
                (Policy::Unknown(why), false) => {
                    return Err(Error::Config(format!(
                        "cannot read the maxmemory-policy of {place} ({why}), so toolonce cannot \
                         tell whether Redis may evict its entries (only {SAFE_POLICY} never \
                         does). Grant the user INFO, or accept the risk with \
                         `allow_eviction=true` in the store URL \
                         (`RedisStoreBuilder::allow_eviction(true)` in code)"
                    )));
                }
                (Policy::Known(policy), true) => {
                    tracing::warn!(
                        target: "toolonce",
                        node = %place,
                        maxmemory_policy = %policy,
                        "Redis may evict toolonce's entries when its memory is full, and a \
                         duplicate call would then run again; started anyway (allow_eviction)"
                    );
                }
                (Policy::Unknown(why), true) => {
                    tracing::warn!(
                        target: "toolonce",
                        node = %place,
                        reason = %why,
                        "cannot read Redis's maxmemory-policy; started anyway (allow_eviction)"
                    );
                }
            }
        }
        Ok(())
    }

    /// `INFO <section>` of the server, or of one node of a cluster.
    pub(super) async fn info(
        &self,
        node: &Option<(String, u16)>,
        section: &str,
    ) -> Result<String, RedisError> {
        let mut cmd = ::redis::cmd("INFO");
        cmd.arg(section);
        let reply: Value = match (&self.conn, node) {
            (Conn::Cluster(c), Some((host, port))) => {
                c.clone()
                    .route_command(
                        cmd,
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                            host: host.clone(),
                            port: *port,
                        }),
                    )
                    .await?
            }
            _ => cmd.query_async(&mut self.conn()).await?,
        };
        Ok(::redis::from_redis_value::<String>(reply)?)
    }
}

/// The `maxmemory_policy` field of an `INFO memory` reply.
fn parse_policy(info: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.strip_prefix("maxmemory_policy:"))
        .map(|policy| policy.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_is_read_from_an_info_reply() {
        let info = "# Memory\r\nused_memory:1\r\nmaxmemory_policy:allkeys-lru\r\nx:y\r\n";
        assert_eq!(parse_policy(info).as_deref(), Some("allkeys-lru"));
        assert_eq!(parse_policy("# Memory\r\nused_memory:1\r\n"), None);
    }
}
