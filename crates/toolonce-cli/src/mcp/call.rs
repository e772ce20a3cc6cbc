//! One intercepted write call: key it, claim it through the [`Layer`](toolonce::Layer), forward
//! it to the server (with the key in `params._meta`) only if the claim was won, record the
//! server's answer, and answer the client — with the server's own bytes, a replay from the
//! store, or an `isError` result explaining why nothing ran.
//!
//! The operation key's tool part is `SERVER_ID/TOOL`, so same-named tools of two servers
//! sharing a store and a scope are different operations.
//!
//! # What names the operation
//!
//! - **By default, the arguments**: the key is derived from (scope, `SERVER_ID/TOOL`, the
//!   canonical `params.arguments`, or their key fields). No other member of `params` counts:
//!   not `_meta` (progress token, trace context, the per-request protocol version, client
//!   identity and capabilities of protocol 2026-07-28), and not the multi-round-trip members
//!   `requestState` and `inputResponses`.
//! - **Multi-round-trip calls (2026-07-28).** A server may answer `resultType:
//!   "input_required"` (it needs the user's answer first); the client then sends the call
//!   again, with a new id, carrying `inputResponses` and the server's opaque `requestState`.
//!   That answer means nothing has taken effect, so it is never recorded: the claim is released
//!   and the answer passes on as the server sent it. The continuation is the same operation,
//!   not a new one, so it has the same key: it claims it, is forwarded, and its final answer is
//!   recorded; a plain duplicate afterwards, or the continuation sent again because its answer
//!   was lost, replays that answer. Keying on `requestState` would make every round its own
//!   operation (servers mint a fresh state each round, with an expiry or a nonce), so the
//!   continuation sent again would perform the effect again; keying on `inputResponses` would
//!   let a duplicate with other answers to the same question run it twice. The price: once
//!   done, the same call with other answers replays the first result, as any duplicate does.
//! - **A key from the client.** A call that carries `_meta["toolonce/key"]` (the member the
//!   proxy sends downstream; an agent with ids of its own, such as a workflow step id, sets it)
//!   is named by (scope, `SERVER_ID/TOOL`, that key) instead, and the canonical arguments are
//!   only its fingerprint: the same key with other arguments is a conflict, other keys with the
//!   same arguments are other operations. The tool stays in the key so that a step that calls
//!   two tools names two operations. The key must be a string of 1 to 255 visible ASCII
//!   characters; a call with any other is refused with `-32602` and not sent. The client's
//!   text is hashed behind a NUL (which no canonical arguments text contains) into an
//!   operation key of the usual form, which replaces it in the forwarded request, so a client
//!   key never names the same operation as arguments do, and the server sees one key format.
//!   Key fields do not apply. A read passes through with whatever `_meta` it has.
//!
//! How the server's answer is recorded (`on_error`, `on_tool_error` and `failure_retention`
//! are per-tool settings, see [`config`](super::config)):
//!
//! | server answer | recorded as | a duplicate gets |
//! |---|---|---|
//! | `result` | done, for the retention | the same `result` |
//! | `result` with `isError: true` | `on_tool_error = "keep"` (default): failed, for the failure retention, the whole result kept; `"release"`: forgotten | the same `result`; or a fresh run |
//! | JSON-RPC `error` -32700, -32600, -32601, -32602 (refused before the tool ran: parse error, invalid request, method not found, invalid params or unknown tool), and 2026-07-28's -32020, -32021, -32022 (header mismatch, missing client capability, unsupported protocol version) | never recorded | a fresh run |
//! | any other JSON-RPC `error` (such as -32603, an exception that may follow the effect) | `on_error = "keep"` (default): failed, for the failure retention; `"release"`: forgotten | the same `error`; or a fresh run |
//! | `result` with `resultType: "input_required"` (2026-07-28: the server asks for input first) | never recorded: nothing took effect | a fresh run (see *What names the operation* above) |
//! | none: timeout, cancel, server exit | left running until its lease expires, then `unknown` (it may or may not have taken effect) | `in_flight`; after the lease, `on_expired = "hold"` (default): `unknown`, not forwarded, until a person runs `toolonce resolve`; `"rerun"`: a fresh run with the same key |
//!
//! An answer the proxy gives from the store (a replay, or its own explanation: in flight,
//! conflict, store unavailable) carries `_meta["toolonce/outcome"]` and `_meta["toolonce/key"]`
//! beside whatever `_meta` the first answer had; `content` and `isError` are exactly as first
//! recorded. A replayed JSON-RPC error carries the two in its `data` instead. The server's own
//! answer to an executed call passes on untouched.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};
use toolonce::key::{self, Derived, Fingerprint, OperationKey};
use toolonce::{About, OnExpired, Outcome, ToolError, WriteAnswer};

use super::batch::Batch;
use super::config::{OnError, Policy};
use super::jsonrpc::{self, IdKey};
use super::protocol::{
    HEADER_MISMATCH, INVALID_PARAMS, INVALID_REQUEST, META_KEY, METHOD_NOT_FOUND,
    MISSING_CLIENT_CAPABILITY, OUTCOME_KEY, PARSE_ERROR, UNSUPPORTED_PROTOCOL_VERSION,
};
use super::proxy::{Route, Shared, UnsentCall};
use super::stdio::ClientOut;

/// A write call taken from the client's stream.
#[derive(Debug)]
pub(super) struct Call {
    /// The client's request id, forwarded unchanged: the server's answer comes back with it.
    pub(super) id: Value,
    pub(super) id_key: IdKey,
    pub(super) tool: String,
    pub(super) arguments: Value,
    /// `params._meta["toolonce/key"]`, as the client sent it (not checked yet).
    pub(super) client_key: Option<Value>,
    /// Whether the request names its protocol version in `_meta` (2026-07-28 or later).
    pub(super) modern: bool,
    /// The request as the client sent it.
    pub(super) request: Vec<u8>,
}

/// Where the answer to a call goes.
#[derive(Debug)]
pub(super) enum Sink {
    Client(ClientOut),
    Batch(Arc<Batch>, usize),
}

impl Sink {
    /// Sends the answer, or settles the batch slot without one (a cancelled call).
    pub(super) fn answer(self, line: Option<Vec<u8>>) {
        match self {
            Sink::Client(out) => {
                if let Some(line) = line {
                    out.send(line);
                }
            }
            Sink::Batch(batch, slot) => batch.settle(slot, line),
        }
    }
}

/// Why a forwarded call stopped waiting for the server. The layer's future is then dropped,
/// which stops the lease heartbeat: the entry stays `running` until its lease expires, because
/// the server may or may not have performed the operation.
#[derive(Debug)]
enum GiveUp {
    /// The client cancelled and the server did not answer within the grace period.
    Cancelled,
    /// The server did not answer within the call timeout.
    TimedOut(Duration),
    /// The server exited without answering.
    ServerGone,
}

/// Runs one call to the end and answers it.
pub(super) async fn run(
    shared: Arc<Shared>,
    call: Call,
    cancel: watch::Receiver<bool>,
    sink: Sink,
    unsent: UnsentCall,
) {
    let answer = answer(&shared, &call, cancel, &unsent).await;
    drop(unsent);
    shared.routes().calls.remove(&call.id_key);
    sink.answer(answer);
}

async fn answer(
    shared: &Shared,
    call: &Call,
    cancel: watch::Receiver<bool>,
    unsent: &UnsentCall,
) -> Option<Vec<u8>> {
    let policy = shared.config.policy(&call.tool);
    let error_line = |text: &str, outcome: &str, key: Option<&str>| {
        let result = completed(proxy_result(text, outcome, key), call.modern);
        Some(jsonrpc::result_line(&call.id, &result))
    };
    let tool_part = format!("{}/{}", shared.server_id, call.tool);
    let derived = match &call.client_key {
        None => key::derive(
            &shared.scope,
            &tool_part,
            &call.arguments,
            policy.key_fields.as_ref(),
        ),
        Some(client_key) => match check_client_key(client_key) {
            Ok(client_key) => {
                derive_from_client_key(&shared.scope, &tool_part, client_key, &call.arguments)
            }
            Err(why) => {
                tracing::warn!(target: "toolonce::mcp", tool = %call.tool, why, "refused a call with a malformed client key");
                return Some(jsonrpc::error_line(
                    Some(&call.id),
                    INVALID_PARAMS,
                    &format!(
                        "toolonce: _meta[\"toolonce/key\"] names the operation, and must be a \
                         string of 1 to {CLIENT_KEY_MAX} visible ASCII characters (letters, \
                         digits, punctuation; no spaces or control characters), such as a \
                         workflow step id; this one {why}. The call of `{}` was not sent: \
                         nothing ran. Send it with a valid key, or without one to have the \
                         arguments name the operation.",
                        call.tool
                    ),
                ));
            }
        },
    };
    let derived = match derived {
        Ok(derived) => derived,
        Err(e) => {
            return error_line(
                &format!(
                    "Not executed: no operation key can be derived for this call of `{}` ({e}), \
                 and running it without one could perform it twice.",
                    call.tool
                ),
                "not_executed",
                None,
            );
        }
    };
    let response = Mutex::new(None);
    let (give_up_tx, give_up_rx) = oneshot::channel();
    let cancelled = cancel.clone();
    let forward = Forward {
        shared,
        call,
        policy: &policy,
        derived: &derived,
        response: &response,
        unsent,
    };
    // What the entry says it is: an operator reading `toolonce ls` sees the scope, the tool and
    // the server, which the key alone hides.
    let about =
        About::new(shared.scope.clone(), call.tool.clone()).detail(shared.server_id.clone());
    // Both futures are boxed: inline, they made this call's task about 18 KB, which was
    // copied each time the task was spawned and the forward moved (a third of the proxy's
    // instructions per write call, measured with callgrind).
    let run = Box::pin(shared.layer.run_with_about(
        &call.tool,
        &derived,
        &about,
        &policy.options,
        |_ctx| Box::pin(forward.run(cancel, give_up_tx)),
    ));
    let answer = tokio::select! {
        answer = run => answer,
        Ok(reason) = give_up_rx => {
            return give_up_answer(call, &policy, &derived, reason, error_line);
        }
    };
    // Executed and answered by the server: its own bytes, which carry the client's id.
    if let Some(line) = response.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Some(line);
    }
    // Cancelled (before it reached the server, or while waiting for another run of the same
    // operation): the client expects no answer.
    if *cancelled.borrow() {
        return None;
    }
    if answer.outcome == Outcome::Conflict && call.client_key.is_some() {
        return error_line(
            &format!(
                "Conflict: an earlier call of `{}` with the same _meta[\"toolonce/key\"] \
                 (operation {}) had different arguments. This call was not executed. If you \
                 meant the earlier operation, it has already been done; if you meant a new \
                 one, send it with a new key.",
                call.tool, answer.key
            ),
            Outcome::Conflict.as_str(),
            Some(answer.key.as_str()),
        );
    }
    Some(replay(&call.id, answer, call.modern))
}

/// The longest client key accepted, in characters (as an HTTP idempotency key is commonly
/// bounded), so a key stays readable in logs.
const CLIENT_KEY_MAX: usize = 255;

/// The client key in `value`, if it has the accepted shape; else why not.
fn check_client_key(value: &Value) -> Result<&str, String> {
    let key = match value {
        Value::String(key) => key,
        Value::Null => return Err("is null".to_owned()),
        Value::Bool(_) => return Err("is a boolean".to_owned()),
        Value::Number(_) => return Err("is a number".to_owned()),
        Value::Array(_) => return Err("is an array".to_owned()),
        Value::Object(_) => return Err("is an object".to_owned()),
    };
    if key.is_empty() {
        return Err("is empty".to_owned());
    }
    // The key is not quoted back: it may be something the client would rather not see in a
    // log line or a model's context.
    if let Some((at, _)) = key.char_indices().find(|(_, c)| !c.is_ascii_graphic()) {
        return Err(format!(
            "has a space, a control character or a character outside ASCII at byte {at}"
        ));
    }
    if key.len() > CLIENT_KEY_MAX {
        return Err(format!("is {} characters long", key.len()));
    }
    Ok(key)
}

/// The key and fingerprint of a call named by a client key (see the module's docs).
fn derive_from_client_key(
    scope: &str,
    tool_part: &str,
    client_key: &str,
    arguments: &Value,
) -> toolonce::Result<Derived> {
    let canonical = toolonce::canonical::canonicalize(arguments)?;
    Ok(Derived {
        key: OperationKey::derive(scope, tool_part, &format!("\0{META_KEY}\0{client_key}"))?,
        fingerprint: Fingerprint::of_canonical(&canonical),
    })
}

/// A result the proxy writes itself for a call of protocol 2026-07-28 or later says it is
/// complete, as every result of that version does (a server's own results carry their
/// `resultType` already and are left alone).
fn completed(mut result: Value, modern: bool) -> Value {
    if modern && let Some(result) = result.as_object_mut() {
        result
            .entry("resultType")
            .or_insert_with(|| json!("complete"));
    }
    result
}

/// The answer to a call that the server did not answer this time, as one line: a
/// `CallToolResult` with the outcome in `_meta`, or a kept JSON-RPC error as it came.
fn replay(id: &Value, answer: WriteAnswer, modern: bool) -> Vec<u8> {
    let outcome = match answer.outcome {
        // Executed, yet not answered by the server: it was never sent (cancelled first, or
        // the server's input closed).
        Outcome::Executed => "not_executed",
        other => other.as_str(),
    };
    let result = match (answer.outcome, answer.result) {
        (_, Ok(result)) => as_call_tool_result(result),
        // The whole answer the server gave the first time is kept in the detail.
        (Outcome::ReplayedFailure, Err(e)) => match e.detail {
            Some(detail) if is_call_tool_result(&detail) => detail,
            Some(Value::Object(mut detail)) if detail.contains_key(JSONRPC_ERROR) => {
                let mut error = detail.remove(JSONRPC_ERROR).unwrap_or(Value::Null);
                // An error has no `_meta`: the outcome goes into its `data` (when that is
                // absent or an object), its code and message as first recorded.
                if let Some(error) = error.as_object_mut() {
                    let data = error
                        .entry("data")
                        .or_insert_with(|| Value::Object(serde_json::Map::new()));
                    if let Some(data) = data.as_object_mut() {
                        data.insert(OUTCOME_KEY.to_owned(), Value::String(outcome.to_owned()));
                        data.insert(
                            META_KEY.to_owned(),
                            Value::String(answer.key.as_str().to_owned()),
                        );
                    }
                }
                return jsonrpc::line(&json!({"jsonrpc": "2.0", "id": id, "error": error}));
            }
            _ => jsonrpc::tool_error(&e.message),
        },
        (_, Err(e)) => jsonrpc::tool_error(&e.message),
    };
    let result = with_outcome(result, outcome, answer.key.as_str());
    jsonrpc::result_line(id, &completed(result, modern))
}

/// Where a kept JSON-RPC error is stored in the failure's detail.
const JSONRPC_ERROR: &str = "jsonrpc_error";

/// `result` with `_meta["toolonce/outcome"]` and `_meta["toolonce/key"]` added (a `_meta`
/// that is not an object is left alone).
fn with_outcome(mut result: Value, outcome: &str, key: &str) -> Value {
    if let Some(result) = result.as_object_mut() {
        let meta = result
            .entry("_meta")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(OUTCOME_KEY.to_owned(), Value::String(outcome.to_owned()));
            meta.insert(META_KEY.to_owned(), Value::String(key.to_owned()));
        }
    }
    result
}

fn is_call_tool_result(value: &Value) -> bool {
    value.get("content").is_some_and(Value::is_array)
}

/// A stored result that is not a `CallToolResult` (written by another kind of worker sharing
/// the store) is wrapped into one.
fn as_call_tool_result(result: Value) -> Value {
    if is_call_tool_result(&result) {
        return result;
    }
    let text = match &result {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    json!({"content": [{"type": "text", "text": text}], "structuredContent": result})
}

fn give_up_answer(
    call: &Call,
    policy: &Policy,
    derived: &Derived,
    reason: GiveUp,
    error_line: impl Fn(&str, &str, Option<&str>) -> Option<Vec<u8>>,
) -> Option<Vec<u8>> {
    let lease = policy.options.lease;
    let (tool, key) = (&call.tool, &derived.key);
    let after_lease = match policy.options.expired_policy() {
        OnExpired::Rerun => "after that an identical call runs it again with the same \
                             idempotency key."
            .to_owned(),
        _ => format!(
            "after that it stays unknown: an identical call is not run but answered that a \
             person must check whether it took effect and settle it (toolonce resolve {key})."
        ),
    };
    match reason {
        GiveUp::Cancelled => None,
        GiveUp::TimedOut(after) => error_line(
            &format!(
                "Timed out: the MCP server did not answer this call of `{tool}` within \
                 {after:?}, so whether it took effect is unknown. Do not retry it: the \
                 operation ({key}) stays locked for up to {lease:?}; {after_lease}"
            ),
            "timed_out",
            Some(key.as_str()),
        ),
        GiveUp::ServerGone => error_line(
            &format!(
                "The MCP server exited (or the connection to it broke) before answering this \
                 call of `{tool}`, so whether it took effect is unknown. Do not retry it: the \
                 operation ({key}) stays locked for up to {lease:?}; {after_lease}"
            ),
            "server_gone",
            Some(key.as_str()),
        ),
    }
}

/// An `isError` result the proxy writes itself, with its outcome (and the key, once there is
/// one) in `_meta`, as one line.
pub(super) fn proxy_answer(id: &Value, text: &str, outcome: &str, key: Option<&str>) -> Vec<u8> {
    jsonrpc::result_line(id, &proxy_result(text, outcome, key))
}

/// The `result` of a [`proxy_answer`].
fn proxy_result(text: &str, outcome: &str, key: Option<&str>) -> Value {
    let mut result = jsonrpc::tool_error(text);
    let meta = result
        .as_object_mut()
        .expect("a tool error is an object")
        .entry("_meta")
        .or_insert_with(|| json!({}));
    meta[OUTCOME_KEY] = json!(outcome);
    if let Some(key) = key {
        meta[META_KEY] = json!(key);
    }
    result
}

/// The part of a call that runs once the claim is won.
struct Forward<'a> {
    shared: &'a Shared,
    call: &'a Call,
    policy: &'a Policy,
    derived: &'a Derived,
    /// The server's answer, as it sent it, for the client.
    response: &'a Mutex<Option<Vec<u8>>>,
    unsent: &'a UnsentCall,
}

impl Forward<'_> {
    /// Sends the request to the server and waits for its answer. On giving up it tells the
    /// caller through `give_up` and never returns, so the caller drops the layer's future.
    async fn run(
        self,
        mut cancel: watch::Receiver<bool>,
        give_up: oneshot::Sender<GiveUp>,
    ) -> Result<Value, ToolError> {
        let Forward {
            shared,
            call,
            policy,
            derived,
            response,
            unsent,
        } = self;
        let request = with_key(&call.request, derived.key.as_str());
        let (tx, mut rx) = oneshot::channel();
        {
            // Holding stdin, the client's cancel is checked and the route put in place before
            // the request leaves: neither the answer nor a cancel can overtake it (see
            // `Shared::cancel`).
            let mut stdin = shared.server_in.lock().await;
            if *cancel.borrow() {
                return Err(ToolError::transient(
                    "Cancelled by the client before it reached the MCP server; nothing ran.",
                ));
            }
            shared
                .routes()
                .pending
                .insert(call.id_key.clone(), Route::Call(tx));
            let sent = stdin.send(&request).await;
            unsent.settle();
            if !sent {
                shared.routes().pending.remove(&call.id_key);
                return Err(ToolError::transient(
                    "Not executed: the MCP server cannot be reached (its input is closed, or its \
                     URL does not answer), so the call was not sent.",
                ));
            }
        }
        let deadline = tokio::time::sleep(policy.call_timeout);
        tokio::pin!(deadline);
        let reply = tokio::select! {
            reply = &mut rx => reply,
            () = cancelled(&mut cancel) => {
                // The client's cancel went to the server; it may still answer (the tool may have
                // finished), and then the answer is recorded.
                tokio::select! {
                    reply = &mut rx => reply,
                    () = tokio::time::sleep(shared.config.proxy.cancel_grace) => {
                        return abandon(shared, call, give_up, GiveUp::Cancelled).await;
                    }
                }
            }
            () = &mut deadline => {
                let reason = format!(
                    "toolonce: no answer within {:?}", policy.call_timeout
                );
                shared
                    .server_in
                    .send(&jsonrpc::cancelled_line(&call.id, &reason))
                    .await;
                return abandon(shared, call, give_up, GiveUp::TimedOut(policy.call_timeout))
                    .await;
            }
        };
        let Ok(line) = reply else {
            return abandon(shared, call, give_up, GiveUp::ServerGone).await;
        };
        let result = interpret(&line, policy);
        if let Err(e) = &result
            && !e.is_transient()
        {
            shared
                .store
                .keep_failure(&derived.key, policy.failure_retention);
        }
        *response.lock().unwrap_or_else(|p| p.into_inner()) = Some(line);
        result
    }
}

/// Returns once the client has cancelled; never if the switch is dropped unflipped.
async fn cancelled(cancel: &mut watch::Receiver<bool>) {
    if cancel.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Stops waiting for the server: its answer, if it ever comes, is dropped.
async fn abandon(
    shared: &Shared,
    call: &Call,
    give_up: oneshot::Sender<GiveUp>,
    reason: GiveUp,
) -> Result<Value, ToolError> {
    tracing::warn!(target: "toolonce::mcp", tool = %call.tool, id = ?call.id_key, ?reason, "gave up waiting for the server");
    shared.routes().abandon(&call.id_key);
    let _ = give_up.send(reason);
    std::future::pending().await
}

/// The request with the key in `params._meta`, spliced into the client's bytes; re-encoded
/// only if the request has a shape the splice does not handle (a `_meta` that is not an
/// object, which the server would refuse anyway).
fn with_key(request: &[u8], key: &str) -> Vec<u8> {
    if let Some(spliced) = jsonrpc::add_meta_key(request, key) {
        return spliced;
    }
    let mut message: Value = serde_json::from_slice(request).unwrap_or(Value::Null);
    if let Some(params) = message.get_mut("params").and_then(Value::as_object_mut) {
        params.insert("_meta".to_owned(), json!({ META_KEY: key }));
    }
    jsonrpc::line(&message)
}

/// The `resultType` of a protocol 2026-07-28 answer that asks the client for input first.
const INPUT_REQUIRED: &str = "input_required";

/// JSON-RPC error codes that mean the server refused the request before running anything:
/// parse error, invalid request, method not found, invalid params (which includes an unknown
/// tool and, in 2026-07-28, a request without its required `_meta`), and the refusals
/// protocol 2026-07-28 defines: header mismatch, missing required client capability,
/// unsupported protocol version. Such an answer is never recorded, whatever the configuration:
/// a client that is refused a version retries with another one, and that retry must run.
const REFUSED_BEFORE_RUNNING: [i64; 7] = [
    PARSE_ERROR,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    INVALID_PARAMS,
    HEADER_MISMATCH,
    MISSING_CLIENT_CAPABILITY,
    UNSUPPORTED_PROTOCOL_VERSION,
];

/// What the server's answer means for the store (see the module's table).
fn interpret(line: &[u8], policy: &Policy) -> Result<Value, ToolError> {
    let Ok(Value::Object(mut message)) = serde_json::from_slice::<Value>(line) else {
        return Err(ToolError::transient(
            "The MCP server's answer is not a JSON object.",
        ));
    };
    let failure = |on_error: OnError, text: String| match on_error {
        OnError::Keep => ToolError::permanent(text),
        OnError::Release => ToolError::transient(text),
    };
    if let Some(error) = message.remove("error") {
        let text = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("no message");
        let code = error.get("code").and_then(Value::as_i64);
        let on_error = match code {
            Some(code) if REFUSED_BEFORE_RUNNING.contains(&code) => OnError::Release,
            _ => policy.on_error,
        };
        return Err(failure(
            on_error,
            format!("The MCP server answered with an error: {text}"),
        )
        .with_detail(json!({ JSONRPC_ERROR: error })));
    }
    let result = message.remove("result").unwrap_or(Value::Null);
    // Protocol 2026-07-28: the server needs the user's input before it does anything. Never
    // recorded: the claim is released, the answer passes on, and the client's continuation
    // claims the operation again.
    if result.get("resultType").and_then(Value::as_str) == Some(INPUT_REQUIRED) {
        return Err(ToolError::transient(
            "The MCP server asked for more input (resultType input_required); nothing has \
             taken effect yet.",
        ));
    }
    if result.get("isError") == Some(&Value::Bool(true)) {
        let text = result
            .pointer("/content/0/text")
            .and_then(Value::as_str)
            .unwrap_or("The tool reported an error.")
            .to_owned();
        return Err(failure(policy.on_tool_error, text).with_detail(result));
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolonce::ErrorClass;

    fn policy(toml: &str) -> Policy {
        (*super::super::config::Config::from_toml(toml)
            .unwrap()
            .policy("t"))
        .clone()
    }

    #[test]
    fn results_are_recorded_whole() {
        let line = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"x":1}}"#;
        assert_eq!(
            interpret(line, &policy("")).unwrap(),
            json!({"content": [], "x": 1})
        );
    }

    #[test]
    fn is_error_results_are_kept_by_default_with_the_whole_result() {
        let result =
            json!({"content": [{"type": "text", "text": "card declined"}], "isError": true});
        let line = jsonrpc::result_line(&json!(1), &result);
        let e = interpret(&line, &policy("")).unwrap_err();
        assert_eq!(e.class, ErrorClass::Permanent);
        assert_eq!(e.message, "card declined");
        assert_eq!(e.detail, Some(result));
        let released = interpret(&line, &policy("[defaults]\non_tool_error = \"release\""));
        assert!(released.unwrap_err().is_transient());
    }

    #[test]
    fn refusals_before_running_are_released_whatever_the_configuration() {
        for code in REFUSED_BEFORE_RUNNING {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":1,"error":{{"code":{code},"message":"Unknown tool"}}}}"#
            );
            let e =
                interpret(line.as_bytes(), &policy("[defaults]\non_error = \"keep\"")).unwrap_err();
            assert!(e.is_transient(), "{code}");
            assert!(e.message.contains("Unknown tool"));
        }
    }

    #[test]
    fn input_required_is_never_recorded() {
        let line = br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","requestState":"s"}}"#;
        assert!(interpret(line, &policy("")).unwrap_err().is_transient());
        let line = br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","content":[]}}"#;
        assert!(interpret(line, &policy("")).is_ok());
    }

    #[test]
    fn client_keys_of_the_documented_shape_are_accepted() {
        for good in [
            "a",
            "wf-42/step-3",
            "550e8400-e29b-41d4-a716-446655440000",
            "~!{}",
        ] {
            assert_eq!(check_client_key(&json!(good)), Ok(good));
        }
        assert!(check_client_key(&json!("x".repeat(CLIENT_KEY_MAX))).is_ok());
        for bad in [
            json!(""),
            json!("x".repeat(CLIENT_KEY_MAX + 1)),
            json!("a b"),
            json!("a\u{0}"),
            json!("\u{e9}t\u{e9}"),
            json!(1),
            json!(null),
            json!(["a"]),
        ] {
            assert!(check_client_key(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_client_key_never_names_the_operation_its_arguments_would() {
        let args = json!({"k": "v"});
        let by_key = derive_from_client_key("s", "srv/t", "step-1", &args).unwrap();
        let by_args = key::derive("s", "srv/t", &args, None).unwrap();
        assert_ne!(by_key.key, by_args.key);
        assert_eq!(by_key.fingerprint, by_args.fingerprint);
        // The key is the client's, not the arguments'; scope and tool still count.
        let other_args = derive_from_client_key("s", "srv/t", "step-1", &json!({})).unwrap();
        assert_eq!(other_args.key, by_key.key);
        assert_ne!(other_args.fingerprint, by_key.fingerprint);
        for (scope, tool, key) in [
            ("s2", "srv/t", "step-1"),
            ("s", "srv/u", "step-1"),
            ("s", "srv/t", "step-2"),
        ] {
            assert_ne!(
                derive_from_client_key(scope, tool, key, &args).unwrap().key,
                by_key.key
            );
        }
    }

    #[test]
    fn the_proxys_own_results_say_complete_to_a_modern_client_only() {
        let result = proxy_result("in flight", "in_flight", None);
        assert_eq!(completed(result.clone(), true)["resultType"], "complete");
        assert!(completed(result, false).get("resultType").is_none());
        let kept = json!({"content": [], "resultType": "x-ext"});
        assert_eq!(completed(kept, true)["resultType"], "x-ext");
    }

    #[test]
    fn other_errors_follow_on_error() {
        let line = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"boom"}}"#;
        let kept = interpret(line, &policy("")).unwrap_err();
        assert_eq!(kept.class, ErrorClass::Permanent);
        let released = interpret(line, &policy("[defaults]\non_error = \"release\""));
        assert!(released.unwrap_err().is_transient());
    }

    #[test]
    fn replays_carry_the_outcome_beside_the_existing_meta() {
        let result = json!({"content": [], "_meta": {"a": 1}, "isError": false});
        let out = with_outcome(result, "replayed", "idem:k");
        assert_eq!(
            out["_meta"],
            json!({"a": 1, "toolonce/outcome": "replayed", "toolonce/key": "idem:k"})
        );
        assert_eq!(out["isError"], json!(false));
    }

    #[test]
    fn foreign_results_are_wrapped_into_call_tool_results() {
        let wrapped = as_call_tool_result(json!({"receipt": 7}));
        assert_eq!(wrapped["content"][0]["text"], "{\"receipt\":7}");
        assert_eq!(wrapped["structuredContent"], json!({"receipt": 7}));
        let native = json!({"content": [{"type": "text", "text": "ok"}]});
        assert_eq!(as_call_tool_result(native.clone()), native);
    }

    #[test]
    fn a_meta_that_is_not_an_object_is_replaced() {
        let out = with_key(br#"{"id":1,"params":{"name":"t","_meta":null}}"#, "idem:k");
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["params"]["_meta"], json!({"toolonce/key": "idem:k"}));
    }
}
