//! The rounds: the run's toolbox and floor ([`Bench`]), the rounds of each workload at each
//! concurrency with the two sides alternating which goes first ([`measure`]), and the clean-up
//! of everything the run wrote.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use serde_json::json;
use toolonce::{OperationKey, Outcome, Store, Toolbox, WriteOptions};

use super::args::{BenchArgs, LEASE, RETENTION};
use super::floor::{self, Kind};
use super::stats::{self, Row, Sample};
use super::workload::{Charge, TOOL, Workload, ours_task};
use crate::exit;

pub(super) struct Bench {
    pub(super) toolbox: Arc<Toolbox>,
    pub(super) store: Arc<dyn Store>,
    pub(super) kind: Kind,
    /// The scope of every entry the run's toolbox writes.
    pub(super) scope: String,
    /// Whether rounds of the raw floor run beside toolonce's (`--scale` runs toolonce's only:
    /// the floor's rows would share the store whose size is being measured).
    pub(super) with_raw: bool,
    /// Every key the toolbox recorded, for the clean-up.
    written: Vec<OperationKey>,
    replay_ops: Vec<u64>,
    /// Replayed operations are numbered down from `u64::MAX` less this.
    replay_base: u64,
    /// First-time operations are numbered from 0 to this (exclusive).
    next_op: u64,
    /// The most callers of a replay round: replayed keys are numbered below it.
    most_callers: u64,
}

impl Bench {
    pub(super) async fn open(url: &str, run_id: &str) -> anyhow::Result<Bench> {
        let (store, kind) = floor::open(url, run_id).await?;
        let options = WriteOptions::new().lease(LEASE).retention(RETENTION);
        let scope = format!("toolonce-bench-{run_id}");
        let toolbox = Toolbox::builder(Arc::clone(&store))
            .scope(scope.clone())
            .write_with(Charge(TOOL), options)
            .build()
            .map_err(exit::internal)?;
        Ok(Bench {
            toolbox: Arc::new(toolbox),
            store,
            with_raw: kind.has_raw(),
            kind,
            scope,
            written: Vec::new(),
            replay_ops: Vec::new(),
            replay_base: 0,
            next_op: 0,
            most_callers: 0,
        })
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
        let server_before = self.kind.server_us().await?;
        let cpu_before = stats::process_cpu_us();
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
                self.kind.task(workload, task, ops)
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
        let cpu_after = stats::process_cpu_us();
        if let Some(e) = first_error {
            return Err(e);
        }
        let server_after = self.kind.server_us().await?;
        Ok(Sample {
            wall,
            latencies,
            server_us: server_before.zip(server_after).map(|(a, b)| b - a),
            client_us: cpu_before.zip(cpu_after).map(|(a, b)| b - a),
        })
    }

    /// Makes the next [`measure`] replay operations of its own, executed afresh: `--scale`
    /// measures for longer than an entry's retention, and the first size's would be gone by
    /// the last. (Numbered below the earlier ones: a round has at most 1,024 callers.)
    pub(super) fn fresh_replays(&mut self) {
        self.replay_base += self.replay_ops.len().max(1024) as u64;
        self.replay_ops.clear();
    }

    /// How many entries toolonce's rounds have written so far: each first-time operation and
    /// replayed one (the floor's rows are not entries).
    pub(super) fn entries_written(&self) -> u64 {
        self.written.len() as u64
    }

    /// Removes everything the run wrote: the toolbox's entries, then the raw floor's data.
    pub(super) async fn clean_up(&mut self) -> anyhow::Result<()> {
        let keys = std::mem::take(&mut self.written);
        if self.kind.entries_need_deleting() {
            delete_all(&self.store, keys).await?;
        }
        self.kind.clean_up(self.next_op, self.most_callers).await
    }
}

/// Deletes the toolbox's entries, a few at a time.
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

/// Every row: each concurrency, first-time then replay, `args.rounds` rounds of each side.
/// First-time operations are numbered on from those of an earlier call (`--scale` calls it
/// once per size).
pub(super) async fn measure(bench: &mut Bench, args: &BenchArgs) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut next = bench.next_op;
    for &concurrency in &args.concurrency {
        let per_task = args.ops().div_ceil(concurrency);
        // The replayed operations: one per caller, executed once before its first round.
        let executed = bench.replay_ops.len() as u64;
        let base = u64::MAX - bench.replay_base;
        bench.replay_ops = (0..concurrency.max(executed)).map(|i| base - i).collect();
        for n in (executed..concurrency).map(|i| base - i) {
            bench.ours_first(n).await?;
        }
        bench.most_callers = bench.most_callers.max(concurrency);
        if bench.with_raw {
            bench.kind.prepare_replays(concurrency).await?;
        }
        for workload in [Workload::FirstTime, Workload::Replay] {
            let mut ours = Vec::new();
            let mut raw = Vec::new();
            for round in 0..args.rounds() {
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
                    } else if bench.with_raw {
                        raw.push(
                            bench
                                .round(false, workload, concurrency, per_task, first)
                                .await?,
                        );
                    }
                }
            }
            rows.push(stats::summarize(workload, concurrency, &ours, &raw));
        }
    }
    Ok(rows)
}
