//! `toolonce bench`: what safety costs on a given store, measured end to end through the public
//! API (a [`Toolbox`](toolonce::Toolbox) with one write tool) beside the store's raw floor — the
//! minimal unsafe design on the same kind of connection, in the same run: Redis `SET NX PX` +
//! `SET PX` and `GET`; SQL `INSERT … ON CONFLICT DO NOTHING` + `UPDATE` and `SELECT`.
//!
//! Rounds alternate ours and raw (drift in the machine's load hits both alike) and the figures
//! are medians over rounds. Everything the bench writes lives under a prefix, table or file of
//! its own for this run, and is removed at the end (also after Ctrl-C); Redis keys carry an
//! expiry as well, so a killed run leaves nothing for long.
//!
//! Layout: this file is the command (the run from start to clean-up); `args` its arguments and
//! the lease and retention of what it writes, `workload` the write tool and the two workloads,
//! `runner` the rounds, `floor` the raw floor of each store (one file per store), `stats` the
//! figures of a row, `report` the table and the JSON document, `storm` the storm of duplicates
//! (`--storm N`), `scale` the cost as the store grows (`--scale`), `env` the runtime the run
//! reports, what the machine does with an idle CPU, and the run's random id.

use anyhow::Context;
use serde_json::{Value, json};
use toolonce::store::redact_url;

use crate::output::outln;

mod args;
mod env;
mod floor;
mod report;
mod runner;
mod scale;
mod stats;
mod storm;
mod workload;

pub(crate) use args::BenchArgs;
use env::{idle_note, rand_u64, runtime};

pub(crate) async fn run(args: BenchArgs) -> anyhow::Result<std::process::ExitCode> {
    if let Some(callers) = args.storm {
        return storm::run(&args.store, callers, args.json).await;
    }
    if args.scale {
        return scale::run(&args).await;
    }
    let run_id = format!("{:016x}", rand_u64());
    let mut bench = runner::Bench::open(&args.store, &run_id).await?;
    let measured = tokio::select! {
        r = runner::measure(&mut bench, &args) => Some(r),
        _ = tokio::signal::ctrl_c() => None,
    };
    let cleaned = bench.clean_up().await;
    let rows = match measured {
        Some(rows) => rows?,
        None => {
            cleaned.context("cleaning up after Ctrl-C")?;
            eprintln!("toolonce: bench interrupted; what it wrote is removed");
            return Ok(std::process::ExitCode::from(130));
        }
    };
    cleaned.context("cleaning up what the bench wrote")?;
    let store = redact_url(&args.store);
    // Said where the store is waited on: the memory store never is.
    let idle_cpus = bench.kind.has_raw().then(idle_note).flatten();
    if args.json {
        let results: Vec<Value> = rows.iter().map(stats::Row::to_json).collect();
        outln!(
            "{}",
            json!({
                "store": store,
                "runtime": runtime(),
                "idle_cpus": idle_cpus,
                "results": results
            })
        );
    } else {
        report::print_table(&store, &bench.kind, &rows, idle_cpus.as_deref())?;
    }
    Ok(std::process::ExitCode::SUCCESS)
}
