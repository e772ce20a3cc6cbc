//! The Redis store through the layer, beside the same number of plain Redis commands on the
//! same kind of connection (a `ConnectionManager` to the same server), in the same run:
//!
//! - **first-time**: a new write call (claim + complete: two `EVALSHA`) against two plain
//!   commands, `SET key running NX PX lease` and `SET key done PX retention`;
//! - **replay**: a duplicate call (claim: one `EVALSHA`) against one `GET`;
//! - **16 concurrent**: sixteen callers on distinct operations against sixteen callers doing
//!   the plain pairs.
//!
//! The server is a real `redis-server` started by the test support. After criterion's own
//! report, a second pass alternates ours and raw in short rounds (so drift in the machine's load
//! hits both alike) and prints `redis first-time: toolonce 61.2 µs, raw 58.9 µs, ratio 0.96`
//! (ratio = raw / ours), with the CPU each call cost this process and the server, and then the
//! server's own time per command. Run with
//! `cargo bench -p toolonce --features redis --bench redis` (add `-- none` to skip criterion's
//! pass and print only the ratios).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use redis::aio::ConnectionManager;
use serde_json::{Value, json};
use toolonce::key::{self, Derived};
use toolonce::store::redis::RedisStore;
use toolonce::{Layer, Outcome, WriteOptions};
use toolonce_testsupport::shared_redis;

const CONCURRENCY: usize = 16;

/// A result of the size a payment tool returns.
fn result(seq: u64) -> Value {
    json!({"receipt": format!("re_{seq:012}"), "cents": 129900, "currency": "eur", "status": "succeeded"})
}

/// What a raw baseline stores: values of the same size as ours.
fn raw_running() -> String {
    format!(
        r#"{{"status":"running","startedAt":1764400000000,"owner":"{:032x}","fingerprint":"{:064x}"}}"#,
        1, 2
    )
}

fn raw_done(seq: u64) -> String {
    format!(
        r#"{{"status":"done","result":{},"startedAt":1764400000000,"completedAt":1764400000001,"fingerprint":"{:064x}"}}"#,
        result(seq),
        2
    )
}

/// Retention short enough that the keys of a long run do not pile up.
fn options() -> WriteOptions {
    WriteOptions::new()
        .lease(Duration::from_secs(60))
        .retention(Duration::from_secs(120))
}

struct Bench {
    runtime: tokio::runtime::Runtime,
    layer: Layer,
    raw: ConnectionManager,
    replayed: Derived,
    seq: AtomicU64,
    run: u64,
}

impl Bench {
    fn new() -> Bench {
        let url = shared_redis().url();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (layer, raw) = runtime.block_on(async {
            let store = RedisStore::connect(&url).await.unwrap();
            let client = redis::Client::open(url.as_str()).unwrap();
            let raw = ConnectionManager::new(client).await.unwrap();
            (Layer::new(Arc::new(store)), raw)
        });
        let run = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let replayed = key::derive("bench-replay", "charge", &json!({"run": run}), None).unwrap();
        let bench = Bench {
            runtime,
            layer,
            raw,
            replayed,
            seq: AtomicU64::new(0),
            run,
        };
        bench.runtime.block_on(async {
            let first = bench.call(&bench.replayed).await;
            assert_eq!(first, Outcome::Executed);
            let mut raw = bench.raw.clone();
            let _: () = redis::cmd("SET")
                .arg(bench.raw_key(u64::MAX))
                .arg(raw_done(0))
                .query_async(&mut raw)
                .await
                .unwrap();
        });
        bench
    }

    /// `n` operations never called before (derived outside the timed part).
    fn fresh_ops(&self, n: u64) -> Vec<(u64, Derived)> {
        (0..n)
            .map(|_| {
                let seq = self.seq.fetch_add(1, Ordering::Relaxed);
                let args = json!({"run": self.run, "seq": seq, "cents": 129900});
                (seq, key::derive("bench", "charge", &args, None).unwrap())
            })
            .collect()
    }

    fn raw_key(&self, seq: u64) -> String {
        format!("bench-raw:{}:{seq}", self.run)
    }

    async fn call(&self, op: &Derived) -> Outcome {
        let seq = self.seq.load(Ordering::Relaxed);
        self.layer
            .run("charge", op, &options(), |_| async move { Ok(result(seq)) })
            .await
            .outcome
    }

    /// One raw first-time pair: two plain commands, one round trip each.
    async fn raw_pair(raw: &mut ConnectionManager, key: &str, running: &str, done: &str) {
        let _: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(running)
            .arg("NX")
            .arg("PX")
            .arg(60_000)
            .query_async(raw)
            .await
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(done)
            .arg("PX")
            .arg(120_000)
            .query_async(raw)
            .await
            .unwrap();
    }

    async fn first_time_ours(&self, n: u64) -> Duration {
        let ops = self.fresh_ops(n);
        let start = Instant::now();
        for (_, op) in &ops {
            let outcome = self.call(op).await;
            debug_assert_eq!(outcome, Outcome::Executed);
        }
        start.elapsed()
    }

    async fn first_time_raw(&self, n: u64) -> Duration {
        let mut raw = self.raw.clone();
        let running = raw_running();
        let items: Vec<(String, String)> = (0..n)
            .map(|_| {
                let seq = self.seq.fetch_add(1, Ordering::Relaxed);
                (self.raw_key(seq), raw_done(seq))
            })
            .collect();
        let start = Instant::now();
        for (key, done) in &items {
            Self::raw_pair(&mut raw, key, &running, done).await;
        }
        start.elapsed()
    }

    async fn replay_ours(&self, n: u64) -> Duration {
        let start = Instant::now();
        for _ in 0..n {
            let outcome = self.call(&self.replayed).await;
            debug_assert_eq!(outcome, Outcome::Replayed);
        }
        start.elapsed()
    }

    async fn replay_raw(&self, n: u64) -> Duration {
        let mut raw = self.raw.clone();
        let key = self.raw_key(u64::MAX);
        let start = Instant::now();
        for _ in 0..n {
            let value: Option<String> = redis::cmd("GET")
                .arg(&key)
                .query_async(&mut raw)
                .await
                .unwrap();
            debug_assert!(value.is_some());
        }
        start.elapsed()
    }

    /// `n` first-time calls spread over 16 concurrent callers.
    async fn concurrent_ours(self: &Arc<Self>, n: u64) -> Duration {
        let per = n.div_ceil(CONCURRENCY as u64);
        let batches: Vec<_> = (0..CONCURRENCY).map(|_| self.fresh_ops(per)).collect();
        let start = Instant::now();
        let tasks: Vec<_> = batches
            .into_iter()
            .map(|ops| {
                let bench = self.clone();
                tokio::spawn(async move {
                    for (_, op) in &ops {
                        let outcome = bench.call(op).await;
                        debug_assert_eq!(outcome, Outcome::Executed);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        start.elapsed() * n as u32 / (per * CONCURRENCY as u64) as u32
    }

    async fn concurrent_raw(self: &Arc<Self>, n: u64) -> Duration {
        let per = n.div_ceil(CONCURRENCY as u64);
        let running = Arc::new(raw_running());
        let batches: Vec<Vec<(String, String)>> = (0..CONCURRENCY)
            .map(|_| {
                (0..per)
                    .map(|_| {
                        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
                        (self.raw_key(seq), raw_done(seq))
                    })
                    .collect()
            })
            .collect();
        let start = Instant::now();
        let tasks: Vec<_> = batches
            .into_iter()
            .map(|items| {
                let mut raw = self.raw.clone();
                let running = running.clone();
                tokio::spawn(async move {
                    for (key, done) in &items {
                        Self::raw_pair(&mut raw, key, &running, done).await;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        start.elapsed() * n as u32 / (per * CONCURRENCY as u64) as u32
    }
}

fn bench_all(c: &mut Criterion) {
    let bench = Arc::new(Bench::new());
    let rt = &bench.runtime;

    let mut group = c.benchmark_group("redis first-time");
    group.bench_function("toolonce", |b| {
        b.to_async(rt).iter_custom(|n| {
            let bench = bench.clone();
            async move { bench.first_time_ours(n).await }
        })
    });
    group.bench_function("raw SET NX PX + SET PX", |b| {
        b.to_async(rt).iter_custom(|n| {
            let bench = bench.clone();
            async move { bench.first_time_raw(n).await }
        })
    });
    group.finish();

    let mut group = c.benchmark_group("redis replay");
    group.bench_function("toolonce", |b| {
        b.to_async(rt).iter_custom(|n| {
            let bench = bench.clone();
            async move { bench.replay_ours(n).await }
        })
    });
    group.bench_function("raw GET", |b| {
        b.to_async(rt).iter_custom(|n| {
            let bench = bench.clone();
            async move { bench.replay_raw(n).await }
        })
    });
    group.finish();

    let mut group = c.benchmark_group("redis 16 concurrent first-time");
    group.bench_function("toolonce", |b| {
        b.to_async(rt).iter_custom(|n| {
            let bench = bench.clone();
            async move { bench.concurrent_ours(n).await }
        })
    });
    group.bench_function("raw pairs", |b| {
        b.to_async(rt).iter_custom(|n| {
            let bench = bench.clone();
            async move { bench.concurrent_raw(n).await }
        })
    });
    group.finish();

    if std::env::args().any(|arg| arg == "--bench") {
        assert_eq!(shared_redis().command(&["CONFIG", "RESETSTAT"]), "OK");
        print_ratios(&bench);
        print_server_time();
    }
}

/// CPU time used so far by this process (all threads) and by the Redis server: the machine's
/// load stretches round trips, but hardly what each call costs in CPU.
fn cpu_now() -> (Duration, Duration) {
    // utime and stime, fields 14 and 15 of /proc/self/stat, in ticks of 1/100 s.
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = after_name
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse().ok())
        .collect();
    let client = Duration::from_millis(fields.iter().sum::<u64>() * 10);
    let info = shared_redis().command(&["INFO", "cpu"]);
    let server: f64 = info
        .lines()
        .filter_map(|l| {
            let (name, value) = l.split_once(':')?;
            matches!(name, "used_cpu_sys" | "used_cpu_user")
                .then(|| value.trim().parse::<f64>().ok())?
        })
        .sum();
    (client, Duration::from_secs_f64(server))
}

/// One side of a comparison: median wall time per call, and CPU per call (client, server).
struct Side {
    wall: Duration,
    client_cpu: Duration,
    server_cpu: Duration,
}

type Run =
    Box<dyn Fn(Arc<Bench>, u64) -> std::pin::Pin<Box<dyn std::future::Future<Output = Duration>>>>;

/// Alternates ours and raw in rounds of `n` operations for about `total` (so drift in the
/// machine's load hits both alike) and measures each side.
fn compare(bench: &Arc<Bench>, n: u64, total: Duration, ours: Run, raw: Run) -> (Side, Side) {
    let mut walls = [Vec::new(), Vec::new()];
    let mut cpu = [(Duration::ZERO, Duration::ZERO); 2];
    let mut calls = [0u32; 2];
    let start = Instant::now();
    while start.elapsed() < total || walls[0].len() < 5 {
        for (i, run) in [&ours, &raw].into_iter().enumerate() {
            let (c0, s0) = cpu_now();
            walls[i].push(bench.runtime.block_on(run(bench.clone(), n)) / n as u32);
            let (c1, s1) = cpu_now();
            cpu[i].0 += c1 - c0;
            cpu[i].1 += s1 - s0;
            calls[i] += n as u32;
        }
    }
    let mut side = |i: usize| {
        walls[i].sort();
        Side {
            wall: walls[i][walls[i].len() / 2],
            client_cpu: cpu[i].0 / calls[i],
            server_cpu: cpu[i].1 / calls[i],
        }
    };
    let ours = side(0);
    (ours, side(1))
}

/// The server's own time per command during the ratio pass (`INFO commandstats`; since Redis 7
/// a script's time includes the commands it runs, and the `get`/`set` counts include those run
/// by scripts).
fn print_server_time() {
    let info = shared_redis().command(&["INFO", "commandstats"]);
    let per_call = |command: &str| -> Option<String> {
        let line = info
            .lines()
            .find(|l| l.starts_with(&format!("cmdstat_{command}:")))?;
        let usec = line.split("usec_per_call=").nth(1)?.split(',').next()?;
        Some(format!("{command} {usec} µs"))
    };
    let stats: Vec<String> = ["evalsha", "set", "get"]
        .iter()
        .filter_map(|c| per_call(c))
        .collect();
    println!("redis server time per command: {}", stats.join(", "));
}

fn print_ratios(bench: &Arc<Bench>) {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let line = |name: &str, (ours, raw): (Side, Side)| {
        println!(
            "{name}: toolonce {:.1} µs, raw {:.1} µs, ratio {:.2}  \
             (CPU per call, client + server: toolonce {:.1} + {:.1} µs, raw {:.1} + {:.1} µs)",
            us(ours.wall),
            us(raw.wall),
            raw.wall.as_secs_f64() / ours.wall.as_secs_f64(),
            us(ours.client_cpu),
            us(ours.server_cpu),
            us(raw.client_cpu),
            us(raw.server_cpu),
        );
    };
    let total = Duration::from_secs(4);
    line(
        "redis first-time",
        compare(
            bench,
            200,
            total,
            Box::new(|b, n| Box::pin(async move { b.first_time_ours(n).await })),
            Box::new(|b, n| Box::pin(async move { b.first_time_raw(n).await })),
        ),
    );
    line(
        "redis replay",
        compare(
            bench,
            200,
            total,
            Box::new(|b, n| Box::pin(async move { b.replay_ours(n).await })),
            Box::new(|b, n| Box::pin(async move { b.replay_raw(n).await })),
        ),
    );
    line(
        "redis 16 concurrent first-time (per call)",
        compare(
            bench,
            1_600,
            total,
            Box::new(|b, n| Box::pin(async move { b.concurrent_ours(n).await })),
            Box::new(|b, n| Box::pin(async move { b.concurrent_raw(n).await })),
        ),
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench_all
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
