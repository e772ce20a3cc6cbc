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
    prefix: String,
    cluster: bool,
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
}
