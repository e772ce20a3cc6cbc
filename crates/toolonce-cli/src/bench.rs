//! `toolonce bench`: what safety costs on a given store, measured end to end through the public
//! API (a [`Toolbox`] with one write tool) beside the store's raw floor — the minimal unsafe
//! design on the same kind of connection, in the same run: Redis `SET NX PX` + `SET PX` and
//! `GET`; SQL `INSERT … ON CONFLICT DO NOTHING` + `UPDATE` and `SELECT`.
//!
//! Rounds alternate ours and raw (drift in the machine's load hits both alike) and the figures
//! are medians over rounds. Everything the bench writes lives under a prefix, table or file of
//! its own for this run, and is removed at the end (also after Ctrl-C); Redis keys carry an
//! expiry as well, so a killed run leaves nothing for long.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use toolonce::store::redact_url;
use toolonce::{OperationKey, Outcome, Store, ToolError, Toolbox, WriteContext, WriteOptions};

use crate::exit;
use crate::output::outln;

#[derive(clap::Args, Debug)]
#[command(after_long_help = "\
Rows: first_time (a new operation: claim, run, record) and replay (a duplicate answered from \
the store), at each concurrency. `ratio` is toolonce's throughput over the raw floor's; p50 and \
p99 are toolonce's latencies per operation. The memory store has no raw floor: its rows give \
absolute latencies.")]
pub(crate) struct BenchArgs {
    /// The store to measure: memory://, sqlite://PATH, redis://HOST, redis+cluster://HOSTS,
    /// postgres://HOST. The bench writes beside what is there (its own key prefix, table, or
    /// file next to a SQLite file) and removes what it wrote.
    #[arg(long = "store", value_name = "URL", env = "TOOLONCE_STORE")]
    store: String,
    /// Operations per workload, per round and concurrency.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    ops: u64,
    /// Concurrent callers, as a comma-separated list.
    #[arg(long, value_delimiter = ',', default_value = "1,8", value_parser = clap::value_parser!(u64).range(1..=1024))]
    concurrency: Vec<u64>,
    /// Interleaved rounds; figures are medians over them.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    rounds: u64,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

/// Entries outlive the run by this much at most, should it be killed before it cleans up.
const RETENTION: Duration = Duration::from_secs(600);
const LEASE: Duration = Duration::from_secs(60);
const TOOL: &str = "bench_charge";

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct ChargeArgs {
    /// Which operation.
    n: u64,
    /// A typical small argument.
    cents: u64,
}

/// The write tool: returns at once a result of the size a payment tool returns.
struct Charge;

impl toolonce::WriteTool for Charge {
    type Args = ChargeArgs;
    type Output = Value;
    fn name(&self) -> &str {
        TOOL
    }
    fn description(&self) -> &str {
        "Charges nothing: the bench's write tool."
    }
    async fn call(&self, _ctx: WriteContext, args: ChargeArgs) -> Result<Value, ToolError> {
        Ok(
            json!({"receipt": format!("re_{:012}", args.n), "cents": args.cents, "status": "succeeded"}),
        )
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Workload {
    FirstTime,
    Replay,
}

impl Workload {
    fn as_str(self) -> &'static str {
        match self {
            Workload::FirstTime => "first_time",
            Workload::Replay => "replay",
        }
    }
}

/// What one side of one round measured.
struct Sample {
    wall: Duration,
    latencies: Vec<Duration>,
    /// Redis: server time spent (microseconds, `INFO commandstats`).
    server_us: Option<f64>,
    /// This process's CPU time over the round (microseconds, user and system, every thread):
    /// the client's side of the cost. The two sides never run at once, so it is theirs alone.
    client_us: Option<f64>,
}

/// The CPU time this process has used so far, in microseconds, where the system tells it.
fn process_cpu_us() -> Option<f64> {
    #[cfg(unix)]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        Some(t.tv_sec as f64 * 1e6 + t.tv_nsec as f64 / 1e3)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

pub(crate) async fn run(args: BenchArgs) -> anyhow::Result<std::process::ExitCode> {
    let run_id = format!("{:016x}", rand_u64());
    let mut bench = Bench::open(&args.store, &run_id).await?;
    let measured = tokio::select! {
        r = measure(&mut bench, &args) => Some(r),
        _ = tokio::signal::ctrl_c() => None,
    };
    let cleaned = bench.clean_up().await;
    let rows = match measured {
        Some(rows) => rows?,
        None => {
            cleaned.context("cleaning up after Ctrl-C")?;
            eprintln!("toolonce: bench interrupted; what it wrote is removed");
            return Ok(std::process::ExitCode::from(130));
        }
    };
    cleaned.context("cleaning up what the bench wrote")?;
    let store = redact_url(&args.store);
    if args.json {
        let results: Vec<Value> = rows.iter().map(Row::to_json).collect();
        outln!("{}", json!({"store": store, "results": results}));
    } else {
        print_table(&store, &bench.kind, &rows)?;
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// A row of the report.
struct Row {
    workload: Workload,
    concurrency: u64,
    ours_ops_s: f64,
    raw_ops_s: Option<f64>,
    p50: Duration,
    p99: Duration,
    raw_p50: Option<Duration>,
    raw_p99: Option<Duration>,
    ours_server_us: Option<f64>,
    raw_server_us: Option<f64>,
    ours_client_us: Option<f64>,
    raw_client_us: Option<f64>,
    /// The median over rounds of each round's toolonce ÷ floor throughput: the two sides of a
    /// round ran back to back, so a change in the machine's load between rounds cancels out.
    ratio: Option<f64>,
}

fn us(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e7).round() / 10.0
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

impl Row {
    fn ratio(&self) -> Option<f64> {
        self.ratio.map(|r| (r * 1000.0).round() / 1000.0)
    }

    fn to_json(&self) -> Value {
        let mut row = json!({
            "workload": self.workload.as_str(),
            "concurrency": self.concurrency,
            "toolonce_ops_s": self.ours_ops_s.round(),
            "raw_ops_s": self.raw_ops_s.map(f64::round),
            "ratio": self.ratio(),
            "p50_us": us(self.p50),
            "p99_us": us(self.p99),
            "raw_p50_us": self.raw_p50.map(us),
            "raw_p99_us": self.raw_p99.map(us),
        });
        if let (Some(ours), Some(raw)) = (self.ours_server_us, self.raw_server_us) {
            row["toolonce_server_us_per_op"] = json!(round2(ours));
            row["raw_server_us_per_op"] = json!(round2(raw));
        }
        if let Some(ours) = self.ours_client_us {
            row["toolonce_client_us_per_op"] = json!(round2(ours));
            row["raw_client_us_per_op"] = json!(self.raw_client_us.map(round2));
        }
        row
    }
}

fn print_table(store: &str, kind: &Kind, rows: &[Row]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "store: {store} ({})", kind.floor())?;
    let server = rows.iter().any(|r| r.ours_server_us.is_some());
    write!(
        out,
        "{:<11} {:>5} {:>13} {:>11} {:>7} {:>9} {:>9} {:>9}",
        "workload", "conc", "toolonce op/s", "raw op/s", "ratio", "p50 µs", "p99 µs", "raw p50"
    )?;
    let client = rows.iter().any(|r| r.ours_client_us.is_some());
    if client {
        write!(out, " {:>16}", "client µs/op")?;
    }
    if server {
        write!(out, " {:>16}", "server µs/op")?;
    }
    writeln!(out)?;
    let dash = "-".to_owned();
    for r in rows {
        write!(
            out,
            "{:<11} {:>5} {:>13.0} {:>11} {:>7} {:>9.1} {:>9.1} {:>9}",
            r.workload.as_str(),
            r.concurrency,
            r.ours_ops_s,
            r.raw_ops_s.map_or(dash.clone(), |x| format!("{x:.0}")),
            r.ratio().map_or(dash.clone(), |x| format!("{x:.2}")),
            us(r.p50),
            us(r.p99),
            r.raw_p50.map_or(dash.clone(), |d| format!("{:.1}", us(d))),
        )?;
        if let Some(ours) = r.ours_client_us {
            match r.raw_client_us {
                Some(raw) => write!(out, " {:>7.2} / {:<6.2}", ours, raw)?,
                None => write!(out, " {:>7.2}{:9}", ours, "")?,
            }
        }
        if let (Some(ours), Some(raw)) = (r.ours_server_us, r.raw_server_us) {
            write!(out, " {:>7.2} / {:<6.2}", ours, raw)?;
        }
        writeln!(out)?;
    }
    if client {
        writeln!(
            out,
            "client µs/op: this process's CPU per operation, user and system, toolonce / raw"
        )?;
    }
    if server {
        writeln!(
            out,
            "server µs/op: Redis CPU per operation, toolonce / raw (INFO cpu)"
        )?;
    }
    if matches!(kind, Kind::Memory) {
        writeln!(
            out,
            "memory store: no raw floor; targets are p50 ≤ 4 µs first-time, ≤ 2 µs replay"
        )?;
    }
    Ok(())
}

async fn measure(bench: &mut Bench, args: &BenchArgs) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut next = 0u64;
    for &concurrency in &args.concurrency {
        let per_task = args.ops.div_ceil(concurrency);
        // The replayed operations: one per caller, executed once before its first round.
        let executed = bench.replay_ops.len() as u64;
        bench.replay_ops = (0..concurrency.max(executed))
            .map(|i| u64::MAX - i)
            .collect();
        for n in (executed..concurrency).map(|i| u64::MAX - i) {
            bench.ours_first(n).await?;
        }
        bench.most_callers = bench.most_callers.max(concurrency);
        bench.raw_prepare_replays(concurrency).await?;
        for workload in [Workload::FirstTime, Workload::Replay] {
            let mut ours = Vec::new();
            let mut raw = Vec::new();
            for round in 0..args.rounds {
                let first = next;
                next += per_task * concurrency;
                bench.next_op = next;
                // Alternate which side goes first.
                let order = if round % 2 == 0 {
                    [true, false]
                } else {
                    [false, true]
                };
                for is_ours in order {
                    if is_ours {
                        ours.push(
                            bench
                                .round(true, workload, concurrency, per_task, first)
                                .await?,
                        );
                    } else if bench.has_raw() {
                        raw.push(
                            bench
                                .round(false, workload, concurrency, per_task, first)
                                .await?,
                        );
                    }
                }
            }
            rows.push(summarize(workload, concurrency, &ours, &raw));
        }
    }
    Ok(rows)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

fn percentiles(samples: &[Sample]) -> (Duration, Duration) {
    let mut all: Vec<Duration> = samples
        .iter()
        .flat_map(|s| s.latencies.iter().copied())
        .collect();
    all.sort();
    let at = |q: f64| all[((all.len() as f64 * q).ceil() as usize).clamp(1, all.len()) - 1];
    (at(0.5), at(0.99))
}

fn summarize(workload: Workload, concurrency: u64, ours: &[Sample], raw: &[Sample]) -> Row {
    let ops_s = |s: &[Sample]| {
        median(
            s.iter()
                .map(|x| x.latencies.len() as f64 / x.wall.as_secs_f64())
                .collect(),
        )
    };
    let per_op = |s: &[Sample], total: fn(&Sample) -> Option<f64>| -> Option<f64> {
        let per_op: Option<Vec<f64>> = s
            .iter()
            .map(|x| total(x).map(|us| us / x.latencies.len() as f64))
            .collect();
        per_op.filter(|v| !v.is_empty()).map(median)
    };
    let server = |s: &[Sample]| per_op(s, |x| x.server_us);
    let client = |s: &[Sample]| per_op(s, |x| x.client_us);
    let (p50, p99) = percentiles(ours);
    let (raw_p50, raw_p99) = if raw.is_empty() {
        (None, None)
    } else {
        let (a, b) = percentiles(raw);
        (Some(a), Some(b))
    };
    Row {
        workload,
        concurrency,
        ours_ops_s: ops_s(ours),
        raw_ops_s: (!raw.is_empty()).then(|| ops_s(raw)),
        p50,
        p99,
        raw_p50,
        raw_p99,
        ours_server_us: server(ours),
        raw_server_us: server(raw),
        ours_client_us: client(ours),
        raw_client_us: client(raw),
        ratio: (!raw.is_empty()).then(|| {
            median(
                ours.iter()
                    .zip(raw)
                    .map(|(o, r)| {
                        let rate = |x: &Sample| x.latencies.len() as f64 / x.wall.as_secs_f64();
                        rate(o) / rate(r)
                    })
                    .collect(),
            )
        }),
    }
}

fn rand_u64() -> u64 {
    let mut bytes = [0u8; 8];
    // A clock-derived id is good enough if the system has no randomness to give.
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        return nanos as u64 ^ u64::from(std::process::id());
    }
    u64::from_le_bytes(bytes)
}

/// The raw floor's values: the size of ours (a running entry with owner and fingerprint, a
/// settled one with the result).
fn raw_running() -> String {
    format!(
        r#"{{"status":"running","startedAt":1764400000000,"leaseUntil":1764400060000,"owner":"{:032x}","fingerprint":"{:064x}"}}"#,
        1, 2
    )
}

fn raw_done(n: u64) -> String {
    format!(
        r#"{{"status":"done","result":{{"receipt":"re_{n:012}","cents":500,"status":"succeeded"}},"startedAt":1764400000000,"completedAt":1764400000001,"fingerprint":"{:064x}"}}"#,
        2
    )
}

/// The store under test, with what the raw floor needs to reach it.
enum Kind {
    Memory,
    #[cfg(feature = "sqlite")]
    Sqlite(sqlite::Raw),
    #[cfg(feature = "redis")]
    Redis(redis_raw::Raw),
    #[cfg(feature = "postgres")]
    Postgres(Box<postgres::Raw>),
}

impl Kind {
    fn floor(&self) -> String {
        match self {
            Kind::Memory => "no raw floor".into(),
            #[cfg(feature = "sqlite")]
            Kind::Sqlite(_) => {
                "raw floor: INSERT … ON CONFLICT DO NOTHING + UPDATE, replay SELECT, own connection"
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
}

struct Bench {
    toolbox: Arc<Toolbox>,
    store: Arc<dyn Store>,
    kind: Kind,
    /// Every key the toolbox recorded, for the clean-up.
    written: Vec<OperationKey>,
    replay_ops: Vec<u64>,
    /// First-time operations are numbered from 0 to this (exclusive).
    next_op: u64,
    /// The most callers of a replay round: replayed keys are numbered below it.
    most_callers: u64,
}

impl Bench {
    async fn open(url: &str, run_id: &str) -> anyhow::Result<Bench> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(exit::with_code(
                exit::USAGE,
                anyhow::anyhow!(
                    "store URL {:?} has no scheme: expected memory://, sqlite://PATH, redis://HOST or postgres://HOST",
                    redact_url(url)
                ),
            ));
        };
        let _ = rest;
        let opening = || format!("cannot open the store {}", redact_url(url));
        let (store, kind): (Arc<dyn Store>, Kind) = match scheme {
            "memory" => (Arc::new(toolonce::MemoryStore::new()), Kind::Memory),
            #[cfg(feature = "sqlite")]
            "sqlite" => {
                let (store, raw) = sqlite::open(rest, run_id).with_context(opening)?;
                (store, Kind::Sqlite(raw))
            }
            #[cfg(feature = "redis")]
            "redis" | "rediss" | "redis+cluster" | "rediss+cluster" => {
                let (store, raw) = redis_raw::open(url, run_id).await.with_context(opening)?;
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
        };
        let options = WriteOptions::new().lease(LEASE).retention(RETENTION);
        let toolbox = Toolbox::builder(Arc::clone(&store))
            .scope(format!("toolonce-bench-{run_id}"))
            .write_with(Charge, options)
            .build()
            .map_err(exit::internal)?;
        Ok(Bench {
            toolbox: Arc::new(toolbox),
            store,
            kind,
            written: Vec::new(),
            replay_ops: Vec::new(),
            next_op: 0,
            most_callers: 0,
        })
    }

    fn has_raw(&self) -> bool {
        !matches!(self.kind, Kind::Memory)
    }

    /// Executes operation `n` once (a replayed operation's first call).
    async fn ours_first(&mut self, n: u64) -> anyhow::Result<()> {
        let answer = self.toolbox.call(TOOL, json!({"n": n, "cents": 500})).await;
        if let Some(key) = &answer.key {
            self.written.push(key.clone());
        }
        if answer.outcome != Outcome::Executed {
            bail!(
                "the bench's first call came out {:?}: {}",
                answer.outcome,
                answer.content
            );
        }
        Ok(())
    }

    async fn raw_prepare_replays(&mut self, concurrency: u64) -> anyhow::Result<()> {
        match &self.kind {
            Kind::Memory => Ok(()),
            #[cfg(feature = "sqlite")]
            Kind::Sqlite(raw) => raw.prepare_replays(concurrency),
            #[cfg(feature = "redis")]
            Kind::Redis(raw) => raw.prepare_replays(concurrency).await,
            #[cfg(feature = "postgres")]
            Kind::Postgres(raw) => raw.prepare_replays(concurrency).await,
        }
    }

    /// One round of one side: `concurrency` callers, `per_task` operations each, numbered from
    /// `first` (first-time) or replaying the caller's own operation.
    async fn round(
        &mut self,
        ours: bool,
        workload: Workload,
        concurrency: u64,
        per_task: u64,
        first: u64,
    ) -> anyhow::Result<Sample> {
        let server_before = self.server_us().await?;
        let cpu_before = process_cpu_us();
        let start = Instant::now();
        let mut tasks = Vec::new();
        for task in 0..concurrency {
            let ops: Vec<u64> = match workload {
                Workload::FirstTime => (0..per_task).map(|i| first + task * per_task + i).collect(),
                Workload::Replay => vec![self.replay_ops[task as usize]; per_task as usize],
            };
            tasks.push(if ours {
                tokio::spawn(ours_task(Arc::clone(&self.toolbox), workload, ops))
            } else {
                self.raw_task(workload, task, ops)
            });
        }
        let mut latencies = Vec::with_capacity((concurrency * per_task) as usize);
        let mut first_error = None;
        for task in tasks {
            match task.await.context("a bench task panicked")? {
                Ok((lat, keys)) => {
                    latencies.extend(lat);
                    self.written.extend(keys);
                }
                Err(e) => first_error = first_error.or(Some(e)),
            }
        }
        let wall = start.elapsed();
        let cpu_after = process_cpu_us();
        if let Some(e) = first_error {
            return Err(e);
        }
        let server_after = self.server_us().await?;
        Ok(Sample {
            wall,
            latencies,
            server_us: server_before.zip(server_after).map(|(a, b)| b - a),
            client_us: cpu_before.zip(cpu_after).map(|(a, b)| b - a),
        })
    }

    fn raw_task(&self, workload: Workload, task: u64, ops: Vec<u64>) -> RawTask {
        match &self.kind {
            Kind::Memory => unreachable!("the memory store has no raw floor"),
            #[cfg(feature = "sqlite")]
            Kind::Sqlite(raw) => raw.task(workload, task, ops),
            #[cfg(feature = "redis")]
            Kind::Redis(raw) => raw.task(workload, task, ops),
            #[cfg(feature = "postgres")]
            Kind::Postgres(raw) => raw.task(workload, task, ops),
        }
    }

    async fn server_us(&self) -> anyhow::Result<Option<f64>> {
        match &self.kind {
            #[cfg(feature = "redis")]
            Kind::Redis(raw) => raw.server_us().await,
            _ => Ok(None),
        }
    }

    /// Removes everything the run wrote: the toolbox's entries, then the raw floor's data.
    async fn clean_up(&mut self) -> anyhow::Result<()> {
        let keys = std::mem::take(&mut self.written);
        match &self.kind {
            Kind::Memory => Ok(()),
            #[cfg(feature = "sqlite")]
            Kind::Sqlite(raw) => raw.clean_up(),
            #[cfg(feature = "redis")]
            Kind::Redis(raw) => {
                delete_all(&self.store, keys).await?;
                raw.clean_up(self.next_op, self.most_callers).await
            }
            #[cfg(feature = "postgres")]
            Kind::Postgres(raw) => raw.clean_up().await,
        }
    }
}

/// Deletes the toolbox's entries, a few at a time.
#[cfg(feature = "redis")]
async fn delete_all(store: &Arc<dyn Store>, keys: Vec<OperationKey>) -> anyhow::Result<()> {
    use futures_util::StreamExt;
    let results: Vec<toolonce::Result<bool>> = futures_util::stream::iter(keys)
        .map(|key| {
            let store = Arc::clone(store);
            async move { store.delete(&key).await }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for r in results {
        r.context("deleting a bench entry")?;
    }
    Ok(())
}

type TaskResult = anyhow::Result<(Vec<Duration>, Vec<OperationKey>)>;
type RawTask = tokio::task::JoinHandle<TaskResult>;

async fn ours_task(toolbox: Arc<Toolbox>, workload: Workload, ops: Vec<u64>) -> TaskResult {
    let mut latencies = Vec::with_capacity(ops.len());
    let mut keys = Vec::new();
    let expected = match workload {
        Workload::FirstTime => Outcome::Executed,
        Workload::Replay => Outcome::Replayed,
    };
    for n in ops {
        let args = json!({"n": n, "cents": 500});
        let start = Instant::now();
        let answer = toolbox.call(TOOL, args).await;
        latencies.push(start.elapsed());
        if workload == Workload::FirstTime
            && let Some(key) = answer.key
        {
            keys.push(key);
        }
        if answer.outcome != expected {
            bail!(
                "a bench call came out {:?} where {:?} was expected: {}",
                answer.outcome,
                expected,
                answer.content
            );
        }
    }
    Ok((latencies, keys))
}

#[cfg(feature = "sqlite")]
mod sqlite {
    //! SQLite: the store on a file of the bench's own beside the given one (same directory, so
    //! same disk), and the raw floor on its own connection to that file with the store's
    //! settings (WAL, `synchronous=NORMAL`).

    use std::path::{Path, PathBuf};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    use anyhow::Context;
    use toolonce::Store;
    use toolonce::store::sqlite::SqliteStore;

    use super::{RawTask, Workload, raw_done, raw_running};

    pub(super) struct Raw {
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
                        return Err(e).with_context(|| {
                            format!("cannot remove {}", Path::new(&name).display())
                        });
                    }
                }
            }
            Ok(())
        }
    }
}

#[cfg(feature = "redis")]
mod redis_raw {
    //! Redis: the store under a key prefix of the run's own, the raw floor on a connection of
    //! the same kind (a `ConnectionManager`, or a cluster connection) to the same server.

    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use anyhow::Context;
    use redis::AsyncCommands;
    use toolonce::Store;
    use toolonce::store::redis::RedisStore;

    use super::{RawTask, Workload, raw_done, raw_running};

    #[derive(Clone)]
    enum Conn {
        Single(redis::aio::ConnectionManager),
        Cluster(redis::cluster_async::ClusterConnection),
    }

    impl redis::aio::ConnectionLike for Conn {
        fn req_packed_command<'a>(
            &'a mut self,
            cmd: &'a redis::Cmd,
        ) -> redis::RedisFuture<'a, redis::Value> {
            match self {
                Conn::Single(c) => c.req_packed_command(cmd),
                Conn::Cluster(c) => c.req_packed_command(cmd),
            }
        }
        fn req_packed_commands<'a>(
            &'a mut self,
            cmd: &'a redis::Pipeline,
            offset: usize,
            count: usize,
        ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
            match self {
                Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
                Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
            }
        }
        fn get_db(&self) -> i64 {
            match self {
                Conn::Single(c) => c.get_db(),
                Conn::Cluster(c) => c.get_db(),
            }
        }
    }

    pub(super) struct Raw {
        conn: Conn,
        prefix: String,
        cluster: bool,
    }

    /// The URL of one node without toolonce's own query options, which the driver does not
    /// know; and for a cluster, each seed node's.
    fn nodes(url: &str) -> anyhow::Result<(bool, Vec<String>)> {
        let (scheme, rest) = url.split_once("://").context("no scheme")?;
        let (cluster, scheme) = match scheme.strip_suffix("+cluster") {
            Some(s) => (true, s),
            None => (false, scheme),
        };
        let rest = rest.split_once('?').map_or(rest, |(r, _)| r);
        let (auth, hosts) = match rest.rsplit_once('@') {
            Some((auth, hosts)) => (format!("{auth}@"), hosts),
            None => (String::new(), rest),
        };
        let (hosts, path) = match hosts.split_once('/') {
            Some((h, p)) => (h, format!("/{p}")),
            None => (hosts, String::new()),
        };
        Ok((
            cluster,
            hosts
                .split(',')
                .map(|h| format!("{scheme}://{auth}{h}{path}"))
                .collect(),
        ))
    }

    pub(super) async fn open(url: &str, run_id: &str) -> anyhow::Result<(Arc<dyn Store>, Raw)> {
        let prefix = format!("toolonce-bench:{run_id}:");
        let store = RedisStore::builder(url)
            .prefix(prefix.clone())
            .connect()
            .await?;
        let (cluster, nodes) = nodes(url)?;
        let conn = if cluster {
            let client = redis::cluster::ClusterClientBuilder::new(nodes)
                .connection_timeout(Duration::from_secs(1))
                .response_timeout(Duration::from_secs(2))
                .build()?;
            Conn::Cluster(client.get_async_connection().await?)
        } else {
            let client = redis::Client::open(nodes[0].as_str())?;
            let config = redis::aio::ConnectionManagerConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(1)))
                .set_response_timeout(Some(Duration::from_secs(2)));
            Conn::Single(redis::aio::ConnectionManager::new_with_config(client, config).await?)
        };
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
                        super::RETENTION.as_millis() as u64,
                    )
                    .await?;
            }
            Ok(())
        }

        pub(super) fn task(&self, workload: Workload, task: u64, ops: Vec<u64>) -> RawTask {
            let mut conn = self.conn.clone();
            let prefix = self.prefix.clone();
            let lease = super::LEASE.as_millis() as u64;
            let retention = super::RETENTION.as_millis() as u64;
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
}

#[cfg(feature = "postgres")]
mod postgres {
    //! PostgreSQL: the store on a table of the run's own, the raw floor on a table of its own
    //! too, through one prepared-statement connection per caller. The floor's connections use
    //! TLS where the store's do (the URL's `sslmode`; under the default `prefer`, whenever the
    //! server offers it), so both sides pay the same encryption on every round trip.

    use std::sync::Arc;
    use std::time::Instant;

    use anyhow::Context;
    use toolonce::Store;
    use toolonce::store::postgres::{self, PostgresStore};

    use super::{RawTask, Workload, raw_done, raw_running};

    pub(super) struct Raw {
        /// The store's URL: the floor's connections are made as the store makes its own.
        url: String,
        /// Whether the floor's connections are encrypted (as the store's are then).
        pub(super) encrypted: bool,
        table: String,
        raw_table: String,
        /// Whether the store's schema-version table existed before the run.
        version_table_existed: bool,
        clients: tokio::sync::Mutex<Vec<Arc<tokio_postgres::Client>>>,
    }

    /// One connection of the floor, made by the store's own `connect_client`.
    async fn connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
        postgres::connect_client(url).await.map_err(|e| {
            // A refused TLS handshake (a server without TLS under a mode that requires it)
            // or login (a wrong password) is the URL's matter, not the server's availability.
            let code = if matches!(e, toolonce::Error::Config(_))
                || e.report().to_string().contains("TLS")
            {
                crate::exit::USAGE
            } else {
                crate::exit::UNAVAILABLE
            };
            crate::exit::with_code(
                code,
                anyhow::Error::new(e).context("cannot open the raw floor's connection"),
            )
        })
    }

    pub(super) async fn open(url: &str, run_id: &str) -> anyhow::Result<(Arc<dyn Store>, Raw)> {
        let admin = connect(url).await?;
        let encrypted: bool = admin
            .query_one(
                "SELECT coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)",
                &[],
            )
            .await?
            .get(0);
        let version_table_existed = admin
            .query_one("SELECT to_regclass('toolonce_schema') IS NOT NULL", &[])
            .await?
            .get(0);
        let table = format!("toolonce_bench_{run_id}");
        let raw_table = format!("toolonce_bench_raw_{run_id}");
        let raw = Raw {
            url: url.to_owned(),
            encrypted,
            table: table.clone(),
            raw_table: raw_table.clone(),
            version_table_existed,
            clients: tokio::sync::Mutex::new(Vec::new()),
        };
        admin
            .batch_execute(&format!(
                "CREATE TABLE \"{raw_table}\" (key text COLLATE \"C\" PRIMARY KEY, state text NOT NULL, value json NOT NULL, expires_at timestamptz NOT NULL)"
            ))
            .await?;
        let store = match PostgresStore::builder(url).table(table).connect().await {
            Ok(store) => store,
            Err(e) => {
                let _ = raw.clean_up().await;
                return Err(e.into());
            }
        };
        Ok((Arc::new(store), raw))
    }

    impl Raw {
        /// One connection per caller, opened before the rounds (the store's pool opens its
        /// connections during the first rounds, as it would in a program).
        async fn clients(&self, n: usize) -> anyhow::Result<Vec<Arc<tokio_postgres::Client>>> {
            let mut clients = self.clients.lock().await;
            while clients.len() < n {
                clients.push(Arc::new(connect(&self.url).await?));
            }
            Ok(clients[..n].to_vec())
        }

        pub(super) async fn prepare_replays(&self, concurrency: u64) -> anyhow::Result<()> {
            let clients = self.clients(concurrency as usize).await?;
            let insert = format!(
                "INSERT INTO \"{}\" VALUES ($1, 'done', $2::text::json, now() + interval '10 minutes') ON CONFLICT DO NOTHING",
                self.raw_table
            );
            for task in 0..concurrency {
                clients[0]
                    .execute(&insert, &[&format!("replay:{task}"), &raw_done(task)])
                    .await?;
            }
            Ok(())
        }

        pub(super) fn task(&self, workload: Workload, task: u64, ops: Vec<u64>) -> RawTask {
            let table = self.raw_table.clone();
            let client = self
                .clients
                .try_lock()
                .ok()
                .and_then(|c| c.get(task as usize).cloned());
            tokio::spawn(async move {
                let client = client.context("the raw floor's connection was not opened")?;
                let insert = client
                    .prepare(&format!(
                        "INSERT INTO \"{table}\" VALUES ($1, 'running', $2::text::json, now() + interval '1 minute') ON CONFLICT DO NOTHING"
                    ))
                    .await?;
                let update = client
                    .prepare(&format!(
                        "UPDATE \"{table}\" SET state = 'done', value = $2::text::json, expires_at = now() + interval '10 minutes' WHERE key = $1"
                    ))
                    .await?;
                let select = client
                    .prepare(&format!(
                        "SELECT state, value::text FROM \"{table}\" WHERE key = $1 AND expires_at > now()"
                    ))
                    .await?;
                let running = raw_running();
                let replay_key = format!("replay:{task}");
                let mut latencies = Vec::with_capacity(ops.len());
                for n in ops {
                    let start = Instant::now();
                    match workload {
                        Workload::FirstTime => {
                            let key = format!("first:{n}");
                            let won = client.execute(&insert, &[&key, &running]).await?;
                            anyhow::ensure!(won == 1, "raw key {key} existed");
                            client.execute(&update, &[&key, &raw_done(n)]).await?;
                        }
                        Workload::Replay => {
                            let row = client.query_opt(&select, &[&replay_key]).await?;
                            anyhow::ensure!(row.is_some(), "raw key {replay_key} missing");
                        }
                    }
                    latencies.push(start.elapsed());
                }
                Ok((latencies, Vec::new()))
            })
        }

        /// Drops the run's two tables and the store's claim function, and the run's row in the
        /// store's schema-version table (the table too, if the run created it and it is empty).
        pub(super) async fn clean_up(&self) -> anyhow::Result<()> {
            self.clients.lock().await.clear();
            let admin = connect(&self.url).await?;
            let t = &self.table;
            admin
                .batch_execute(&format!(
                    "DROP TABLE IF EXISTS \"{t}\"; DROP TABLE IF EXISTS \"{}\";
                     DO $$ DECLARE f regprocedure; BEGIN
                       FOR f IN SELECT oid::regprocedure FROM pg_proc
                                WHERE proname = '{t}_claim' AND pg_function_is_visible(oid) LOOP
                         EXECUTE 'DROP FUNCTION ' || f;
                       END LOOP;
                     END $$",
                    self.raw_table
                ))
                .await?;
            let exists: bool = admin
                .query_one("SELECT to_regclass('toolonce_schema') IS NOT NULL", &[])
                .await?
                .get(0);
            if exists {
                admin
                    .execute("DELETE FROM toolonce_schema WHERE table_name = $1", &[t])
                    .await?;
                if !self.version_table_existed {
                    let left: i64 = admin
                        .query_one("SELECT count(*) FROM toolonce_schema", &[])
                        .await?
                        .get(0);
                    if left == 0 {
                        admin.batch_execute("DROP TABLE toolonce_schema").await?;
                    }
                }
            }
            Ok(())
        }
    }
}
