//! `POST /mcp`, as a pipeline: the message is checked, finds its session (or opens one),
//! is registered where its answer goes, dispatched to the session's proxy, and the answer is
//! given back as an event stream or as JSON. Each step either hands the next one what it needs
//! or stops the pipeline with the answer the client gets.

// A step's refusal (`Err` of an HTTP answer) is answered at once, never stored: boxing it would
// only add an allocation.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use hyper::body::Incoming as Body;
use hyper::header::{self, HeaderValue};
use hyper::{Request, StatusCode};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::mcp::auth::Principal;
use crate::mcp::jsonrpc::{IdKey, Peek};
use crate::mcp::protocol::{
    METHOD_HEADER, PROTOCOL_VERSION_HEADER as PROTOCOL_VERSION, SESSION_ID_HEADER as SESSION,
};

use super::body::{Cancel, EventBody, Pending};
use super::request::{
    Answer, accepts_events, answer, events, json_answer, progress_token, refuse,
    refused_for_credentials, sessionless,
};
use super::routes::{Session, Waiter};
use super::sessions::{AtLimit, Backend, Busy, OverQuota, State, open_session, sessionless_proxy};
use super::{envelope, limits, shared};

/// A POSTed message, read and checked: what the later steps need of the request.
struct Message {
    /// Whether the client accepts `text/event-stream`.
    streams: bool,
    version: Option<String>,
    method_header: Option<String>,
    authorization: Option<HeaderValue>,
    /// The body as the one line the proxy reads.
    line: Vec<u8>,
    peek: Peek,
}

/// A request as its session's proxy gets it, and where its answer goes.
struct Call {
    /// The client's id, which the answer carries back.
    id: Value,
    /// The id the proxy sees: the client's own, or in a shared proxy the gateway's.
    upstream_id: Value,
    key: IdKey,
    line: Vec<u8>,
    progress: Option<Value>,
    shared: bool,
    /// Whether the client going away cancels the request.
    cancel: bool,
}

/// An answer that ends the pipeline early; it gets no `Mcp-Session-Id`.
type Stop = Answer;

pub(super) async fn post(
    state: &Arc<State>,
    principal: &Principal,
    session: Option<String>,
    request: Request<Body>,
) -> Answer {
    let message = match check(state, request).await {
        Ok(message) => message,
        Err(stop) => return stop,
    };
    let (session_id, session) = match session_for(state, principal, session, &message) {
        Ok(found) => found,
        Err(stop) => return stop,
    };
    let Message {
        streams,
        authorization,
        line,
        peek,
        ..
    } = message;
    if let Some(upstream) = &session.forward_to {
        upstream.set_client_authorization(authorization);
    }
    if peek.id.is_some() && peek.method.as_deref().is_some_and(|m| m != "initialize") {
        session.engage();
    }
    let (Some(method), Some(id)) = (&peek.method, &peek.id) else {
        return pass_on(&session, &peek, line);
    };
    // `initialize` is answered as JSON: an HTTP server behind the gateway refusing the client's
    // credentials is then answered with its status (see `refused_for_credentials`).
    let streams = streams && method != "initialize";
    let call = match call_of(&session, method, id, line) {
        Ok(call) => call,
        Err(stop) => return stop,
    };
    let answered = if streams {
        answer_on_stream(state, &session, call).await
    } else {
        answer_as_json(state, session_id.as_deref(), &session, call).await
    };
    match answered {
        Ok(response) => with_session_id(response, session_id),
        Err(stop) => stop,
    }
}

/// What a 2026-07-28 request is checked for, and the statuses of its refusals, depend on
/// whether the server is a command (see `envelope`).
fn stdio(state: &State) -> bool {
    matches!(state.gateway.backend, Backend::Command { .. })
}

/// Step 1: the headers the later steps need, and the body as one JSON-RPC message.
async fn check(state: &State, request: Request<Body>) -> Result<Message, Stop> {
    let streams = accepts_events(&request);
    let header = |name| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let version = header(PROTOCOL_VERSION);
    let method_header = header(METHOD_HEADER);
    let authorization = request.headers().get(header::AUTHORIZATION).cloned();
    let body = limits::read_body(request, &state.gateway.bounds).await?;
    // The proxy reads one message per line. A newline outside a JSON string is whitespace (one
    // inside must be escaped), so a pretty-printed message becomes one line unchanged in meaning.
    let mut line: Vec<u8> = body
        .iter()
        .map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b })
        .collect();
    line.push(b'\n');
    if line.trim_ascii_start().first() == Some(&b'[') {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "batches are not served by the gateway",
        ));
    }
    let Some(peek) = Peek::of(&line) else {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "the body is not a JSON-RPC message",
        ));
    };
    Ok(Message {
        streams,
        version,
        method_header,
        authorization,
        line,
        peek,
    })
}

/// Step 2: the session the message goes to: the one its `Mcp-Session-Id` names, a new one for
/// an `initialize` (with its id, given back with the answer), or a sessionless proxy.
fn session_for(
    state: &Arc<State>,
    principal: &Principal,
    session: Option<String>,
    message: &Message,
) -> Result<(Option<String>, Arc<Session>), Stop> {
    let peek = &message.peek;
    match session {
        Some(id) => match state.session_of(&id, principal) {
            Some(session) => Ok((None, session)),
            None => Err(refuse(
                StatusCode::NOT_FOUND,
                "no such session: initialize again",
            )),
        },
        None if peek.method.as_deref() == Some("initialize")
            && peek.id.is_some()
            && !envelope::claims_sessionless(&message.line) =>
        {
            open(state, principal).map(|(id, session)| (Some(id), session))
        }
        None if sessionless(message.version.as_deref(), &message.line) => {
            sessionless_for(state, principal, message).map(|session| (None, session))
        }
        None => Err(refuse(
            StatusCode::BAD_REQUEST,
            "no Mcp-Session-Id: send initialize first",
        )),
    }
}

/// A new session for an `initialize`, or the refusal of one at a limit.
fn open(state: &Arc<State>, principal: &Principal) -> Result<(String, Arc<Session>), Stop> {
    open_session(state, principal).map_err(|e| {
        if e.is::<AtLimit>() {
            tracing::warn!(target: "toolonce::mcp", "refused a session: {e}");
            refuse(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())
        } else if e.is::<OverQuota>() {
            tracing::info!(target: "toolonce::mcp", "refused a session: {e}");
            refuse(StatusCode::TOO_MANY_REQUESTS, &e.to_string())
        } else {
            tracing::error!(target: "toolonce::mcp", error = %e, "cannot open a session");
            refuse(StatusCode::INTERNAL_SERVER_ERROR, "cannot start the server")
        }
    })
}

/// The shared proxy for a message of protocol 2026-07-28, checked first as such a server
/// checks it; a notification with no proxy to go to is accepted and dropped.
fn sessionless_for(
    state: &Arc<State>,
    principal: &Principal,
    message: &Message,
) -> Result<Arc<Session>, Stop> {
    let headers = envelope::Headers {
        version: message.version.as_deref(),
        method: message.method_header.as_deref(),
    };
    // Before any proxy is chosen: a refused message reaches no shared server.
    if let Some(refusal) = envelope::refusal(&headers, &message.line, &message.peek, stdio(state)) {
        return Err(json_answer(StatusCode::BAD_REQUEST, refusal));
    }
    let id = message.peek.id.as_ref();
    match sessionless_proxy(state, principal, id, &message.authorization) {
        Ok(Some(session)) => Ok(session),
        Ok(None) => Err(answer(StatusCode::ACCEPTED, Vec::new())),
        Err(e) if e.is::<OverQuota>() => Err(refuse(StatusCode::TOO_MANY_REQUESTS, &e.to_string())),
        Err(e) if e.is::<Busy>() => Err(refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many requests without a session in progress: try again later",
        )),
        Err(e) => {
            tracing::error!(target: "toolonce::mcp", error = %e, "cannot start a proxy");
            Err(refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot start the server",
            ))
        }
    }
}

/// A notification or a response: passed on, and nothing comes back.
fn pass_on(session: &Session, peek: &Peek, line: Vec<u8>) -> Answer {
    // A cancel without a session names the client's id, which other clients of a shared proxy
    // may use too: it is dropped (protocol 2026-07-28 cancels by closing the request's stream;
    // see `shared`).
    if peek.method.as_deref() == Some("notifications/cancelled") && session.routes().shared {
        tracing::debug!(target: "toolonce::mcp", "dropped a cancel without a session");
        return answer(StatusCode::ACCEPTED, Vec::new());
    }
    let _ = session.to_proxy.send(line);
    answer(StatusCode::ACCEPTED, Vec::new())
}

/// A request as the proxy is to see it: the id (and progress token) the client's own, or in a
/// shared proxy the gateway's (see `shared`).
fn call_of(session: &Session, method: &str, id: &Value, line: Vec<u8>) -> Result<Call, Stop> {
    // Cancelling `initialize` is not allowed (the specification forbids it).
    let cancel = method != "initialize";
    let progress = progress_token(&line);
    let shared = session.routes().shared;
    let (upstream_id, line) = if shared {
        let n = shared::next_id();
        let Some(line) = shared::to_upstream(&line, n, progress.is_some()) else {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                "the request's id or progress token cannot be read",
            ));
        };
        (Value::from(n), line)
    } else {
        (id.clone(), line)
    };
    Ok(Call {
        id: id.clone(),
        key: IdKey::of(&upstream_id),
        upstream_id,
        line,
        progress,
        shared,
        cancel,
    })
}

fn in_progress() -> Stop {
    refuse(
        StatusCode::BAD_REQUEST,
        "the request id is used by a request still in progress",
    )
}

fn session_ended() -> Stop {
    refuse(
        StatusCode::NOT_FOUND,
        "the session has ended: initialize again",
    )
}

/// Steps 3 to 5 for a client that takes an event stream: the request is registered to answer
/// on it (with its progress), sent to the proxy, and the stream is the answer.
async fn answer_on_stream(
    state: &State,
    session: &Arc<Session>,
    call: Call,
) -> Result<Answer, Stop> {
    let (tx, rx) = mpsc::unbounded_channel();
    let seq = register_stream(session, &call, tx)?;
    if session.to_proxy.send(call.line).is_err() {
        let mut routes = session.routes();
        if let Some(Waiter::Events {
            progress: Some(token),
            ..
        }) = routes.waiting.remove(&call.key)
        {
            routes.progress.remove(&token);
        }
        drop(routes);
        return Err(session_ended());
    }
    let body = EventBody {
        head: None,
        rx,
        _cancel: Some(Cancel {
            session: session.clone(),
            key: call.key,
            id: call.upstream_id,
            seq,
            cancel: call.cancel,
        }),
    };
    Ok(if call.shared {
        envelope::answer_on_stream(body, stdio(state)).await
    } else {
        events(body)
    })
}

/// Where a streamed request's answer and progress go; its place in the session's order.
fn register_stream(
    session: &Session,
    call: &Call,
    tx: mpsc::UnboundedSender<bytes::Bytes>,
) -> Result<u64, Stop> {
    let progress = call.progress.clone().map(|token| {
        let sent = if call.shared {
            call.key.clone()
        } else {
            IdKey::of(&token)
        };
        (sent, token)
    });
    let mut routes = session.routes();
    if routes.waiting.contains_key(&call.key) {
        return Err(in_progress());
    }
    routes.next += 1;
    let seq = routes.next;
    if let Some((sent, token)) = &progress {
        routes
            .progress
            .insert(sent.clone(), (call.key.clone(), token.clone()));
    }
    routes.waiting.insert(
        call.key.clone(),
        Waiter::Events {
            tx,
            seq,
            progress: progress.map(|(sent, _)| sent),
            id: call.id.clone(),
        },
    );
    Ok(seq)
}

/// Steps 3 to 5 for a client that takes JSON: the request is registered, sent to the proxy,
/// and its answer awaited; the client going away meanwhile cancels it.
async fn answer_as_json(
    state: &State,
    session_id: Option<&str>,
    session: &Session,
    call: Call,
) -> Result<Answer, Stop> {
    let (tx, rx) = oneshot::channel();
    {
        let mut routes = session.routes();
        if routes.waiting.contains_key(&call.key) {
            return Err(in_progress());
        }
        routes.waiting.insert(
            call.key.clone(),
            Waiter::Json {
                tx,
                id: call.id.clone(),
            },
        );
    }
    let mut pending = Pending {
        session,
        key: call.key,
        id: call.upstream_id,
        cancel: call.cancel,
    };
    if session.to_proxy.send(call.line).is_err() {
        pending.cancel = false;
        return Err(session_ended());
    }
    let Ok(reply) = rx.await else {
        pending.cancel = false;
        return Err(refuse(
            StatusCode::BAD_GATEWAY,
            "the server exited before answering the request",
        ));
    };
    pending.cancel = false;
    if session_id.is_some()
        && let Some((status, challenge)) = refused_for_credentials(&reply)
    {
        return Err(refused_initialize(
            state, session_id, session, reply, status, challenge,
        ));
    }
    Ok(if call.shared {
        let (status, reply) = envelope::answered(reply, stdio(state));
        json_answer(status, reply)
    } else {
        json_answer(StatusCode::OK, reply)
    })
}

/// The server refused the credentials of an `initialize`: the session just opened is closed
/// again, and the client gets the refusal as an HTTP status.
fn refused_initialize(
    state: &State,
    session_id: Option<&str>,
    session: &Session,
    reply: Vec<u8>,
    status: StatusCode,
    challenge: Option<HeaderValue>,
) -> Answer {
    // No session was opened on the server: none is left open here either.
    if let Some(id) = session_id {
        state.sessions().remove(id);
    }
    // The server refused the client's own credentials only when they went on; else it refused
    // the gateway's (--header), which no client can fix: its challenge would send the client to
    // the server's authorization server for nothing.
    let forwarded = session.forward_to.is_some();
    let status = if forwarded {
        status
    } else {
        StatusCode::BAD_GATEWAY
    };
    let mut response = answer(status, reply);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(challenge) = challenge.filter(|_| forwarded) {
        headers.insert(header::WWW_AUTHENTICATE, challenge);
    }
    response
}

/// The last step: the answer, with the id of the session the message opened.
fn with_session_id(mut response: Answer, session_id: Option<String>) -> Answer {
    if let Some(id) = session_id
        && let Ok(value) = HeaderValue::from_str(&id)
    {
        response.headers_mut().insert(SESSION, value);
    }
    response
}
