//! A write tool that blocks its thread (a blocking HTTP client, `std::thread::sleep`) for
//! several leases while duplicates keep arriving from another thread: the lease must stay
//! alive although the tool's task is never polled, so the tool runs exactly once. Shared by the
//! store test binaries that run it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use toolonce::{Outcome, Store, ToolError, Toolbox, WriteContext, WriteOptions, WriteTool};

/// Blocks its thread for `block`, then answers.
#[derive(Clone)]
struct Blocking {
    runs: Arc<AtomicU32>,
    block: Duration,
}

impl WriteTool for Blocking {
    type Args = Value;
    type Output = Value;
    fn name(&self) -> &str {
        "sync_client"
    }
    fn description(&self) -> &str {
        "Calls a service through a blocking client."
    }
    async fn call(&self, _ctx: WriteContext, _args: Value) -> Result<Value, ToolError> {
        let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        // Deliberately blocking: the thread, and with it this task, is stuck for the duration.
        std::thread::sleep(self.block);
        Ok(json!({"run": n}))
    }
}

fn toolbox(store: Arc<dyn Store>, tool: Blocking, lease: Duration) -> Toolbox {
    Toolbox::builder(store)
        .scope("blocking")
        .write_with(tool, WriteOptions::new().lease(lease))
        .build()
        .unwrap()
}

/// Runs the scenario. `first` and `duplicates` are the same store, or two handles on it (as two
/// processes would have). Must be called from a multi-thread runtime with at least two
/// workers: the blocking call is spawned onto one of them.
pub(crate) async fn a_tool_blocking_its_thread_for_three_leases_runs_once(
    first: Arc<dyn Store>,
    duplicates: Arc<dyn Store>,
) {
    let lease = Duration::from_millis(1_500);
    let tool = Blocking {
        runs: Arc::new(AtomicU32::new(0)),
        block: lease * 3,
    };
    let args = json!({"request": 1});
    let caller = Arc::new(toolbox(first, tool.clone(), lease));
    let call = tokio::spawn({
        let (caller, args) = (caller.clone(), args.clone());
        async move { caller.call("sync_client", args).await }
    });
    while tool.runs.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // Duplicates every 100 ms from a thread of their own (another part of the agent, another
    // process), until the blocking call has answered.
    let done = Arc::new(AtomicBool::new(false));
    let other = std::thread::spawn({
        let (done, tool, args) = (done.clone(), tool.clone(), args.clone());
        move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let tb = toolbox(duplicates, tool, lease);
                let mut outcomes = Vec::new();
                while !done.load(Ordering::SeqCst) {
                    outcomes.push(tb.call("sync_client", args.clone()).await.outcome);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                outcomes
            })
        }
    });

    let answer = call.await.unwrap();
    done.store(true, Ordering::SeqCst);
    let outcomes = other.join().unwrap();
    assert_eq!(answer.outcome, Outcome::Executed, "{}", answer.content);
    assert_eq!(
        tool.runs.load(Ordering::SeqCst),
        1,
        "the blocked tool lost its lease and a duplicate ran it again; duplicates saw {outcomes:?}"
    );
    assert!(
        outcomes.len() >= 10,
        "too few duplicates were tried: {outcomes:?}"
    );
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Outcome::InFlight | Outcome::Replayed)),
        "{outcomes:?}"
    );
    assert_eq!(
        caller.call("sync_client", args).await.outcome,
        Outcome::Replayed
    );
}
