//! Redis: the store under a key prefix of the run's own, the raw floor on a connection to the
//! same server made by the store's own `connect_client` (the same kind, a `ConnectionManager`
//! or a cluster connection, with the same URL handling, TLS and settings).

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use redis::AsyncCommands;
use toolonce::Store;
use toolonce::store::redis::{self as redis_store, Conn, RedisStore};

use crate::bench::workload::{RawTask, Workload, raw_done, raw_running};

/// The Redis floor: its connection and the key prefix of its keys.
pub(crate) struct Raw {
    conn: Conn,
    /// The run's own prefix: the store's keys and the floor's are all under it.
    run_prefix: String,
    prefix: String,
    pub(super) cluster: bool,
}

pub(super) async fn open(url: &str, run_id: &str) -> anyhow::Result<(Arc<dyn Store>, Raw)> {
    let prefix = format!("toolonce-bench:{run_id}:");
    let store = RedisStore::builder(url)
        .prefix(prefix.clone())
        .connect()
        .await?;
    let conn = redis_store::connect_client(url).await?;
    let cluster = matches!(conn, Conn::Cluster(_));
    Ok((
        Arc::new(store),
        Raw {
            conn,
            prefix: format!("{prefix}raw:"),
            run_prefix: prefix,
            cluster,
        },
    ))
}

impl Raw {
    fn key(prefix: &str, name: &str) -> String {
        format!("{prefix}{name}")
    }

    pub(super) async fn prepare_replays(&self, concurrency: u64) -> anyhow::Result<()> {
        let mut conn = self.conn.clone();
        for task in 0..concurrency {
            let _: () = conn
                .pset_ex(
                    Self::key(&self.prefix, &format!("replay:{task}")),
                    raw_done(task),
                    crate::bench::args::RETENTION.as_millis() as u64,
                )
                .await?;
        }
        Ok(())
    }

    pub(super) fn task(&self, workload: Workload, task: u64, ops: Vec<u64>) -> RawTask {
        let mut conn = self.conn.clone();
        let prefix = self.prefix.clone();
        let lease = crate::bench::args::LEASE.as_millis() as u64;
        let retention = crate::bench::args::RETENTION.as_millis() as u64;
        tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(ops.len());
            let running = raw_running();
            let replay_key = Self::key(&prefix, &format!("replay:{task}"));
            for n in ops {
                match workload {
                    Workload::FirstTime => {
                        let key = Self::key(&prefix, &format!("first:{n}"));
                        let done = raw_done(n);
                        let start = Instant::now();
                        let won: Option<String> = redis::cmd("SET")
                            .arg(&key)
                            .arg(&running)
                            .arg("NX")
                            .arg("PX")
                            .arg(lease)
                            .query_async(&mut conn)
                            .await?;
                        anyhow::ensure!(won.is_some(), "raw key {key} existed");
                        let () = redis::cmd("SET")
                            .arg(&key)
                            .arg(&done)
                            .arg("PX")
                            .arg(retention)
                            .query_async(&mut conn)
                            .await?;
                        latencies.push(start.elapsed());
                    }
                    Workload::Replay => {
                        let start = Instant::now();
                        let value: Option<String> = conn.get(&replay_key).await?;
                        latencies.push(start.elapsed());
                        anyhow::ensure!(value.is_some(), "raw key {replay_key} missing");
                    }
                }
            }
            Ok((latencies, Vec::new()))
        })
    }

    /// The server's CPU time so far (user + system, `INFO cpu`), in microseconds: what
    /// caps how many operations one Redis serves. (`INFO commandstats` would count a
    /// script's inner commands twice, in the script's time and in their own.) Single
    /// servers only: a cluster spreads the work over its masters.
    pub(super) async fn server_us(&self) -> anyhow::Result<Option<f64>> {
        if self.cluster {
            return Ok(None);
        }
        let mut conn = self.conn.clone();
        let info: String = redis::cmd("INFO").arg("cpu").query_async(&mut conn).await?;
        let seconds: f64 = info
            .lines()
            .filter_map(|l| {
                let (name, value) = l.split_once(':')?;
                matches!(name, "used_cpu_sys" | "used_cpu_user")
                    .then(|| value.trim().parse::<f64>().ok())?
            })
            .sum();
        Ok(Some(seconds * 1e6))
    }

    /// Deletes the raw floor's keys: the run's first-time keys (numbered below
    /// `next_op`) and replayed keys (below `callers`), all under the run's own prefix.
    pub(super) async fn clean_up(&self, next_op: u64, callers: u64) -> anyhow::Result<()> {
        use futures_util::StreamExt;
        let keys = (0..next_op)
            .map(|n| Self::key(&self.prefix, &format!("first:{n}")))
            .chain((0..callers).map(|t| Self::key(&self.prefix, &format!("replay:{t}"))));
        let results: Vec<redis::RedisResult<u64>> = futures_util::stream::iter(keys)
            .map(|key| {
                let mut conn = self.conn.clone();
                async move { conn.del(key).await }
            })
            .buffer_unordered(32)
            .collect()
            .await;
        for r in results {
            r.context("deleting a raw floor key")?;
        }
        Ok(())
    }

    /// Where the run's keys are, for a message that a run could not remove them.
    pub(super) fn whereabouts(&self) -> String {
        format!(
            "keys {}* on the server (they expire within {} s)",
            self.run_prefix,
            crate::bench::args::RETENTION.as_secs()
        )
    }

    /// The server's memory in use (`INFO memory`, `used_memory`), in bytes; a single server
    /// only (a cluster's is spread over its masters).
    pub(super) async fn used_memory(&self) -> anyhow::Result<Option<u64>> {
        if self.cluster {
            return Ok(None);
        }
        let mut conn = self.conn.clone();
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut conn)
            .await?;
        Ok(info.lines().find_map(|l| {
            l.strip_prefix("used_memory:")
                .and_then(|v| v.trim().parse().ok())
        }))
    }

    /// Deletes every key under the run's prefix (the store's entries and the floor's keys),
    /// walking the keyspace with `SCAN` and unlinking each batch found: `--scale` writes too
    /// many keys to keep their names. A single server only.
    pub(super) async fn delete_run_keys(&self) -> anyhow::Result<u64> {
        anyhow::ensure!(!self.cluster, "the bench cannot walk a cluster's keys");
        let mut conn = self.conn.clone();
        let pattern = format!("{}*", self.run_prefix.replace('*', "\\*"));
        let (mut cursor, mut deleted) = (0u64, 0u64);
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .context("walking the run's keys")?;
            if !keys.is_empty() {
                let n: u64 = redis::cmd("UNLINK")
                    .arg(&keys)
                    .query_async(&mut conn)
                    .await
                    .context("deleting the run's keys")?;
                deleted += n;
            }
            if next == 0 {
                return Ok(deleted);
            }
            cursor = next;
        }
    }
}
