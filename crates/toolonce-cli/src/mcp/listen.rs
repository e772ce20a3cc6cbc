//! `toolonce mcp --listen ADDR -- <server command>`: the proxy as a Streamable HTTP gateway.
//!
//! Clients POST JSON-RPC messages to `/mcp`. An `initialize` request opens a session: the
//! gateway starts the server command for it and runs a [`proxy`](super::proxy) between the
//! session and the server, so every rule of the stdio proxy holds (write calls claimed through
//! the layer, replays, fail-closed answers). Sessions share the store and the scope, so calls
//! are deduplicated across sessions, and across gateway processes sharing a durable store.
//!
//! What is served: a POSTed request is answered with its JSON-RPC response as
//! `application/json`; a POSTed notification or response gets `202 Accepted`; the
//! `Mcp-Session-Id` given with the `initialize` answer is required afterwards (404 once the
//! session is gone); `DELETE` ends a session. Not served: event streams (a `GET` gets 405, and
//! messages the server sends outside an answer, such as progress notifications or its own
//! requests, are dropped), batches (400), sessionless requests (protocol 2026-07-28).
//!
//! A client closing its connection before the answer came cancels the request, as a
//! `notifications/cancelled` would.

use std::collections::HashMap;
use std::convert::Infallible;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming as Body;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::jsonrpc::{self, IdKey, Peek};
use super::proxy;
use super::stdio::ClientOut;

/// The largest request body accepted.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// The session header of Streamable HTTP.
const SESSION: &str = "mcp-session-id";

/// What the gateway needs to start a proxy for each session.
pub(crate) struct Gateway {
    pub(crate) addr: SocketAddr,
    /// The bearer token clients must present, if one is required.
    pub(crate) token: Option<String>,
    pub(crate) program: OsString,
    pub(crate) args: Vec<OsString>,
    pub(crate) scope: String,
    pub(crate) server_id: String,
    pub(crate) config: Arc<super::config::Config>,
    pub(crate) store: Arc<super::store::LazyStore>,
}

/// One client session: the input of its proxy and the requests waiting for answers.
struct Session {
    to_proxy: mpsc::UnboundedSender<Vec<u8>>,
    waiting: Arc<Mutex<HashMap<IdKey, oneshot::Sender<Vec<u8>>>>>,
}

impl Session {
    fn waiting(&self) -> MutexGuard<'_, HashMap<IdKey, oneshot::Sender<Vec<u8>>>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct State {
    gateway: Gateway,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    proxies: Mutex<JoinSet<()>>,
}

impl State {
    fn sessions(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Serves until SIGTERM or SIGINT, then ends every session (each server's input is closed, as
/// a stdio client hanging up would) and waits for the servers to exit.
pub(crate) async fn serve(gateway: Gateway) -> anyhow::Result<std::process::ExitStatus> {
    let listener = tokio::net::TcpListener::bind(gateway.addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", gateway.addr))?;
    let local = listener.local_addr()?;
    // Said even with logging off: with port 0 this is how a person learns the port.
    eprintln!("toolonce mcp: listening on http://{local}/mcp");
    let shutdown_timeout = gateway.config.proxy.shutdown_timeout;
    let state = Arc::new(State {
        gateway,
        sessions: Mutex::new(HashMap::new()),
        proxies: Mutex::new(JoinSet::new()),
    });
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::warn!(target: "toolonce::mcp", error = %e, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let state = state.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(handle(&state, request).await) }
                    });
                    if let Err(e) = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await
                    {
                        tracing::debug!(target: "toolonce::mcp", error = %e, "connection ended");
                    }
                });
            }
            _ = terminate.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    drop(listener);
    // Dropping a session's input is the client hanging up: its proxy closes the server's input.
    state.sessions().clear();
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

type Answer = Response<Full<Bytes>>;

fn answer(status: StatusCode, body: Vec<u8>) -> Answer {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}

/// An HTTP error with a JSON-RPC error body, as Streamable HTTP servers answer.
fn refuse(status: StatusCode, message: &str) -> Answer {
    let mut response = answer(
        status,
        jsonrpc::error_line(None, jsonrpc_code(status), message),
    );
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn jsonrpc_code(status: StatusCode) -> i64 {
    match status {
        StatusCode::BAD_REQUEST => -32600,
        _ => -32000,
    }
}

async fn handle(state: &Arc<State>, request: Request<Body>) -> Answer {
    if request.uri().path() != "/mcp" {
        return refuse(StatusCode::NOT_FOUND, "not found: the MCP endpoint is /mcp");
    }
    if let Some(token) = &state.gateway.token
        && !authorized(&request, token)
    {
        let mut response = refuse(StatusCode::UNAUTHORIZED, "a valid bearer token is required");
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    }
    if !origin_allowed(&request) {
        return refuse(
            StatusCode::FORBIDDEN,
            "requests from this Origin are refused",
        );
    }
    let session = request
        .headers()
        .get(SESSION)
        .map(|v| v.to_str().unwrap_or("").to_owned());
    match *request.method() {
        Method::POST => post(state, session, request).await,
        Method::DELETE => match session {
            Some(id) if state.sessions().remove(&id).is_some() => {
                answer(StatusCode::OK, Vec::new())
            }
            Some(_) => refuse(StatusCode::NOT_FOUND, "no such session"),
            None => refuse(StatusCode::BAD_REQUEST, "no Mcp-Session-Id"),
        },
        _ => {
            let mut response = refuse(
                StatusCode::METHOD_NOT_ALLOWED,
                "only POST and DELETE are served (no event stream)",
            );
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
            response
        }
    }
}

/// Whether the request carries `Authorization: Bearer <token>`. The comparison takes the same
/// time wherever the first difference is.
fn authorized(request: &Request<Body>, token: &str) -> bool {
    let Some(given) = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, value)| value.trim())
    else {
        return false;
    };
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// Browsers send an `Origin`: only pages served from this machine may reach the gateway, so a
/// web page cannot drive it through DNS rebinding. Clients that are not browsers send none.
fn origin_allowed(request: &Request<Body>) -> bool {
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

async fn post(state: &Arc<State>, session: Option<String>, request: Request<Body>) -> Answer {
    let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                "the body is too large or was not received whole",
            );
        }
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
        Some(id) => match state.sessions().get(&id) {
            Some(session) => (None, session.clone()),
            None => return refuse(StatusCode::NOT_FOUND, "no such session: initialize again"),
        },
        None if peek.method.as_deref() == Some("initialize") && peek.id.is_some() => {
            match open_session(state) {
                Ok((id, session)) => (Some(id), session),
                Err(e) => {
                    tracing::error!(target: "toolonce::mcp", error = %e, "cannot open a session");
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
    let (Some(method), Some(id)) = (&peek.method, &peek.id) else {
        // A notification or a response: nothing comes back.
        let _ = session.to_proxy.send(line);
        return answer(StatusCode::ACCEPTED, Vec::new());
    };
    let key = IdKey::of(id);
    let (tx, rx) = oneshot::channel();
    {
        let mut waiting = session.waiting();
        if waiting.contains_key(&key) {
            return refuse(
                StatusCode::BAD_REQUEST,
                "the request id is used by a request still in progress",
            );
        }
        waiting.insert(key.clone(), tx);
    }
    let mut pending = Pending {
        session: &session,
        key,
        id: id.clone(),
        cancel: method != "initialize",
    };
    if session.to_proxy.send(line).is_err() {
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
    let mut response = answer(StatusCode::OK, reply);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(id) = session_id
        && let Ok(value) = HeaderValue::from_str(&id)
    {
        response.headers_mut().insert(SESSION, value);
    }
    response
}

/// A request waiting for its answer. Dropped before the answer came (the client closed the
/// connection), it cancels the request.
struct Pending<'a> {
    session: &'a Session,
    key: IdKey,
    id: Value,
    cancel: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.session.waiting().remove(&self.key);
        if self.cancel {
            let _ = self.session.to_proxy.send(jsonrpc::cancelled_line(
                &self.id,
                "the client closed the HTTP connection",
            ));
        }
    }
}

/// Starts the server command and a proxy for a new session.
fn open_session(state: &Arc<State>) -> anyhow::Result<(String, Arc<Session>)> {
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    let id: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let gateway = &state.gateway;
    let mut command = tokio::process::Command::new(&gateway.program);
    command.args(&gateway.args);
    let (to_proxy, client_in) = mpsc::unbounded_channel();
    let (client_out, mut out_rx) = ClientOut::channel();
    let waiting: Arc<Mutex<HashMap<IdKey, oneshot::Sender<Vec<u8>>>>> = Arc::default();
    let settings = proxy::Settings {
        scope: gateway.scope.clone(),
        server_id: gateway.server_id.clone(),
        config: gateway.config.clone(),
        store: gateway.store.clone(),
    };
    let shutdown_timeout = gateway.config.proxy.shutdown_timeout;
    let answers = waiting.clone();
    let unanswered = waiting.clone();
    let state_for_end = Arc::downgrade(state);
    let session_id = id.clone();
    state
        .proxies
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .spawn(async move {
            // Answers go to the requests waiting for them; anything else the server sends
            // would need an event stream, which the gateway does not serve.
            let deliver = tokio::spawn(async move {
                while let Some(line) = out_rx.recv().await {
                    if line.is_empty() {
                        break;
                    }
                    let waiter = Peek::of(&line)
                        .filter(Peek::is_response)
                        .and_then(|peek| peek.id)
                        .and_then(|id| {
                            answers
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .remove(&IdKey::of(&id))
                        });
                    match waiter {
                        Some(tx) => {
                            let _ = tx.send(line);
                        }
                        None => tracing::debug!(
                            target: "toolonce::mcp",
                            "dropped a message outside an answer (no event stream)"
                        ),
                    }
                }
            });
            let status = proxy::run(
                settings,
                proxy::Server::Command(command),
                client_in,
                client_out.clone(),
                shutdown_timeout,
            )
            .await;
            client_out.close();
            let _ = deliver.await;
            // Requests the server never answered learn it from their senders being dropped.
            unanswered.lock().unwrap_or_else(|p| p.into_inner()).clear();
            match status {
                Ok(status) => {
                    tracing::info!(target: "toolonce::mcp", %status, "a session's server exited");
                }
                Err(e) => {
                    tracing::warn!(target: "toolonce::mcp", error = %e, "a session's proxy failed");
                }
            }
            if let Some(state) = state_for_end.upgrade() {
                state.sessions().remove(&session_id);
            }
        });
    let session = Arc::new(Session { to_proxy, waiting });
    state.sessions().insert(id.clone(), session.clone());
    Ok((id, session))
}
