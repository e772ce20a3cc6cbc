//! Added latency of `toolonce mcp` per `tools/call`: the test MCP server called directly, and
//! through the proxy on the memory store (and SQLite with the `sqlite` feature), in the same
//! run. Every write call has fresh arguments, so each one is a first-time call: claim, forward,
//! record. Prints `mcp write call: direct X µs, proxied Y µs, added Z µs` per store (medians,
//! then means), after criterion's own estimates.
//!
//! `cargo bench -p toolonce-cli --bench mcp`

#[path = "../tests/support/mcp_peer.rs"]
mod mcp_peer;

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use mcp_peer::{Peer, Spawn};
use serde_json::json;

/// One peer to measure, with a counter that makes every call's arguments new.
struct Subject {
    name: &'static str,
    peer: Peer,
    n: u64,
    // Keeps a SQLite store's directory alive.
    _dir: Option<tempfile::TempDir>,
}

impl Subject {
    fn start(name: &'static str, spawn: Spawn, dir: Option<tempfile::TempDir>) -> Self {
        let mut peer = spawn.without_files().start();
        peer.initialize();
        peer.list_tools();
        Subject {
            name,
            peer,
            n: 0,
            _dir: dir,
        }
    }

    fn write_call(&mut self) {
        self.n += 1;
        let answer = self
            .peer
            .call("charge", json!({"amount": 100, "order": self.n}));
        assert!(answer.get("result").is_some(), "{answer}");
    }

    fn read_call(&mut self) {
        let answer = self.peer.call("lookup", json!({"q": 1}));
        assert!(answer.get("result").is_some(), "{answer}");
    }
}

fn subjects() -> Vec<Subject> {
    let mut subjects = vec![
        Subject::start("direct", Spawn::direct(), None),
        Subject::start("memory", Spawn::proxy().arg("--scope").arg("bench"), None),
    ];
    if cfg!(feature = "sqlite") {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite://{}", dir.path().join("bench.db").display());
        subjects.push(Subject::start(
            "sqlite",
            Spawn::proxy()
                .arg("--store")
                .arg(&url)
                .arg("--scope")
                .arg("bench"),
            Some(dir),
        ));
    }
    subjects
}

/// Per-call latencies of `calls` calls per subject, taken in interleaved rounds so that drift
/// (CPU frequency, other load) hits every subject alike.
fn interleaved(subjects: &mut [Subject], call: fn(&mut Subject), calls: usize) -> Vec<Stats> {
    const ROUNDS: usize = 15;
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(calls); subjects.len()];
    for _ in 0..ROUNDS {
        for (i, subject) in subjects.iter_mut().enumerate() {
            for _ in 0..calls / ROUNDS {
                let started = Instant::now();
                call(subject);
                samples[i].push(started.elapsed());
            }
        }
    }
    samples.into_iter().map(Stats::of).collect()
}

/// The median and the mean of some latencies. The median is the figure to compare: on a
/// shared machine a few calls stall for a scheduler tick, which moves the mean a lot.
#[derive(Clone, Copy)]
struct Stats {
    median: Duration,
    mean: Duration,
}

impl Stats {
    fn of(mut samples: Vec<Duration>) -> Stats {
        samples.sort();
        let total: Duration = samples.iter().sum();
        Stats {
            median: samples[samples.len() / 2],
            mean: total / u32::try_from(samples.len()).expect("few samples"),
        }
    }
}

fn report(what: &str, direct: Stats, proxied: Stats, store: &str) {
    println!(
        "{what}: direct {:.1} µs, proxied {:.1} µs, added {:.1} µs ({store}; medians; means: \
         direct {:.1} µs, proxied {:.1} µs, added {:.1} µs)",
        micros(direct.median),
        micros(proxied.median),
        micros(proxied.median) - micros(direct.median),
        micros(direct.mean),
        micros(proxied.mean),
        micros(proxied.mean) - micros(direct.mean),
    );
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn bench(c: &mut Criterion) {
    let mut subjects = subjects();

    let mut group = c.benchmark_group("mcp_write_call");
    for subject in &mut subjects {
        group.bench_function(subject.name, |b| b.iter(|| subject.write_call()));
    }
    group.finish();
    let mut group = c.benchmark_group("mcp_read_call");
    for subject in subjects.iter_mut().take(2) {
        group.bench_function(subject.name, |b| b.iter(|| subject.read_call()));
    }
    group.finish();

    let writes = interleaved(&mut subjects, Subject::write_call, 3000);
    for (subject, proxied) in subjects.iter().zip(&writes).skip(1) {
        report(
            "mcp write call",
            writes[0],
            *proxied,
            &format!("{} store", subject.name),
        );
    }
    let reads = interleaved(&mut subjects[..2], Subject::read_call, 3000);
    report("mcp read call", reads[0], reads[1], "passed through");
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(50)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
