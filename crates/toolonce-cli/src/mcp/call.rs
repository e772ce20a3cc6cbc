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
//! How the server's answer is recorded, and what a duplicate gets, is [`answer`](super::answer)'s
//! to say.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};
use toolonce::key::{self, Derived};
use toolonce::repeat::{InvalidRepeat, Repeat};
use toolonce::texts::Text;
use toolonce::{About, Layer, Outcome, ToolError};

use super::answer::{
    GiveUp, completed, give_up_answer, given_up_duplicate, interpret, proxy_result, replay,
    with_notice,
};
use super::batch::Batch;
use super::config::{Config, Policy};
use super::given_up::{GivenUp, Why};
use super::jsonrpc::{self, IdKey};
use super::protocol::{INVALID_PARAMS, META_KEY, META_PROTOCOL_VERSION};
use super::repeat;
use super::route::{NotSent, Router, UnsentCall};
use super::stdio::ClientOut;
use super::tools::Tools;

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
    /// The ordinal the model gave (see [`repeat`](super::repeat)), already out of
    /// `arguments`, or why its value is not one.
    pub(super) repeat: Result<Repeat, InvalidRepeat>,
    /// The request without the repeat argument, when it had one: what is forwarded.
    pub(super) forwarded: Option<Vec<u8>>,
    /// The tool's repeat argument, if it has one: its policy's, unless the tool has a property
    /// of that name of its own.
    pub(super) repeat_argument: Option<String>,
}

impl Call {
    /// The write call in `message` (whose bytes are `request`), if it is one: a `tools/call`
    /// with an id of a tool `tools` classes as a write.
    pub(super) fn of(tools: &Tools, message: Value, request: Vec<u8>) -> Option<Call> {
        if message.get("method").and_then(Value::as_str) != Some("tools/call") {
            return None;
        }
        let id = message.get("id").filter(|id| !id.is_null())?.clone();
        let params = message.get("params")?;
        let tool = params.get("name")?.as_str()?;
        if !tools.is_write(tool) {
            return None;
        }
        // MCP makes `arguments` optional: no arguments and `{}` are the same operation.
        let mut arguments = match params.get("arguments") {
            None | Some(Value::Null) => Value::Object(serde_json::Map::new()),
            Some(args) => args.clone(),
        };
        let taken = repeat::take(tools, tool, &mut arguments, &message);
        let meta = params.get("_meta");
        Some(Call {
            repeat: taken.repeat,
            forwarded: taken.forwarded,
            repeat_argument: taken.argument,
            id_key: IdKey::of(&id),
            id,
            tool: tool.to_owned(),
            arguments,
            client_key: meta.and_then(|m| m.get(META_KEY)).cloned(),
            modern: meta.is_some_and(|m| m.get(META_PROTOCOL_VERSION).is_some()),
            request,
        })
    }
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

/// What every write call of one proxy needs: how to name its operation, the layer, and the
/// routing handle through which it reaches the server.
#[derive(Debug)]
pub(super) struct Context {
    pub(super) scope: String,
    /// The server's part of every operation key's tool part (see `--server-id`).
    pub(super) server_id: String,
    pub(super) config: Arc<Config>,
    pub(super) layer: Layer,
    pub(super) router: Arc<Router>,
    /// The operations this proxy stopped waiting for, until their lease ends.
    pub(super) given_up: GivenUp,
}

/// Runs one call to the end and answers it.
pub(super) async fn run(
    shared: Arc<Context>,
    call: Call,
    cancel: watch::Receiver<bool>,
    sink: Sink,
    unsent: UnsentCall,
) {
    let answer = answer(&shared, &call, cancel, &unsent).await;
    drop(unsent);
    shared.router.call_ended(&call.id_key);
    sink.answer(answer);
}

/// Keys the call, runs it through the layer, and says what the client gets (`None`: nothing,
/// it was cancelled).
async fn answer(
    shared: &Context,
    call: &Call,
    cancel: watch::Receiver<bool>,
    unsent: &UnsentCall,
) -> Option<Vec<u8>> {
    let policy = shared.config.policy(&call.tool);
    let derived = match derive(shared, call, &policy) {
        Ok(derived) => derived,
        Err(refused) => return refused,
    };
    // A replay's note offers the repeat argument only to a tool that has it.
    let options = if call.repeat_argument == policy.options.repeat_argument {
        std::borrow::Cow::Borrowed(&policy.options)
    } else {
        let options = policy.options.clone();
        std::borrow::Cow::Owned(options.repeat_argument(call.repeat_argument.as_deref()))
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
        &options,
        |_ctx| Box::pin(forward.run(cancel, give_up_tx)),
    ));
    let answer = tokio::select! {
        answer = run => answer,
        Ok(reason) = give_up_rx => {
            // Whether it took effect is unknown: a duplicate within the lease is told so, not
            // that it is running (its entry stays `running` until the lease ends).
            let why = match reason {
                GiveUp::ServerGone => Some(Why::ServerGone),
                GiveUp::TimedOut(_) => Some(Why::TimedOut),
                GiveUp::Cancelled => None,
            };
            if let Some(why) = why {
                let until = std::time::Instant::now() + policy.options.lease;
                shared.given_up.note(&derived.key, until, why);
            }
            let error_line = |text: &str, outcome: &str, key: Option<&str>| {
                error_line(call, text, outcome, key)
            };
            return give_up_answer(&call.tool, &policy, &derived, reason, error_line);
        }
    };
    answered(shared, call, &policy, answer, &response, &cancelled)
}

/// A `tools/call` answer of the proxy's own: an `isError` result.
fn error_line(call: &Call, text: &str, outcome: &str, key: Option<&str>) -> Option<Vec<u8>> {
    let result = completed(proxy_result(text, outcome, key), call.modern);
    Some(jsonrpc::result_line(&call.id, &result))
}

/// The call's operation: derived from its arguments (or its client key) and repeat ordinal;
/// a call that cannot be keyed gets its answer instead, and nothing is claimed or sent.
fn derive(shared: &Context, call: &Call, policy: &Policy) -> Result<Derived, Option<Vec<u8>>> {
    let repeat = match &call.repeat {
        Ok(repeat) => *repeat,
        Err(refused) => {
            tracing::info!(target: "toolonce::mcp", tool = %call.tool, %refused, "refused a call with an invalid repeat ordinal; nothing was claimed or sent");
            let text = refused.message(&call.tool);
            return Err(error_line(
                call,
                &text,
                Outcome::InvalidArguments.as_str(),
                None,
            ));
        }
    };
    let tool_part = format!("{}/{}", shared.server_id, call.tool);
    // An integer beyond 64 bits reads as the nearest double, the key of other integers too:
    // refused from the text the client sent, before any key is derived. The whole request is
    // looked at first (a scan for a long run of digits, which almost no request has); only
    // then are its arguments found, since an id or a token may hold such a number too.
    let inexact = toolonce::canonical::first_inexact_integer(&call.request)
        .and_then(|_| jsonrpc::arguments_text(&call.request))
        .and_then(toolonce::canonical::first_inexact_integer);
    let derived = match (inexact, &call.client_key) {
        (Some(integer), _) => Err(toolonce::Error::InvalidArguments(
            toolonce::canonical::inexact_integer_message(integer),
        )),
        (None, None) => key::derive_repeat(
            &shared.scope,
            &tool_part,
            &call.arguments,
            policy.key_fields.as_ref(),
            repeat,
        ),
        (None, Some(client_key)) => match check_client_key(client_key) {
            Ok(client_key) => key::derive_named_repeat(
                &shared.scope,
                &tool_part,
                client_key,
                &call.arguments,
                repeat,
            ),
            Err(why) => {
                tracing::warn!(target: "toolonce::mcp", tool = %call.tool, why, "refused a call with a malformed client key");
                return Err(Some(jsonrpc::error_line(
                    Some(&call.id),
                    INVALID_PARAMS,
                    &Text::McpClientKey.fill(&[
                        ("max", &CLIENT_KEY_MAX.to_string()),
                        ("why", &why),
                        ("tool", &call.tool),
                    ]),
                )));
            }
        },
    };
    derived.map_err(|e| {
        error_line(
            call,
            &Text::McpUnkeyable.fill(&[("tool", &call.tool), ("error", &e.to_string())]),
            "not_executed",
            None,
        )
    })
}

/// What the client gets once the layer has answered: the server's own bytes, nothing for a
/// cancelled call, or the proxy's answer for a duplicate.
fn answered(
    shared: &Context,
    call: &Call,
    policy: &Policy,
    answer: toolonce::WriteAnswer,
    response: &Mutex<Option<Vec<u8>>>,
    cancelled: &watch::Receiver<bool>,
) -> Option<Vec<u8>> {
    // Executed and answered by the server: its own bytes, which carry the client's id.
    if let Some(line) = response.lock().unwrap_or_else(|p| p.into_inner()).take() {
        // Unless its outcome was not simply recorded: then the client hears so too.
        return Some(match &answer.notice {
            Some(notice) => with_notice(line, notice),
            None => line,
        });
    }
    // Cancelled (before it reached the server, or while waiting for another run of the same
    // operation): the client expects no answer.
    if *cancelled.borrow() {
        return None;
    }
    if answer.outcome == Outcome::InFlight
        && let Some(why) = shared.given_up.why(&answer.key)
    {
        return error_line(
            call,
            &given_up_duplicate(&call.tool, policy, &answer.key, why),
            Outcome::Unknown.as_str(),
            Some(answer.key.as_str()),
        );
    }
    if answer.outcome == Outcome::Conflict && call.client_key.is_some() {
        return error_line(
            call,
            &Text::McpClientKeyConflict.fill(&[("tool", &call.tool), ("key", answer.key.as_str())]),
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
        Value::Bool(_) => return Err(Text::McpKeyNotString.fill(&[("kind", "a boolean")])),
        Value::Number(_) => return Err(Text::McpKeyNotString.fill(&[("kind", "a number")])),
        Value::Array(_) => return Err(Text::McpKeyNotString.fill(&[("kind", "an array")])),
        Value::Object(_) => return Err(Text::McpKeyNotString.fill(&[("kind", "an object")])),
    };
    if key.is_empty() {
        return Err(Text::McpKeyEmpty.fill(&[]));
    }
    // The key is not quoted back: it may be something the client would rather not see in a
    // log line or a model's context.
    if let Some((at, _)) = key.char_indices().find(|(_, c)| !c.is_ascii_graphic()) {
        return Err(Text::McpKeyNotVisible.fill(&[("at", &at.to_string())]));
    }
    if key.len() > CLIENT_KEY_MAX {
        return Err(Text::McpKeyTooLong.fill(&[("length", &key.len().to_string())]));
    }
    Ok(key)
}

/// The part of a call that runs once the claim is won.
struct Forward<'a> {
    shared: &'a Context,
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
        // The repeat argument is the proxy's: the server never sees it.
        let request = call.forwarded.as_deref().unwrap_or(&call.request);
        let request = with_key(request, derived.key.as_str());
        // Neither the answer nor a cancel can overtake the request (see `Router`).
        let sent = shared
            .router
            .send_awaiting(&call.id_key, &request, &cancel, unsent)
            .await;
        let mut rx = match sent {
            Ok(rx) => rx,
            Err(NotSent::Cancelled) => {
                return Err(ToolError::transient(Text::McpCancelled.fill(&[])));
            }
            Err(NotSent::Unreachable) => {
                return Err(ToolError::transient(Text::McpUnreachable.fill(&[])));
            }
        };
        let deadline = tokio::time::sleep(policy.call_timeout);
        tokio::pin!(deadline);
        let reply = tokio::select! {
            reply = &mut rx => reply,
            () = cancelled(&mut cancel) => {
                // The client's cancel went to the server; it may still answer (the tool may have
                // finished), and then the answer is recorded: within the grace, and after it
                // for one more lease (the claim is renewed that long, and no longer), since an
                // outcome that arrived is never left `unknown` while it can still be stored.
                let patience = shared
                    .config
                    .proxy
                    .cancel_grace
                    .saturating_add(policy.options.lease);
                tokio::select! {
                    reply = &mut rx => reply,
                    () = tokio::time::sleep(patience) => {
                        return abandon(shared, call, give_up, GiveUp::Cancelled).await;
                    }
                }
            }
            () = &mut deadline => {
                let reason = format!(
                    "toolonce: no answer within {:?}", policy.call_timeout
                );
                shared
                    .router
                    .send(&jsonrpc::cancelled_line(&call.id, &reason))
                    .await;
                return abandon(shared, call, give_up, GiveUp::TimedOut(policy.call_timeout))
                    .await;
            }
        };
        let Ok(line) = reply else {
            return abandon(shared, call, give_up, GiveUp::ServerGone).await;
        };
        // A kept failure's (shorter) retention is the options' failure_retention: the layer
        // applies it.
        let result = interpret(&line, &call.tool, policy);
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
    shared: &Context,
    call: &Call,
    give_up: oneshot::Sender<GiveUp>,
    reason: GiveUp,
) -> Result<Value, ToolError> {
    tracing::warn!(target: "toolonce::mcp", tool = %call.tool, id = ?call.id_key, ?reason, "gave up waiting for the server");
    shared.router.abandon(&call.id_key);
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The key and fingerprint of a call named by a client key (see the module's docs).
    fn derive_from_client_key(
        scope: &str,
        tool_part: &str,
        client_key: &str,
        arguments: &Value,
    ) -> toolonce::Result<Derived> {
        key::derive_named(scope, tool_part, client_key, arguments)
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
    fn a_meta_that_is_not_an_object_is_replaced() {
        let out = with_key(br#"{"id":1,"params":{"name":"t","_meta":null}}"#, "idem:k");
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["params"]["_meta"], json!({"toolonce/key": "idem:k"}));
    }
}
