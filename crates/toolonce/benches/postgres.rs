//! `PostgresStore` through the layer, beside the raw baseline: the same SQL statements issued
//! directly with tokio-postgres on prepared statements, over the same number of connections to
//! the same real server (from `toolonce-testsupport`). Three figures: sequential first-time
//! write calls (claim + complete: two statements), sequential replays (one claim), and 16
//! concurrent callers on distinct operations.
//!
//! Criterion measures each side on its own. The printed ratio (raw / toolonce; 1.0 means no
//! overhead) comes from a paired run after it: blocks of raw and toolonce calls interleaved
//! (ABBA) over many rounds, and the median of each side's per-round time per call, so that a
//! machine whose load drifts (other builds, the server on the same cores) skews both sides
//! alike.
//!
//! Run: `cargo bench -p toolonce --features postgres --bench postgres`
//! (append `-- paired` to skip criterion and print only the paired ratios).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::Criterion;
use serde_json::{Value, json};
use tokio::runtime::Runtime;
use tokio_postgres::{Client, NoTls, Statement};
use toolonce::key::{self, Derived};
use toolonce::store::postgres::PostgresStore;
use toolonce::{Layer, Outcome, OwnerToken, WriteOptions};
use toolonce_testsupport::PostgresServer;

const TABLE: &str = "bench_entries";
const CONCURRENCY: usize = 16;
const LEASE_MS: i64 = 60_000;
const RETENTION_MS: i64 = 24 * 60 * 60 * 1000;

/// The statements `PostgresStore` runs for a claim and a complete, for [`TABLE`].
const CLAIM: &str = "SELECT won, took_over, state, owner, fingerprint, started_at, expires_at, settled_at, \
     result, error, scope, tool, detail, first_started_at, attempts \
     FROM \"bench_entries_claim\"($1, $2, $3, $4::bigint, $5::bigint, $6::boolean, $7, $8, $9)";
const COMPLETE: &str = "UPDATE \"bench_entries\" SET state = 'done', owner = NULL, \
     lease_until = NULL, result = $3::text::json, settled_at = now(), \
     expires_at = now() + $4::bigint * interval '1 millisecond' \
     WHERE key = $1 AND state = 'running' AND owner = $2 AND expires_at > now()";

/// A fresh operation, never used before in this run.
fn fresh_op() -> Derived {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let args = json!({"to": "ada@example.com", "amount": 1250, "n": n});
    key::derive(
        &format!("bench-{}", std::process::id()),
        "charge",
        &args,
        None,
    )
    .unwrap()
}

fn result_of(op: &Derived) -> Value {
    json!({"receipt": op.key.as_str(), "status": "succeeded", "amount": 1250})
}

/// The raw connection for the next sequential call: round robin over all of them, as the
/// pool's FIFO queue rotates through its connections, so that neither side's figure hangs on
/// one server backend (on a loaded machine, one backend process can stay slower than another
/// for a whole run).
fn next_raw(raw: &[Raw]) -> &Raw {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    &raw[NEXT.fetch_add(1, Ordering::Relaxed) as usize % raw.len()]
}

/// One direct connection with the two statements prepared.
struct Raw {
    client: Client,
    claim: Statement,
    complete: Statement,
}

impl Raw {
    async fn connect(url: &str) -> Raw {
        // The settings `PostgresStore` applies to its connections.
        let mut config: tokio_postgres::Config = url.parse().unwrap();
        config
            .application_name("toolonce")
            .keepalives_idle(Duration::from_secs(10))
            .keepalives_interval(Duration::from_secs(5))
            .keepalives_retries(3)
            .tcp_user_timeout(Duration::from_secs(30));
        let (client, connection) = config.connect(NoTls).await.unwrap();
        tokio::spawn(connection);
        let claim = client.prepare(CLAIM).await.unwrap();
        let complete = client.prepare(COMPLETE).await.unwrap();
        Raw {
            client,
            claim,
            complete,
        }
    }

    /// The claim statement, as the store issues it.
    async fn raw_claim(&self, op: &Derived, owner: &OwnerToken) -> tokio_postgres::Row {
        self.client
            .query_one(
                &self.claim,
                &[
                    &op.key.as_str(),
                    &owner.as_str(),
                    &op.fingerprint.as_str(),
                    &LEASE_MS,
                    &RETENTION_MS,
                    &false,
                    &Some("bench"),
                    &Some("charge"),
                    &None::<&str>,
                ],
            )
            .await
            .unwrap()
    }

    /// What a first-time call does, by hand: claim, then record the result.
    async fn first_time(&self, op: &Derived) {
        let owner = OwnerToken::generate();
        let row = self.raw_claim(op, &owner).await;
        assert!(row.get::<_, bool>(0));
        let text = serde_json::to_string(&result_of(op)).unwrap();
        let n = self
            .client
            .execute(
                &self.complete,
                &[&op.key.as_str(), &owner.as_str(), &text, &RETENTION_MS],
            )
            .await
            .unwrap();
        assert_eq!(n, 1);
    }

    /// What a replay does, by hand: the claim finds the done entry; decode its result.
    async fn replay(&self, op: &Derived) -> Value {
        let row = self.raw_claim(op, &OwnerToken::generate()).await;
        assert!(!row.get::<_, bool>(0));
        serde_json::from_str(row.get::<_, &str>(8)).unwrap()
    }
}

async fn layer_call(layer: &Layer, op: &Derived, options: &WriteOptions) -> Outcome {
    let result = result_of(op);
    layer
        .run("charge", op, options, |_| async move { Ok(result) })
        .await
        .outcome
}

fn main() {
    let pg = PostgresServer::start();
    let url = pg.url();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sides = rt.block_on(Sides::connect(&url));

    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .configure_from_args();
    for figure in Figure::ALL {
        let mut group = c.benchmark_group(format!("postgres {}", figure.name()));
        for side in [Side::Raw, Side::Toolonce] {
            group.bench_function(side.name(), |b| {
                b.to_async(&rt).iter_custom(|n| {
                    let sides = sides.clone();
                    async move { sides.time(figure, side, n).await }
                })
            });
        }
        group.finish();
    }
    c.final_summary();

    for figure in Figure::ALL {
        paired(&rt, &sides, figure);
    }
}

#[derive(Clone, Copy)]
enum Figure {
    FirstTime,
    Replay,
    Concurrent,
}

impl Figure {
    const ALL: [Figure; 3] = [Figure::FirstTime, Figure::Replay, Figure::Concurrent];

    fn name(self) -> &'static str {
        match self {
            Figure::FirstTime => "first-time",
            Figure::Replay => "replay",
            Figure::Concurrent => "16 concurrent first-time",
        }
    }

    /// Iterations per round of the paired run: about 10 to 50 ms per round on each side.
    fn per_round(self) -> u64 {
        match self {
            Figure::FirstTime => 25,
            Figure::Replay => 100,
            Figure::Concurrent => 4,
        }
    }
}

#[derive(Clone, Copy)]
enum Side {
    Raw,
    Toolonce,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Raw => "raw",
            Side::Toolonce => "toolonce",
        }
    }
}

/// Both sides: the layer on a store with a pool of 16, and 16 direct connections.
#[derive(Clone)]
struct Sides {
    layer: Layer,
    options: WriteOptions,
    raw: Arc<Vec<Raw>>,
    /// Operations completed once, for the replays of each side.
    our_done: Arc<Derived>,
    raw_done: Arc<Derived>,
}

impl Sides {
    async fn connect(url: &str) -> Sides {
        let store = PostgresStore::builder(url)
            .table(TABLE)
            .pool_size(CONCURRENCY)
            .connect()
            .await
            .unwrap();
        let mut raw = Vec::new();
        for _ in 0..CONCURRENCY {
            raw.push(Raw::connect(url).await);
        }
        let sides = Sides {
            layer: Layer::new(Arc::new(store)),
            options: WriteOptions::new(),
            raw: Arc::new(raw),
            our_done: Arc::new(fresh_op()),
            raw_done: Arc::new(fresh_op()),
        };
        // Open all of the pool's connections, as the raw side has, so that sequential calls
        // rotate through them too.
        sides.time(Figure::Concurrent, Side::Toolonce, 1).await;
        sides.raw[0].first_time(&sides.raw_done).await;
        let outcome = layer_call(&sides.layer, &sides.our_done, &sides.options).await;
        assert_eq!(outcome, Outcome::Executed);
        sides
    }

    /// Runs `n` iterations of `figure` on `side`; returns the time they took, without the
    /// derivation of their keys.
    async fn time(&self, figure: Figure, side: Side, n: u64) -> Duration {
        let mut elapsed = Duration::ZERO;
        match (figure, side) {
            (Figure::FirstTime, Side::Raw) => {
                let ops: Vec<_> = (0..n).map(|_| fresh_op()).collect();
                let start = Instant::now();
                for op in &ops {
                    next_raw(&self.raw).first_time(op).await;
                }
                elapsed += start.elapsed();
            }
            (Figure::FirstTime, Side::Toolonce) => {
                let ops: Vec<_> = (0..n).map(|_| fresh_op()).collect();
                let start = Instant::now();
                for op in &ops {
                    let outcome = layer_call(&self.layer, op, &self.options).await;
                    assert_eq!(outcome, Outcome::Executed);
                }
                elapsed += start.elapsed();
            }
            (Figure::Replay, Side::Raw) => {
                let start = Instant::now();
                for _ in 0..n {
                    std::hint::black_box(next_raw(&self.raw).replay(&self.raw_done).await);
                }
                elapsed += start.elapsed();
            }
            (Figure::Replay, Side::Toolonce) => {
                let start = Instant::now();
                for _ in 0..n {
                    let outcome = layer_call(&self.layer, &self.our_done, &self.options).await;
                    assert_eq!(outcome, Outcome::Replayed);
                }
                elapsed += start.elapsed();
            }
            (Figure::Concurrent, side) => {
                for _ in 0..n {
                    let ops: Vec<_> = (0..CONCURRENCY).map(|_| fresh_op()).collect();
                    let start = Instant::now();
                    let tasks: Vec<_> = ops
                        .into_iter()
                        .enumerate()
                        .map(|(i, op)| {
                            let sides = self.clone();
                            tokio::spawn(async move {
                                match side {
                                    Side::Raw => sides.raw[i].first_time(&op).await,
                                    Side::Toolonce => {
                                        let outcome =
                                            layer_call(&sides.layer, &op, &sides.options).await;
                                        assert_eq!(outcome, Outcome::Executed);
                                    }
                                }
                            })
                        })
                        .collect();
                    for t in tasks {
                        t.await.unwrap();
                    }
                    elapsed += start.elapsed();
                }
            }
        }
        elapsed
    }
}

/// The paired run of one figure: `ROUNDS` rounds, each timing a block of both sides, the side
/// that goes first alternating; prints the median time per call of each and their ratio.
fn paired(rt: &Runtime, sides: &Sides, figure: Figure) {
    const ROUNDS: usize = 40;
    let n = figure.per_round();
    let per_call = |side| rt.block_on(sides.time(figure, side, n)).as_secs_f64() * 1e6 / n as f64;
    // One unmeasured round to warm both sides.
    per_call(Side::Raw);
    per_call(Side::Toolonce);
    let (mut raw, mut ours) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        if round % 2 == 0 {
            raw.push(per_call(Side::Raw));
            ours.push(per_call(Side::Toolonce));
        } else {
            ours.push(per_call(Side::Toolonce));
            raw.push(per_call(Side::Raw));
        }
    }
    let (raw, ours) = (median(raw), median(ours));
    println!(
        "postgres {}: toolonce {ours:.1} µs, raw {raw:.1} µs, ratio {:.2}",
        figure.name(),
        raw / ours
    );
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
