//! What a write call answers: its [`Outcome`], the [`WriteAnswer`], and the texts the model
//! reads when the layer answers instead of the tool (in flight, conflict, held, store
//! unavailable, misconfigured). Each text says what happened and whether retrying can help,
//! since the model acts on nothing else.

use serde::Serialize;
use serde_json::Value;

use crate::key::{Derived, OperationKey};
use crate::store::{Fenced, Recorded};
use crate::tool::ToolError;

use super::replay::ReplayNote;
use crate::texts::Text;

/// How a write call ended. Every answer carries one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// The tool ran (successfully or not) in this call. Read tools always end here.
    Executed,
    /// A duplicate: the stored result of the first run was returned; nothing ran.
    Replayed,
    /// A duplicate of an operation that failed permanently: the stored error was returned.
    ReplayedFailure,
    /// The same operation is running elsewhere right now; this call did not run it.
    InFlight,
    /// The key fields match an earlier operation but the other arguments differ; not run.
    Conflict,
    /// The arguments did not fit the tool's schema (or the limits), or the call's
    /// [`WriteOptions`] are invalid; nothing was claimed or run.
    ///
    /// [`WriteOptions`]: crate::WriteOptions
    InvalidArguments,
    /// No tool of that name is registered.
    UnknownTool,
    /// The store could not be used, so the write tool was not run (fail closed).
    StoreUnavailable,
    /// An earlier attempt of this operation was interrupted (its lease expired without a
    /// result), so whether it took effect is unknown, and the tool's [`OnExpired`] policy said
    /// not to run it again: nothing ran. A person must check and settle it
    /// (`toolonce resolve`, [`Store::resolve`]).
    ///
    /// [`OnExpired`]: crate::OnExpired
    /// [`Store::resolve`]: crate::Store::resolve
    Unknown,
}

impl Outcome {
    /// The outcome as a `snake_case` word, as logs and JSON spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Executed => "executed",
            Outcome::Replayed => "replayed",
            Outcome::ReplayedFailure => "replayed_failure",
            Outcome::InFlight => "in_flight",
            Outcome::Conflict => "conflict",
            Outcome::InvalidArguments => "invalid_arguments",
            Outcome::UnknownTool => "unknown_tool",
            Outcome::StoreUnavailable => "store_unavailable",
            Outcome::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The answer of [`Layer::run`](crate::Layer::run). `R` is the result's form: a `Value` from
/// every public way in; the layer itself answers with the result as the store kept it
/// ([`Recorded`]), which the [`Toolbox`](crate::Toolbox) hands on without decoding a replayed
/// result.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct WriteAnswer<R = Value> {
    /// How the call ended.
    pub outcome: Outcome,
    /// The operation key.
    pub key: OperationKey,
    /// The tool's result, or the error to show the model (the tool's own, or the layer's
    /// explanation for `in_flight`, `conflict` and `store_unavailable`). The layer's texts are
    /// written for a model; for `store_unavailable` the store's own error, for an operator, is
    /// in the error's `detail` under [`STORE_ERROR`].
    pub result: Result<R, ToolError>,
    /// What the caller should know about how the outcome was kept, when it is not simply
    /// recorded: it may not survive a failover of the store (fewer replicas acknowledged it
    /// than asked), it could not be recorded at all, or the claim was lost while the tool ran.
    /// Written for a person (the surfaces pass it on: `_meta["toolonce/notice"]` over MCP, a
    /// line on stderr from `toolonce exec`, `Answer.notice` in Python); `None` otherwise.
    pub notice: Option<String>,
    /// For a replay ([`Outcome::Replayed`], [`Outcome::ReplayedFailure`]): what the model is
    /// told beside the recorded result, which stays as it was (when the earlier call's outcome
    /// was recorded, the key, and how to repeat the action on purpose). The surfaces render
    /// it: the toolbox as a second text block after the result, the MCP proxy as a text content
    /// item and `_meta` members. `None` for every other outcome.
    pub replay: Option<ReplayNote>,
}

impl WriteAnswer<Recorded> {
    /// The same answer with its result as a value.
    pub(crate) fn into_values(self) -> WriteAnswer {
        WriteAnswer {
            outcome: self.outcome,
            key: self.key,
            result: self.result.map(Recorded::into_value),
            notice: self.notice,
            replay: self.replay,
        }
    }
}

/// What the caller of an executed call is told when its outcome was not simply recorded (see
/// [`WriteAnswer::notice`]); `None` when it was. `settled` is what recording it answered
/// (`None`: it could not be recorded at all).
pub(crate) fn settle_notice(settled: Option<Fenced>) -> Option<String> {
    match settled {
        Some(Fenced::Applied) => None,
        Some(Fenced::AppliedUnreplicated(short)) => {
            Some(Text::NoticeUnreplicated.fill(&[("short", &short.to_string())]))
        }
        Some(Fenced::NotOwner) => Some(Text::NoticeNotOwner.fill(&[])),
        None => Some(Text::NoticeUnrecorded.fill(&[])),
    }
}

/// The answer to a call whose options are invalid: nothing is claimed or run. A mistake of the
/// program, not of the model, so the operator hears of it loudly.
pub(crate) fn misconfigured<R>(tool: &str, op: &Derived, e: &crate::Error) -> WriteAnswer<R> {
    tracing::error!(
        target: "toolonce",
        tool,
        key = %op.key,
        outcome = Outcome::InvalidArguments.as_str(),
        error = %e.report(),
        "write call refused: its write options are invalid; nothing was claimed or run"
    );
    WriteAnswer {
        outcome: Outcome::InvalidArguments,
        key: op.key.clone(),
        notice: None,
        replay: None,
        result: Err(ToolError::permanent(
            Text::Misconfigured.fill(&[("tool", tool), ("error", &e.to_string())]),
        )),
    }
}

/// The key of [`ToolError::detail`] under which an answer the layer wrote carries, for the
/// operator, the store's own error (`store_unavailable`).
pub const STORE_ERROR: &str = "store_error";

/// The key of [`ToolError::detail`] marking the answer to a tool that panicked.
pub(crate) const PANICKED: &str = "panicked";

/// The answer when the store cannot be used. The store's error is in the text (the model may
/// pass it on) and, for the operator's log and the `toolonce` command, in the detail under
/// [`STORE_ERROR`].
pub(crate) fn unavailable(tool: &str, e: &crate::Error) -> ToolError {
    let report = e.report().to_string();
    ToolError::transient(Text::StoreUnavailable.fill(&[("tool", tool), ("report", &report)]))
        .with_detail(serde_json::json!({ STORE_ERROR: report }))
}

/// The answer when the operation's entry is there but cannot be read (written by another
/// writer, or damaged): it was begun, perhaps done, so it is neither run nor called harmless.
pub(crate) fn unreadable(tool: &str, key: &OperationKey, e: &crate::Error) -> ToolError {
    let report = e.report().to_string();
    ToolError::permanent(Text::Unreadable.fill(&[
        ("tool", tool),
        ("key", key.as_str()),
        ("report", &report),
    ]))
    .with_detail(serde_json::json!({ STORE_ERROR: report }))
}

/// The answer under `hold` (or a probe that cannot tell): written for the model, which must
/// neither retry nor assume either way.
pub(crate) fn held(tool: &str, key: &OperationKey) -> ToolError {
    ToolError::permanent(Text::Held.fill(&[("tool", tool), ("key", key.as_str())]))
}

pub(crate) fn in_flight(tool: &str, key: &OperationKey) -> ToolError {
    ToolError::transient(Text::InFlight.fill(&[("tool", tool), ("key", key.as_str())]))
}

pub(crate) fn conflict(tool: &str, key: &OperationKey) -> ToolError {
    ToolError::permanent(Text::Conflict.fill(&[("tool", tool), ("key", key.as_str())]))
}
