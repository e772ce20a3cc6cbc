//! `toolonce bench --scale`: what toolonce costs as the store grows. The run's own entries are
//! written into the store (its own prefix, table or file, as for the other rows) up to each of
//! `--sizes` in turn, and at each size the bench measures the bytes an entry takes, toolonce's
//! first-time and replay throughput (the runner's rounds, without the raw floor: its rows would
//! share the store being measured), and the time of the operator's `ls`, `purge` and
//! `resolve`. Each fill also writes a tenth of the size again with a 1 s retention, which the
//! size's `purge` removes: the share of a store whose entries expire as they are written.
//!
//! Everything is removed at the end, also after an error or Ctrl-C; if that fails too the
//! command says where the entries are. Layout: this file is the command and the loop over the
//! sizes; `fill` writes the entries, `operator` times the commands, `figures` holds what a
//! size measured and `report` prints it.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use toolonce::store::redact_url;

use super::args::BenchArgs;
use super::env::{idle_note, rand_u64};
use super::runner::{self, Bench};
use super::workload::{EXPIRING_TOOL, TOOL};
use figures::Size;

mod figures;
mod fill;
mod operator;
mod report;

pub(super) async fn run(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    let run_id = format!("{:016x}", rand_u64());
    let mut bench = Bench::open(&args.store, &run_id).await?;
    bench.with_raw = false;
    let measured = tokio::select! {
        r = measure_all(&mut bench, args) => Some(r),
        _ = tokio::signal::ctrl_c() => None,
    };
    let cleaned = clean_up(&mut bench).await;
    if cleaned.is_err() {
        eprintln!(
            "toolonce: bench --scale could not remove what it wrote: {}",
            bench.kind.whereabouts()
        );
    }
    let Some(sizes) = measured else {
        cleaned.context("cleaning up after Ctrl-C")?;
        eprintln!("toolonce: bench interrupted; what it wrote is removed");
        return Ok(ExitCode::from(130));
    };
    let sizes = sizes?;
    cleaned.context("cleaning up what the bench wrote")?;
    let store = redact_url(&args.store);
    let idle_cpus = bench.kind.has_raw().then(idle_note).flatten();
    if args.json {
        report::print_json(&store, &sizes, idle_cpus.as_deref())?;
    } else {
        report::print_table(&store, &sizes, idle_cpus.as_deref())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Every entry of the run, then what the runner removes (the floor's file or tables).
async fn clean_up(bench: &mut Bench) -> anyhow::Result<()> {
    let entries = bench.kind.delete_run_entries().await;
    let rest = bench.clean_up().await;
    entries.and(rest)
}

/// Each size in increasing order, on one store filled further each time.
async fn measure_all(bench: &mut Bench, args: &BenchArgs) -> anyhow::Result<Vec<Size>> {
    bench.kind.check_scalable()?;
    let mut sizes = args.sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let expiring = fill::expiring_toolbox(bench)?;
    let base = bench.kind.bytes_used().await?;
    // Fill operations written so far (live ones, expiring ones).
    let (mut live, mut expired) = (0u64, 0u64);
    let mut out = Vec::new();
    for size in sizes {
        let have = live + bench.entries_written();
        let start = Instant::now();
        let more = size.saturating_sub(have);
        fill::fill(
            &bench.toolbox,
            TOOL,
            fill::FIRST + live..fill::FIRST + live + more,
        )
        .await?;
        let brief = size / 10;
        let numbers = fill::FIRST + expired..fill::FIRST + expired + brief;
        fill::fill(&expiring, EXPIRING_TOOL, numbers).await?;
        let fill_time = start.elapsed();
        let purge_after = Instant::now() + fill::EXPIRING_RETENTION + Duration::from_millis(100);
        (live, expired) = (live + more, expired + brief);
        let entries = have + more;
        let bytes = bench.kind.bytes_used().await?;
        let bytes_per_entry = base
            .zip(bytes)
            .map(|(before, now)| now.saturating_sub(before) as f64 / (entries + brief) as f64);
        bench.fresh_replays();
        let rows = runner::measure(bench, args).await?;
        let timings = operator::time(&bench.store, &bench.scope, purge_after, size).await?;
        out.push(Size {
            entries,
            fill: fill_time,
            filled: more + brief,
            bytes_per_entry,
            rows,
            timings,
        });
    }
    Ok(out)
}
