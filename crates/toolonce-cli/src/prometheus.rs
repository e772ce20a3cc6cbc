//! `/metrics`: the Prometheus text exposition of what the core counts through the `metrics`
//! facade (`toolonce_calls_total`, `toolonce_call_duration_seconds`,
//! `toolonce_takeovers_total`) and of gauges sampled from the store
//! (`toolonce_entries{state}`, `toolonce_oldest_unknown_age_seconds`). Every server that
//! serves `/metrics` (the gateway, the console) calls [`install`] once at start and answers the
//! route with [`render`]; the exporter crate runs no listener of its own.
//!
//! The recorder also tallies replays and in-flight refusals for the console's chart
//! ([`tally`]).
//!
//! Labels are tool, outcome and state only: never a key, a scope, a principal or a run id,
//! which would make one series per operation (and show who called what).

pub(crate) mod tally;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use toolonce::layer::DURATION_METRIC;
use toolonce::{State, Store};

/// The gauge of live entries, by state.
pub(crate) const ENTRIES_METRIC: &str = "toolonce_entries";
/// The gauge of how long the oldest `unknown` entry has waited for a person, in seconds (0
/// when there is none).
pub(crate) const OLDEST_UNKNOWN_METRIC: &str = "toolonce_oldest_unknown_age_seconds";
/// The counter of census queries that failed or timed out (the gauges then keep their last
/// values).
pub(crate) const CENSUS_FAILURES_METRIC: &str = "toolonce_census_failures_total";

/// Bucket bounds of the duration histogram, in seconds: a replay takes about a millisecond, a
/// tool call up to minutes.
const DURATION_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// The store is counted at most this often, however often the route is scraped: a scrape
/// storm costs the store one aggregate query per interval.
const CENSUS_INTERVAL: Duration = Duration::from_secs(5);
/// How long one census may take before the scrape answers without it.
const CENSUS_TIMEOUT: Duration = Duration::from_secs(2);
/// How often the recorder's histogram samples are folded in when nobody scrapes, so that
/// they never pile up.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the Prometheus recorder as the `metrics` facade's global one (once per process;
/// later calls return the same handle) and starts its upkeep thread. Fails if another
/// recorder was installed first.
pub(crate) fn install() -> anyhow::Result<&'static PrometheusHandle> {
    if let Some(handle) = HANDLE.get() {
        return Ok(handle);
    }
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(DURATION_METRIC.to_owned()), DURATION_BUCKETS)?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(tally::Tally(recorder))
        .map_err(|e| anyhow::anyhow!("cannot install the metrics recorder: {e}"))?;
    let handle = HANDLE.get_or_init(|| handle);
    describe();
    std::thread::Builder::new()
        .name("toolonce-metrics-upkeep".into())
        .spawn(|| {
            loop {
                std::thread::sleep(UPKEEP_INTERVAL);
                if let Some(handle) = HANDLE.get() {
                    handle.run_upkeep();
                }
            }
        })?;
    Ok(handle)
}

/// The `# HELP` lines.
fn describe() {
    use toolonce::layer::{CALLS_METRIC, TAKEOVERS_METRIC};
    metrics::describe_counter!(CALLS_METRIC, "Write calls, by tool and outcome.");
    metrics::describe_histogram!(
        DURATION_METRIC,
        metrics::Unit::Seconds,
        "Write calls' durations (claim, run, record), by tool and outcome."
    );
    metrics::describe_counter!(
        TAKEOVERS_METRIC,
        "Takeovers of unknown operations (run again with the same key), by tool."
    );
    metrics::describe_gauge!(ENTRIES_METRIC, "Live entries in the store, by state.");
    metrics::describe_gauge!(
        OLDEST_UNKNOWN_METRIC,
        metrics::Unit::Seconds,
        "How long the oldest unknown entry has waited for a person (0: none)."
    );
    metrics::describe_counter!(
        CENSUS_FAILURES_METRIC,
        "Store census queries that failed or timed out."
    );
}

/// The exposition text, after sampling the store's census if the last sample is older than
/// [`CENSUS_INTERVAL`]. Installs the recorder if nobody did ([`install`]'s error, if any, is
/// the answer's text then: a misconfiguration, not a secret).
pub(crate) async fn render(store: &dyn Store) -> String {
    let handle = match install() {
        Ok(handle) => handle,
        Err(e) => return format!("# {e}\n"),
    };
    sample(store).await;
    handle.render()
}

/// When the census was last taken; the lock keeps concurrent scrapes from counting twice.
static LAST_CENSUS: tokio::sync::Mutex<Option<Instant>> = tokio::sync::Mutex::const_new(None);

async fn sample(store: &dyn Store) {
    let mut last = LAST_CENSUS.lock().await;
    if last.is_some_and(|at| at.elapsed() < CENSUS_INTERVAL) {
        return;
    }
    *last = Some(Instant::now());
    let census = match tokio::time::timeout(CENSUS_TIMEOUT, store.census()).await {
        Ok(Ok(Some(census))) => census,
        // A store that cannot count cheaply (Redis): no entry gauges at all.
        Ok(Ok(None)) => return,
        Ok(Err(e)) => {
            tracing::warn!(target: "toolonce::metrics", error = %e.report(), "cannot count the store's entries");
            metrics::counter!(CENSUS_FAILURES_METRIC).increment(1);
            return;
        }
        Err(_) => {
            tracing::warn!(target: "toolonce::metrics", timeout = ?CENSUS_TIMEOUT, "counting the store's entries timed out");
            metrics::counter!(CENSUS_FAILURES_METRIC).increment(1);
            return;
        }
    };
    for state in [State::Running, State::Unknown, State::Done, State::Failed] {
        // Counts far below 2^53 are exact as f64.
        #[allow(clippy::cast_precision_loss)]
        let count = census.count(state) as f64;
        metrics::gauge!(ENTRIES_METRIC, "state" => state.as_str()).set(count);
    }
    let waited = census.oldest_unknown.unwrap_or_default();
    metrics::gauge!(OLDEST_UNKNOWN_METRIC).set(waited.as_secs_f64());
}
