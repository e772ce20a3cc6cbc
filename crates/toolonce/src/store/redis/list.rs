//! Listing: the walk of `SCAN` over every master, and the cursor that lets a page resume it
//! (the node, its `SCAN` cursor, and the keys the previous page had no room for).

use ::redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use ::redis::{RedisError, Value};

use crate::key::OperationKey;
use crate::{Error, Result};

use super::conn::{RedisStore, cluster_masters};
use super::error::to_error;
use super::link::Conn;

/// How many `SCAN` calls one [`Store::list`] call makes at most.
pub(super) const MAX_SCANS_PER_PAGE: usize = 64;

/// Where a listing stands: the node being scanned (an index into the sorted masters; the
/// number of masters once all are done), its `SCAN` cursor (0 = not started), and the keys
/// already found that the previous page had no room for.
#[derive(Default)]
pub(super) struct ListCursor {
    pub(super) node: usize,
    pub(super) scan: u64,
    pub(super) pending: Vec<OperationKey>,
}

impl ListCursor {
    /// `NODE/SCAN/HEX,HEX,…` where NODE is `host:port` on a cluster, `0` on a single server,
    /// `-` when every node is scanned; HEX are the pending keys without their `idem:`.
    pub(super) fn encode(&self, nodes: &[Option<(String, u16)>]) -> String {
        let node = match nodes.get(self.node) {
            None => "-".to_owned(),
            Some(None) => "0".to_owned(),
            Some(Some((host, port))) => format!("{host}:{port}"),
        };
        let pending: Vec<&str> = self
            .pending
            .iter()
            .map(|k| k.as_str().trim_start_matches("idem:"))
            .collect();
        format!("{node}/{}/{}", self.scan, pending.join(","))
    }

    pub(super) fn parse(text: &str, nodes: &[Option<(String, u16)>]) -> Result<ListCursor> {
        let invalid = || Error::Config(format!("invalid list cursor {text:?}"));
        let mut parts = text.splitn(3, '/');
        let (Some(node), Some(scan), Some(pending)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid());
        };
        let scan: u64 = scan.parse().map_err(|_| invalid())?;
        let node = match node {
            "-" => nodes.len(),
            "0" if nodes.first() == Some(&None) => 0,
            addr => {
                // A cluster master by address. If it is gone (the topology changed), go on with
                // the next one in address order, from its start.
                let (host, port) = addr.rsplit_once(':').ok_or_else(invalid)?;
                let port: u16 = port.parse().map_err(|_| invalid())?;
                let wanted = Some((host.to_owned(), port));
                match nodes.iter().position(|n| *n == wanted) {
                    Some(i) => i,
                    None => {
                        let next = nodes
                            .iter()
                            .position(|n| *n > wanted)
                            .unwrap_or(nodes.len());
                        return Ok(ListCursor {
                            node: next,
                            scan: 0,
                            pending: parse_pending(pending).ok_or_else(invalid)?,
                        });
                    }
                }
            }
        };
        Ok(ListCursor {
            node,
            scan,
            pending: parse_pending(pending).ok_or_else(invalid)?,
        })
    }
}

pub(super) fn parse_pending(text: &str) -> Option<Vec<OperationKey>> {
    text.split(',')
        .filter(|h| !h.is_empty())
        .map(|h| format!("idem:{h}").parse().ok())
        .collect()
}

/// Escapes the glob characters of `SCAN … MATCH` in a literal prefix.
pub(super) fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl RedisStore {
    /// The masters to scan, in a stable order: `[None]` for a single server.
    pub(super) async fn scan_nodes(&self) -> Result<Vec<Option<(String, u16)>>> {
        match &self.conn {
            Conn::Single(_) | Conn::Sentinel(_) => Ok(vec![None]),
            Conn::Cluster(_) => {
                let reply: Value = ::redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query_async(&mut self.conn())
                    .await
                    .map_err(to_error)?;
                let mut masters = cluster_masters(reply)?;
                masters.sort();
                masters.dedup();
                Ok(masters.into_iter().map(Some).collect())
            }
        }
    }

    /// One `SCAN` step on `node`: the next cursor and the keys found.
    pub(super) async fn scan(
        &self,
        node: &Option<(String, u16)>,
        cursor: u64,
        pattern: &str,
        count: usize,
    ) -> Result<(u64, Vec<String>)> {
        let mut cmd = ::redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(count);
        let reply = match (&self.conn, node) {
            (Conn::Cluster(c), Some((host, port))) => c
                .clone()
                .route_command(
                    cmd,
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                        host: host.clone(),
                        port: *port,
                    }),
                )
                .await
                .map_err(to_error)?,
            _ => cmd.query_async(&mut self.conn()).await.map_err(to_error)?,
        };
        ::redis::from_redis_value::<(u64, Vec<String>)>(reply)
            .map_err(|e| Error::store(RedisError::from(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> OperationKey {
        "idem:0123456789abcdef0123456789abcdef".parse().unwrap()
    }

    #[test]
    fn glob_characters_of_a_prefix_are_escaped() {
        assert_eq!(glob_escape(r"a*b?[c]\"), r"a\*b\?\[c\]\\");
    }

    #[test]
    fn a_list_cursor_survives_encoding() {
        let nodes = vec![
            Some(("127.0.0.1".to_owned(), 7000)),
            Some(("127.0.0.1".to_owned(), 7001)),
        ];
        let c = ListCursor {
            node: 1,
            scan: 42,
            pending: vec![key()],
        };
        let text = c.encode(&nodes);
        assert_eq!(text, "127.0.0.1:7001/42/0123456789abcdef0123456789abcdef");
        let back = ListCursor::parse(&text, &nodes).unwrap();
        assert_eq!((back.node, back.scan, back.pending), (1, 42, vec![key()]));
        // A master that left: continue with the next one in address order.
        let fewer = vec![nodes[0].clone()];
        assert_eq!(ListCursor::parse(&text, &fewer).unwrap().node, 1);
        assert!(ListCursor::parse("nonsense", &nodes).is_err());
        assert!(ListCursor::parse("0/1/zz", &[None]).is_err());
    }
}
