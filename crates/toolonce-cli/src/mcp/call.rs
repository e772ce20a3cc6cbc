//! One intercepted write call: key it, claim it through the [`Layer`](toolonce::Layer), forward
//! it to the server (with the key in `params._meta`) only if the claim was won, record the
//! server's answer, and answer the client — with the server's own bytes, a replay from the
//! store, or an `isError` result explaining why nothing ran.
//!
//! How the server's answer is recorded, following the SPEC's failure rules:
//!
//! | server answer | recorded as | a duplicate gets |
//! |---|---|---|
//! | `result` | done | the same `result` |
//! | `result` with `isError: true` (the tool ran and failed) | failed, permanent, the whole result in the error's `detail` | the same `result` |
//! | JSON-RPC `error` (the request was refused before the tool ran) | released (transient) | a fresh run |
//! | none: timeout, cancel, server exit | left running until its lease expires (the outcome is unknown) | `in_flight`, then a fresh run with the same key |

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};
use toolonce::key::{self, Derived};
use toolonce::{Outcome, ToolError, WriteAnswer};

use super::batch::Batch;
use super::config::Policy;
use super::jsonrpc::{self, IdKey, META_KEY};
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
    let error_line = |text: &str| Some(jsonrpc::result_line(&call.id, &jsonrpc::tool_error(text)));
    let derived = match key::derive(
        &shared.scope,
        &call.tool,
        &call.arguments,
        policy.key_fields.as_ref(),
    ) {
        Ok(derived) => derived,
        Err(e) => {
            return error_line(&format!(
                "Not executed: no operation key can be derived for this call of `{}` ({e}), \
                 and running it without one could perform it twice.",
                call.tool
            ));
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
    let run = shared
        .layer
        .run(&call.tool, &derived, &policy.options, |_ctx| {
            forward.run(cancel, give_up_tx)
        });
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
    Some(jsonrpc::result_line(&call.id, &replay(answer)))
}

/// The `CallToolResult` for an answer the server did not give this time.
fn replay(answer: WriteAnswer) -> Value {
    match (answer.outcome, answer.result) {
        (_, Ok(result)) => as_call_tool_result(result),
        // The whole CallToolResult the server gave the first time is kept in the detail.
        (Outcome::ReplayedFailure, Err(e)) => match e.detail {
            Some(detail) if is_call_tool_result(&detail) => detail,
            _ => jsonrpc::tool_error(&e.message),
        },
        (_, Err(e)) => jsonrpc::tool_error(&e.message),
    }
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
    error_line: impl Fn(&str) -> Option<Vec<u8>>,
) -> Option<Vec<u8>> {
    let lease = policy.options.lease;
    let (tool, key) = (&call.tool, &derived.key);
    match reason {
        GiveUp::Cancelled => None,
        GiveUp::TimedOut(after) => error_line(&format!(
            "Timed out: the MCP server did not answer this call of `{tool}` within {after:?}, so \
             whether it took effect is unknown. Do not retry it at once: the operation ({key}) \
             stays locked for up to {lease:?}; after that an identical call runs it again with \
             the same idempotency key."
        )),
        GiveUp::ServerGone => error_line(&format!(
            "The MCP server exited before answering this call of `{tool}`, so whether it took \
             effect is unknown. The operation ({key}) stays locked for up to {lease:?}; after \
             that an identical call runs it again with the same idempotency key."
        )),
    }
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
                    "Not executed: the MCP server's input is closed, so the call was not sent.",
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
        let result = interpret(&line);
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

/// What the server's answer means for the store (see the module's table).
fn interpret(line: &[u8]) -> Result<Value, ToolError> {
    let Ok(Value::Object(mut message)) = serde_json::from_slice::<Value>(line) else {
        return Err(ToolError::transient(
            "The MCP server's answer is not a JSON object.",
        ));
    };
    if let Some(error) = message.remove("error") {
        let text = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("no message");
        return Err(
            ToolError::transient(format!("The MCP server refused the call: {text}"))
                .with_detail(error),
        );
    }
    let result = message.remove("result").unwrap_or(Value::Null);
    if result.get("isError") == Some(&Value::Bool(true)) {
        let text = result
            .pointer("/content/0/text")
            .and_then(Value::as_str)
            .unwrap_or("The tool reported an error.")
            .to_owned();
        return Err(ToolError::permanent(text).with_detail(result));
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolonce::ErrorClass;

    #[test]
    fn results_are_recorded_whole() {
        let line = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"x":1}}"#;
        assert_eq!(interpret(line).unwrap(), json!({"content": [], "x": 1}));
    }

    #[test]
    fn is_error_results_are_permanent_failures_that_keep_the_result() {
        let result =
            json!({"content": [{"type": "text", "text": "card declined"}], "isError": true});
        let line = jsonrpc::result_line(&json!(1), &result);
        let e = interpret(&line).unwrap_err();
        assert_eq!(e.class, ErrorClass::Permanent);
        assert_eq!(e.message, "card declined");
        assert_eq!(e.detail, Some(result));
    }

    #[test]
    fn protocol_errors_are_transient() {
        let line = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Unknown tool"}}"#;
        let e = interpret(line).unwrap_err();
        assert!(e.is_transient());
        assert!(e.message.contains("Unknown tool"));
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
