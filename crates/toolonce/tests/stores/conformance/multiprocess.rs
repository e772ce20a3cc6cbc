//! Multi-process contention: N OS processes run the same set of operations through the layer
//! on one shared store, and every operation must have executed exactly once.
//!
//! The test binary re-runs itself as the workers (`current_exe` with `--exact <worker test>`),
//! so no extra binary is needed. Each execution appends a line to a shared log file opened
//! with `O_APPEND`, whose line writes are atomic; the parent counts the lines per operation.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use toolonce::{InFlight, Layer, Store, WriteOptions, key};

const ROLE: &str = "TOOLONCE_MP_ROLE";
const LOG: &str = "TOOLONCE_MP_LOG";
const SCOPE: &str = "TOOLONCE_MP_SCOPE";
const OPS: &str = "TOOLONCE_MP_OPS";

/// The full name the test harness gives the test `name` of the module whose `module_path!()`
/// is `module`: its path without the binary's own name (`sqlite::processes::worker`), as
/// `--exact` wants it.
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{name}"),
        None => name.to_owned(),
    }
}

/// Whether this process is a worker started by [`run_workers`].
pub fn is_worker() -> bool {
    std::env::var_os(ROLE).is_some()
}

/// Starts `processes` copies of this test binary running the test `worker_test` (which must
/// call [`worker`] when [`is_worker`]), each with `env`, then checks that each of `ops`
/// operations ran exactly once. Panics with the offending operations otherwise.
pub fn run_workers(worker_test: &str, env: &[(&str, String)], processes: usize, ops: usize) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("executions.log");
    std::fs::File::create(&log).unwrap();
    let scope = format!("mp-{}-{}", std::process::id(), nanos());
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..processes)
        .map(|i| {
            let mut cmd = Command::new(&exe);
            cmd.args(["--exact", worker_test, "--nocapture", "--test-threads", "1"])
                .env(ROLE, i.to_string())
                .env(LOG, &log)
                .env(SCOPE, &scope)
                .env(OPS, ops.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, v) in env {
                cmd.env(k, v);
            }
            cmd.spawn().expect("start a worker process")
        })
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "worker {i} failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    check_log(&log, ops);
}

fn check_log(log: &Path, ops: usize) {
    let text = std::fs::read_to_string(log).unwrap();
    let mut counts = vec![0usize; ops];
    for line in text.lines() {
        let op: usize = line.split(' ').next().unwrap().parse().unwrap();
        counts[op] += 1;
    }
    let wrong: Vec<_> = counts
        .iter()
        .enumerate()
        .filter(|(_, n)| **n != 1)
        .map(|(op, n)| format!("op {op} ran {n} times"))
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {ops} operations did not run exactly once: {}",
        wrong.len(),
        wrong
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// The body of a worker process: runs every operation through the layer, in an order of its
/// own (so processes collide on different operations), waiting for in-flight duplicates.
pub async fn worker(store: Arc<dyn Store>) {
    let role: usize = std::env::var(ROLE).unwrap().parse().unwrap();
    let log = std::env::var(LOG).unwrap();
    let scope = std::env::var(SCOPE).unwrap();
    let ops: usize = std::env::var(OPS).unwrap().parse().unwrap();
    let layer = Layer::new(store);
    let options = WriteOptions::new()
        .lease(Duration::from_secs(30))
        .in_flight(InFlight::Wait(Duration::from_secs(60)));
    let file = Arc::new(std::fs::OpenOptions::new().append(true).open(&log).unwrap());
    let order: Vec<usize> = if role.is_multiple_of(2) {
        (0..ops).collect()
    } else {
        (0..ops).rev().collect()
    };
    for op in order {
        let args = json!({"op": op, "payload": {"nested": [op]}});
        let derived = key::derive(&scope, "mp_tool", &args, None).unwrap();
        let file = file.clone();
        let answer = layer
            .run("mp_tool", &derived, &options, move |_ctx| async move {
                // One write call per line: O_APPEND makes it atomic across processes.
                (&*file)
                    .write_all(format!("{op} {}\n", std::process::id()).as_bytes())
                    .unwrap();
                Ok(json!(op))
            })
            .await;
        assert_eq!(
            answer.result,
            Ok(json!(op)),
            "op {op}: {:?}",
            answer.outcome
        );
    }
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}
