//! What the layer tells the operator about each write call: one log event in operator wording
//! (never the model's text) and the `toolonce_calls_total` / `toolonce_takeovers_total`
//! counters. Kept apart from the protocol so that reporting can change without touching what a
//! call does.

use super::answer::{Outcome, PANICKED, STORE_ERROR, WriteAnswer};
use crate::store::About;

/// The one event of every write call, in operator wording: what happened, the tool, the key,
/// the outcome, and the tool's own error or the store's where there is one. The text written
/// for the model ("you must not retry it…") stays in the answer and is never logged.
pub(crate) fn log_write_call(tool: &str, about: &About, answer: &WriteAnswer) {
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
/// The counter of takeovers of `unknown` operations, by tool.
pub const TAKEOVERS_METRIC: &str = "toolonce_takeovers_total";

pub(crate) fn count_call(tool: &str, outcome: Outcome) {
    metrics::counter!(
        CALLS_METRIC,
        "tool" => tool.to_owned(),
        "outcome" => outcome.as_str()
    )
    .increment(1);
}

pub(crate) fn count_takeover(tool: &str) {
    metrics::counter!(TAKEOVERS_METRIC, "tool" => tool.to_owned()).increment(1);
}
