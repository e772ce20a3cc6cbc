//! Filling the store: the run's own entries written through the toolbox as a program writes
//! them (claim, run, record), [`CALLERS`] at a time, each numbered in a range the rounds never
//! use; and the toolbox of the entries written with a short retention, for `purge` to find.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use futures_util::StreamExt;
use serde_json::json;
use toolonce::{Outcome, Toolbox, WriteOptions};

use crate::bench::args::LEASE;
use crate::bench::runner::Bench;
use crate::bench::workload::{Charge, EXPIRING_TOOL};
use crate::exit;

/// Concurrent callers of a fill: enough to keep a network store's connections busy.
const CALLERS: usize = 64;
/// Fill operations are numbered from here: the rounds number theirs from 0, and their
/// replayed operations down from `u64::MAX`.
pub(super) const FIRST: u64 = 1 << 48;
/// How long an expiring entry is kept once recorded.
pub(super) const EXPIRING_RETENTION: Duration = Duration::from_secs(1);

/// A toolbox on the run's store and scope whose one tool, [`EXPIRING_TOOL`], records its
/// entries for [`EXPIRING_RETENTION`] only.
pub(super) fn expiring_toolbox(bench: &Bench) -> anyhow::Result<Arc<Toolbox>> {
    let options = WriteOptions::new()
        .lease(LEASE)
        .retention(EXPIRING_RETENTION);
    let toolbox = Toolbox::builder(Arc::clone(&bench.store))
        .scope(bench.scope.clone())
        .write_with(Charge(EXPIRING_TOOL), options)
        .build()
        .map_err(exit::internal)?;
    Ok(Arc::new(toolbox))
}

/// Calls `tool` once for each of `numbers`, [`CALLERS`] at a time; each must execute.
pub(super) async fn fill(
    toolbox: &Arc<Toolbox>,
    tool: &'static str,
    numbers: Range<u64>,
) -> anyhow::Result<()> {
    let mut answers = futures_util::stream::iter(numbers)
        .map(|n| {
            let toolbox = Arc::clone(toolbox);
            async move { toolbox.call(tool, json!({"n": n, "cents": 500})).await }
        })
        .buffer_unordered(CALLERS);
    while let Some(answer) = answers.next().await {
        if answer.outcome != Outcome::Executed {
            bail!(
                "filling the store, a call came out {:?}: {}",
                answer.outcome,
                answer.content
            );
        }
    }
    Ok(())
}
