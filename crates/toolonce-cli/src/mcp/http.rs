//! The server's end over Streamable HTTP (`toolonce mcp --upstream URL`): every message the
//! proxy would write to a server's stdin is POSTed to the URL, and every message that comes
//! back (a JSON body, the events of an SSE body, the events of the GET stream a server may
//! offer) goes to routing as if the server had written it on its stdout.
//!
//! - **Bytes.** A message goes out as the body, exactly as the client wrote it (without its
//!   newline). One that comes back keeps its bytes; only line breaks, which are JSON
//!   whitespace and which the stdio framing forbids inside a message, become spaces.
//! - **Delivery.** The proxy keeps its own HTTP/1.1 connections, so [`Upstream::send`] returns
//!   once a live connection has taken the request: a write call whose server cannot be reached
//!   is answered "not executed", since nothing left. A connection lost after the request left,
//!   or a 5xx status, leaves the outcome unknown ([`Incoming::Lost`]: a write call is given up
//!   like one whose server exited). A 4xx status is a refusal before anything ran. A request
//!   the proxy gives up (cancelled, timed out) has its exchange ended. Messages
//!   that expect no answer (notifications, answers to the server's requests) are sent one
//!   after the other, each once the server accepted the one before, so that the server sees
//!   them in the client's order (`notifications/initialized` before the proxy's `tools/list`).
//! - **Sessions** (protocols 2025-03-26 to 2025-11-25). The `Mcp-Session-Id` of the
//!   `initialize` answer and the negotiated `MCP-Protocol-Version` go with every later request;
//!   the session is ended with DELETE when the client hangs up. When the server has ended the
//!   session (404 to a request that carried it), the proxy opens a new one as the specification
//!   asks of a client, with the client's own `initialize` and `notifications/initialized`
//!   (their answers go nowhere: the client already has one), and sends the request again: a
//!   404 means it was not processed. Requests also carry
//!   `Mcp-Method` and `Mcp-Name` (protocol 2026-07-28), and a request's own
//!   `_meta["io.modelcontextprotocol/protocolVersion"]` is its `MCP-Protocol-Version`.
//! - **Server-to-client messages** come on the SSE bodies of POSTs and on the GET stream,
//!   opened once the session is initialized and reopened (with `Last-Event-ID`) when it ends;
//!   a server that answers the GET with 405 has none. A POST's event stream that ends before
//!   its answer is resumed with a GET carrying the last event id, when the server gave ids.
//! - **Headers** given with `--header` go with every request; their values are marked
//!   sensitive and never logged. TLS uses rustls with the system's trusted roots.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming as Body;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;

use super::jsonrpc::{self, IdKey, Peek};
use super::protocol::{
    EVENT_STREAM, HTTP_STATUS_KEY, INTERNAL_ERROR, INVALID_REQUEST,
    LAST_EVENT_ID_HEADER as LAST_EVENT_ID, META_PROTOCOL_VERSION, META_PROTOCOL_VERSION_POINTER,
    METHOD_HEADER, NAME_HEADER, OUTCOME_KEY, PROTOCOL_VERSION_HEADER as PROTOCOL_VERSION,
    SESSION_ID_HEADER as SESSION_ID, WWW_AUTHENTICATE_KEY,
};

/// How long connecting (TCP and TLS) may take before the server counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a message that expects no answer may wait for the server to accept it.
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest JSON body read from the server; an SSE body is read event by event.
const BODY_LIMIT: usize = 64 * 1024 * 1024;

/// How long an idle connection is reused. A server closes idle connections on a timer of its
/// own (Node.js after 5 s), and a request written just as the server closes is lost with an
/// unknown outcome; staying under the common timers keeps that from happening.
const IDLE_REUSE: Duration = Duration::from_secs(4);

/// How many times a POST's event stream is resumed with a GET before its requests are lost.
const RESUME_ATTEMPTS: usize = 3;

/// The JSON-RPC codes of the proxy's own answers: a refusal before anything ran (4xx), and an
/// answer that did not come (the outcome is unknown).
const REFUSED: i64 = INVALID_REQUEST;
const INTERNAL: i64 = INTERNAL_ERROR;

type Sender = SendRequest<Full<Bytes>>;

/// What comes back from the server, for routing.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// One message, as one line.
    Message(Vec<u8>),
    /// Requests that left and will never be answered (the connection broke, a 5xx status):
    /// their ids, and why.
    Lost(Vec<Value>, String),
}

/// Where the server is.
struct Target {
    tls: Option<(
        tokio_rustls::TlsConnector,
        rustls::pki_types::ServerName<'static>,
    )>,
    host: String,
    port: u16,
    /// The `Host` header.
    authority: HeaderValue,
    /// The request target: path and query.
    path: Uri,
    /// The URL for messages: scheme, host, port and path, never the query (it may hold a key).
    shown: String,
}

/// A Streamable HTTP MCP server, as the proxy's server end.
#[derive(Debug)]
pub(crate) struct Upstream {
    target: Target,
    headers: HeaderMap,
    idle: Mutex<Vec<(Instant, Sender)>>,
    session: Mutex<Option<HeaderValue>>,
    version: Mutex<Option<HeaderValue>>,
    /// The client's `initialize` and `notifications/initialized`, to open a new session with.
    handshake: Mutex<(Option<Bytes>, Option<Bytes>)>,
    renewing: tokio::sync::Mutex<()>,
    /// Cloned by every exchange in progress: routing ends when the last clone is gone.
    incoming: Mutex<Option<mpsc::UnboundedSender<Incoming>>>,
    /// Serializes messages that expect no answer (see the module's documentation).
    accepting: tokio::sync::Mutex<()>,
    closed: watch::Sender<bool>,
    stream_opened: AtomicBool,
    /// The exchanges in progress of one request each, by request id, so that one whose request
    /// the proxy gave up is ended (a server may never answer a cancelled request).
    exchanges: Mutex<HashMap<IdKey, AbortHandle>>,
    /// The `Authorization` of the gateway's client (`--listen`), sent unless `--header` sets
    /// one.
    client_authorization: Mutex<Option<HeaderValue>>,
}

impl Upstream {
    /// Checks the URL and the headers (`Name: value`) and loads the trusted roots; the receiver
    /// yields what the server sends.
    pub(crate) fn new(
        url: &str,
        headers: &[String],
    ) -> anyhow::Result<(Arc<Upstream>, mpsc::UnboundedReceiver<Incoming>)> {
        let target = Target::parse(url)?;
        let mut map = HeaderMap::new();
        for line in headers {
            let (name, value) = line
                .split_once(':')
                .context("--header must be `Name: value`")?;
            let name = HeaderName::from_bytes(name.trim().as_bytes())
                .ok()
                .with_context(|| {
                    format!("--header: `{}` is not a valid header name", name.trim())
                })?;
            if [
                header::HOST,
                header::CONTENT_LENGTH,
                header::TRANSFER_ENCODING,
                header::CONNECTION,
            ]
            .contains(&name)
            {
                anyhow::bail!("--header: `{name}` is set by toolonce itself");
            }
            // The value is never echoed: it may be a token.
            let mut value = HeaderValue::from_str(value.trim()).ok().with_context(|| {
                format!("--header: the value of `{name}` is not a valid header value")
            })?;
            value.set_sensitive(true);
            map.append(name, value);
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let upstream = Upstream {
            target,
            headers: map,
            idle: Mutex::new(Vec::new()),
            session: Mutex::new(None),
            version: Mutex::new(None),
            handshake: Mutex::new((None, None)),
            renewing: tokio::sync::Mutex::new(()),
            incoming: Mutex::new(Some(tx)),
            accepting: tokio::sync::Mutex::new(()),
            closed: watch::Sender::new(false),
            stream_opened: AtomicBool::new(false),
            exchanges: Mutex::new(HashMap::new()),
            client_authorization: Mutex::new(None),
        };
        Ok((Arc::new(upstream), rx))
    }

    /// The server's URL without its query, for messages.
    pub(crate) fn shown(&self) -> &str {
        &self.target.shown
    }

    /// Sends one message (a line as the client wrote it). `false` if it did not leave: the
    /// server cannot be reached, or the proxy is closing.
    pub(crate) async fn send(self: &Arc<Self>, message: &[u8]) -> bool {
        let Some(incoming) = lock(&self.incoming).clone() else {
            return false;
        };
        let message = message.trim_ascii_end();
        let requests = request_ids(message);
        let peek = Peek::of(message);
        let initialize = peek
            .as_ref()
            .filter(|p| p.method.as_deref() == Some("initialize"))
            .and_then(|p| p.id.as_ref().map(IdKey::of));
        let initialized =
            peek.as_ref().and_then(|p| p.method.as_deref()) == Some("notifications/initialized");
        if initialize.is_some() {
            // A new session: the client's `initialize` goes without the old one's id.
            *lock(&self.session) = None;
            *lock(&self.version) = None;
            lock(&self.handshake).0 = Some(Bytes::copy_from_slice(message));
        } else if initialized {
            lock(&self.handshake).1 = Some(Bytes::copy_from_slice(message));
        }
        let request = self.post(message, peek.as_ref());
        let session = request.headers().get(SESSION_ID).cloned();
        // Without an answer to wait for, the next message waits for this one to be accepted.
        let accepting = if requests.is_empty() {
            Some(self.accepting.lock().await)
        } else {
            None
        };
        let mut sender = match self.connection().await {
            Ok(sender) => sender,
            Err(e) => {
                tracing::warn!(
                    target: "toolonce::mcp",
                    upstream = %self.target.shown,
                    error = %e,
                    "cannot reach the MCP server; the message was not sent"
                );
                return false;
            }
        };
        let response = sender.try_send_request(request);
        let single = match requests.as_slice() {
            [id] => Some(IdKey::of(id)),
            _ => None,
        };
        let exchange = Exchange {
            upstream: self.clone(),
            incoming,
            message: Bytes::copy_from_slice(message),
            session,
            pending: requests.iter().map(IdKey::of).collect(),
            requests,
            initialize,
        };
        if let Some(accepting) = accepting {
            let accepted = tokio::time::timeout(ACCEPT_TIMEOUT, exchange.run(sender, response));
            if accepted.await.is_err() {
                tracing::warn!(
                    target: "toolonce::mcp",
                    upstream = %self.target.shown,
                    "the MCP server did not accept a notification in time"
                );
            }
            drop(accepting);
            if initialized {
                self.open_stream();
            }
        } else {
            let upstream = self.clone();
            let key = single.clone();
            // Held until the handle is in: the task cannot look for it before.
            let mut exchanges = lock(&self.exchanges);
            let task = tokio::spawn(async move {
                exchange.run(sender, response).await;
                if let Some(id) = &key {
                    let mut exchanges = lock(&upstream.exchanges);
                    if exchanges.get(id).map(AbortHandle::id) == Some(tokio::task::id()) {
                        exchanges.remove(id);
                    }
                }
            });
            if let Some(id) = single {
                exchanges.insert(id, task.abort_handle());
            }
        }
        true
    }

    /// The `Authorization` the gateway's client sent with its latest request (`None`: it sent
    /// none), for the requests sent from now on. Never logged.
    pub(crate) fn set_client_authorization(&self, value: Option<HeaderValue>) {
        *lock(&self.client_authorization) = value.map(|mut value| {
            value.set_sensitive(true);
            value
        });
    }

    /// The proxy gave up the request `id`: its exchange, if still in progress, ends (closing
    /// its connection), since its answer is no longer wanted.
    pub(crate) fn give_up(&self, id: &IdKey) {
        if let Some(exchange) = lock(&self.exchanges).remove(id) {
            exchange.abort();
        }
    }

    /// Stops sending and listening: routing ends once the exchanges in progress are over.
    pub(crate) fn close(&self) {
        lock(&self.incoming).take();
        self.closed.send_replace(true);
    }

    /// Opens a new session in place of `expired`, which the server has ended (see the module's
    /// documentation). `true` once there is a new session, also one another exchange opened.
    async fn renew_session(&self, expired: &HeaderValue) -> bool {
        let _renewing = self.renewing.lock().await;
        if lock(&self.session).as_ref() != Some(expired) {
            return lock(&self.session).is_some();
        }
        let (Some(initialize), initialized) = lock(&self.handshake).clone() else {
            return false;
        };
        *lock(&self.session) = None;
        *lock(&self.version) = None;
        let renewed = async {
            let peek = Peek::of(&initialize);
            let request = self.post(&initialize, peek.as_ref());
            let mut sender = self.connection().await?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| e.to_string())?;
            if !response.status().is_success() {
                return Err(format!("HTTP {}", response.status()));
            }
            let mut session = response
                .headers()
                .get(SESSION_ID)
                .cloned()
                .ok_or("no session id")?;
            session.set_sensitive(true);
            let answer = first_answer(response).await.ok_or("no answer")?;
            self.learn_version(&answer);
            *lock(&self.session) = Some(session);
            if let Some(initialized) = initialized {
                let peek = Peek::of(&initialized);
                let request = self.post(&initialized, peek.as_ref());
                let mut sender = self.connection().await?;
                let response = sender
                    .send_request(request)
                    .await
                    .map_err(|e| e.to_string())?;
                let _ = response.into_body().collect().await;
            }
            Ok::<_, String>(())
        };
        match tokio::time::timeout(ACCEPT_TIMEOUT, renewed).await {
            Ok(Ok(())) => {
                tracing::info!(
                    target: "toolonce::mcp",
                    upstream = %self.target.shown,
                    "the MCP server ended the session; opened a new one"
                );
                true
            }
            Ok(Err(e)) => {
                tracing::warn!(
                    target: "toolonce::mcp",
                    upstream = %self.target.shown,
                    error = %e,
                    "the MCP server ended the session, and a new one cannot be opened"
                );
                false
            }
            Err(_) => false,
        }
    }

    /// Ends the session with DELETE, if there is one (a server may refuse with 405).
    pub(crate) async fn end_session(&self) {
        if lock(&self.session).is_none() {
            return;
        }
        let request = self.request(Method::DELETE, Bytes::new(), None, None);
        let deleted = tokio::time::timeout(CONNECT_TIMEOUT, async {
            let mut sender = self.connection().await?;
            sender
                .send_request(request)
                .await
                .map_err(|e| e.to_string())
        });
        match deleted.await {
            Ok(Ok(response)) => {
                tracing::debug!(target: "toolonce::mcp", status = %response.status(), "ended the MCP session")
            }
            Ok(Err(e)) => {
                tracing::debug!(target: "toolonce::mcp", error = %e, "cannot end the MCP session")
            }
            Err(_) => tracing::debug!(target: "toolonce::mcp", "ending the MCP session timed out"),
        }
    }

    /// A POST of `message`, with the headers that name it.
    fn post(&self, message: &[u8], peek: Option<&Peek>) -> Request<Full<Bytes>> {
        let method = peek.and_then(|p| p.method.as_deref());
        // The name and a per-request protocol version need a look inside `params`; only the
        // messages that can have them pay for it.
        let wants_name = matches!(
            method,
            Some(
                "tools/call"
                    | "prompts/get"
                    | "resources/read"
                    | "resources/subscribe"
                    | "resources/unsubscribe"
            )
        );
        let wants_version = contains(message, META_PROTOCOL_VERSION.as_bytes());
        let params = (wants_name || wants_version)
            .then(|| serde_json::from_slice::<Value>(message).ok())
            .flatten()
            .and_then(|mut m| m.get_mut("params").map(Value::take));
        let text = |v: Option<&Value>| {
            v.and_then(Value::as_str)
                .and_then(|s| HeaderValue::from_str(s).ok())
        };
        let name = params
            .as_ref()
            .filter(|_| wants_name)
            .and_then(|p| text(p.get("name")).or_else(|| text(p.get("uri"))));
        let version = params
            .as_ref()
            .and_then(|p| text(p.pointer(META_PROTOCOL_VERSION_POINTER)));
        let mut request = self.request(
            Method::POST,
            Bytes::copy_from_slice(message),
            method.and_then(|m| HeaderValue::from_str(m).ok()),
            name,
        );
        if let Some(version) = version {
            request.headers_mut().insert(PROTOCOL_VERSION, version);
        }
        request
    }

    fn request(
        &self,
        method: Method,
        body: Bytes,
        mcp_method: Option<HeaderValue>,
        mcp_name: Option<HeaderValue>,
    ) -> Request<Full<Bytes>> {
        let post = method == Method::POST;
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = self.target.path.clone();
        let headers = request.headers_mut();
        headers.insert(header::HOST, self.target.authority.clone());
        headers.insert(
            header::USER_AGENT,
            HeaderValue::from_static(concat!("toolonce/", env!("CARGO_PKG_VERSION"))),
        );
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static(if post {
                "application/json, text/event-stream"
            } else {
                EVENT_STREAM
            }),
        );
        if post {
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        if let Some(session) = lock(&self.session).clone() {
            headers.insert(SESSION_ID, session);
        }
        if let Some(version) = lock(&self.version).clone() {
            headers.insert(PROTOCOL_VERSION, version);
        }
        if let Some(method) = mcp_method {
            headers.insert(METHOD_HEADER, method);
        }
        if let Some(name) = mcp_name {
            headers.insert(NAME_HEADER, name);
        }
        if let Some(authorization) = lock(&self.client_authorization).clone() {
            headers.insert(header::AUTHORIZATION, authorization);
        }
        // The user's headers replace the proxy's (and the client's) of the same name.
        for name in self.headers.keys() {
            headers.remove(name);
        }
        for (name, value) in &self.headers {
            headers.append(name, value.clone());
        }
        request
    }

    /// An idle connection that is still open, or a new one.
    async fn connection(&self) -> Result<Sender, String> {
        loop {
            let Some((since, mut sender)) = lock(&self.idle).pop() else {
                break;
            };
            if since.elapsed() < IDLE_REUSE && !sender.is_closed() && sender.ready().await.is_ok() {
                return Ok(sender);
            }
        }
        self.connect().await
    }

    async fn connect(&self) -> Result<Sender, String> {
        let target = &self.target;
        let connect = async {
            let tcp = tokio::net::TcpStream::connect((target.host.as_str(), target.port))
                .await
                .map_err(|e| e.to_string())?;
            let _ = tcp.set_nodelay(true);
            match &target.tls {
                Some((tls, name)) => {
                    let stream = tls
                        .connect(name.clone(), tcp)
                        .await
                        .map_err(|e| format!("TLS: {e}"))?;
                    handshake(stream).await
                }
                None => handshake(tcp).await,
            }
        };
        tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| format!("no connection within {CONNECT_TIMEOUT:?}"))?
    }

    /// Gives a connection whose exchange is over back for the next request.
    fn release(&self, sender: Sender) {
        if !sender.is_closed() {
            lock(&self.idle).push((Instant::now(), sender));
        }
    }

    /// Opens the GET stream once the session is initialized (see the module's documentation).
    fn open_stream(self: &Arc<Self>) {
        if self.stream_opened.swap(true, Ordering::AcqRel) {
            return;
        }
        let upstream = self.clone();
        tokio::spawn(async move {
            let mut closed = upstream.closed.subscribe();
            tokio::select! {
                () = upstream.listen() => {}
                _ = closed.wait_for(|c| *c) => {}
            }
        });
    }

    /// Reads the GET stream, reopening it when it ends, until the server says it has none.
    async fn listen(self: &Arc<Self>) {
        let mut last_event = None;
        let mut failures = 0u32;
        loop {
            let Some(incoming) = lock(&self.incoming).clone() else {
                return;
            };
            let mut pending = HashSet::new();
            let mut retry = Duration::from_secs(1);
            match self
                .get(&incoming, &mut pending, &mut last_event, &mut retry, false)
                .await
            {
                Ok(()) => failures = 0,
                Err(GetError::NotOffered) => {
                    tracing::debug!(target: "toolonce::mcp", "the MCP server offers no GET stream");
                    return;
                }
                Err(GetError::Expired(session)) => {
                    if !self.renew_session(&session).await {
                        failures += 1;
                        retry = Duration::from_secs(1 << failures.min(5));
                    }
                }
                Err(GetError::Failed(e)) => {
                    failures += 1;
                    if failures == 1 {
                        tracing::warn!(
                            target: "toolonce::mcp",
                            upstream = %self.target.shown,
                            error = %e,
                            "the MCP server's GET stream failed; retrying"
                        );
                    }
                    retry = Duration::from_secs(1 << failures.min(5));
                }
            }
            drop(incoming);
            tokio::time::sleep(retry).await;
        }
    }

    /// One GET: reads its events until it ends (or, with `until_answered`, until the requests
    /// in `pending` are answered).
    async fn get(
        &self,
        incoming: &mpsc::UnboundedSender<Incoming>,
        pending: &mut HashSet<IdKey>,
        last_event: &mut Option<HeaderValue>,
        retry: &mut Duration,
        until_answered: bool,
    ) -> Result<(), GetError> {
        let mut request = self.request(Method::GET, Bytes::new(), None, None);
        let session = request.headers().get(SESSION_ID).cloned();
        if let Some(id) = last_event.clone() {
            request.headers_mut().insert(LAST_EVENT_ID, id);
        }
        let mut sender = self.connection().await.map_err(GetError::Failed)?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| GetError::Failed(e.to_string()))?;
        match response.status() {
            StatusCode::METHOD_NOT_ALLOWED => return Err(GetError::NotOffered),
            StatusCode::NOT_FOUND if session.is_some() => {
                return Err(GetError::Expired(session.expect("checked")));
            }
            status if !status.is_success() => {
                return Err(GetError::Failed(format!("HTTP {status}")));
            }
            _ if !is_event_stream(&response) => {
                return Err(GetError::Failed("not an event stream".into()));
            }
            _ => {}
        }
        let mut events = Events::new(response.into_body());
        while let Some(event) = events.next().await {
            if let Some(id) = event.id.and_then(|id| HeaderValue::from_str(&id).ok()) {
                *last_event = Some(id);
            }
            if let Some(ms) = event.retry {
                *retry = Duration::from_millis(ms.min(60_000));
            }
            if let Some(data) = event.data {
                self.deliver(incoming, data, pending, None);
            }
            if until_answered && pending.is_empty() {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Hands one message to routing, noting the answers it carries.
    fn deliver(
        &self,
        incoming: &mpsc::UnboundedSender<Incoming>,
        message: Vec<u8>,
        pending: &mut HashSet<IdKey>,
        initialize: Option<&IdKey>,
    ) {
        let line = one_line(message);
        if !pending.is_empty() {
            for id in response_ids(&line) {
                if initialize == Some(&id) {
                    self.learn_version(&line);
                }
                pending.remove(&id);
            }
        }
        let _ = incoming.send(Incoming::Message(line));
    }

    /// The negotiated protocol version, from the `initialize` answer.
    fn learn_version(&self, line: &[u8]) {
        let version = serde_json::from_slice::<Value>(line).ok().and_then(|m| {
            m.pointer("/result/protocolVersion")
                .and_then(Value::as_str)
                .and_then(|v| HeaderValue::from_str(v).ok())
        });
        if let Some(version) = version {
            *lock(&self.version) = Some(version);
        }
    }
}

enum GetError {
    NotOffered,
    /// The server ended this session.
    Expired(HeaderValue),
    Failed(String),
}

/// One POST and what comes back.
struct Exchange {
    upstream: Arc<Upstream>,
    incoming: mpsc::UnboundedSender<Incoming>,
    /// The message, to send again in a new session.
    message: Bytes,
    /// The session it was sent in.
    session: Option<HeaderValue>,
    /// The ids of the requests in the message.
    requests: Vec<Value>,
    /// Those not answered yet.
    pending: HashSet<IdKey>,
    initialize: Option<IdKey>,
}

impl Exchange {
    async fn run(
        mut self,
        sender: Sender,
        response: impl Future<
            Output = Result<
                Response<Body>,
                hyper::client::conn::TrySendError<Request<Full<Bytes>>>,
            >,
        >,
    ) {
        let upstream = self.upstream.clone();
        let (sender, response) = match response.await {
            Ok(response) => (sender, response),
            Err(mut e) => match e.take_message() {
                // The connection closed before the request left: once more on a new one.
                Some(request) => {
                    let retried = async {
                        let mut sender = upstream.connect().await?;
                        let response = sender
                            .send_request(request)
                            .await
                            .map_err(|e| e.to_string())?;
                        Ok::<_, String>((sender, response))
                    };
                    match retried.await {
                        Ok(pair) => pair,
                        Err(e) => return self.lost(&e),
                    }
                }
                None => return self.lost(&e.into_error().to_string()),
            },
        };
        let (mut sender, mut response) = (sender, response);
        let in_session = self.session.is_some();
        if response.status() == StatusCode::NOT_FOUND
            && let Some(session) = self.session.take()
            && upstream.renew_session(&session).await
        {
            // Not processed in the ended session: once more in the new one.
            let peek = Peek::of(&self.message);
            let request = upstream.post(&self.message, peek.as_ref());
            let resent = async {
                let mut sender = upstream.connection().await?;
                let response = sender
                    .send_request(request)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok::<_, String>((sender, response))
            };
            match resent.await {
                Ok(pair) => (sender, response) = pair,
                Err(e) => return self.lost(&e),
            }
        }
        if self.initialize.is_some()
            && let Some(session) = response.headers().get(SESSION_ID)
        {
            let mut session = session.clone();
            session.set_sensitive(true);
            *lock(&upstream.session) = Some(session);
        }
        let status = response.status();
        if !status.is_success() {
            let ended = status == StatusCode::NOT_FOUND && in_session;
            let challenge = response
                .headers()
                .get(header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            return self
                .refused(status, ended, challenge, response.into_body())
                .await;
        }
        if is_event_stream(&response) {
            let mut events = Events::new(response.into_body());
            let mut last_event = None;
            while let Some(event) = events.next().await {
                if let Some(id) = event.id.and_then(|id| HeaderValue::from_str(&id).ok()) {
                    last_event = Some(id);
                }
                if let Some(data) = event.data {
                    upstream.deliver(
                        &self.incoming,
                        data,
                        &mut self.pending,
                        self.initialize.as_ref(),
                    );
                }
            }
            if events.complete {
                upstream.release(sender);
            }
            if !self.pending.is_empty() {
                self.resume(last_event, events.error).await;
            }
            return;
        }
        match http_body_util::Limited::new(response.into_body(), BODY_LIMIT)
            .collect()
            .await
        {
            Ok(body) => {
                let body = body.to_bytes();
                let json = matches!(body.trim_ascii_start().first(), Some(b'{' | b'['));
                if json {
                    upstream.deliver(
                        &self.incoming,
                        body.to_vec(),
                        &mut self.pending,
                        self.initialize.as_ref(),
                    );
                }
                if sender.ready().await.is_ok() {
                    upstream.release(sender);
                }
                // A request answered 202 without a body gets its answer on the GET stream; one
                // answered with something else (a web page from a gateway) gets none.
                if !body.trim_ascii().is_empty() && !self.pending.is_empty() {
                    let what = if json {
                        "its answer did not answer every request"
                    } else {
                        "its answer is not JSON"
                    };
                    self.lost(what);
                }
            }
            Err(e) => self.lost(&format!("reading the answer: {e}")),
        }
    }

    /// Resumes an event stream that ended before answering, with GETs carrying the last event
    /// id the server gave.
    async fn resume(mut self, mut last_event: Option<HeaderValue>, error: Option<String>) {
        let why = error.unwrap_or_else(|| "the event stream ended".into());
        if last_event.is_none() {
            return self.lost(&why);
        }
        for _ in 0..RESUME_ATTEMPTS {
            let mut retry = Duration::ZERO;
            let resumed = self
                .upstream
                .get(
                    &self.incoming,
                    &mut self.pending,
                    &mut last_event,
                    &mut retry,
                    true,
                )
                .await;
            if self.pending.is_empty() || matches!(resumed, Err(GetError::NotOffered)) {
                break;
            }
            tokio::time::sleep(retry.max(Duration::from_millis(100))).await;
        }
        if !self.pending.is_empty() {
            self.lost(&why);
        }
    }

    /// A status that is not success: a 4xx (or a redirect, which the proxy does not follow)
    /// refused the message before anything ran, so its requests are answered with an error
    /// saying so; after a 5xx nobody knows.
    async fn refused(
        self,
        status: StatusCode,
        session_ended: bool,
        challenge: Option<String>,
        body: Body,
    ) {
        let body = http_body_util::Limited::new(body, 64 * 1024)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let said = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|m| {
                m.pointer("/error/message")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| status.canonical_reason().unwrap_or("").to_owned());
        let shown = &self.upstream.target.shown;
        tracing::warn!(target: "toolonce::mcp", upstream = %shown, %status, "the MCP server refused a message");
        if status.is_server_error() {
            return self.lost(&format!("HTTP {status}: {said}"));
        }
        let session = if session_ended {
            " Its session has ended, and a new one could not be opened."
        } else {
            ""
        };
        for id in &self.requests {
            let text = format!(
                "toolonce: the MCP server at {shown} refused this request with HTTP {status} \
                 ({said}); it was not processed.{session}"
            );
            // The status (and an authentication challenge) go along, so that a gateway can
            // answer its own client with them (see `listen`).
            let mut data = serde_json::json!({HTTP_STATUS_KEY: status.as_u16()});
            if let Some(challenge) = &challenge {
                data[WWW_AUTHENTICATE_KEY] = Value::from(challenge.as_str());
            }
            let _ = self
                .incoming
                .send(Incoming::Message(jsonrpc::line(&serde_json::json!({
                    "jsonrpc": "2.0",
                    "id": id,
                    "error": {"code": REFUSED, "message": text, "data": data},
                }))));
        }
    }

    /// The requests not answered will never be.
    fn lost(self, why: &str) {
        if self.pending.is_empty() {
            return;
        }
        tracing::warn!(
            target: "toolonce::mcp",
            upstream = %self.upstream.target.shown,
            error = %why,
            "lost the connection to the MCP server before its answer"
        );
        let ids = self
            .requests
            .into_iter()
            .filter(|id| self.pending.contains(&IdKey::of(id)))
            .collect();
        let _ = self.incoming.send(Incoming::Lost(ids, why.to_owned()));
    }
}

/// The first answer in a response (its JSON body, or the first event that holds one).
async fn first_answer(response: Response<Body>) -> Option<Vec<u8>> {
    if !is_event_stream(&response) {
        let body = http_body_util::Limited::new(response.into_body(), BODY_LIMIT)
            .collect()
            .await
            .ok()?;
        return Some(body.to_bytes().to_vec());
    }
    let mut events = Events::new(response.into_body());
    while let Some(event) = events.next().await {
        if let Some(data) = event.data
            && !response_ids(&data).is_empty()
        {
            return Some(data);
        }
    }
    None
}

/// The answer the client gets for a request whose answer will not come.
pub(crate) fn lost_line(id: &Value, upstream: &str, why: &str) -> Vec<u8> {
    jsonrpc::line(&serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": INTERNAL,
            "message": format!(
                "toolonce: the MCP server at {upstream} did not answer this request ({why}); \
                 whether it took effect is unknown."
            ),
            "data": {OUTCOME_KEY: "server_gone"},
        },
    }))
}

/// The answer the client gets for a request that could not be sent.
pub(crate) fn unsent_line(id: &Value, upstream: &str) -> Vec<u8> {
    jsonrpc::error_line(
        Some(id),
        INTERNAL,
        &format!(
            "toolonce: the MCP server at {upstream} cannot be reached; this request was not \
             sent. Try again later."
        ),
    )
}

async fn handshake<T>(io: T) -> Result<Sender, String>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (sender, connection) = http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(target: "toolonce::mcp", error = %e, "an HTTP connection to the MCP server ended");
        }
    });
    Ok(sender)
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl Target {
    fn parse(url: &str) -> anyhow::Result<Target> {
        // The URL itself is never echoed: its query may hold a key.
        let uri: Uri = url.parse().ok().context("--upstream is not a valid URL")?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => anyhow::bail!("--upstream must be an http:// or https:// URL"),
        };
        let authority = uri.authority().context("--upstream has no host")?;
        if authority.as_str().contains('@') {
            anyhow::bail!(
                "--upstream must not hold credentials (user:password@); pass them with --header \
                 'Authorization: ...'"
            );
        }
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let path = uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .parse::<Uri>()
            .context("--upstream has an invalid path")?;
        let shown = format!(
            "{}://{}{}",
            if https { "https" } else { "http" },
            authority,
            uri.path()
        );
        let tls = if https {
            Some((tls_connector()?, {
                rustls::pki_types::ServerName::try_from(host.clone())
                    .ok()
                    .context("--upstream has a host name TLS cannot check")?
            }))
        } else {
            None
        };
        Ok(Target {
            tls,
            host,
            port,
            authority: HeaderValue::from_str(authority.as_str())
                .context("--upstream has an invalid host")?,
            path,
            shown,
        })
    }
}

/// TLS with the system's trusted roots (also `SSL_CERT_FILE` and `SSL_CERT_DIR`), HTTP/1.1.
fn tls_connector() -> anyhow::Result<tokio_rustls::TlsConnector> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        anyhow::bail!(
            "no trusted root certificates found in the system's store{}",
            found
                .errors
                .first()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        );
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS configuration")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn is_event_stream(response: &Response<Body>) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with(EVENT_STREAM))
}

/// The message as one line: line breaks (JSON whitespace) become spaces, one newline ends it.
fn one_line(mut message: Vec<u8>) -> Vec<u8> {
    let end = message.trim_ascii_end().len();
    message.truncate(end);
    for b in &mut message {
        if matches!(*b, b'\n' | b'\r') {
            *b = b' ';
        }
    }
    message.push(b'\n');
    message
}

/// The ids of the requests in a message (one, or the members of a batch).
pub(crate) fn request_ids(message: &[u8]) -> Vec<Value> {
    let is_request = |p: &Peek| p.method.is_some();
    match message.trim_ascii_start().first() {
        Some(b'{') => Peek::of(message)
            .filter(is_request)
            .and_then(|p| p.id)
            .into_iter()
            .collect(),
        Some(b'[') => serde_json::from_slice::<Vec<Value>>(message)
            .unwrap_or_default()
            .into_iter()
            .filter(|m| m.get("method").is_some())
            .filter_map(|mut m| m.get_mut("id").map(Value::take))
            .filter(|id| !id.is_null())
            .collect(),
        _ => Vec::new(),
    }
}

/// The ids of the answers in a message (one, or the members of a batch).
fn response_ids(line: &[u8]) -> Vec<IdKey> {
    match line.trim_ascii_start().first() {
        Some(b'{') => Peek::of(line)
            .filter(Peek::is_response)
            .and_then(|p| p.id)
            .map(|id| IdKey::of(&id))
            .into_iter()
            .collect(),
        Some(b'[') => serde_json::from_slice::<Vec<Value>>(line)
            .unwrap_or_default()
            .iter()
            .filter(|m| m.get("method").is_none())
            .filter_map(|m| m.get("id").map(IdKey::of))
            .collect(),
        _ => Vec::new(),
    }
}

/// One server-sent event.
#[derive(Debug, Default, PartialEq)]
struct Event {
    /// The data of a `message` event (the default type); `None` for other types and for
    /// events without data, or with empty data (such as the event that opens a resumable
    /// stream, which only sets an id): those are no message.
    data: Option<Vec<u8>>,
    id: Option<String>,
    retry: Option<u64>,
}

/// The events of an SSE body, parsed as they arrive.
struct Events {
    body: Body,
    parser: Parser,
    ready: std::collections::VecDeque<Event>,
    /// Whether the body ended cleanly.
    complete: bool,
    error: Option<String>,
}

impl Events {
    fn new(body: Body) -> Self {
        Events {
            body,
            parser: Parser::default(),
            ready: Default::default(),
            complete: false,
            error: None,
        }
    }

    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            if self.complete || self.error.is_some() {
                return None;
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.parser.feed(&data, &mut self.ready);
                    }
                }
                Some(Err(e)) => self.error = Some(e.to_string()),
                None => self.complete = true,
            }
        }
    }
}

/// The `text/event-stream` format: lines end with CR, LF or CRLF; a blank line ends an event.
#[derive(Debug, Default)]
struct Parser {
    line: Vec<u8>,
    /// The last byte was a CR: an LF right after it ends no second line.
    after_cr: bool,
    data: Vec<u8>,
    has_data: bool,
    event: Vec<u8>,
    id: Option<String>,
    retry: Option<u64>,
}

impl Parser {
    fn feed(&mut self, bytes: &[u8], out: &mut std::collections::VecDeque<Event>) {
        for &b in bytes {
            match b {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.line);
                    self.field(&line, out);
                }
                _ => {
                    self.after_cr = false;
                    self.line.push(b);
                }
            }
        }
    }

    fn field(&mut self, line: &[u8], out: &mut std::collections::VecDeque<Event>) {
        if line.is_empty() {
            let message = self.event.is_empty() || self.event == b"message";
            let data = std::mem::take(&mut self.data);
            let event = Event {
                data: (self.has_data && message && !data.trim_ascii().is_empty()).then_some(data),
                id: self.id.take(),
                retry: self.retry.take(),
            };
            self.has_data = false;
            self.event.clear();
            if event != Event::default() {
                out.push_back(event);
            }
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (name, mut value) = match line.iter().position(|&b| b == b':') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &[][..]),
        };
        if value.first() == Some(&b' ') {
            value = &value[1..];
        }
        match name {
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => self.event = value.to_vec(),
            b"id" if !value.contains(&0) => {
                self.id = Some(String::from_utf8_lossy(value).into_owned());
            }
            b"retry" => self.retry = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<Event> {
        let mut parser = Parser::default();
        let mut out = std::collections::VecDeque::new();
        for chunk in chunks {
            parser.feed(chunk, &mut out);
        }
        out.into_iter().collect()
    }

    #[test]
    fn events_split_anywhere_and_any_line_ending_parse_the_same() {
        let whole: &[u8] = b"event: message\r\nid: 7\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n: ping\n\ndata:x\r\rdata: y\n\n";
        let expected = events(&[whole]);
        assert_eq!(expected.len(), 3, "{expected:?}");
        assert_eq!(expected[0].data.as_deref(), Some(&b"{\"a\":\n1}"[..]));
        assert_eq!(expected[0].id.as_deref(), Some("7"));
        assert_eq!(expected[1].data.as_deref(), Some(&b"x"[..]));
        assert_eq!(expected[2].data.as_deref(), Some(&b"y"[..]));
        for split in 0..whole.len() {
            let (a, b) = whole.split_at(split);
            assert_eq!(events(&[a, b]), expected, "split at {split}");
        }
    }

    #[test]
    fn events_of_other_types_and_ids_alone_carry_no_message() {
        let out = events(&[b"id: 3\nretry: 500\ndata: \n\nevent: ping\ndata: 1\n\n"]);
        let only_id = Event {
            data: None,
            id: Some("3".into()),
            retry: Some(500),
        };
        assert_eq!(out, vec![only_id]);
    }

    #[test]
    fn messages_become_one_line_with_their_other_bytes_kept() {
        assert_eq!(
            one_line(b"{\"a\": \"x y\",\r\n \"b\":1.0}\n\n".to_vec()),
            b"{\"a\": \"x y\",   \"b\":1.0}\n"
        );
    }

    #[test]
    fn urls_with_credentials_are_refused_without_echoing_them() {
        let e = Target::parse("http://user:s3cret@example.com/mcp").unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
        let e = Target::parse("ftp://example.com/").unwrap_err();
        assert!(e.to_string().contains("http"), "{e}");
        let t = Target::parse("http://[::1]:8080/mcp?key=s3cret").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 8080));
        assert_eq!(t.path, "/mcp?key=s3cret");
        assert!(!t.shown.contains("s3cret"));
    }

    #[test]
    fn header_values_are_never_echoed_in_errors() {
        let e = Upstream::new(
            "http://localhost/mcp",
            &["Authorization: Bearer s3cret\u{1}x".into()],
        )
        .unwrap_err();
        assert!(!format!("{e:#}").contains("s3cret"), "{e:#}");
        let (upstream, _rx) =
            Upstream::new("http://localhost/mcp", &["X-Api-Key:  k1 ".into()]).unwrap();
        let request = upstream.request(Method::POST, Bytes::new(), None, None);
        assert_eq!(request.headers()["x-api-key"], "k1");
        assert!(!format!("{:?}", request.headers()).contains("k1"));
    }
}
