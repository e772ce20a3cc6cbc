//! SQLite: the store on a file of the bench's own beside the given one (same directory, so
//! same disk), and the raw floor on connections of its own to that file, set up as the store
//! sets up its own: WAL, `synchronous=NORMAL`, writes inline on one connection that never runs
//! an automatic checkpoint (a thread of the floor's runs one every [`CHECKPOINT_EVERY`]
//! commits, as the store's connection thread does: a passive one, then a restart of the log
//! with the writer held, without which a log written without pause never restarts and grows
//! by every write), and reads inline on
//! the first idle connection of a pool as large as the store's. A floor set up otherwise
//! measured slower than toolonce (its writes paid SQLite's automatic checkpoints inline, its
//! replays queued for one connection), which is not a floor.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Instant;

use anyhow::Context;
use toolonce::Store;
use toolonce::store::sqlite::SqliteStore;

use crate::bench::workload::{RawTask, Workload, raw_done, raw_running};

/// Commits between two passive checkpoints: the store's own figure (its inline writer's).
const CHECKPOINT_EVERY: u32 = 256;
/// Reader connections: as many as the store opens by default (`SqliteOptions::readers`).
const READERS: usize = 2;

/// The SQLite floor: the run's own database file and the floor's connections to it.
pub(crate) struct Raw {
    path: PathBuf,
    conns: Arc<Conns>,
}

struct Conns {
    writer: Arc<Mutex<rusqlite::Connection>>,
    readers: Box<[Mutex<rusqlite::Connection>]>,
    commits: AtomicU32,
    /// Asks the checkpoint thread for a passive checkpoint; the thread ends when this drops.
    checkpoint: mpsc::Sender<()>,
}

impl Conns {
    /// The first idle reader, or the first one once it is free.
    fn reader(&self) -> MutexGuard<'_, rusqlite::Connection> {
        self.readers
            .iter()
            .find_map(|m| match m.try_lock() {
                Ok(guard) => Some(guard),
                Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            })
            .unwrap_or_else(|| {
                self.readers[0]
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
            })
    }

    fn committed(&self) {
        let n = self.commits.fetch_add(1, Ordering::Relaxed);
        if n % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1 {
            let _ = self.checkpoint.send(());
        }
    }
}

fn connect(path: &Path) -> anyhow::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
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
    let writer = connect(&path)?;
    writer.pragma_update(None, "journal_mode", "WAL")?;
    writer.pragma_update(None, "wal_autocheckpoint", 0)?;
    writer.execute_batch(
        "CREATE TABLE IF NOT EXISTS bench_raw (key TEXT PRIMARY KEY, value TEXT NOT NULL, expires INTEGER NOT NULL)",
    )?;
    let readers = (0..READERS)
        .map(|_| {
            let conn = connect(&path)?;
            conn.pragma_update(None, "query_only", true)?;
            Ok(Mutex::new(conn))
        })
        .collect::<anyhow::Result<Box<[_]>>>()?;
    let checkpointer = connect(&path)?;
    let writer = Arc::new(Mutex::new(writer));
    let held = Arc::clone(&writer);
    let (checkpoint, asked) = mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("bench-floor-checkpoint".into())
        .spawn(move || {
            for () in asked {
                let _ = checkpointer.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
                let _writer = held.lock().unwrap_or_else(PoisonError::into_inner);
                let _ = checkpointer.busy_timeout(std::time::Duration::from_millis(20));
                let _ = checkpointer.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()));
            }
        })
        .context("cannot start the floor's checkpoint thread")?;
    Ok((
        Arc::new(store),
        Raw {
            path,
            conns: Arc::new(Conns {
                writer,
                readers,
                commits: AtomicU32::new(0),
                checkpoint,
            }),
        },
    ))
}

impl Raw {
    pub(super) fn prepare_replays(&self, concurrency: u64) -> anyhow::Result<()> {
        let conn = self.conns.writer.lock().expect("the raw connection");
        for task in 0..concurrency {
            conn.execute(
                "INSERT OR REPLACE INTO bench_raw (key, value, expires) VALUES (?1, ?2, ?3)",
                rusqlite::params![format!("replay:{task}"), raw_done(task), i64::MAX],
            )?;
        }
        Ok(())
    }

    pub(super) fn task(&self, workload: Workload, task: u64, ops: Vec<u64>) -> RawTask {
        let conns = Arc::clone(&self.conns);
        // Inline on the caller's task, as the store's own inline reads and writes are. Between
        // operations the task spends a unit of Tokio's cooperative budget, as toolonce's side
        // does in the runtime's resources it touches: it yields once the budget runs out (every
        // 128 units), so eight callers on two workers take turns as toolonce's do. A yield per
        // operation cost the floor a trip through the scheduler each time (its replays used
        // more client CPU than toolonce's); none at all left a caller running all its
        // operations in a row, and the round's time to the worker given the most callers.
        tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(ops.len());
            let running = raw_running();
            let replay_key = format!("replay:{task}");
            for n in ops {
                let start = Instant::now();
                match workload {
                    Workload::FirstTime => {
                        let key = format!("first:{n}");
                        {
                            let conn = conns.writer.lock().expect("the raw connection");
                            let won = conn
                                .prepare_cached("INSERT INTO bench_raw (key, value, expires) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING")?
                                .execute(rusqlite::params![key, running, 1_764_400_060_000i64])?;
                            anyhow::ensure!(won == 1, "raw key {key} existed");
                        }
                        conns.committed();
                        {
                            let conn = conns.writer.lock().expect("the raw connection");
                            conn.prepare_cached(
                                "UPDATE bench_raw SET value = ?2, expires = ?3 WHERE key = ?1",
                            )?
                            .execute(rusqlite::params![
                                key,
                                raw_done(n),
                                1_764_400_120_000i64
                            ])?;
                        }
                        conns.committed();
                    }
                    Workload::Replay => {
                        let value: String = conns
                            .reader()
                            .prepare_cached("SELECT value FROM bench_raw WHERE key = ?1")?
                            .query_row([&replay_key], |r| r.get(0))?;
                        std::hint::black_box(value);
                    }
                }
                latencies.push(start.elapsed());
                tokio::task::consume_budget().await;
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

    /// Where the run's file is, for a message that a run could not remove it.
    pub(super) fn whereabouts(&self) -> String {
        format!("the file {} (and its -wal and -shm)", self.path.display())
    }

    /// The bytes of the database's pages in use (`page_count` less `freelist_count`, times
    /// `page_size`), as a reader sees them: committed pages still in the WAL included, free
    /// pages a purge left for reuse not.
    pub(super) fn bytes_used(&self) -> anyhow::Result<u64> {
        let conn = self.conns.reader();
        let pragma = |name: &str| -> anyhow::Result<u64> {
            let n: i64 = conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))?;
            Ok(n.max(0).unsigned_abs())
        };
        Ok((pragma("page_count")? - pragma("freelist_count")?) * pragma("page_size")?)
    }
}
