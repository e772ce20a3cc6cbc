//! The figures: what one side of one round measured ([`Sample`]), the process's CPU clock,
//! and a row of the report made of the rounds of both sides (medians over rounds, percentiles
//! over every operation).

use std::time::Duration;

use super::workload::Workload;

/// What one side of one round measured.
pub(super) struct Sample {
    pub(super) wall: Duration,
    pub(super) latencies: Vec<Duration>,
    /// Redis: the server's CPU time over the round (microseconds, `INFO cpu`).
    pub(super) server_us: Option<f64>,
    /// This process's CPU time over the round (microseconds, user and system, every thread):
    /// the client's side of the cost. The two sides never run at once, so it is theirs alone.
    pub(super) client_us: Option<f64>,
}

/// The CPU time this process has used so far, in microseconds, where the system tells it.
pub(super) fn process_cpu_us() -> Option<f64> {
    #[cfg(unix)]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        Some(t.tv_sec as f64 * 1e6 + t.tv_nsec as f64 / 1e3)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// A row of the report.
pub(super) struct Row {
    pub(super) workload: Workload,
    pub(super) concurrency: u64,
    pub(super) ours_ops_s: f64,
    pub(super) raw_ops_s: Option<f64>,
    pub(super) p50: Duration,
    pub(super) p99: Duration,
    pub(super) raw_p50: Option<Duration>,
    pub(super) raw_p99: Option<Duration>,
    pub(super) ours_server_us: Option<f64>,
    pub(super) raw_server_us: Option<f64>,
    pub(super) ours_client_us: Option<f64>,
    pub(super) raw_client_us: Option<f64>,
    /// The median over rounds of each round's toolonce ÷ floor throughput: the two sides of a
    /// round ran back to back, so a change in the machine's load between rounds cancels out.
    pub(super) ratio: Option<f64>,
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

fn percentiles(samples: &[Sample]) -> (Duration, Duration) {
    let mut all: Vec<Duration> = samples
        .iter()
        .flat_map(|s| s.latencies.iter().copied())
        .collect();
    all.sort();
    let at = |q: f64| all[((all.len() as f64 * q).ceil() as usize).clamp(1, all.len()) - 1];
    (at(0.5), at(0.99))
}

pub(super) fn summarize(
    workload: Workload,
    concurrency: u64,
    ours: &[Sample],
    raw: &[Sample],
) -> Row {
    let ops_s = |s: &[Sample]| {
        median(
            s.iter()
                .map(|x| x.latencies.len() as f64 / x.wall.as_secs_f64())
                .collect(),
        )
    };
    let per_op = |s: &[Sample], total: fn(&Sample) -> Option<f64>| -> Option<f64> {
        let per_op: Option<Vec<f64>> = s
            .iter()
            .map(|x| total(x).map(|us| us / x.latencies.len() as f64))
            .collect();
        per_op.filter(|v| !v.is_empty()).map(median)
    };
    let server = |s: &[Sample]| per_op(s, |x| x.server_us);
    let client = |s: &[Sample]| per_op(s, |x| x.client_us);
    let (p50, p99) = percentiles(ours);
    let (raw_p50, raw_p99) = if raw.is_empty() {
        (None, None)
    } else {
        let (a, b) = percentiles(raw);
        (Some(a), Some(b))
    };
    Row {
        workload,
        concurrency,
        ours_ops_s: ops_s(ours),
        raw_ops_s: (!raw.is_empty()).then(|| ops_s(raw)),
        p50,
        p99,
        raw_p50,
        raw_p99,
        ours_server_us: server(ours),
        raw_server_us: server(raw),
        ours_client_us: client(ours),
        raw_client_us: client(raw),
        ratio: (!raw.is_empty()).then(|| {
            median(
                ours.iter()
                    .zip(raw)
                    .map(|(o, r)| {
                        let rate = |x: &Sample| x.latencies.len() as f64 / x.wall.as_secs_f64();
                        rate(o) / rate(r)
                    })
                    .collect(),
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A round of `ops` operations of `latency_us` each, over `wall_ms`.
    fn sample(ops: usize, wall_ms: u64, latency_us: u64) -> Sample {
        Sample {
            wall: Duration::from_millis(wall_ms),
            latencies: vec![Duration::from_micros(latency_us); ops],
            server_us: None,
            client_us: None,
        }
    }

    #[test]
    fn the_median_is_the_middle_value_or_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![7.0]), 7.0);
    }

    #[test]
    fn percentiles_rank_every_operation_of_every_round_together() {
        let one = Sample {
            latencies: (1..=50).map(Duration::from_micros).collect(),
            ..sample(0, 1, 0)
        };
        let two = Sample {
            latencies: (51..=100).rev().map(Duration::from_micros).collect(),
            ..sample(0, 1, 0)
        };
        assert_eq!(
            percentiles(&[two, one]),
            (Duration::from_micros(50), Duration::from_micros(99))
        );
        assert_eq!(
            percentiles(&[sample(1, 1, 7)]),
            (Duration::from_micros(7), Duration::from_micros(7))
        );
    }

    #[test]
    fn a_rows_ratio_is_the_median_of_each_rounds_own_ratio_not_the_ratio_of_the_medians() {
        // toolonce at 100, 50 and 25 op/s; the floor, in the same rounds, at 400, 10 and 30.
        let ours = [
            sample(100, 1000, 1),
            sample(100, 2000, 1),
            sample(100, 4000, 1),
        ];
        let raw = [
            sample(400, 1000, 1),
            sample(10, 1000, 1),
            sample(30, 1000, 1),
        ];
        let row = summarize(Workload::FirstTime, 1, &ours, &raw);
        assert_eq!(row.ours_ops_s, 50.0);
        assert_eq!(row.raw_ops_s, Some(30.0));
        // Rounds' ratios 0.25, 5 and 0.83: their median, where the medians' ratio is 1.67.
        let ratio = row.ratio.expect("a ratio");
        assert!((ratio - 25.0 / 30.0).abs() < 1e-9, "{ratio}");
    }

    #[test]
    fn cpu_per_operation_is_the_median_over_rounds_and_absent_if_a_round_lacks_it() {
        let with = |ops, client| Sample {
            client_us: Some(client),
            server_us: Some(client * 2.0),
            ..sample(ops, 1000, 1)
        };
        let ours = [with(10, 100.0), with(20, 100.0), with(10, 300.0)];
        let row = summarize(Workload::Replay, 8, &ours, &[]);
        // 10, 5 and 30 µs per operation.
        assert_eq!(row.ours_client_us, Some(10.0));
        assert_eq!(row.ours_server_us, Some(20.0));
        assert_eq!(
            (row.raw_ops_s, row.ratio, row.raw_client_us),
            (None, None, None)
        );
        assert_eq!(row.raw_p50, None);
        let mixed = [with(10, 100.0), sample(10, 1000, 1)];
        assert_eq!(
            summarize(Workload::Replay, 1, &mixed, &[]).ours_client_us,
            None
        );
    }
}
