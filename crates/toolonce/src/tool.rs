//! Tool kinds at the type level: a [`ReadTool`] runs directly, a [`WriteTool`] only through the
//! layer, because its handler needs a [`WriteContext`] and only this crate can build one.

use std::fmt;
use std::future::Future;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::key::{IDEMPOTENCY_KEY_HEADER, OperationKey};
use crate::policy::OnExpired;

/// A tool without side effects: never claimed, never cached; retrying it is free.
///
/// ```
/// use toolonce::{ReadTool, ToolError};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Args { account: String }
///
/// struct Balance;
///
/// impl ReadTool for Balance {
///     type Args = Args;
///     type Output = u64;
///     fn name(&self) -> &str { "get_balance" }
///     fn description(&self) -> &str { "The balance of an account, in cents." }
///     async fn call(&self, args: Args) -> Result<u64, ToolError> {
///         Ok(if args.account == "acct_1" { 12_500 } else { 0 })
///     }
/// }
/// ```
pub trait ReadTool: Send + Sync + 'static {
    /// The arguments, deserialized from the model's JSON; their JSON Schema is shown to the model.
    type Args: DeserializeOwned + JsonSchema + Send + 'static;
    /// The result, serialized to JSON for the model.
    type Output: Serialize + Send + 'static;

    /// The name the model calls the tool by.
    fn name(&self) -> &str;
    /// What the tool does, for the model.
    fn description(&self) -> &str;
    /// Runs the tool.
    fn call(
        &self,
        args: Self::Args,
    ) -> impl Future<Output = Result<Self::Output, ToolError>> + Send;
}

/// A tool with side effects. It runs only through the layer ([`Toolbox`](crate::Toolbox) or
/// [`Layer`](crate::Layer)), at most once per operation key while its entry lives.
///
/// The handler gets a [`WriteContext`] holding the operation key, and must hand that key to
/// every downstream system that accepts one (an HTTP `Idempotency-Key` header, a payment
/// provider's idempotency token): that is what covers a crash between the downstream success and
/// the layer recording the result.
pub trait WriteTool: Send + Sync + 'static {
    /// The arguments, deserialized from the model's JSON; their JSON Schema is shown to the model.
    ///
    /// The operation is keyed on the arguments as this type sees them: a field it ignores (a
    /// `note` the model added, a member of a nested object the type has no field for) is left
    /// out of the key and the fingerprint, since two calls the tool cannot tell apart must be one
    /// operation. Use `#[serde(deny_unknown_fields)]` to refuse such fields instead.
    type Args: DeserializeOwned + JsonSchema + Send + 'static;
    /// The result, serialized to JSON, stored, and replayed to duplicates.
    type Output: Serialize + Send + 'static;

    /// The name the model calls the tool by (part of the key).
    fn name(&self) -> &str;
    /// What the tool does, for the model.
    fn description(&self) -> &str;
    /// JSON Pointers (RFC 6901) of the argument fields that define the operation, when not all
    /// of them do (say, a free-text `note` the model may rephrase). Empty (the default) means
    /// all arguments. A duplicate whose key fields match but whose other arguments differ is a
    /// conflict and is not executed.
    fn key_fields(&self) -> Vec<String> {
        Vec::new()
    }
    /// Whether the downstream system honours the operation key: it drops a second request
    /// that carries the key of one it already performed (a payment API with `Idempotency-Key`).
    /// Then running an `unknown` operation again is safe, and the default policy is
    /// [`OnExpired::Rerun`]; otherwise (the default, `false`) it is [`OnExpired::Hold`].
    fn honours_key(&self) -> bool {
        false
    }
    /// What a duplicate does when an earlier attempt of its operation was interrupted (its
    /// lease expired without a result), unless the tool's [`WriteOptions`](crate::WriteOptions)
    /// say otherwise. By default [`OnExpired::Rerun`] if the tool
    /// [honours the key](Self::honours_key), else [`OnExpired::Hold`]. A tool that implements
    /// [`verify`](Self::verify) returns [`OnExpired::Verify`] here (Rust cannot tell whether a
    /// default method was overridden, so the tool says it).
    fn on_expired(&self) -> OnExpired {
        if self.honours_key() {
            OnExpired::Rerun
        } else {
            OnExpired::Hold
        }
    }
    /// Under [`OnExpired::Verify`]: asks the downstream system, by the key
    /// ([`WriteContext::key`]), whether the interrupted attempt took effect. "Is there a charge
    /// with this idempotency key?" [`Verified::Done`] with the result the tool would have
    /// returned records and replays it; [`Verified::NotDone`] runs the tool again (with the same
    /// key); [`Verified::CannotTell`] (the default) holds. A probe that fails should answer
    /// `CannotTell`: holding is always safe.
    ///
    /// It is asked only under [`OnExpired::Verify`]: a tool that implements it must also
    /// return that from [`on_expired`](Self::on_expired) (or be given it in its
    /// [`WriteOptions`](crate::WriteOptions)); otherwise the default policy applies and this
    /// probe is never called.
    fn verify(
        &self,
        ctx: &WriteContext,
        args: &Self::Args,
    ) -> impl Future<Output = Verified> + Send {
        let _ = (ctx, args);
        std::future::ready(Verified::CannotTell)
    }
    /// Runs the tool, once per operation.
    ///
    /// The lease heartbeat runs as a task of its own, so a handler that blocks its thread keeps
    /// its lease on a multi-thread runtime; on a current-thread runtime move blocking work to
    /// `tokio::task::spawn_blocking` (see [`Layer::run`](crate::Layer::run), "Runtime").
    fn call(
        &self,
        ctx: WriteContext,
        args: Self::Args,
    ) -> impl Future<Output = Result<Self::Output, ToolError>> + Send;
}

/// What a verify probe learned about an operation whose earlier attempt was interrupted (see
/// [`OnExpired::Verify`]).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Verified {
    /// It took effect downstream, with this result: recorded and replayed, not run again.
    Done(serde_json::Value),
    /// It did not take effect: run it again (with the same key).
    NotDone,
    /// The downstream system cannot say: held, as under
    /// [`OnExpired::Hold`].
    CannotTell,
}

/// What a write tool's handler knows about the operation it runs. Only the layer builds one.
#[derive(Clone, Debug)]
pub struct WriteContext {
    key: OperationKey,
    attempt_reclaimed: bool,
}

impl WriteContext {
    pub(crate) fn new(key: OperationKey, attempt_reclaimed: bool) -> Self {
        WriteContext {
            key,
            attempt_reclaimed,
        }
    }

    /// The operation key: the same for every duplicate of this operation.
    pub fn key(&self) -> &OperationKey {
        &self.key
    }

    /// The header to send downstream: `("Idempotency-Key", "idem:…")`.
    pub fn idempotency_header(&self) -> (&'static str, &str) {
        (IDEMPOTENCY_KEY_HEADER, self.key.as_str())
    }

    /// Whether an earlier attempt of this operation may have taken effect downstream: this call
    /// took over an `unknown` operation (an earlier attempt's lease expired without a result,
    /// and the policy reran it or a verify probe said it was not done), or waited on an earlier
    /// run that then vanished without a result (its owner failed transiently, or an operator
    /// released it). Handing the key downstream is what makes running again safe either way.
    /// A verify probe is always given `true`.
    ///
    /// `false` proves nothing: a store may have forgotten an expired earlier attempt (an entry
    /// kept past its retention, or written by an older version that did not keep `unknown`
    /// entries).
    pub fn may_have_run_before(&self) -> bool {
        self.attempt_reclaimed
    }
}

/// Whether running a failed operation again may succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorClass {
    /// A timeout, an outage, a rate limit: the entry is deleted and a duplicate runs again.
    Transient,
    /// Bad input, a declined card: the error is stored and replayed to duplicates.
    Permanent,
}

/// An error from a tool, as the model sees it and the store keeps it.
///
/// `?` converts [`std::io::Error`] and a [`tokio::time::timeout`]'s `Elapsed` (both transient).
/// For your own error types, write a `From` impl that says which of their cases may succeed on
/// another try ([`transient`](Self::transient)) and which never will
/// ([`permanent`](Self::permanent)): `examples/agent_loop.rs` shows one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolError {
    /// The text shown to the model.
    pub message: String,
    /// Transient or permanent.
    pub class: ErrorClass,
    /// Optional structured detail kept with the error and replayed with it (the MCP proxy keeps
    /// the server's whole answer here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
}

impl ToolError {
    /// A transient error: the operation may be tried again.
    pub fn transient(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
            class: ErrorClass::Transient,
            detail: None,
        }
    }

    /// A permanent error: stored and replayed to every duplicate.
    pub fn permanent(message: impl Into<String>) -> Self {
        ToolError {
            message: message.into(),
            class: ErrorClass::Permanent,
            detail: None,
        }
    }

    /// Attaches structured detail.
    pub fn with_detail(mut self, detail: serde_json::Value) -> Self {
        self.detail = Some(detail);
        self
    }

    /// Whether the error is transient.
    pub fn is_transient(&self) -> bool {
        self.class == ErrorClass::Transient
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ToolError {}

/// An I/O error (a refused or reset connection, a socket timeout, a full disk) is
/// **transient**, so `?` on one in a tool does the usual right thing: the entry is released and
/// a duplicate runs the tool again, with the same key. Whether a request that failed this way
/// reached the downstream system is unknown, which is why the key goes downstream: it lets the
/// downstream system drop the second attempt if the first one did arrive. Map the error
/// yourself ([`ToolError::permanent`]) when it means the operation can never succeed.
impl From<std::io::Error> for ToolError {
    fn from(error: std::io::Error) -> Self {
        ToolError::transient(error.to_string())
    }
}

/// A [`tokio::time::timeout`] that ran out is **transient**, for the reasons given for I/O
/// errors: trying again (with the same key downstream) may succeed.
impl From<tokio::time::error::Elapsed> for ToolError {
    fn from(_: tokio::time::error::Elapsed) -> Self {
        ToolError::transient(crate::texts::Text::ToolTimedOut.fill(&[]))
    }
}
