//! The raw floor: the minimal unsafe design on each store, reached the way the store reaches
//! its server (one file per store). [`open`] opens the store under test and its floor from the
//! URL; [`Kind`] says which store it is and runs the floor's side of a round.

use std::sync::Arc;

use anyhow::{Context, bail};
use toolonce::Store;
use toolonce::store::redact_url;

use super::workload::{RawTask, Workload};
use crate::exit;

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "sqlite")]
mod sqlite;

/// The store under test, with what the raw floor needs to reach it.
pub(super) enum Kind {
    Memory,
    #[cfg(feature = "sqlite")]
    Sqlite(sqlite::Raw),
    #[cfg(feature = "redis")]
    Redis(redis::Raw),
    #[cfg(feature = "postgres")]
    Postgres(Box<postgres::Raw>),
}

/// Opens the store of `url` for this run (its own prefix, table or file) and its raw floor.
pub(super) async fn open(url: &str, run_id: &str) -> anyhow::Result<(Arc<dyn Store>, Kind)> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(exit::with_code(
            exit::USAGE,
            anyhow::anyhow!(
                "store URL {:?} has no scheme: expected memory://, sqlite://PATH, redis://HOST or postgres://HOST",
                redact_url(url)
            ),
        ));
    };
    // Used only by the arms of the stores this build has.
    let _ = (rest, run_id);
    let opening = || format!("cannot open the store {}", redact_url(url));
    Ok(match scheme {
        "memory" => (Arc::new(toolonce::MemoryStore::new()), Kind::Memory),
        #[cfg(feature = "sqlite")]
        "sqlite" => {
            let (store, raw) = sqlite::open(rest, run_id).with_context(opening)?;
            (store, Kind::Sqlite(raw))
        }
        #[cfg(feature = "redis")]
        "redis" | "rediss" | "redis+cluster" | "rediss+cluster" => {
            let (store, raw) = redis::open(url, run_id).await.with_context(opening)?;
            (store, Kind::Redis(raw))
        }
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => {
            let (store, raw) = postgres::open(url, run_id).await.with_context(opening)?;
            (store, Kind::Postgres(Box::new(raw)))
        }
        _ => {
            // The library names the scheme it does not know, or the feature it lacks.
            toolonce::store::open(url).await.with_context(opening)?;
            bail!("the bench does not support the store {}", redact_url(url));
        }
    })
}

impl Kind {
    /// What the floor is, for the report's first line.
    pub(super) fn floor(&self) -> String {
        match self {
            Kind::Memory => "no raw floor".into(),
            #[cfg(feature = "sqlite")]
            Kind::Sqlite(_) => {
                "raw floor: INSERT … ON CONFLICT DO NOTHING + UPDATE, replay SELECT, own connections set up as the store's"
                    .into()
            }
            #[cfg(feature = "redis")]
            Kind::Redis(_) => "raw floor: SET NX PX + SET PX, replay GET".into(),
            #[cfg(feature = "postgres")]
            Kind::Postgres(raw) => format!(
                "raw floor: INSERT … ON CONFLICT DO NOTHING + UPDATE, replay SELECT, prepared, one connection per caller, {}",
                if raw.encrypted { "TLS" } else { "no TLS" }
            ),
        }
    }

    pub(super) fn has_raw(&self) -> bool {
        !matches!(self, Kind::Memory)
    }

    /// Writes the settled entry each of `concurrency` callers replays.
    pub(super) async fn prepare_replays(&self, concurrency: u64) -> anyhow::Result<()> {
        match self {
            Kind::Memory => Ok(()),
            #[cfg(feature = "sqlite")]
            Kind::Sqlite(raw) => raw.prepare_replays(concurrency),
            #[cfg(feature = "redis")]
            Kind::Redis(raw) => raw.prepare_replays(concurrency).await,
            #[cfg(feature = "postgres")]
            Kind::Postgres(raw) => raw.prepare_replays(concurrency).await,
        }
    }

    /// One caller of the floor's side of a round, spawned.
    pub(super) fn task(&self, workload: Workload, task: u64, ops: Vec<u64>) -> RawTask {
        match self {
            Kind::Memory => unreachable!("the memory store has no raw floor"),
            #[cfg(feature = "sqlite")]
            Kind::Sqlite(raw) => raw.task(workload, task, ops),
            #[cfg(feature = "redis")]
            Kind::Redis(raw) => raw.task(workload, task, ops),
            #[cfg(feature = "postgres")]
            Kind::Postgres(raw) => raw.task(workload, task, ops),
        }
    }

    /// The server's CPU time so far, where the bench can read it (a single Redis server).
    pub(super) async fn server_us(&self) -> anyhow::Result<Option<f64>> {
        match self {
            #[cfg(feature = "redis")]
            Kind::Redis(raw) => raw.server_us().await,
            _ => Ok(None),
        }
    }

    /// Whether the store's entries outlive [`clean_up`](Self::clean_up) and must be deleted
    /// one by one: on Redis they share the server's keyspace, while the other stores' go with
    /// the run's own table or file.
    pub(super) fn entries_need_deleting(&self) -> bool {
        match self {
            #[cfg(feature = "redis")]
            Kind::Redis(_) => true,
            _ => false,
        }
    }

    /// Removes the floor's data (on SQLite and PostgreSQL, with the store's file or table);
    /// the floor's Redis keys are numbered below `next_op` (first-time) and `most_callers`
    /// (replayed).
    pub(super) async fn clean_up(&self, next_op: u64, most_callers: u64) -> anyhow::Result<()> {
        let _ = (next_op, most_callers);
        match self {
            Kind::Memory => Ok(()),
            #[cfg(feature = "sqlite")]
            Kind::Sqlite(raw) => raw.clean_up(),
            #[cfg(feature = "redis")]
            Kind::Redis(raw) => raw.clean_up(next_op, most_callers).await,
            #[cfg(feature = "postgres")]
            Kind::Postgres(raw) => raw.clean_up().await,
        }
    }

    /// The bytes the store's data takes, where the bench can read them (`--scale`): SQLite's
    /// pages in use, PostgreSQL's table with its indexes, a single Redis server's memory (the
    /// whole server's: the run's share is the difference it makes).
    pub(super) async fn bytes_used(&self) -> anyhow::Result<Option<u64>> {
        match self {
            Kind::Memory => Ok(None),
            #[cfg(feature = "sqlite")]
            Kind::Sqlite(raw) => raw.bytes_used().map(Some),
            #[cfg(feature = "redis")]
            Kind::Redis(raw) => raw.used_memory().await,
            #[cfg(feature = "postgres")]
            Kind::Postgres(raw) => raw.bytes_used().await.map(Some),
        }
    }

    /// Where what the run wrote is, for the message of a run that could not remove it.
    pub(super) fn whereabouts(&self) -> String {
        match self {
            Kind::Memory => "this process's memory, gone with it".into(),
            #[cfg(feature = "sqlite")]
            Kind::Sqlite(raw) => raw.whereabouts(),
            #[cfg(feature = "redis")]
            Kind::Redis(raw) => raw.whereabouts(),
            #[cfg(feature = "postgres")]
            Kind::Postgres(raw) => raw.whereabouts(),
        }
    }

    /// Refuses `--scale` where its clean-up cannot find every key it wrote: on Redis Cluster
    /// (its keys are deleted by walking the run's prefix, on one server).
    pub(super) fn check_scalable(&self) -> anyhow::Result<()> {
        #[cfg(feature = "redis")]
        if let Kind::Redis(raw) = self
            && raw.cluster
        {
            bail!("bench --scale does not support Redis Cluster: measure one server");
        }
        Ok(())
    }

    /// Removes every entry of the run, however many (`--scale`, which keeps no list of them):
    /// on Redis by walking the run's prefix; elsewhere they go with the run's file or table.
    pub(super) async fn delete_run_entries(&self) -> anyhow::Result<()> {
        match self {
            #[cfg(feature = "redis")]
            Kind::Redis(raw) => raw.delete_run_keys().await.map(|_| ()),
            _ => Ok(()),
        }
    }
}
