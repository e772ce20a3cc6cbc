//! The process's own tallies of the calls it answered as replays and as in-flight refusals,
//! for the console's chart (`GET /console/api/stats`): the recorder [`super::install`] sets
//! is the Prometheus one wrapped in [`Tally`], which adds to these totals whatever the core
//! adds to `toolonce_calls_total{outcome="replayed"|"replayed_failure"|"in_flight"}`. So the
//! chart and `/metrics` count the same calls, and the exporter keeps no other copy.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use metrics::{
    Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use toolonce::layer::CALLS_METRIC;

static REPLAYS: AtomicU64 = AtomicU64::new(0);
static IN_FLIGHT: AtomicU64 = AtomicU64::new(0);

/// The calls this process answered since it started, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    /// Duplicates suppressed: the recorded result or error given again.
    pub(crate) replays: u64,
    /// Refused because the same operation was still running.
    pub(crate) in_flight: u64,
}

pub(crate) fn totals() -> Totals {
    Totals {
        replays: REPLAYS.load(Ordering::Relaxed),
        in_flight: IN_FLIGHT.load(Ordering::Relaxed),
    }
}

/// Which tally a counter's increments go to, if any.
fn tally_of(key: &Key) -> Option<&'static AtomicU64> {
    if key.name() != CALLS_METRIC {
        return None;
    }
    let outcome = key.labels().find(|l| l.key() == "outcome")?;
    match outcome.value() {
        "replayed" | "replayed_failure" => Some(&REPLAYS),
        "in_flight" => Some(&IN_FLIGHT),
        _ => None,
    }
}

/// A recorder that passes everything to `R` and tallies the calls counters it is asked for.
pub(crate) struct Tally<R>(pub(crate) R);

/// A counter whose increments go to the exporter's counter and to a tally.
struct Tee {
    inner: Counter,
    tally: &'static AtomicU64,
}

impl CounterFn for Tee {
    fn increment(&self, value: u64) {
        self.inner.increment(value);
        self.tally.fetch_add(value, Ordering::Relaxed);
    }

    fn absolute(&self, value: u64) {
        self.inner.absolute(value);
    }
}

impl<R: Recorder> Recorder for Tally<R> {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        let inner = self.0.register_counter(key, metadata);
        match tally_of(key) {
            Some(tally) => Counter::from_arc(Arc::new(Tee { inner, tally })),
            None => inner,
        }
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.0.register_gauge(key, metadata)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        self.0.register_histogram(key, metadata)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics::Label;

    #[test]
    fn only_the_replayed_and_in_flight_calls_counters_are_tallied() {
        let key = |name: &'static str, outcome: &'static str| {
            Key::from_parts(
                name,
                vec![
                    Label::from_static_parts("tool", "charge"),
                    Label::from_static_parts("outcome", outcome),
                ],
            )
        };
        assert!(std::ptr::eq(
            tally_of(&key(CALLS_METRIC, "replayed")).unwrap(),
            &REPLAYS
        ));
        assert!(std::ptr::eq(
            tally_of(&key(CALLS_METRIC, "replayed_failure")).unwrap(),
            &REPLAYS
        ));
        assert!(std::ptr::eq(
            tally_of(&key(CALLS_METRIC, "in_flight")).unwrap(),
            &IN_FLIGHT
        ));
        assert!(tally_of(&key(CALLS_METRIC, "executed")).is_none());
        assert!(tally_of(&key("toolonce_takeovers_total", "replayed")).is_none());
    }
}
