//! `toolonce mcp --listen ADDR (-- <server command> | --upstream URL)`: the proxy as a
//! Streamable HTTP gateway.
//!
//! Clients POST JSON-RPC messages to `/mcp`. An `initialize` request opens a session: the
//! gateway starts the server command for it, or opens a session of its own on the HTTP server
//! (each client session maps to one server session, ended with it), and runs a
//! [`proxy`](super::proxy) between the two, so every rule of the stdio proxy holds (write
//! calls claimed through the layer, replays, fail-closed answers, transparency). Sessions share
//! the store, the scope and the server id, so calls of one principal are deduplicated across
//! its sessions, and across gateway processes sharing a durable store. Requests of protocol
//! 2026-07-28, which has no sessions, go to a pool of sessionless proxies, each shared by many
//! clients of one principal and kept apart by ids of the gateway's own (see [`shared`]); such
//! a request is checked at the door as a 2026-07-28 server checks it over HTTP, and refusals
//! get that protocol's HTTP statuses (see [`envelope`]).
//!
//! What is served: a POSTed request is answered as an event stream when the client accepts
//! `text/event-stream`: what the server sends while the request is in progress goes on the
//! newest such stream of the session (progress on the stream of the request that asked for
//! it; in a shared proxy, only that), then the answer ends it. A client that accepts only JSON gets the answer as `application/json`. A
//! `GET` opens the session's stream for messages outside any request (kept until one is open).
//! A POSTed notification or response gets `202 Accepted`; the `Mcp-Session-Id` given with the
//! `initialize` answer is required afterwards (404 once the session is gone); `DELETE` ends a
//! session. Not served: batches (400), resumption with `Last-Event-ID` (events carry no ids).
//!
//! Sessions are bounded, since each holds a server process (or a session on the HTTP server):
//! one with no request in progress, no `GET` stream open and no request for `--session-idle`
//! is ended as `DELETE` ends it (a client that crashed or forgot leaks nothing), and an
//! `initialize` while `--max-sessions` sessions' servers are alive (an ended session's counts
//! until it has exited) gets `503` and starts no server; one beyond its principal's
//! `--max-sessions-per-principal` gets `429`, and a session that did nothing after its
//! handshake is ended after `--handshake-idle`. So is the HTTP server (see
//! [`limits`]): read timeouts for heads and bodies, a body size limit, a connection cap.
//!
//! Over HTTP, a client closing the stream or the connection before the answer came is the
//! cancellation: the proxy gets a `notifications/cancelled`, as from a stdio client.
//!
//! Credentials ([`auth`](super::auth)): every request is authenticated after its headers,
//! before its body is read, and acts for a principal: its sessions belong to it (another
//! principal's session id gets 404, as an unknown one) and its calls' operations are in its
//! scope, so sessions of one principal share results and two principals never do. The
//! client's `Authorization` stays here; the gateway reaches an HTTP server with `--header`.
//! With `--forward-authorization` the client's goes on instead (the latest one the session
//! sent), and `initialize` is answered as JSON, so that the server refusing the client's
//! credentials (401, 403) becomes the gateway's HTTP answer; without it, the server refusing
//! the gateway's own credentials is a 502.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::body::Incoming as Body;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioTimer;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::auth::Principal;
use super::jsonrpc::{IdKey, Peek};
use super::protocol::{
    METHOD_HEADER, PROTOCOL_VERSION_HEADER as PROTOCOL_VERSION, SESSION_ID_HEADER as SESSION,
};

mod admission;
mod body;
mod console;
mod envelope;
mod limits;
mod metrics;
mod request;
mod routes;
mod sessions;
mod shared;

use crate::connections::Connections;
use body::{Cancel, EventBody, Pending};
use limits::AcceptErrors;
pub(crate) use limits::BoundsArgs;
use request::{
    Answer, accepts_events, answer, events, json_answer, metadata, progress_token, refuse,
    refused_for_credentials, sessionless,
};
use routes::{Session, Waiter, lock};
use sessions::{
    AtLimit, Busy, OverQuota, State, end_idle_sessions, open_session, sessionless_proxy,
};
pub(crate) use sessions::{Backend, ConsoleToken, Gateway};

/// Serves until SIGTERM or SIGINT, then ends every session (each server's input is closed, as
/// a stdio client hanging up would) and waits for the servers to exit.
pub(crate) async fn serve(gateway: Gateway) -> anyhow::Result<std::process::ExitStatus> {
    let listener = tokio::net::TcpListener::bind(gateway.addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", gateway.addr))?;
    let local = listener.local_addr()?;
    // Before the first call, so that every call is counted.
    crate::prometheus::install()?;
    // Said even with logging off: with port 0 this is how a person learns the port.
    eprintln!("toolonce mcp: listening on http://{local}/mcp");
    let shutdown_timeout = gateway.config.proxy.shutdown_timeout;
    let console = console::open(&gateway, local)?;
    let state = Arc::new(State {
        console,
        gateway,
        sessions: Mutex::new(HashMap::new()),
        sessionless: Mutex::new(Vec::new()),
        proxies: Mutex::new(JoinSet::new()),
        live_sessions: Arc::default(),
        live_by_principal: Arc::default(),
    });
    let reaper = tokio::spawn(end_idle_sessions(Arc::downgrade(&state)));
    let key_refresher = state.gateway.auth.refresh_keys_in_background();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let bounds = state.gateway.bounds.clone();
    let connections = Connections::new(bounds.connection_cap());
    let mut accept_errors = AcceptErrors::default();
    loop {
        tokio::select! {
            accepted = async {
                let accepted = listener.accept().await;
                // After the accept, so that a connection is only closed for one that came.
                if accepted.is_ok() {
                    connections.room().await;
                }
                accepted
            } => {
                let (stream, _) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of descriptors (another process's share, or the cap set too
                        // high): try again shortly, without a log line each time.
                        accept_errors.failed(&e);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // An event-stream answer goes out in several small writes (headers, events, the
                // last chunk); with Nagle's algorithm each waited for the client's delayed ACK,
                // about 40 ms per call.
                let _ = stream.set_nodelay(true);
                let state = state.clone();
                let mut http = hyper::server::conn::http1::Builder::new();
                http.timer(TokioTimer::new()).header_read_timeout(bounds.header_timeout);
                connections.serve(
                    stream,
                    http,
                    move |request| {
                        let state = state.clone();
                        async move { handle(&state, request).await }
                    },
                    || {
                        refuse(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "the connection was closed to make room",
                        )
                    },
                );
            }
            _ = terminate.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    drop(listener);
    reaper.abort();
    if let Some(refresher) = key_refresher {
        refresher.abort();
    }
    // Dropping a session's input is the client hanging up: its proxy closes the server's input.
    state.sessions().clear();
    lock(&state.sessionless).clear();
    let mut proxies = std::mem::take(&mut *state.proxies.lock().unwrap_or_else(|p| p.into_inner()));
    let ended = async { while proxies.join_next().await.is_some() {} };
    // Each proxy waits up to three shutdown timeouts for its server (input closed, SIGTERM,
    // SIGKILL).
    if tokio::time::timeout(shutdown_timeout * 3 + Duration::from_secs(2), ended)
        .await
        .is_err()
    {
        tracing::warn!(target: "toolonce::mcp", "stopping with servers still running");
    }
    Ok(std::os::unix::process::ExitStatusExt::from_raw(0))
}

async fn handle(state: &Arc<State>, request: Request<Body>) -> Answer {
    if let Some(console) = console::serving(state.console.as_ref(), request.uri().path()) {
        // The console checks its own session, CSRF token and Origin (see `crate::console`).
        return console
            .handle(request)
            .await
            .map(http_body_util::Either::Left);
    }
    if let Some(document) = state.gateway.auth.metadata(request.uri().path()) {
        return metadata(request.method(), document);
    }
    let path = request.uri().path();
    if path != "/mcp" && path != metrics::PATH {
        return refuse(StatusCode::NOT_FOUND, "not found: the MCP endpoint is /mcp");
    }
    let principal = match admission::admit(&state.gateway.auth, &request).await {
        Ok(principal) => principal,
        Err(refusal) => return refusal,
    };
    if request.uri().path() == metrics::PATH {
        return metrics::serve(&state.gateway.store, request.method()).await;
    }
    let session = request
        .headers()
        .get(SESSION)
        .map(|v| v.to_str().unwrap_or("").to_owned());
    match *request.method() {
        Method::POST => post(state, &principal, session, request).await,
        Method::GET => get(state, &principal, session, &request),
        Method::DELETE => match session {
            Some(id) if state.end_session_of(&id, &principal) => answer(StatusCode::OK, Vec::new()),
            Some(_) => refuse(StatusCode::NOT_FOUND, "no such session"),
            None => refuse(StatusCode::BAD_REQUEST, "no Mcp-Session-Id"),
        },
        _ => {
            let mut response = refuse(
                StatusCode::METHOD_NOT_ALLOWED,
                "only POST, GET and DELETE are served",
            );
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
            response
        }
    }
}

/// `GET /mcp`: the session's stream for messages outside any request. A newer one replaces
/// an older one (a client reconnecting may not have closed the old one yet).
fn get(
    state: &Arc<State>,
    principal: &Principal,
    session: Option<String>,
    request: &Request<Body>,
) -> Answer {
    if !accepts_events(request) {
        return refuse(
            StatusCode::NOT_ACCEPTABLE,
            "the GET stream is an event stream: accept text/event-stream",
        );
    }
    let Some(id) = session else {
        return refuse(StatusCode::BAD_REQUEST, "no Mcp-Session-Id");
    };
    let Some(session) = state.session_of(&id, principal) else {
        return refuse(StatusCode::NOT_FOUND, "no such session: initialize again");
    };
    pass_authorization(&session, request);
    session.engage();
    let (tx, rx) = mpsc::unbounded_channel();
    {
        let mut routes = session.routes();
        if routes.ended {
            return refuse(
                StatusCode::NOT_FOUND,
                "the session has ended: initialize again",
            );
        }
        for frame in routes.queued.drain(..) {
            let _ = tx.send(frame);
        }
        routes.stream = Some(tx);
    }
    events(EventBody {
        head: None,
        rx,
        _cancel: None,
    })
}

/// Gives the HTTP server the client's `Authorization` for the session's next requests, when it
/// is passed on (see [`Backend::Http`]).
fn pass_authorization(session: &Session, request: &Request<Body>) {
    if let Some(upstream) = &session.forward_to {
        upstream.set_client_authorization(request.headers().get(header::AUTHORIZATION).cloned());
    }
}

async fn post(
    state: &Arc<State>,
    principal: &Principal,
    session: Option<String>,
    request: Request<Body>,
) -> Answer {
    let streams = accepts_events(&request);
    let version = request
        .headers()
        .get(PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let method_header = request
        .headers()
        .get(METHOD_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let authorization = request.headers().get(header::AUTHORIZATION).cloned();
    // What a 2026-07-28 request is checked for, and the statuses of its refusals, depend on
    // whether the server is a command (see `envelope`).
    let stdio = matches!(state.gateway.backend, Backend::Command { .. });
    let bounds = &state.gateway.bounds;
    let body = match limits::read_body(request, bounds).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    // The proxy reads one message per line. A newline outside a JSON string is whitespace (one
    // inside must be escaped), so a pretty-printed message becomes one line unchanged in meaning.
    let mut line: Vec<u8> = body
        .iter()
        .map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b })
        .collect();
    line.push(b'\n');
    if line.trim_ascii_start().first() == Some(&b'[') {
        return refuse(
            StatusCode::BAD_REQUEST,
            "batches are not served by the gateway",
        );
    }
    let Some(peek) = Peek::of(&line) else {
        return refuse(
            StatusCode::BAD_REQUEST,
            "the body is not a JSON-RPC message",
        );
    };
    let (session_id, session) = match session {
        Some(id) => match state.session_of(&id, principal) {
            Some(session) => (None, session),
            None => return refuse(StatusCode::NOT_FOUND, "no such session: initialize again"),
        },
        None if peek.method.as_deref() == Some("initialize")
            && peek.id.is_some()
            && !envelope::claims_sessionless(&line) =>
        {
            match open_session(state, principal) {
                Ok((id, session)) => (Some(id), session),
                Err(e) if e.is::<AtLimit>() => {
                    tracing::warn!(target: "toolonce::mcp", "refused a session: {e}");
                    return refuse(StatusCode::SERVICE_UNAVAILABLE, &e.to_string());
                }
                Err(e) if e.is::<OverQuota>() => {
                    tracing::info!(target: "toolonce::mcp", "refused a session: {e}");
                    return refuse(StatusCode::TOO_MANY_REQUESTS, &e.to_string());
                }
                Err(e) => {
                    tracing::error!(target: "toolonce::mcp", error = %e, "cannot open a session");
                    return refuse(StatusCode::INTERNAL_SERVER_ERROR, "cannot start the server");
                }
            }
        }
        None if sessionless(version.as_deref(), &line) => {
            let headers = envelope::Headers {
                version: version.as_deref(),
                method: method_header.as_deref(),
            };
            // Before any proxy is chosen: a refused message reaches no shared server.
            if let Some(refusal) = envelope::refusal(&headers, &line, &peek, stdio) {
                return json_answer(StatusCode::BAD_REQUEST, refusal);
            }
            match sessionless_proxy(state, principal, peek.id.as_ref(), &authorization) {
                Ok(Some(session)) => (None, session),
                Ok(None) => return answer(StatusCode::ACCEPTED, Vec::new()),
                Err(e) if e.is::<OverQuota>() => {
                    return refuse(StatusCode::TOO_MANY_REQUESTS, &e.to_string());
                }
                Err(e) if e.is::<Busy>() => {
                    return refuse(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "too many requests without a session in progress: try again later",
                    );
                }
                Err(e) => {
                    tracing::error!(target: "toolonce::mcp", error = %e, "cannot start a proxy");
                    return refuse(StatusCode::INTERNAL_SERVER_ERROR, "cannot start the server");
                }
            }
        }
        None => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "no Mcp-Session-Id: send initialize first",
            );
        }
    };
    if let Some(upstream) = &session.forward_to {
        upstream.set_client_authorization(authorization);
    }
    if peek.id.is_some() && peek.method.as_deref().is_some_and(|m| m != "initialize") {
        session.engage();
    }
    let (Some(method), Some(id)) = (&peek.method, &peek.id) else {
        // A notification or a response: nothing comes back. A cancel without a session names
        // the client's id, which other clients of a shared proxy may use too: it is dropped
        // (protocol 2026-07-28 cancels by closing the request's stream; see `shared`).
        if peek.method.as_deref() == Some("notifications/cancelled") && session.routes().shared {
            tracing::debug!(target: "toolonce::mcp", "dropped a cancel without a session");
            return answer(StatusCode::ACCEPTED, Vec::new());
        }
        let _ = session.to_proxy.send(line);
        return answer(StatusCode::ACCEPTED, Vec::new());
    };
    // Cancelling `initialize` is not allowed (the specification forbids it).
    let cancel = method != "initialize";
    // `initialize` is answered as JSON: an HTTP server behind the gateway refusing the client's
    // credentials is then answered with its status (see `refused_for_credentials`).
    let streams = streams && method != "initialize";
    let progress = progress_token(&line);
    let shared = session.routes().shared;
    // The id (and progress token) the proxy sees: the client's own, or in a shared proxy the
    // gateway's (see `shared`).
    let (upstream_id, line) = if shared {
        let n = shared::next_id();
        let Some(line) = shared::to_upstream(&line, n, progress.is_some()) else {
            return refuse(
                StatusCode::BAD_REQUEST,
                "the request's id or progress token cannot be read",
            );
        };
        (Value::from(n), line)
    } else {
        (id.clone(), line)
    };
    let key = IdKey::of(&upstream_id);
    let sent_token = |token: &Value| {
        if shared {
            key.clone()
        } else {
            IdKey::of(token)
        }
    };
    let mut response = if streams {
        let progress = progress.map(|token| (sent_token(&token), token));
        let (tx, rx) = mpsc::unbounded_channel();
        let body = {
            let mut routes = session.routes();
            if routes.waiting.contains_key(&key) {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    "the request id is used by a request still in progress",
                );
            }
            routes.next += 1;
            let seq = routes.next;
            if let Some((sent, token)) = &progress {
                routes
                    .progress
                    .insert(sent.clone(), (key.clone(), token.clone()));
            }
            routes.waiting.insert(
                key.clone(),
                Waiter::Events {
                    tx,
                    seq,
                    progress: progress.map(|(sent, _)| sent),
                    id: id.clone(),
                },
            );
            drop(routes);
            if session.to_proxy.send(line).is_err() {
                let mut routes = session.routes();
                if let Some(Waiter::Events {
                    progress: Some(token),
                    ..
                }) = routes.waiting.remove(&key)
                {
                    routes.progress.remove(&token);
                }
                drop(routes);
                return refuse(
                    StatusCode::NOT_FOUND,
                    "the session has ended: initialize again",
                );
            }
            let cancel = Cancel {
                session: session.clone(),
                key,
                id: upstream_id,
                seq,
                cancel,
            };
            EventBody {
                head: None,
                rx,
                _cancel: Some(cancel),
            }
        };
        if shared {
            envelope::answer_on_stream(body, stdio).await
        } else {
            events(body)
        }
    } else {
        let (tx, rx) = oneshot::channel();
        {
            let mut routes = session.routes();
            if routes.waiting.contains_key(&key) {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    "the request id is used by a request still in progress",
                );
            }
            routes
                .waiting
                .insert(key.clone(), Waiter::Json { tx, id: id.clone() });
        }
        let mut pending = Pending {
            session: &session,
            key,
            id: upstream_id,
            cancel,
        };
        if session.to_proxy.send(line).is_err() {
            pending.cancel = false;
            return refuse(
                StatusCode::NOT_FOUND,
                "the session has ended: initialize again",
            );
        }
        let Ok(reply) = rx.await else {
            pending.cancel = false;
            return refuse(
                StatusCode::BAD_GATEWAY,
                "the server exited before answering the request",
            );
        };
        pending.cancel = false;
        if session_id.is_some()
            && let Some((status, challenge)) = refused_for_credentials(&reply)
        {
            // No session was opened on the server: none is left open here either.
            if let Some(id) = &session_id {
                state.sessions().remove(id);
            }
            // The server refused the client's own credentials only when they went on; else it
            // refused the gateway's (--header), which no client can fix: its challenge would
            // send the client to the server's authorization server for nothing.
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
            return response;
        }
        if shared {
            let (status, reply) = envelope::answered(reply, stdio);
            json_answer(status, reply)
        } else {
            json_answer(StatusCode::OK, reply)
        }
    };
    if let Some(id) = session_id
        && let Ok(value) = HeaderValue::from_str(&id)
    {
        response.headers_mut().insert(SESSION, value);
    }
    response
}
