//! The arguments of `toolonce bench`, and the lease and retention of every entry it writes
//! (shared by the run through toolonce and the Redis floor).

use std::time::Duration;

#[derive(clap::Args, Debug)]
#[command(after_long_help = "\
Rows: first_time (a new operation: claim, run, record) and replay (a duplicate answered from \
the store), at each concurrency. `ratio` is toolonce's throughput over the raw floor's; p50 and \
p99 are toolonce's latencies per operation. The memory store has no raw floor: its rows give \
absolute latencies.")]
pub(crate) struct BenchArgs {
    /// The store to measure: memory://, sqlite://PATH, redis://HOST, redis+cluster://HOSTS,
    /// postgres://HOST. The bench writes beside what is there (its own key prefix, table, or
    /// file next to a SQLite file) and removes what it wrote.
    #[arg(long = "store", value_name = "URL", env = "TOOLONCE_STORE")]
    pub(super) store: String,
    /// Operations per workload, per round and concurrency [default: 2000; 500 with --scale].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    ops: Option<u64>,
    /// Concurrent callers, as a comma-separated list.
    #[arg(long, value_delimiter = ',', default_value = "1,8", value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub(super) concurrency: Vec<u64>,
    /// Interleaved rounds; figures are medians over them [default: 5; 3 with --scale].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1000))]
    rounds: Option<u64>,
    /// Instead of the throughput rows, fire this many concurrent duplicates of one operation
    /// at the store, three times (answered in flight, waiting, and with the store stopped
    /// halfway where the bench can stop it), and report executions and answers.
    #[arg(long, value_name = "CALLERS", value_parser = clap::value_parser!(u64).range(2..=100_000))]
    pub(super) storm: Option<u64>,
    /// Instead of comparing with the raw floor, fill the store with the bench's own entries to
    /// each of --sizes in turn and measure at each: bytes per entry, first-time and replay
    /// throughput (toolonce's rounds only), and the time of `ls`, `purge` and `resolve`.
    #[arg(long, conflicts_with = "storm")]
    pub(super) scale: bool,
    /// The store sizes of --scale, in entries, as a comma-separated list.
    #[arg(long, value_delimiter = ',', default_value = "1000,100000,1000000", requires = "scale", value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub(super) sizes: Vec<u64>,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    pub(super) json: bool,
}

impl BenchArgs {
    /// Operations per workload, per round and concurrency: fewer under `--scale`, whose rounds
    /// should not grow the smallest store many times over.
    pub(super) fn ops(&self) -> u64 {
        self.ops.unwrap_or(if self.scale { 500 } else { 2000 })
    }

    pub(super) fn rounds(&self) -> u64 {
        self.rounds.unwrap_or(if self.scale { 3 } else { 5 })
    }
}

/// Entries outlive the run by this much at most, should it be killed before it cleans up.
pub(super) const RETENTION: Duration = Duration::from_secs(600);
pub(super) const LEASE: Duration = Duration::from_secs(60);
