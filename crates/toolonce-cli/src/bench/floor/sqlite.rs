//! SQLite: the store on a file of the bench's own beside the given one (same directory, so
//! same disk), and the raw floor on its own connection to that file with the store's
//! settings (WAL, `synchronous=NORMAL`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use toolonce::Store;
use toolonce::store::sqlite::SqliteStore;

use crate::bench::workload::{RawTask, Workload, raw_done, raw_running};

/// The SQLite floor: the run's own database file and the floor's connection to it.
pub(crate) struct Raw {
    path: PathBuf,
    conn: Arc<Mutex<rusqlite::Connection>>,
}

pub(super) fn open(rest: &str, run_id: &str) -> anyhow::Result<(Arc<dyn Store>, Raw)> {
    let given = Path::new(rest);
    if rest.is_empty() || rest == ":memory:" {
        anyhow::bail!("the bench needs a SQLite file path (sqlite://PATH)");
    }
    if given.is_dir() {
        return Err(crate::exit::with_code(
            crate::exit::UNAVAILABLE,
            anyhow::anyhow!(
                "{} is a directory: SQLite cannot open it as a database file",
                given.display()
            ),
        ));
    }
    let dir = given
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let path = dir.join(format!(".toolonce-bench-{run_id}.db"));
    let store = SqliteStore::open(&path)?;
    let conn = rusqlite::Connection::open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS bench_raw (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires INTEGER NOT NULL)",
    )?;
    Ok((
        Arc::new(store),
        Raw {
            path,
            conn: Arc::new(Mutex::new(conn)),
        },
    ))
}

impl Raw {
    pub(super) fn prepare_replays(&self, concurrency: u64) -> anyhow::Result<()> {
        let conn = self.conn.lock().expect("the raw connection");
        for task in 0..concurrency {
            conn.execute(
                "INSERT OR REPLACE INTO bench_raw (key, value, expires) VALUES (?1, ?2, ?3)",
                rusqlite::params![format!("replay:{task}"), raw_done(task), i64::MAX],
            )?;
        }
        Ok(())
    }

    pub(super) fn task(&self, workload: Workload, task: u64, ops: Vec<u64>) -> RawTask {
        let conn = Arc::clone(&self.conn);
        // Inline on the caller's task, as the store's own inline reads and writes are.
        tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(ops.len());
            let running = raw_running();
            let replay_key = format!("replay:{task}");
            for n in ops {
                let start = Instant::now();
                {
                    let conn = conn.lock().expect("the raw connection");
                    match workload {
                        Workload::FirstTime => {
                            let key = format!("first:{n}");
                            let won = conn
                                .prepare_cached("INSERT INTO bench_raw (key, value, expires) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING")?
                                .execute(rusqlite::params![key, running, 1_764_400_060_000i64])?;
                            anyhow::ensure!(won == 1, "raw key {key} existed");
                            conn.prepare_cached(
                                "UPDATE bench_raw SET value = ?2, expires = ?3 WHERE key = ?1",
                            )?
                            .execute(rusqlite::params![
                                key,
                                raw_done(n),
                                1_764_400_120_000i64
                            ])?;
                        }
                        Workload::Replay => {
                            let value: String = conn
                                .prepare_cached("SELECT value FROM bench_raw WHERE key = ?1")?
                                .query_row([&replay_key], |r| r.get(0))?;
                            std::hint::black_box(value);
                        }
                    }
                }
                latencies.push(start.elapsed());
                tokio::task::yield_now().await;
            }
            Ok((latencies, Vec::new()))
        })
    }

    /// Deletes the bench's file and its WAL and shared-memory files.
    pub(super) fn clean_up(&self) -> anyhow::Result<()> {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut name = self.path.clone().into_os_string();
            name.push(suffix);
            match std::fs::remove_file(&name) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("cannot remove {}", Path::new(&name).display()));
                }
            }
        }
        Ok(())
    }
}
