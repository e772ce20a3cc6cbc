//! What the server's answer to a write call means, and the answers the proxy writes itself: pure
//! MCP semantics, without I/O. [`interpret`] reads the server's answer into what the layer
//! records; [`replay`] turns a recorded outcome into the answer a duplicate gets; the rest shapes
//! results (`_meta["toolonce/outcome"]`, `resultType`, a stored result that is not a
//! `CallToolResult`) and writes the texts the model reads when nothing ran or the outcome is
//! unknown.
//!
//! How the server's answer is recorded (`on_error`, `on_tool_error` and `failure_retention`
//! are per-tool settings, see [`config`](super::config)):
//!
//! | server answer | recorded as | a duplicate gets |
//! |---|---|---|
//! | `result` | done, for the retention | the same `result` |
//! | an answer serde_json cannot read (a lone surrogate, nesting deeper than 127, not an object) | done, for the retention, the answer's text kept as it came: the tool may have taken effect | the same bytes, under its own id |
//! | `result` with `isError: true` | `on_tool_error = "keep"` (default): failed, for the failure retention, the whole result kept; `"release"`: forgotten | the same `result`; or a fresh run |
//! | `result` with `isError: true` that is an official SDK server's refusal of the call before its tool ran: the TypeScript SDK's `MCP error -32602: Tool T not found` (or `disabled`, or `Input validation error: Invalid arguments for tool T: …`), the Python SDK's `Unknown tool: T`, for the tool `T` called, as the only content | never recorded, whatever the configuration (as the JSON-RPC error `-32602` it stands for) | a fresh run |
//! | JSON-RPC `error` -32700, -32600, -32601, -32602 (refused before the tool ran: parse error, invalid request, method not found, invalid params or unknown tool), and 2026-07-28's -32020, -32021, -32022 (header mismatch, missing client capability, unsupported protocol version) | never recorded | a fresh run |
//! | any other JSON-RPC `error` (such as -32603, an exception that may follow the effect) | `on_error = "keep"` (default): failed, for the failure retention; `"release"`: forgotten | the same `error`; or a fresh run |
//! | `result` with `resultType: "input_required"` (2026-07-28: the server asks for input first) | never recorded: nothing took effect | a fresh run (see *What names the operation* above) |
//! | none: timeout, cancel, server exit | left running until its lease expires, then `unknown` (it may or may not have taken effect) | `in_flight`; after the lease, `on_expired = "hold"` (default): `unknown`, not forwarded, until a person runs `toolonce resolve`; `"rerun"`: a fresh run with the same key |
//!
//! An answer the proxy gives from the store (a replay, or its own explanation: in flight,
//! conflict, store unavailable) carries `_meta["toolonce/outcome"]` and `_meta["toolonce/key"]`
//! beside whatever `_meta` the first answer had; `content` and `isError` are exactly as first
//! recorded. A replayed JSON-RPC error carries the two in its `data` instead. The server's own
use std::time::Duration;

use serde_json::{Value, json};
use toolonce::key::Derived;
use toolonce::texts::Text;
use toolonce::{OnExpired, Outcome, ToolError, WriteAnswer};

use super::config::{OnError, Policy};
use super::given_up::Why;
use super::jsonrpc::{self, Lenient};
use super::protocol::{
    HEADER_MISMATCH, INVALID_PARAMS, INVALID_REQUEST, META_KEY, METHOD_NOT_FOUND,
    MISSING_CLIENT_CAPABILITY, NOTICE_KEY, OUTCOME_KEY, PARSE_ERROR, UNSUPPORTED_PROTOCOL_VERSION,
};

/// Why a forwarded call stopped waiting for the server. The layer's future is then dropped,
/// which stops the lease heartbeat: the entry stays `running` until its lease expires, because
/// the server may or may not have performed the operation.
#[derive(Debug)]
pub(super) enum GiveUp {
    /// The client cancelled and the server did not answer within the grace period.
    Cancelled,
    /// The server did not answer within the call timeout.
    TimedOut(Duration),
    /// The server exited without answering.
    ServerGone,
}

/// A result the proxy writes itself for a call of protocol 2026-07-28 or later says it is
/// complete, as every result of that version does (a server's own results carry their
/// `resultType` already and are left alone).
pub(super) fn completed(mut result: Value, modern: bool) -> Value {
    if modern && let Some(result) = result.as_object_mut() {
        result
            .entry("resultType")
            .or_insert_with(|| json!("complete"));
    }
    result
}

/// The answer to a call that the server did not answer this time, as one line: a
/// `CallToolResult` with the outcome in `_meta`, or a kept JSON-RPC error as it came.
pub(super) fn replay(id: &Value, answer: WriteAnswer, modern: bool) -> Vec<u8> {
    if let Ok(recorded) = &answer.result
        && let Some(raw) = recorded.get(UNREADABLE_ANSWER).and_then(Value::as_str)
    {
        // An answer kept as it came: the same bytes under this caller's id.
        if let Some(mut line) = jsonrpc::with_id(raw.trim_end().as_bytes(), id) {
            line.push(b'\n');
            return line;
        }
    }
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
    let result = match &answer.replay {
        Some(note) => super::note::with_note(result, note),
        None => result,
    };
    jsonrpc::result_line(id, &completed(result, modern))
}

/// The server's answer `line` to an executed call with the layer's `notice` (see
/// [`toolonce::WriteAnswer::notice`]) in its result's `_meta`, spliced in with every other byte
/// as the server sent it. An answer that is not a result object (an error), or bytes
/// serde_json cannot read, is sent as it came: the log has the notice.
pub(super) fn with_notice(line: Vec<u8>, notice: &str) -> Vec<u8> {
    if serde_json::from_slice::<serde::de::IgnoredAny>(&line).is_err() {
        return line;
    }
    jsonrpc::with_meta_member(
        &line,
        "result",
        NOTICE_KEY,
        &Value::String(notice.to_owned()),
    )
    .unwrap_or(line)
}

/// Where an answer of the server that serde_json cannot read is recorded, as the text it came
/// as (see [`interpret`]).
pub(super) const UNREADABLE_ANSWER: &str = "toolonce/unreadable_answer";

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

/// The answer to a call given up: the client cancelled (no answer), or the server did not
/// answer in time or at all (its outcome is unknown, and the text says what happens next).
pub(super) fn give_up_answer(
    tool: &str,
    policy: &Policy,
    derived: &Derived,
    reason: GiveUp,
    error_line: impl Fn(&str, &str, Option<&str>) -> Option<Vec<u8>>,
) -> Option<Vec<u8>> {
    let lease = policy.options.lease;
    let key = &derived.key;
    let after_lease = match policy.options.expired_policy() {
        OnExpired::Rerun => Text::McpAfterLeaseRerun.fill(&[]),
        _ => Text::McpAfterLeaseHold.fill(&[("key", key.as_str())]),
    };
    let lease = format!("{lease:?}");
    match reason {
        GiveUp::Cancelled => None,
        GiveUp::TimedOut(after) => error_line(
            &Text::McpTimedOut.fill(&[
                ("tool", tool),
                ("after", &format!("{after:?}")),
                ("key", key.as_str()),
                ("lease", &lease),
                ("after_lease", &after_lease),
            ]),
            "timed_out",
            Some(key.as_str()),
        ),
        GiveUp::ServerGone => error_line(
            &Text::McpServerGone.fill(&[
                ("tool", tool),
                ("key", key.as_str()),
                ("lease", &lease),
                ("after_lease", &after_lease),
            ]),
            "server_gone",
            Some(key.as_str()),
        ),
    }
}

/// The text a duplicate of an operation this proxy gave up on gets within its lease (see
/// [`given_up`](super::given_up)): whether it took effect is unknown, not running.
pub(super) fn given_up_duplicate(
    tool: &str,
    policy: &Policy,
    key: &toolonce::OperationKey,
    why: Why,
) -> String {
    let what = match why {
        Why::ServerGone => Text::McpGivenUpGone,
        Why::TimedOut => Text::McpGivenUpTimedOut,
    };
    let after_lease = match policy.options.expired_policy() {
        OnExpired::Rerun => Text::McpAfterLeaseRerun.fill(&[]),
        _ => Text::McpGivenUpHold.fill(&[("key", key.as_str())]),
    };
    Text::McpGivenUp.fill(&[
        ("tool", tool),
        ("key", key.as_str()),
        ("what", &what.fill(&[])),
        ("lease", &format!("{:?}", policy.options.lease)),
        ("after_lease", &after_lease),
    ])
}

/// An `isError` result the proxy writes itself, with its outcome (and the key, once there is
/// one) in `_meta`, as one line.
pub(super) fn proxy_answer(id: &Value, text: &str, outcome: &str, key: Option<&str>) -> Vec<u8> {
    jsonrpc::result_line(id, &proxy_result(text, outcome, key))
}

/// The `result` of a [`proxy_answer`].
pub(super) fn proxy_result(text: &str, outcome: &str, key: Option<&str>) -> Value {
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

/// Whether a JSON-RPC error `code` means the server refused the request before running anything.
pub(crate) fn refused_before_running(code: i64) -> bool {
    REFUSED_BEFORE_RUNNING.contains(&code)
}

/// What the server's answer means for the store (see the module's table).
pub(super) fn interpret(line: &[u8], tool: &str, policy: &Policy) -> Result<Value, ToolError> {
    let Ok(Value::Object(mut message)) = serde_json::from_slice::<Value>(line) else {
        // The server answered, and the tool may have taken effect; what it answered cannot be
        // read here (a text cut inside an emoji, nesting deeper than serde_json reads, not an
        // object). Calling that transient would release the operation and run it again for
        // every duplicate: it is recorded as it came instead, and replayed byte for byte.
        return Ok(json!({ UNREADABLE_ANSWER: String::from_utf8_lossy(line) }));
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
            Some(code) if refused_before_running(code) => OnError::Release,
            _ => policy.on_error,
        };
        return Err(
            failure(on_error, Text::McpServerError.fill(&[("text", text)]))
                .with_detail(json!({ JSONRPC_ERROR: error })),
        );
    }
    let result = message.remove("result").unwrap_or(Value::Null);
    // Protocol 2026-07-28: the server needs the user's input before it does anything. Never
    // recorded: the claim is released, the answer passes on, and the client's continuation
    // claims the operation again.
    if result.get("resultType").and_then(Value::as_str) == Some(INPUT_REQUIRED) {
        return Err(ToolError::transient(Text::McpInputRequired.fill(&[])));
    }
    if result.get("isError") == Some(&Value::Bool(true)) {
        let text = result
            .pointer("/content/0/text")
            .and_then(Value::as_str)
            .map_or_else(|| Text::McpToolError.fill(&[]), str::to_owned);
        // The server refused the call before its tool ran: nothing began, so it is released
        // (and the client still gets the server's own answer).
        if refused_by_sdk(&result, tool) {
            return Err(ToolError::transient(text).with_detail(result));
        }
        return Err(failure(policy.on_tool_error, text).with_detail(result));
    }
    Ok(result)
}

/// Whether an `isError` result is an official SDK server's refusal of a call of `tool` before
/// the tool ran, which those servers answer as a result rather than the JSON-RPC error `-32602`
/// it stands for. Only the exact texts the SDKs write before the tool's handler is called, for
/// this very tool, as the only content, with no structured content: the TypeScript SDK
/// (1.x `McpServer`) throws `McpError(InvalidParams)` for an unknown or disabled tool and for
/// arguments its schema refuses, and returns the message as `MCP error -32602: …`; the Python
/// SDK (`MCPServer`) answers `Unknown tool: NAME`. Anything else with `-32602` in it (the
/// TypeScript SDK's output validation error, which comes after the tool ran; the Python SDK's
/// `Error executing tool …`, which its argument validation shares with the tool's own
/// exceptions) may follow an effect and is recorded as any `isError` result.
fn refused_by_sdk(result: &Value, tool: &str) -> bool {
    let Some([only]) = result
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
    else {
        return false;
    };
    if result.get("structuredContent").is_some() {
        return false;
    }
    let Some(text) = only.get("text").and_then(Value::as_str) else {
        return false;
    };
    if let Some(rest) = text.strip_prefix("MCP error -32602: ") {
        return rest == format!("Tool {tool} not found")
            || rest == format!("Tool {tool} disabled")
            || rest.starts_with(&format!(
                "Input validation error: Invalid arguments for tool {tool}: "
            ))
            || rest.starts_with(&format!(
                "Invalid arguments for tool {tool}: arguments contain more than the maximum of "
            ));
    }
    text == format!("Unknown tool: {tool}")
}

/// The JSON-RPC error answering a write call serde_json cannot read exactly (see
/// [`Lenient`]), which is not sent: no operation key can be derived for it.
pub(super) fn unreadable_call(message: &Lenient) -> Vec<u8> {
    let tool = message.tool.as_ref().map_or("?", |(name, _)| name.as_str());
    jsonrpc::error_line(
        message.id.as_ref(),
        INVALID_PARAMS,
        &Text::McpUnreadableCall.fill(&[("tool", tool)]),
    )
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
    fn an_answer_serde_json_cannot_read_is_recorded_as_it_came_not_released() {
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{{"structuredContent":{}1{}}}}}"#,
            "[".repeat(150),
            "]".repeat(150)
        );
        for line in [
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"caf\ud83d"}]}}"#.to_vec(),
            deep.into_bytes(),
            b"[1,2]".to_vec(),
        ] {
            let recorded = interpret(&line, "t", &policy("")).expect("recorded, never released");
            assert_eq!(
                recorded[UNREADABLE_ANSWER].as_str().map(str::as_bytes),
                Some(&line[..])
            );
        }
    }

    #[test]
    fn results_are_recorded_whole() {
        let line = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"x":1}}"#;
        assert_eq!(
            interpret(line, "t", &policy("")).unwrap(),
            json!({"content": [], "x": 1})
        );
    }

    #[test]
    fn is_error_results_are_kept_by_default_with_the_whole_result() {
        let result =
            json!({"content": [{"type": "text", "text": "card declined"}], "isError": true});
        let line = jsonrpc::result_line(&json!(1), &result);
        let e = interpret(&line, "t", &policy("")).unwrap_err();
        assert_eq!(e.class, ErrorClass::Permanent);
        assert_eq!(e.message, "card declined");
        assert_eq!(e.detail, Some(result));
        let released = interpret(
            &line,
            "t",
            &policy("[defaults]\non_tool_error = \"release\""),
        );
        assert!(released.unwrap_err().is_transient());
    }

    #[test]
    fn refusals_before_running_are_released_whatever_the_configuration() {
        for code in REFUSED_BEFORE_RUNNING {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":1,"error":{{"code":{code},"message":"Unknown tool"}}}}"#
            );
            let e = interpret(
                line.as_bytes(),
                "t",
                &policy("[defaults]\non_error = \"keep\""),
            )
            .unwrap_err();
            assert!(e.is_transient(), "{code}");
            assert!(e.message.contains("Unknown tool"));
        }
    }

    #[test]
    fn sdk_refusals_answered_as_results_are_released_and_anything_like_them_is_kept() {
        let answer = |text: &str| {
            let result = json!({"content": [{"type": "text", "text": text}], "isError": true});
            jsonrpc::result_line(&json!(1), &result)
        };
        let keep = policy("[defaults]\non_tool_error = \"keep\"");
        // What the TypeScript SDK 1.32 and the Python SDK 2.3 servers send (probed).
        for refused in [
            "MCP error -32602: Tool charge not found",
            "MCP error -32602: Tool charge disabled",
            "MCP error -32602: Input validation error: Invalid arguments for tool charge: [\n  {\n    \"code\": \"invalid_type\"",
            "Unknown tool: charge",
        ] {
            let e = interpret(&answer(refused), "charge", &keep).unwrap_err();
            assert!(e.is_transient(), "{refused}");
        }
        for kept in [
            // After the tool ran: its output did not match its schema.
            "MCP error -32602: Output validation error: Tool charge has an output schema but no structured content was provided",
            // Another tool's name: not this call's refusal.
            "MCP error -32602: Tool refund not found",
            "Unknown tool: refund",
            // The Python SDK's text for argument validation is also that of the tool's own
            // exceptions.
            "Error executing tool charge: 1 validation error for chargeArguments",
            "The card was declined (MCP error -32602: Tool charge not found)",
        ] {
            let e = interpret(&answer(kept), "charge", &keep).unwrap_err();
            assert!(!e.is_transient(), "{kept}");
        }
        let with_more = json!({"content": [{"type": "text", "text": "Unknown tool: charge"}], "structuredContent": {"charged": true}, "isError": true});
        let line = jsonrpc::result_line(&json!(1), &with_more);
        assert!(
            !interpret(&line, "charge", &keep)
                .unwrap_err()
                .is_transient()
        );
    }

    #[test]
    fn input_required_is_never_recorded() {
        let line = br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","requestState":"s"}}"#;
        assert!(
            interpret(line, "t", &policy(""))
                .unwrap_err()
                .is_transient()
        );
        let line = br#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","content":[]}}"#;
        assert!(interpret(line, "t", &policy("")).is_ok());
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
        let kept = interpret(line, "t", &policy("")).unwrap_err();
        assert_eq!(kept.class, ErrorClass::Permanent);
        let released = interpret(line, "t", &policy("[defaults]\non_error = \"release\""));
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
    fn an_executed_answer_with_a_notice_carries_it_beside_the_servers_meta() {
        let line = br#"{"jsonrpc":"2.0","id":7,"result":{"content":[],"_meta":{"a":1}}}"#;
        let out: Value =
            serde_json::from_slice(&with_notice(line.to_vec(), "may be lost")).unwrap();
        assert_eq!(out["id"], json!(7));
        assert_eq!(
            out["result"]["_meta"],
            json!({"a": 1, "toolonce/notice": "may be lost"})
        );
        // A result without `_meta` gets one.
        let line = br#"{"jsonrpc":"2.0","id":"x","result":{"content":[]}}"#;
        let out: Value = serde_json::from_slice(&with_notice(line.to_vec(), "n")).unwrap();
        assert_eq!(out["result"]["_meta"], json!({"toolonce/notice": "n"}));
        // An error, or bytes serde_json cannot read, go as they came.
        let error = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"m"}}"#.to_vec();
        assert_eq!(with_notice(error.clone(), "n"), error);
        let garbled = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"t\":\"\\ud800\"}\n".to_vec();
        assert_eq!(with_notice(garbled.clone(), "n"), garbled);
    }

    #[test]
    fn foreign_results_are_wrapped_into_call_tool_results() {
        let wrapped = as_call_tool_result(json!({"receipt": 7}));
        assert_eq!(wrapped["content"][0]["text"], "{\"receipt\":7}");
        assert_eq!(wrapped["structuredContent"], json!({"receipt": 7}));
        let native = json!({"content": [{"type": "text", "text": "ok"}]});
        assert_eq!(as_call_tool_result(native.clone()), native);
    }
}
