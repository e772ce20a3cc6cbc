//! `toolonce mcp --listen ADDR (-- <server command> | --upstream URL)`: the proxy as a
//! Streamable HTTP gateway.
//!
//! Clients POST JSON-RPC messages to `/mcp`. An `initialize` request opens a session: the
//! gateway starts the server command for it, or opens a session of its own on the HTTP server
//! (each client session maps to one server session, ended with it), and runs a
//! [`proxy`](super::proxy) between the two, so every rule of the stdio proxy holds (write
//! calls claimed through the layer, replays, fail-closed answers, transparency). Sessions share
//! the store, the scope and the server id, so calls are deduplicated across sessions, and
//! across gateway processes sharing a durable store. Requests of protocol 2026-07-28, which
//! has no sessions, go to a pool of sessionless proxies.
//!
//! What is served: a POSTed request is answered as an event stream when the client accepts
//! `text/event-stream`: what the server sends while the request is in progress goes on the
//! newest such stream (progress on the stream of the request that asked for it), then the
//! answer ends it. A client that accepts only JSON gets the answer as `application/json`. A
//! `GET` opens the session's stream for messages outside any request (kept until one is open).
//! A POSTed notification or response gets `202 Accepted`; the `Mcp-Session-Id` given with the
//! `initialize` answer is required afterwards (404 once the session is gone); `DELETE` ends a
//! session. Not served: batches (400), resumption with `Last-Event-ID` (events carry no ids).
//!
//! Sessions are bounded, since each holds a server process (or a session on the HTTP server):
//! one with no request in progress, no `GET` stream open and no request for `--session-idle`
//! is ended as `DELETE` ends it (a client that crashed or forgot leaks nothing), and an
//! `initialize` beyond `--max-sessions` open sessions gets `503` and starts no server.
//!
//! Over HTTP, a client closing the stream or the connection before the answer came is the
//! cancellation: the proxy gets a `notifications/cancelled`, as from a stdio client.
//!
//! Credentials: the client's `Authorization` goes on to an HTTP server (the latest one the
//! session sent), unless the gateway checks a token of its own (`--require-token`): that token
//! stays here, and `--header` gives the server's. `initialize` is answered as JSON, so that the
//! server refusing the client's credentials (401, 403) becomes the gateway's HTTP answer.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::{Frame, Incoming as Body};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::http::Upstream;
use super::jsonrpc::{self, IdKey, Peek};
use super::protocol::{
    EVENT_STREAM, FIRST_SESSIONLESS_VERSION, HTTP_STATUS_KEY, INTERNAL_ERROR, INVALID_REQUEST,
    META_PROTOCOL_VERSION as META_VERSION, META_PROTOCOL_VERSION_POINTER,
    PROTOCOL_VERSION_HEADER as PROTOCOL_VERSION, SERVER_ERROR, SESSION_ID_HEADER as SESSION,
    WWW_AUTHENTICATE_KEY,
};
use super::server;
use super::stdio::ClientOut;
use super::{lifecycle, proxy};

/// The largest request body accepted.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// How many messages outside any answer wait for a client that has no `GET` stream open; older
/// ones are dropped first.
const QUEUE_LIMIT: usize = 1024;

/// What the gateway needs to start a proxy for each session.
pub(crate) struct Gateway {
    pub(crate) addr: SocketAddr,
    /// The bearer token clients must present, if one is required.
    pub(crate) token: Option<String>,
    pub(crate) backend: Backend,
    pub(crate) scope: String,
    pub(crate) server_id: String,
    pub(crate) config: Arc<super::config::Config>,
    pub(crate) store: Arc<super::store::LazyStore>,
    /// A session with nothing in progress and no request for this long is ended.
    pub(crate) session_idle: Duration,
    /// How many sessions may be open at once.
    pub(crate) max_sessions: usize,
}

/// The server behind the gateway.
pub(crate) enum Backend {
    /// A command started for each session.
    Command {
        program: OsString,
        args: Vec<OsString>,
    },
    /// A Streamable HTTP server: each client session of the gateway has its own session there.
    Http {
        url: String,
        headers: Vec<String>,
        /// Whether the client's `Authorization` goes on to the server (not when the gateway
        /// checks a token of its own: that one is the gateway's, and stays there).
        forward_authorization: bool,
    },
}

/// One client session: the input of its proxy and where the server's messages go.
struct Session {
    to_proxy: mpsc::UnboundedSender<Vec<u8>>,
    routes: Arc<Mutex<Routes>>,
    /// The HTTP server, when the client's `Authorization` is passed on to it.
    forward_to: Option<Arc<Upstream>>,
    /// For a sessionless proxy whose server gets the client's `Authorization`: the one it was
    /// started for. Only requests with that same header share it, so one client's credentials
    /// never carry another's request.
    bound: Option<HeaderValue>,
    /// When the client last sent a request, or was last seen with one in progress or its
    /// `GET` stream open: idleness counts from there.
    touched: Mutex<Instant>,
}

impl Session {
    fn routes(&self) -> MutexGuard<'_, Routes> {
        lock(&self.routes)
    }

    fn touch(&self) {
        *lock(&self.touched) = Instant::now();
    }

    /// Whether the session is idle for `idle`: nothing in progress, no `GET` stream open, and
    /// no request for that long. A busy session counts as just touched.
    fn idle_for(&self, idle: Duration) -> bool {
        let busy = {
            let routes = self.routes();
            !routes.waiting.is_empty() || routes.stream.as_ref().is_some_and(|s| !s.is_closed())
        };
        if busy {
            self.touch();
            return false;
        }
        lock(&self.touched).elapsed() >= idle
    }
}

/// Where the messages of one session's server go.
#[derive(Default)]
struct Routes {
    /// Requests waiting for their answers, by request id.
    waiting: HashMap<IdKey, Waiter>,
    /// The progress tokens of requests answered on an event stream, and the requests.
    progress: HashMap<IdKey, IdKey>,
    /// The client's `GET` stream, for messages outside any request.
    stream: Option<mpsc::UnboundedSender<Bytes>>,
    /// Messages outside any answer, kept until the client opens a `GET` stream.
    queued: VecDeque<Bytes>,
    /// Numbers the event streams, so that the newest one is known and a stream that ends
    /// removes only its own waiter.
    next: u64,
    /// The session's proxy has ended: nothing more will come.
    ended: bool,
}

/// How a request waits for its answer.
enum Waiter {
    /// As one JSON body.
    Json(oneshot::Sender<Vec<u8>>),
    /// On an event stream, which also carries what the server sends while handling it.
    Events {
        tx: mpsc::UnboundedSender<Bytes>,
        seq: u64,
        progress: Option<IdKey>,
        /// The request's id, to answer it if the server never does.
        id: Value,
    },
}

impl Routes {
    /// Routes one message from the session's proxy.
    fn deliver(&mut self, line: Vec<u8>) {
        let peek = Peek::of(&line);
        if let Some(peek) = &peek
            && peek.is_response()
            && let Some(id) = &peek.id
            && let Some(waiter) = self.waiting.remove(&IdKey::of(id))
        {
            match waiter {
                Waiter::Json(tx) => {
                    let _ = tx.send(line);
                }
                // The stream ends with its answer: the sender is dropped here.
                Waiter::Events { tx, progress, .. } => {
                    let _ = tx.send(event(&line));
                    if let Some(token) = progress {
                        self.progress.remove(&token);
                    }
                }
            }
            return;
        }
        if peek.as_ref().is_some_and(Peek::is_response) {
            // Its request is gone (the client closed its stream): no other request's stream
            // may carry an answer its client never asked for.
            tracing::debug!(target: "toolonce::mcp", "dropped an answer nobody waits for");
            return;
        }
        let frame = event(&line);
        // Progress goes to the stream of the request that asked for it.
        if peek.as_ref().and_then(|p| p.method.as_deref()) == Some("notifications/progress")
            && let Some(token) = serde_json::from_slice::<Value>(&line)
                .ok()
                .and_then(|m| m.pointer("/params/progressToken").map(IdKey::of))
            && let Some(request) = self.progress.get(&token)
            && let Some(Waiter::Events { tx, .. }) = self.waiting.get(request)
            && tx.send(frame.clone()).is_ok()
        {
            return;
        }
        // Anything else (the server's own requests, log messages) goes on the newest request's
        // stream: while a request is in progress, what the
        // server sends most likely belongs to it (an elicitation, a sampling request), and the
        // client reads every stream alike. Otherwise on the GET stream, or it waits for one.
        let newest = self
            .waiting
            .values()
            .filter_map(|w| match w {
                Waiter::Events { tx, seq, .. } => Some((*seq, tx)),
                Waiter::Json(_) => None,
            })
            .max_by_key(|(seq, _)| *seq);
        if let Some((_, tx)) = newest
            && tx.send(frame.clone()).is_ok()
        {
            return;
        }
        if let Some(stream) = &self.stream {
            if stream.send(frame.clone()).is_ok() {
                return;
            }
            self.stream = None;
        }
        if self.queued.len() == QUEUE_LIMIT {
            self.queued.pop_front();
            tracing::debug!(
                target: "toolonce::mcp",
                "dropped a message outside an answer: the client opened no GET stream"
            );
        }
        self.queued.push_back(frame);
    }
}

/// One message as a server-sent event.
fn event(line: &[u8]) -> Bytes {
    let message = line.trim_ascii_end();
    let mut frame = Vec::with_capacity(message.len() + 24);
    frame.extend_from_slice(b"event: message\ndata: ");
    // A message is one line (the proxy's framing), so it is one `data` field.
    frame.extend_from_slice(message);
    frame.extend_from_slice(b"\n\n");
    Bytes::from(frame)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

struct State {
    gateway: Gateway,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// Proxies for requests without a session (protocol 2026-07-28 has none). A request goes to
    /// the first whose requests in progress do not use its id; another is started when all do.
    sessionless: Mutex<Vec<Arc<Session>>>,
    proxies: Mutex<JoinSet<()>>,
}

impl State {
    fn sessions(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        lock(&self.sessions)
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
        sessionless: Mutex::new(Vec::new()),
        proxies: Mutex::new(JoinSet::new()),
    });
    let reaper = tokio::spawn(end_idle_sessions(Arc::downgrade(&state)));
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
                // An event-stream answer goes out in several small writes (headers, events, the
                // last chunk); with Nagle's algorithm each waited for the client's delayed ACK,
                // about 40 ms per call.
                let _ = stream.set_nodelay(true);
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
    reaper.abort();
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

/// Ends the sessions idle for `--session-idle`, as `DELETE` would: dropping a session's input
/// is the client hanging up, so its proxy stops the server (or ends the HTTP server's session).
/// Checked a few times per idle period, so a session lasts at most a quarter longer.
async fn end_idle_sessions(state: std::sync::Weak<State>) {
    let Some(idle) = state.upgrade().map(|s| s.gateway.session_idle) else {
        return;
    };
    let period = (idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(30));
    loop {
        tokio::time::sleep(period).await;
        let Some(state) = state.upgrade() else {
            return;
        };
        let mut ended = Vec::new();
        state.sessions().retain(|id, session| {
            let idle = session.idle_for(idle);
            if idle {
                ended.push(id.clone());
            }
            !idle
        });
        for id in ended {
            tracing::info!(
                target: "toolonce::mcp",
                session = %id,
                "ended a session idle for --session-idle"
            );
        }
    }
}

type Answer = Response<Either<Full<Bytes>, EventBody>>;

fn answer(status: StatusCode, body: Vec<u8>) -> Answer {
    let mut response = Response::new(Either::Left(Full::new(Bytes::from(body))));
    *response.status_mut() = status;
    response
}

/// A `200` whose body is an event stream.
fn events(body: EventBody) -> Answer {
    let mut response = Response::new(Either::Right(body));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
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
        StatusCode::BAD_REQUEST => INVALID_REQUEST,
        _ => SERVER_ERROR,
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
        Method::GET => get(state, session, &request),
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
                "only POST, GET and DELETE are served",
            );
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
            response
        }
    }
}

/// Whether the client takes an event stream (`Accept` names `text/event-stream`).
fn accepts_events(request: &Request<Body>) -> bool {
    request
        .headers()
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.split(';').next().unwrap_or("").trim())
        .any(|v| v.eq_ignore_ascii_case(EVENT_STREAM))
}

/// `GET /mcp`: the session's stream for messages outside any request. A newer one replaces
/// an older one (a client reconnecting may not have closed the old one yet).
fn get(state: &Arc<State>, session: Option<String>, request: &Request<Body>) -> Answer {
    if !accepts_events(request) {
        return refuse(
            StatusCode::NOT_ACCEPTABLE,
            "the GET stream is an event stream: accept text/event-stream",
        );
    }
    let Some(id) = session else {
        return refuse(StatusCode::BAD_REQUEST, "no Mcp-Session-Id");
    };
    let Some(session) = state.sessions().get(&id).inspect(|s| s.touch()).cloned() else {
        return refuse(StatusCode::NOT_FOUND, "no such session: initialize again");
    };
    pass_authorization(&session, request);
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
    events(EventBody { rx, _cancel: None })
}

/// Gives the HTTP server the client's `Authorization` for the session's next requests, when it
/// is passed on (see [`Backend::Http`]).
fn pass_authorization(session: &Session, request: &Request<Body>) {
    if let Some(upstream) = &session.forward_to {
        upstream.set_client_authorization(request.headers().get(header::AUTHORIZATION).cloned());
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
    let streams = accepts_events(&request);
    let version = request
        .headers()
        .get(PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let authorization = request.headers().get(header::AUTHORIZATION).cloned();
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
        // Touched under the sessions' lock: an idle session is either ended before this
        // request (404) or not ended for it.
        Some(id) => match state.sessions().get(&id) {
            Some(session) => {
                session.touch();
                (None, session.clone())
            }
            None => return refuse(StatusCode::NOT_FOUND, "no such session: initialize again"),
        },
        None if peek.method.as_deref() == Some("initialize") && peek.id.is_some() => {
            match open_session(state) {
                Ok((id, session)) => (Some(id), session),
                Err(e) if e.is::<AtLimit>() => {
                    tracing::warn!(target: "toolonce::mcp", "refused a session: {e}");
                    return refuse(StatusCode::SERVICE_UNAVAILABLE, &e.to_string());
                }
                Err(e) => {
                    tracing::error!(target: "toolonce::mcp", error = %e, "cannot open a session");
                    return refuse(StatusCode::INTERNAL_SERVER_ERROR, "cannot start the server");
                }
            }
        }
        None if sessionless(version.as_deref(), &line) => {
            match sessionless_proxy(state, peek.id.as_ref().map(IdKey::of), &authorization) {
                Ok(Some(session)) => (None, session),
                Ok(None) => return answer(StatusCode::ACCEPTED, Vec::new()),
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
    let (Some(method), Some(id)) = (&peek.method, &peek.id) else {
        // A notification or a response: nothing comes back.
        let _ = session.to_proxy.send(line);
        return answer(StatusCode::ACCEPTED, Vec::new());
    };
    let key = IdKey::of(id);
    // Cancelling `initialize` is not allowed (the specification forbids it).
    let cancel = method != "initialize";
    // `initialize` is answered as JSON: an HTTP server behind the gateway refusing the client's
    // credentials is then answered with its status (see `refused_for_credentials`).
    let streams = streams && method != "initialize";
    let mut response = if streams {
        let progress = progress_token(&line);
        let (tx, rx) = mpsc::unbounded_channel();
        {
            let mut routes = session.routes();
            if routes.waiting.contains_key(&key) {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    "the request id is used by a request still in progress",
                );
            }
            routes.next += 1;
            let seq = routes.next;
            if let Some(token) = &progress {
                routes.progress.insert(token.clone(), key.clone());
            }
            routes.waiting.insert(
                key.clone(),
                Waiter::Events {
                    tx,
                    seq,
                    progress,
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
                id: id.clone(),
                seq,
                cancel,
            };
            events(EventBody {
                rx,
                _cancel: Some(cancel),
            })
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
            routes.waiting.insert(key.clone(), Waiter::Json(tx));
        }
        let mut pending = Pending {
            session: &session,
            key,
            id: id.clone(),
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
            let mut response = answer(status, reply);
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            if let Some(challenge) = challenge {
                headers.insert(header::WWW_AUTHENTICATE, challenge);
            }
            return response;
        }
        let mut response = answer(StatusCode::OK, reply);
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    };
    if let Some(id) = session_id
        && let Ok(value) = HeaderValue::from_str(&id)
    {
        response.headers_mut().insert(SESSION, value);
    }
    response
}

/// Whether a message without a session is of protocol 2026-07-28 or later, which has no
/// sessions: its `MCP-Protocol-Version` header, or its own `_meta` protocol version, says so.
/// (Versions are dates, so they compare as text.) Earlier protocols need `initialize` first.
fn sessionless(header: Option<&str>, line: &[u8]) -> bool {
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

/// How many sessionless proxies may run at once; beyond, an idle one is ended for a new one.
const SESSIONLESS_LIMIT: usize = 64;

/// Every sessionless proxy is busy and there may be no more.
#[derive(Debug)]
struct Busy;

impl std::fmt::Display for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("every proxy for requests without a session is busy")
    }
}

impl std::error::Error for Busy {}

/// The proxy for a message without a session: for a request, the first proxy (for the same
/// `Authorization`, when that goes on to the server) whose requests in progress do not use
/// `id`, or a new one; a notification goes to the first one (`None` when there is none:
/// nothing is in progress that it could be about).
fn sessionless_proxy(
    state: &Arc<State>,
    id: Option<IdKey>,
    authorization: &Option<HeaderValue>,
) -> anyhow::Result<Option<Arc<Session>>> {
    let forwards = matches!(
        state.gateway.backend,
        Backend::Http {
            forward_authorization: true,
            ..
        }
    );
    let bound = if forwards {
        authorization.clone()
    } else {
        None
    };
    let mut proxies = lock(&state.sessionless);
    proxies.retain(|p| !p.routes().ended);
    let found = proxies
        .iter()
        .filter(|p| p.bound == bound)
        .find(|p| {
            id.as_ref()
                .is_none_or(|id| !p.routes().waiting.contains_key(id))
        })
        .cloned();
    match (found, id) {
        (Some(session), _) => Ok(Some(session)),
        (None, None) => Ok(None),
        (None, Some(_)) => {
            if proxies.len() >= SESSIONLESS_LIMIT {
                // Dropping an idle proxy's input is a client hanging up: it ends.
                let idle = proxies
                    .iter()
                    .position(|p| p.routes().waiting.is_empty())
                    .ok_or(Busy)?;
                proxies.remove(idle);
            }
            let session = start_session(state, None, bound)?;
            proxies.push(session.clone());
            Ok(Some(session))
        }
    }
}

/// Whether an answer is the HTTP server refusing the client's credentials (401 or 403, said by
/// the proxy's HTTP client in `data`): the status for the client, and the server's challenge,
/// so that a client that can authenticate (OAuth) learns it must, as it would without the
/// gateway.
fn refused_for_credentials(reply: &[u8]) -> Option<(StatusCode, Option<HeaderValue>)> {
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
fn progress_token(line: &[u8]) -> Option<IdKey> {
    if !line.windows(13).any(|w| w == b"progressToken") {
        return None;
    }
    serde_json::from_slice::<Value>(line)
        .ok()?
        .pointer("/params/_meta/progressToken")
        .map(IdKey::of)
}

/// A request waiting for its JSON answer. Dropped before the answer came (the client closed
/// the connection), it cancels the request.
struct Pending<'a> {
    session: &'a Session,
    key: IdKey,
    id: Value,
    cancel: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.session.routes().waiting.remove(&self.key);
        if self.cancel {
            let _ = self.session.to_proxy.send(jsonrpc::cancelled_line(
                &self.id,
                "the client closed the HTTP connection",
            ));
        }
    }
}

/// An event stream: the messages of one request and its answer, or the `GET` stream.
pub(crate) struct EventBody {
    rx: mpsc::UnboundedReceiver<Bytes>,
    /// Held for its `Drop`: the stream closing early cancels the request.
    _cancel: Option<Cancel>,
}

impl hyper::body::Body for EventBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx
            .poll_recv(cx)
            .map(|frame| frame.map(|frame| Ok(Frame::data(frame))))
    }
}

/// A request answered on an event stream. Dropped while the request still waits for its answer
/// (the client closed the stream: over HTTP, that is the cancellation), it cancels it.
struct Cancel {
    session: Arc<Session>,
    key: IdKey,
    id: Value,
    seq: u64,
    cancel: bool,
}

impl Drop for Cancel {
    fn drop(&mut self) {
        let waited = {
            let mut routes = self.session.routes();
            let ours = matches!(
                routes.waiting.get(&self.key),
                Some(Waiter::Events { seq, .. }) if *seq == self.seq
            );
            if ours
                && let Some(Waiter::Events {
                    progress: Some(token),
                    ..
                }) = routes.waiting.remove(&self.key)
            {
                routes.progress.remove(&token);
            }
            ours
        };
        if waited && self.cancel {
            let _ = self.session.to_proxy.send(jsonrpc::cancelled_line(
                &self.id,
                "the client closed the HTTP stream",
            ));
        }
    }
}

/// As many sessions are open as `--max-sessions` allows.
#[derive(Debug)]
struct AtLimit(usize);

impl std::fmt::Display for AtLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the gateway has {} sessions open, its limit (--max-sessions): end one with DELETE \
             or try again later",
            self.0
        )
    }
}

impl std::error::Error for AtLimit {}

/// Opens a session: a new id, and its proxy; [`AtLimit`] at `--max-sessions`, before any server
/// is started.
fn open_session(state: &Arc<State>) -> anyhow::Result<(String, Arc<Session>)> {
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    let id: String = random.iter().map(|b| format!("{b:02x}")).collect();
    // Counted and inserted under one lock, so concurrent `initialize`s never pass the limit.
    // (Starting a session only prepares its server: the process starts in its proxy's task.)
    let mut sessions = state.sessions();
    let max = state.gateway.max_sessions;
    if sessions.len() >= max {
        return Err(AtLimit(max).into());
    }
    let session = start_session(state, Some(id.clone()), None)?;
    sessions.insert(id.clone(), session.clone());
    Ok((id, session))
}

/// Starts a proxy, and the server command or a session with the HTTP server, for the session
/// `id` (`None`: for requests without a session, with the `Authorization` it is `bound` to).
fn start_session(
    state: &Arc<State>,
    id: Option<String>,
    bound: Option<HeaderValue>,
) -> anyhow::Result<Arc<Session>> {
    let gateway = &state.gateway;
    let (server, forward_to) = match &gateway.backend {
        Backend::Command { program, args } => {
            let mut command = tokio::process::Command::new(program);
            command.args(args);
            (server::Server::Command(command), None)
        }
        Backend::Http {
            url,
            headers,
            forward_authorization,
        } => {
            let (upstream, incoming) = Upstream::new(url, headers)?;
            let forward_to = forward_authorization.then(|| upstream.clone());
            (server::Server::Http(upstream, incoming), forward_to)
        }
    };
    let (to_proxy, client_in) = mpsc::unbounded_channel();
    let (client_out, mut out_rx) = ClientOut::channel();
    let routes: Arc<Mutex<Routes>> = Arc::default();
    let settings = proxy::Settings {
        scope: gateway.scope.clone(),
        server_id: gateway.server_id.clone(),
        config: gateway.config.clone(),
        store: gateway.store.clone(),
    };
    let shutdown_timeout = gateway.config.proxy.shutdown_timeout;
    let delivered = routes.clone();
    let state_for_end = Arc::downgrade(state);
    let session_id = id;
    lock(&state.proxies).spawn(async move {
        let routing = delivered.clone();
        let deliver = tokio::spawn(async move {
            while let Some(line) = out_rx.recv().await {
                if line.is_empty() {
                    break;
                }
                lock(&routing).deliver(line);
            }
        });
        let status = lifecycle::run(
            settings,
            server,
            client_in,
            client_out.clone(),
            shutdown_timeout,
        )
        .await;
        client_out.close();
        let _ = deliver.await;
        // Requests the server never answered learn it: a JSON one from its sender being
        // dropped (502), one on an event stream from an error answer. The GET stream ends.
        {
            let mut routes = lock(&delivered);
            routes.ended = true;
            for (_, waiter) in routes.waiting.drain() {
                if let Waiter::Events { tx, id, .. } = waiter {
                    let _ = tx.send(event(&jsonrpc::error_line(
                        Some(&id),
                        INTERNAL_ERROR,
                        "toolonce: the server exited before answering this request",
                    )));
                }
            }
            routes.progress.clear();
            routes.stream = None;
            routes.queued.clear();
        }
        match status {
            Ok(status) => {
                tracing::info!(target: "toolonce::mcp", %status, "a session's server exited");
            }
            Err(e) => {
                tracing::warn!(target: "toolonce::mcp", error = %e, "a session's proxy failed");
            }
        }
        if let Some(state) = state_for_end.upgrade()
            && let Some(id) = &session_id
        {
            state.sessions().remove(id);
        }
    });
    Ok(Arc::new(Session {
        to_proxy,
        routes,
        forward_to,
        bound,
        touched: Mutex::new(Instant::now()),
    }))
}
