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
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::auth::Principal;
use super::protocol::SESSION_ID_HEADER as SESSION;

mod admission;
mod body;
mod console;
mod envelope;
mod limits;
mod metrics;
mod post;
mod request;
mod routes;
mod sessions;
mod shared;

use crate::connections::Connections;
use body::EventBody;
use limits::AcceptErrors;
pub(crate) use limits::BoundsArgs;
use request::{Answer, accepts_events, answer, events, metadata, refuse};
use routes::{Session, lock};
pub(crate) use sessions::{Backend, ConsoleToken, Gateway};
use sessions::{State, end_idle_sessions};

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
    let connections = Connections::new(state.gateway.bounds.connection_cap());
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
                accept(&state, &connections, stream);
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
    end_sessions(&state, shutdown_timeout).await;
    Ok(std::os::unix::process::ExitStatusExt::from_raw(0))
}

/// Serves one accepted connection.
fn accept(state: &Arc<State>, connections: &Arc<Connections>, stream: tokio::net::TcpStream) {
    // An event-stream answer goes out in several small writes (headers, events, the last
    // chunk); with Nagle's algorithm each waited for the client's delayed ACK, about 40 ms per
    // call.
    let _ = stream.set_nodelay(true);
    let state = state.clone();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(state.gateway.bounds.header_timeout);
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

/// Ends every session and waits for the servers to exit.
async fn end_sessions(state: &State, shutdown_timeout: Duration) {
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
        Method::POST => post::post(state, &principal, session, request).await,
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
