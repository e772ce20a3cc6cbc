//! What the bench measures: the write tool the toolbox calls, the two workloads (first-time
//! operations and replays), toolonce's side of a round, and the values the raw floor writes,
//! the size of toolonce's own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::{Value, json};
use toolonce::{OperationKey, Outcome, ToolError, Toolbox, WriteContext};

pub(super) const TOOL: &str = "bench_charge";
/// The tool of the entries `--scale` writes with a short retention, for `purge` to remove.
pub(super) const EXPIRING_TOOL: &str = "bench_charge_expiring";

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub(super) struct ChargeArgs {
    /// Which operation.
    n: u64,
    /// A typical small argument.
    cents: u64,
}

/// The write tool, named: returns at once a result of the size a payment tool returns.
/// (`--scale` registers a second one, [`EXPIRING_TOOL`], whose entries it purges.)
pub(super) struct Charge(pub(super) &'static str);

impl toolonce::WriteTool for Charge {
    type Args = ChargeArgs;
    type Output = Value;
    fn name(&self) -> &str {
        self.0
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
pub(super) enum Workload {
    FirstTime,
    Replay,
}

impl Workload {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Workload::FirstTime => "first_time",
            Workload::Replay => "replay",
        }
    }
}

/// What one caller of a round measured: its latencies, and the keys toolonce recorded (for
/// the clean-up).
pub(super) type TaskResult = anyhow::Result<(Vec<Duration>, Vec<OperationKey>)>;
pub(super) type RawTask = tokio::task::JoinHandle<TaskResult>;

/// One caller of toolonce's side of a round: calls the tool on each of `ops` in turn.
pub(super) async fn ours_task(
    toolbox: Arc<Toolbox>,
    workload: Workload,
    ops: Vec<u64>,
) -> TaskResult {
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

/// The raw floor's values: the size of ours (a running entry with owner and fingerprint, a
/// settled one with the result).
pub(super) fn raw_running() -> String {
    format!(
        r#"{{"status":"running","startedAt":1764400000000,"leaseUntil":1764400060000,"owner":"{:032x}","fingerprint":"{:064x}"}}"#,
        1, 2
    )
}

pub(super) fn raw_done(n: u64) -> String {
    format!(
        r#"{{"status":"done","result":{{"receipt":"re_{n:012}","cents":500,"status":"succeeded"}},"startedAt":1764400000000,"completedAt":1764400000001,"fingerprint":"{:064x}"}}"#,
        2
    )
}
