//! What the layer tells the operator about each write call: one log event in operator wording
//! (never the model's text), the `toolonce_calls_total` / `toolonce_takeovers_total`
//! counters and the `toolonce_call_duration_seconds` histogram. Kept apart from the protocol so that reporting can change without touching what a
//! call does.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use metrics::{Key, Label, Level, Metadata, SharedString};

use super::answer::{Outcome, PANICKED, STORE_ERROR, WriteAnswer};
use crate::store::About;

/// The one event of every write call, in operator wording: what happened, the tool, the key,
/// the outcome, and the tool's own error or the store's where there is one. The text written
/// for the model ("you must not retry it…") stays in the answer and is never logged.
pub(crate) fn log_write_call<R>(tool: &str, about: &About, answer: &WriteAnswer<R>) {
    let error = answer.result.as_ref().err();
    let detail = |field: &str| {
        error
            .and_then(|e| e.detail.as_ref())
            .and_then(|d| d.get(field))
    };
    let panicked = detail(PANICKED).is_some();
    let what = match answer.outcome {
        Outcome::Executed if panicked => "the tool panicked; whether it took effect is unknown",
        Outcome::Executed if error.is_some() => "the tool ran and returned an error",
        Outcome::Executed => "the tool ran",
        Outcome::Replayed => "duplicate: the recorded result was returned, the tool did not run",
        Outcome::ReplayedFailure => {
            "duplicate of a failed operation: the recorded error was returned, the tool did not run"
        }
        Outcome::InFlight => {
            "the operation is running elsewhere (or a run was interrupted and its lease has not \
             expired): the tool did not run"
        }
        Outcome::Conflict => {
            "the key fields match an earlier operation with other arguments: the tool did not run"
        }
        Outcome::StoreUnavailable => "the store could not be used: the tool did not run",
        Outcome::InvalidArguments => "invalid arguments or options: the tool did not run",
        Outcome::UnknownTool => "unknown tool: nothing ran",
        Outcome::Unknown => {
            "an earlier attempt was interrupted and may have taken effect; held for a person to \
             check: the tool did not run"
        }
    };
    // The tool's own error: from this run, or recorded by the first one.
    let tool_error = match answer.outcome {
        Outcome::Executed if !panicked => error.map(|e| e.message.as_str()),
        Outcome::ReplayedFailure => error.map(|e| e.message.as_str()),
        _ => None,
    };
    let store_error = detail(STORE_ERROR).and_then(serde_json::Value::as_str);
    if answer.outcome == Outcome::Unknown {
        // A person must act: louder than the other outcomes, with what they need to find it.
        tracing::warn!(
            target: "toolonce",
            tool,
            scope = about.scope.as_deref(),
            key = %answer.key,
            outcome = answer.outcome.as_str(),
            "write call: {what}; settle it with `toolonce resolve {}`",
            answer.key
        );
        return;
    }
    tracing::info!(
        target: "toolonce",
        tool,
        key = %answer.key,
        outcome = answer.outcome.as_str(),
        // `Option` fields are left out when `None`.
        tool_error,
        store_error,
        "write call: {what}"
    );
}

/// The counter of write calls, by tool and outcome.
pub const CALLS_METRIC: &str = "toolonce_calls_total";
/// The histogram of write calls' durations in seconds (from the call to its answer: the
/// claim, the tool's run and the record; a replay's is the store's round trips), by tool and
/// outcome.
pub const DURATION_METRIC: &str = "toolonce_call_duration_seconds";
/// The counter of takeovers of `unknown` operations, by tool.
pub const TAKEOVERS_METRIC: &str = "toolonce_takeovers_total";

/// Every outcome, in the order of a tool's [`CallKeys`]. An outcome missing here (one added
/// later) is still counted, with a key built for its call ([`count_call`]).
const OUTCOMES: [Outcome; 9] = [
    Outcome::Executed,
    Outcome::Replayed,
    Outcome::ReplayedFailure,
    Outcome::InFlight,
    Outcome::Conflict,
    Outcome::InvalidArguments,
    Outcome::UnknownTool,
    Outcome::StoreUnavailable,
    Outcome::Unknown,
];

/// How many tool names keep their counter keys: a surface that passes names its clients
/// choose (an MCP gateway) must not grow this without bound; past it, keys are built per call.
const KEPT_TOOLS: usize = 1024;

/// The counter and histogram keys of one tool, one pair per outcome, built once: building a
/// key allocates the tool's name and the label list, on every call (0.67k instructions of a
/// replay under callgrind; 0.33k with the kept keys, the lock and the look-up included).
type CallKeys = Box<[(Key, Key)]>;

static CALL_KEYS: OnceLock<RwLock<HashMap<Box<str>, CallKeys>>> = OnceLock::new();

/// What the `counter!` macro would pass the recorder, said once.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

fn call_key(name: &'static str, tool: SharedString, outcome: Outcome) -> Key {
    Key::from_parts(
        name,
        vec![
            Label::new("tool", tool),
            Label::from_static_parts("outcome", outcome.as_str()),
        ],
    )
}

fn keys_of(tool: &str) -> CallKeys {
    // One copy of the name, shared by the tool's eighteen keys.
    let name = SharedString::from_shared(Arc::from(tool));
    OUTCOMES
        .iter()
        .map(|&outcome| {
            (
                call_key(CALLS_METRIC, name.clone(), outcome),
                call_key(DURATION_METRIC, name.clone(), outcome),
            )
        })
        .collect()
}

/// Counts the call and records its duration (`None`: a call refused before it began, whose
/// duration says nothing, is only counted).
fn record(keys: &(Key, Key), took: Option<Duration>) {
    metrics::with_recorder(|recorder| {
        recorder.register_counter(&keys.0, &METADATA).increment(1);
        if let Some(took) = took {
            recorder
                .register_histogram(&keys.1, &METADATA)
                .record(took.as_secs_f64());
        }
    });
}

/// Counts a call by tool and outcome and records how long it took, with the tool's keys kept
/// for its next calls (at most [`KEPT_TOOLS`] names: past them, keys built for this call).
pub(crate) fn count_call(tool: &str, outcome: Outcome, took: Duration) {
    let Some(slot) = OUTCOMES.iter().position(|&o| o == outcome) else {
        return record(&keys_for_once(tool, outcome), Some(took));
    };
    let cache = CALL_KEYS.get_or_init(RwLock::default);
    {
        let kept = cache.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(keys) = kept.get(tool) {
            return record(&keys[slot], Some(took));
        }
    }
    let mut kept = cache.write().unwrap_or_else(PoisonError::into_inner);
    if kept.len() >= KEPT_TOOLS && !kept.contains_key(tool) {
        drop(kept);
        return record(&keys_for_once(tool, outcome), Some(took));
    }
    let keys = kept.entry(Box::from(tool)).or_insert_with(|| keys_of(tool));
    record(&keys[slot], Some(took));
}

fn keys_for_once(tool: &str, outcome: Outcome) -> (Key, Key) {
    let name = SharedString::from_owned(tool.to_owned());
    (
        call_key(CALLS_METRIC, name.clone(), outcome),
        call_key(DURATION_METRIC, name, outcome),
    )
}

/// Counts a call refused before it began (no duration) with its key built for this call
/// alone: for a name that may be nobody's tool (a client's choice), which must take no room
/// among the kept keys.
pub(crate) fn count_unlisted_call(tool: &str, outcome: Outcome) {
    record(&keys_for_once(tool, outcome), None);
}

pub(crate) fn count_takeover(tool: &str) {
    metrics::counter!(TAKEOVERS_METRIC, "tool" => tool.to_owned()).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kept_counter_keys_stop_growing_at_their_bound() {
        for n in 0..KEPT_TOOLS + 50 {
            count_call(
                &format!("report_bound_{n}"),
                Outcome::Executed,
                Duration::ZERO,
            );
        }
        let kept = CALL_KEYS.get().unwrap().read().unwrap();
        assert_eq!(kept.len(), KEPT_TOOLS);
        // A kept name counts through its own keys: one per outcome, each naming it.
        let keys = kept.get("report_bound_0").unwrap();
        assert_eq!(keys.len(), OUTCOMES.len());
        for ((key, histogram), outcome) in keys.iter().zip(OUTCOMES) {
            assert_eq!(
                histogram.labels().collect::<Vec<_>>(),
                key.labels().collect::<Vec<_>>()
            );
            let labels: Vec<_> = key.labels().map(|l| (l.key(), l.value())).collect();
            assert_eq!(
                labels,
                [("tool", "report_bound_0"), ("outcome", outcome.as_str())]
            );
        }
    }
}
