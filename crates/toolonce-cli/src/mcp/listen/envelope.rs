//! A request of protocol 2026-07-28 (no session) at the gateway's HTTP entry, as a server of
//! that version would take it over HTTP: what is refused here before it reaches a shared
//! server, and the HTTP status of a refusal that comes from the server.
//!
//! Refused here (HTTP 400): a message whose `_meta` lacks the protocol version or the client
//! capabilities (-32602), one whose `MCP-Protocol-Version` or `Mcp-Method` header disagrees
//! with its body (-32020), and, in front of a stdio server, one of a version the gateway does
//! not speak without sessions (-32022). A stdio server sees no headers, so only the gateway can
//! check them; and the official SDK's stdio entry takes the protocol era (and version) of the
//! first message it reads for the whole connection: one probe without the version would turn
//! the server that every sessionless client shares into a 2025 server for all of them, and once
//! it speaks 2026-07-28 it no longer looks at the version a request names. No client's message
//! may change that server's state for the others, nor be answered in a version it did not ask
//! for: it is refused before it is sent on. (An HTTP server checks each request itself.)
//!
//! Refused by the server: the HTTP status the HTTP server answered with (which the proxy's HTTP
//! client says in the error's `data`, taken out again here), or for a stdio server, which has no
//! statuses, the one protocol 2026-07-28 gives the error's code: 404 for an unknown (or removed)
//! method, 400 for an invalid request, a header mismatch, a missing client capability or an
//! unsupported version. Every other answer is a 200.

use hyper::StatusCode;
use serde_json::{Value, json};

use super::body::EventBody;
use super::request::{Answer, events, json_answer};
use super::routes::message_of;
use crate::mcp::jsonrpc::{self, Peek};
use crate::mcp::protocol::{
    FIRST_SESSIONLESS_VERSION, HEADER_MISMATCH, HTTP_STATUS_KEY, INVALID_PARAMS, INVALID_REQUEST,
    META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, METHOD_NOT_FOUND, MISSING_CLIENT_CAPABILITY,
    PARSE_ERROR, UNSUPPORTED_PROTOCOL_VERSION,
};

/// The headers of a request that must agree with its body.
pub(super) struct Headers<'a> {
    pub(super) version: Option<&'a str>,
    pub(super) method: Option<&'a str>,
}

/// Whether `initialize` claims protocol 2026-07-28 or later in its `_meta`: it is then no
/// handshake but a sessionless request (which such a server answers "method not found"), as
/// the official SDK classifies it. Without the claim it opens a session.
pub(super) fn claims_sessionless(line: &[u8]) -> bool {
    let Ok(message) = serde_json::from_slice::<Value>(line) else {
        return false;
    };
    meta_of(&message)
        .and_then(|meta| meta.get(META_PROTOCOL_VERSION))
        .and_then(Value::as_str)
        .is_some_and(|v| v >= FIRST_SESSIONLESS_VERSION)
}

/// The versions of the protocol without sessions the gateway speaks.
const SESSIONLESS_VERSIONS: [&str; 1] = [FIRST_SESSIONLESS_VERSION];

/// The refusal (its JSON-RPC error as one line) of a sessionless message the gateway does not
/// send on, or `None`. A response and a `notifications/cancelled` (which the gateway drops
/// without a session) are not checked. `stdio`: the server is a command.
pub(super) fn refusal(headers: &Headers, line: &[u8], peek: &Peek, stdio: bool) -> Option<Vec<u8>> {
    let method = peek.method.as_deref()?;
    if method == "notifications/cancelled" && peek.id.is_none() {
        return None;
    }
    let id = peek.id.as_ref();
    let invalid = |problem: String| {
        Some(error_line(
            id,
            INVALID_PARAMS,
            &format!(
                "Invalid _meta envelope for protocol revision {FIRST_SESSIONLESS_VERSION}: {problem}"
            ),
            None,
        ))
    };
    let message = serde_json::from_slice::<Value>(line).ok()?;
    let Some(meta) = meta_of(&message) else {
        return invalid("_meta: the per-request envelope is required".to_owned());
    };
    let version = match meta.get(META_PROTOCOL_VERSION) {
        None => return invalid(format!("{META_PROTOCOL_VERSION}: missing")),
        Some(Value::String(version)) => version.as_str(),
        Some(_) => return invalid(format!("{META_PROTOCOL_VERSION}: not a string")),
    };
    match meta.get(META_CLIENT_CAPABILITIES) {
        None => return invalid(format!("{META_CLIENT_CAPABILITIES}: missing")),
        Some(Value::Object(_)) => {}
        Some(_) => return invalid(format!("{META_CLIENT_CAPABILITIES}: not an object")),
    }
    let mismatch = |header: &str, body: &str, what: &str| {
        Some(error_line(
            id,
            HEADER_MISMATCH,
            &format!("Bad Request: the request headers and body disagree: {what}"),
            Some(json!({"mismatch": {"header": header, "body": body}})),
        ))
    };
    if let Some(header) = headers.version
        && header.trim() != version
    {
        return mismatch(
            header,
            version,
            &format!("the MCP-Protocol-Version header names {header}, the body {version}"),
        );
    }
    if let Some(header) = headers.method
        && header.trim() != method
    {
        return mismatch(
            header,
            method,
            &format!("the Mcp-Method header names {header}, the body {method}"),
        );
    }
    if stdio && !SESSIONLESS_VERSIONS.contains(&version) {
        return Some(error_line(
            id,
            UNSUPPORTED_PROTOCOL_VERSION,
            &format!(
                "Unsupported protocol version: {version} (supported versions: {})",
                SESSIONLESS_VERSIONS.join(", ")
            ),
            Some(json!({"supported": SESSIONLESS_VERSIONS, "requested": version})),
        ));
    }
    None
}

/// The HTTP status of a shared proxy's answer to a request, and the answer as its client gets
/// it (without the HTTP client's note of the status). `stdio`: the server is a command.
pub(super) fn answered(reply: Vec<u8>, stdio: bool) -> (StatusCode, Vec<u8>) {
    if !reply.windows(7).any(|w| w == b"\"error\"") {
        return (StatusCode::OK, reply);
    }
    let Ok(mut message) = serde_json::from_slice::<Value>(&reply) else {
        return (StatusCode::OK, reply);
    };
    let Some(error) = message.get_mut("error").and_then(Value::as_object_mut) else {
        return (StatusCode::OK, reply);
    };
    let noted = error
        .get("data")
        .and_then(|d| d.get(HTTP_STATUS_KEY))
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok())
        .and_then(|s| StatusCode::from_u16(s).ok());
    if let Some(status) = noted {
        // Credentials refused are the gateway's business, not the client's (see `listen`).
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return (StatusCode::OK, reply);
        }
        if let Some(data) = error.get_mut("data").and_then(Value::as_object_mut) {
            data.remove(HTTP_STATUS_KEY);
            if data.is_empty() {
                error.remove("data");
            }
        }
        return (status, jsonrpc::line(&message));
    }
    if !stdio {
        return (StatusCode::OK, reply);
    }
    let status = match error.get("code").and_then(Value::as_i64) {
        Some(METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
        Some(
            PARSE_ERROR
            | INVALID_REQUEST
            | HEADER_MISMATCH
            | MISSING_CLIENT_CAPABILITY
            | UNSUPPORTED_PROTOCOL_VERSION,
        ) => StatusCode::BAD_REQUEST,
        _ => StatusCode::OK,
    };
    (status, reply)
}

/// A shared proxy's request answered on an event stream: the status is not sent before the
/// first event, so that a refusal (the answer as the first event, an error) is answered as
/// JSON with its status, as the server would answer it over HTTP. Anything else (progress, an
/// answer that is no refusal) starts the stream. Dropped while it waits (the client hung up),
/// `body` cancels the request as the stream would.
pub(super) async fn answer_on_stream(mut body: EventBody, stdio: bool) -> Answer {
    let Some(first) = body.rx.recv().await else {
        return events(body);
    };
    if let Some(message) = message_of(&first)
        && Peek::of(message).is_some_and(|p| p.is_response())
    {
        let (status, reply) = answered(message.to_vec(), stdio);
        if status != StatusCode::OK {
            return json_answer(status, reply);
        }
    }
    body.head = Some(first);
    events(body)
}

fn meta_of(message: &Value) -> Option<&serde_json::Map<String, Value>> {
    message.get("params")?.get("_meta")?.as_object()
}

fn error_line(id: Option<&Value>, code: i64, message: &str, data: Option<Value>) -> Vec<u8> {
    let mut error = json!({"code": code, "message": message});
    if let Some(data) = data {
        error["data"] = data;
    }
    jsonrpc::line(&json!({
        "jsonrpc": "2.0",
        "id": id.cloned().unwrap_or(Value::Null),
        "error": error,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peek(line: &[u8]) -> Peek {
        Peek::of(line).unwrap()
    }

    fn code(refusal: Option<Vec<u8>>) -> Option<i64> {
        let refusal: Value = serde_json::from_slice(&refusal?).unwrap();
        refusal["error"]["code"].as_i64()
    }

    const NO_HEADERS: Headers = Headers {
        version: None,
        method: None,
    };

    #[test]
    fn a_message_without_the_version_or_the_capabilities_in_its_meta_is_refused_with_invalid_params()
     {
        for line in [
            &br#"{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{}}"#[..],
            br#"{"jsonrpc":"2.0","id":1,"method":"server/discover"}"#,
            br#"{"jsonrpc":"2.0","method":"notifications/x","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":7,"io.modelcontextprotocol/clientCapabilities":{}}}}"#,
        ] {
            assert_eq!(
                code(refusal(&NO_HEADERS, line, &peek(line), true)),
                Some(INVALID_PARAMS),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn headers_that_disagree_with_the_body_are_a_header_mismatch_and_agreeing_ones_pass() {
        let line = br#"{"jsonrpc":"2.0","id":"a","method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
        let headers = |version, method| Headers { version, method };
        assert_eq!(
            refusal(
                &headers(Some("2026-07-28"), Some("tools/list")),
                line,
                &peek(line),
                true
            ),
            None
        );
        assert_eq!(refusal(&NO_HEADERS, line, &peek(line), true), None);
        for wrong in [
            headers(Some("2099-01-01"), None),
            headers(None, Some("tools/call")),
        ] {
            assert_eq!(
                code(refusal(&wrong, line, &peek(line), true)),
                Some(HEADER_MISMATCH)
            );
        }
        // A version the gateway does not speak: refused in front of a stdio server only.
        let newer = br#"{"jsonrpc":"2.0","id":"a","method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
        assert_eq!(
            code(refusal(&NO_HEADERS, newer, &peek(newer), true)),
            Some(UNSUPPORTED_PROTOCOL_VERSION)
        );
        assert_eq!(refusal(&NO_HEADERS, newer, &peek(newer), false), None);
        // A response and a cancel are not checked.
        let answer = br#"{"jsonrpc":"2.0","id":3,"result":{}}"#;
        assert_eq!(refusal(&NO_HEADERS, answer, &peek(answer), true), None);
    }

    #[test]
    fn a_refusal_gets_the_status_the_http_server_gave_it_and_loses_the_note_of_it() {
        let reply = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"no","data":{"supported":["2026-07-28"],"toolonce/httpStatus":400}}}"#;
        let (status, line) = answered(reply.to_vec(), false);
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let line: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(line["error"]["data"], json!({"supported": ["2026-07-28"]}));
        let in_band = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}"#;
        assert_eq!(answered(in_band.to_vec(), false).0, StatusCode::OK);
        assert_eq!(answered(in_band.to_vec(), true).0, StatusCode::NOT_FOUND);
        let handler = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"no tool"}}"#;
        assert_eq!(answered(handler.to_vec(), true).0, StatusCode::OK);
        let result = br#"{"jsonrpc":"2.0","id":1,"result":{"error":-32601}}"#;
        assert_eq!(answered(result.to_vec(), true).0, StatusCode::OK);
    }
}
