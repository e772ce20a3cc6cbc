//! Profiling aid: drives a `Toolbox` with one write tool on a store, N first-time calls or N
//! replays of one call, on a 2-worker multi-thread runtime, so a profiler (strace -c,
//! perf, callgrind) sees only toolonce's side. `drive URL first|replay N`. The floors to
//! compare it with, on the same runtime shape: `redis_floor.rs` and `pg_floor.rs`.
//!
//! Unlike `toolonce bench`, it leaves what it wrote in the store: entries under the scope
//! `drive-<pid>`, each kept for its 10-minute retention (`toolonce purge` removes them after).

use std::sync::Arc;

#[path = "support/profiling.rs"]
mod profiling;

use serde_json::{Value, json};
use toolonce::{ToolError, Toolbox, WriteContext, WriteOptions, WriteTool};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Args {
    n: u64,
    cents: u64,
}

struct Charge;

impl WriteTool for Charge {
    type Args = Args;
    type Output = Value;
    fn name(&self) -> &str {
        "bench_charge"
    }
    fn description(&self) -> &str {
        "Charges nothing."
    }
    async fn call(&self, _ctx: WriteContext, args: Args) -> Result<Value, ToolError> {
        Ok(
            json!({"receipt": format!("re_{:012}", args.n), "cents": args.cents, "status": "succeeded"}),
        )
    }
}

fn main() {
    let profiling::Run { url, first, n } = profiling::args("drive");
    profiling::runtime().block_on(async move {
        let store = toolonce::store::open(&url).await.expect("store");
        let run = format!("{:x}", std::process::id());
        let toolbox = Arc::new(
            Toolbox::builder(store)
                .scope(format!("drive-{run}"))
                .write_with(
                    Charge,
                    WriteOptions::new()
                        .lease(std::time::Duration::from_secs(60))
                        .retention(std::time::Duration::from_secs(600)),
                )
                .build()
                .unwrap(),
        );
        let t = tokio::spawn(async move {
            if !first {
                toolbox
                    .call("bench_charge", json!({"n": u64::MAX, "cents": 500}))
                    .await;
            }
            let start = std::time::Instant::now();
            for i in 0..n {
                let op = if first { i } else { u64::MAX };
                let a = toolbox
                    .call("bench_charge", json!({"n": op, "cents": 500}))
                    .await;
                assert!(!a.is_error, "{}", a.content);
            }
            start.elapsed()
        });
        let took = t.await.unwrap();
        profiling::report("calls", n, took);
    });
}
