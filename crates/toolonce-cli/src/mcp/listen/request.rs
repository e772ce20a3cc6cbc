//! The HTTP side of the gateway, apart from sessions: what a client's request says (whether it
//! accepts an event stream, carries the token, comes from an allowed `Origin`, is of a protocol
//! without sessions, asks for progress) and the shapes of the gateway's answers.

use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming as Body;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::Value;

use crate::mcp::jsonrpc;
use crate::mcp::protocol::{
    EVENT_STREAM, FIRST_SESSIONLESS_VERSION, HTTP_STATUS_KEY, INVALID_REQUEST,
    META_PROTOCOL_VERSION as META_VERSION, META_PROTOCOL_VERSION_POINTER, SERVER_ERROR,
    WWW_AUTHENTICATE_KEY,
};

use super::body::EventBody;

pub(super) type Answer = Response<Either<Full<Bytes>, EventBody>>;

pub(super) fn answer(status: StatusCode, body: Vec<u8>) -> Answer {
    let mut response = Response::new(Either::Left(Full::new(Bytes::from(body))));
    *response.status_mut() = status;
    response
}

/// A `200` whose body is an event stream.
pub(super) fn events(body: EventBody) -> Answer {
    let mut response = Response::new(Either::Right(body));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// An HTTP error with a JSON-RPC error body, as Streamable HTTP servers answer.
pub(super) fn refuse(status: StatusCode, message: &str) -> Answer {
    json_answer(
        status,
        jsonrpc::error_line(None, jsonrpc_code(status), message),
    )
}

/// A JSON-RPC message as a JSON body with `status`.
pub(super) fn json_answer(status: StatusCode, body: Vec<u8>) -> Answer {
    let mut response = answer(status, body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

pub(super) fn jsonrpc_code(status: StatusCode) -> i64 {
    match status {
        StatusCode::BAD_REQUEST => INVALID_REQUEST,
        _ => SERVER_ERROR,
    }
}

/// Whether the client takes an event stream (`Accept` names `text/event-stream`).
pub(super) fn accepts_events(request: &Request<Body>) -> bool {
    request
        .headers()
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.split(';').next().unwrap_or("").trim())
        .any(|v| v.eq_ignore_ascii_case(EVENT_STREAM))
}

/// The RFC 9728 metadata document (see [`crate::mcp::auth`]), to a `GET`.
pub(super) fn metadata(method: &Method, document: &[u8]) -> Answer {
    if method != Method::GET {
        let mut response = refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "the protected resource metadata is served to GET",
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET"));
        return response;
    }
    let mut response = answer(StatusCode::OK, document.to_vec());
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Browsers send an `Origin`: only pages served from this machine may reach the gateway, so a
/// web page cannot drive it through DNS rebinding. Clients that are not browsers send none.
pub(super) fn origin_allowed(request: &Request<Body>) -> bool {
    let Some(origin) = request.headers().get(header::ORIGIN) else {
        return true;
    };
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let host = match rest.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => rest.split(':').next().unwrap_or(""),
    };
    matches!(host, "localhost" | "127.0.0.1" | "::1")
}

/// Whether a message without a session is of protocol 2026-07-28 or later, which has no
/// sessions: its `MCP-Protocol-Version` header, or its own `_meta` protocol version, says so.
/// (Versions are dates, so they compare as text.) Earlier protocols need `initialize` first.
pub(super) fn sessionless(header: Option<&str>, line: &[u8]) -> bool {
    const FIRST: &str = FIRST_SESSIONLESS_VERSION;
    if let Some(version) = header {
        return version >= FIRST;
    }
    if !line
        .windows(META_VERSION.len())
        .any(|w| w == META_VERSION.as_bytes())
    {
        return false;
    }
    serde_json::from_slice::<Value>(line)
        .ok()
        .and_then(|m| {
            m.get("params")
                .and_then(|p| p.pointer(META_PROTOCOL_VERSION_POINTER))
                .and_then(Value::as_str)
                .map(|v| v >= FIRST)
        })
        .unwrap_or(false)
}

/// Whether an answer is the HTTP server refusing the client's credentials (401 or 403, said by
/// the proxy's HTTP client in `data`): the status for the client, and the server's challenge,
/// so that a client that can authenticate (OAuth) learns it must, as it would without the
/// gateway.
pub(super) fn refused_for_credentials(reply: &[u8]) -> Option<(StatusCode, Option<HeaderValue>)> {
    if !reply
        .windows(HTTP_STATUS_KEY.len())
        .any(|w| w == HTTP_STATUS_KEY.as_bytes())
    {
        return None;
    }
    let reply: Value = serde_json::from_slice(reply).ok()?;
    let data = reply.pointer("/error/data")?;
    let status = match data.get(HTTP_STATUS_KEY)?.as_u64()? {
        401 => StatusCode::UNAUTHORIZED,
        403 => StatusCode::FORBIDDEN,
        _ => return None,
    };
    let challenge = data
        .get(WWW_AUTHENTICATE_KEY)
        .and_then(Value::as_str)
        .and_then(|v| HeaderValue::from_str(v).ok())
        .or_else(|| {
            (status == StatusCode::UNAUTHORIZED).then(|| HeaderValue::from_static("Bearer"))
        });
    Some((status, challenge))
}

/// The `_meta.progressToken` of a request, if it asks for progress.
pub(super) fn progress_token(line: &[u8]) -> Option<Value> {
    if !line.windows(13).any(|w| w == b"progressToken") {
        return None;
    }
    serde_json::from_slice::<Value>(line)
        .ok()?
        .pointer("/params/_meta/progressToken")
        .cloned()
}
