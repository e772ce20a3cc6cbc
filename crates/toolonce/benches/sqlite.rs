//! The SQLite store through the layer, beside the same SQL statements issued directly with
//! rusqlite, in the same run, on files in one temporary directory with the same settings (WAL,
//! `synchronous=NORMAL`, 5 s busy timeout):
//!
//! - **first-time write**: `Layer::run` with a trivial tool on a fresh key (the replay check, the
//!   claim, the tool, the completion), beside the raw replay-check `SELECT`, then `BEGIN
//!   IMMEDIATE` + claim `INSERT … ON CONFLICT` + `COMMIT`, then `BEGIN IMMEDIATE` + `UPDATE` +
//!   `COMMIT` on one connection;
//! - **replay**: `Layer::run` on a completed key, beside the raw `SELECT` that finds the live
//!   row.
//!
//! After criterion's groups it times both sides again in alternating rounds (this kind of
//! machine is noisy) and prints `ratio (raw time / toolonce time)` for each.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use rusqlite::{Connection, params};
use serde_json::json;
use toolonce::key::{Derived, Fingerprint};
use toolonce::store::sqlite::{SqliteOptions, SqliteStore, sql};
use toolonce::{Layer, OperationKey, Outcome, WriteOptions};

const LEASE: Duration = Duration::from_secs(60);
const RETENTION: Duration = Duration::from_secs(24 * 60 * 60);
const RESULT: &str = r#"{"ok":true}"#;
const FINGERPRINT: &str = "5f6a0b2c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a";

fn fingerprint() -> Fingerprint {
    FINGERPRINT.parse().unwrap()
}

/// A fresh operation: keys from a counter, unique per process run and side.
fn op(side: u8, n: u64) -> Derived {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let key: OperationKey = format!("idem:{side:02x}{:014x}{n:016x}", nanos >> 8)
        .parse()
        .unwrap();
    Derived {
        key,
        fingerprint: fingerprint(),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The toolonce side: a layer on a store with the default options (or `options`).
struct Ours {
    layer: Layer,
    options: WriteOptions,
    next: AtomicU64,
    done: Derived,
}

impl Ours {
    async fn new(path: &Path, store_options: SqliteOptions) -> Ours {
        let layer = Layer::new(Arc::new(store_options.open(path).unwrap()));
        let options = WriteOptions::new().lease(LEASE).retention(RETENTION);
        let done = op(0xff, 0);
        let ours = Ours {
            layer,
            options,
            next: AtomicU64::new(0),
            done: done.clone(),
        };
        assert_eq!(ours.write(&done).await, Outcome::Executed);
        ours
    }

    async fn write(&self, op: &Derived) -> Outcome {
        self.layer
            .run("bench", op, &self.options, |_ctx| async {
                Ok(json!({"ok": true}))
            })
            .await
            .outcome
    }

    async fn first_write(&self) {
        let op = op(1, self.next.fetch_add(1, Ordering::Relaxed));
        let outcome = self.write(&op).await;
        debug_assert_eq!(outcome, Outcome::Executed);
        black_box(outcome);
    }

    async fn replay(&self) {
        let outcome = self.write(&self.done).await;
        debug_assert_eq!(outcome, Outcome::Replayed);
        black_box(outcome);
    }
}

/// The raw side: one rusqlite connection with the store's settings, running the store's
/// statements in the store's transaction pattern.
struct Raw {
    conn: Connection,
    next: AtomicU64,
    done: String,
}

/// Runs [`sql::SELECT_LIVE`] and reads every column of its row in place (text checked as UTF-8,
/// nothing copied or decoded): the least any caller of the statement does. Whether there was a
/// row, and its state.
fn select_live(conn: &Connection, key: &str) -> Option<bool> {
    let mut stmt = conn.prepare_cached(sql::SELECT_LIVE).unwrap();
    let mut rows = stmt.query(params![key, now_ms()]).unwrap();
    let row = rows.next().unwrap()?;
    for column in [0, 1, 2, 3, 8, 9, 10, 11] {
        black_box(row.get_ref(column).unwrap().as_str_or_null().unwrap());
    }
    for column in [4, 5, 6, 7, 12, 13] {
        black_box(row.get::<_, Option<i64>>(column).unwrap());
    }
    Some(row.get_ref(1).unwrap().as_str().unwrap() == "done")
}

impl Raw {
    fn new(path: &Path) -> Raw {
        // The store creates the schema and switches the file to WAL; then the same
        // per-connection settings as the store's connections.
        drop(SqliteStore::open(path).unwrap());
        let conn = Connection::open(path).unwrap();
        conn.busy_timeout(Duration::from_secs(5)).unwrap();
        conn.pragma_update(None, "synchronous", "NORMAL").unwrap();
        conn.set_prepared_statement_cache_capacity(32);
        let mode: String = conn
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let raw = Raw {
            conn,
            next: AtomicU64::new(0),
            done: op(0xfe, 0).key.as_str().to_owned(),
        };
        let done = raw.done.clone();
        raw.write(&done);
        raw
    }

    fn write(&self, key: &str) {
        let owner = format!("{:032x}", self.next.load(Ordering::Relaxed));
        let c = &self.conn;
        // The replay check.
        assert_eq!(select_live(c, key), None);
        // The claim.
        c.prepare_cached(sql::BEGIN).unwrap().execute([]).unwrap();
        let now = now_ms();
        let wrote = c
            .prepare_cached(sql::CLAIM)
            .unwrap()
            .execute(params![
                key,
                owner,
                FINGERPRINT,
                now,
                now + 60_000,
                now + 60_000 + 86_400_000,
                // What `Layer::run("bench", ..)` records: the tool's name only.
                None::<&str>,
                "bench",
                None::<&str>
            ])
            .unwrap();
        assert_eq!(wrote, 1);
        c.prepare_cached(sql::COMMIT).unwrap().execute([]).unwrap();
        // The completion.
        c.prepare_cached(sql::BEGIN).unwrap().execute([]).unwrap();
        let now = now_ms();
        let done = c
            .prepare_cached(sql::COMPLETE)
            .unwrap()
            .execute(params![key, owner, RESULT, now, now + 86_400_000])
            .unwrap();
        assert_eq!(done, 1);
        c.prepare_cached(sql::COMMIT).unwrap().execute([]).unwrap();
    }

    fn first_write(&self) {
        let key = op(2, self.next.fetch_add(1, Ordering::Relaxed)).key;
        self.write(key.as_str());
    }

    fn replay(&self) {
        let done = select_live(&self.conn, &self.done);
        debug_assert_eq!(done, Some(true));
        black_box(done);
    }
}

struct Setup {
    runtime: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
    ours: Ours,
    raw: Raw,
    /// The store with every statement on its connection thread, for comparison.
    threaded: Ours,
}

fn setup() -> Setup {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ours = runtime.block_on(Ours::new(&dir.path().join("ours.db"), SqliteOptions::new()));
    let threaded = runtime.block_on(Ours::new(
        &dir.path().join("threaded.db"),
        SqliteOptions::new().readers(0),
    ));
    let raw = Raw::new(&dir.path().join("raw.db"));
    Setup {
        runtime,
        _dir: dir,
        ours,
        raw,
        threaded,
    }
}

fn bench_sqlite(c: &mut Criterion) {
    let s = setup();
    let (ours, raw, threaded) = (&s.ours, &s.raw, &s.threaded);

    let mut group = c.benchmark_group("sqlite first-time write");
    group.bench_function("toolonce Layer::run", |b| {
        b.to_async(&s.runtime).iter(|| ours.first_write())
    });
    group.bench_function("raw rusqlite, same statements", |b| {
        b.iter(|| raw.first_write())
    });
    group.bench_function("toolonce Layer::run, readers(0)", |b| {
        b.to_async(&s.runtime).iter(|| threaded.first_write())
    });
    group.finish();

    let mut group = c.benchmark_group("sqlite replay");
    group.bench_function("toolonce Layer::run", |b| {
        b.to_async(&s.runtime).iter(|| ours.replay())
    });
    group.bench_function("raw rusqlite, same statement", |b| b.iter(|| raw.replay()));
    group.bench_function("toolonce Layer::run, readers(0)", |b| {
        b.to_async(&s.runtime).iter(|| threaded.replay())
    });
    group.finish();
}

criterion_group!(benches, bench_sqlite);

/// Mean time per call of `f` over `calls` calls.
fn per_call(calls: u32, mut f: impl FnMut()) -> Duration {
    let start = Instant::now();
    for _ in 0..calls {
        f();
    }
    start.elapsed() / calls
}

/// Mean time per call of the future `f` makes, over `calls` calls awaited in one `block_on`
/// (as criterion's `to_async` does), so the runtime's entry is not counted per call.
fn per_async_call<F: std::future::Future>(
    rt: &tokio::runtime::Runtime,
    calls: u32,
    f: impl Fn() -> F,
) -> Duration {
    rt.block_on(async {
        let start = Instant::now();
        for _ in 0..calls {
            f().await;
        }
        start.elapsed() / calls
    })
}

/// One comparison: `rounds` alternating rounds of `calls` calls on each side, so that a busy
/// spell of the machine hits both alike. Prints the mean over all rounds (checkpoints of the
/// write-ahead log included, as in a long run) and the best round (the cost without
/// interference, and without a checkpoint when rounds are short), with their ratios.
fn compare(
    name: &str,
    rounds: usize,
    calls: u32,
    ours: &dyn Fn(u32) -> Duration,
    raw: &dyn Fn(),
) -> f64 {
    let (mut o, mut r) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        o.push(ours(calls));
        r.push(per_call(calls, raw));
    }
    let mean = |v: &[Duration]| v.iter().sum::<Duration>() / v.len() as u32;
    let (om, rm) = (mean(&o), mean(&r));
    let (ob, rb) = (*o.iter().min().unwrap(), *r.iter().min().unwrap());
    let ratio = |r: Duration, o: Duration| r.as_secs_f64() / o.as_secs_f64();
    println!(
        "{name}: toolonce {om:.1?}, raw {rm:.1?}; ratio (raw time / toolonce time): {:.2}   \
         [best rounds: toolonce {ob:.1?}, raw {rb:.1?}, ratio {:.2}]",
        ratio(rm, om),
        ratio(rb, ob),
    );
    ratio(rm, om)
}

/// Prints how the layer on the store compares with the raw statements.
fn print_ratios() {
    let s = setup();
    let rt = &s.runtime;
    println!(
        "\nSQLite store vs raw rusqlite (WAL, synchronous=NORMAL; means over alternating rounds):"
    );
    compare(
        "first-time write",
        24,
        250,
        &|n| per_async_call(rt, n, || s.ours.first_write()),
        &|| s.raw.first_write(),
    );
    compare(
        "replay",
        60,
        1_000,
        &|n| per_async_call(rt, n, || s.ours.replay()),
        &|| s.raw.replay(),
    );
    println!("the same with SqliteOptions::readers(0) (every statement on the connection thread):");
    compare(
        "first-time write, readers(0)",
        24,
        250,
        &|n| per_async_call(rt, n, || s.threaded.first_write()),
        &|| s.raw.first_write(),
    );
    compare(
        "replay, readers(0)",
        60,
        1_000,
        &|n| per_async_call(rt, n, || s.threaded.replay()),
        &|| s.raw.replay(),
    );
}

fn main() {
    benches();
    // Under `cargo test` the bench binary runs without `--bench`: skip the timing there.
    if std::env::args().any(|arg| arg == "--bench") {
        print_ratios();
    }
    Criterion::default().configure_from_args().final_summary();
}
