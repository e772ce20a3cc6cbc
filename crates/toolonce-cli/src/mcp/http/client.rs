//! The proxy's HTTP client of one Streamable HTTP server: its connections (reused while the
//! server keeps them), the session and negotiated protocol version every request carries, the
//! headers of each request, a new session when the server has ended one, and the GET requests
//! whose events are routed like answers.

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming as Body;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::Value;
use tokio::sync::mpsc;

use super::message::{Incoming, contains, one_line, response_ids};
use super::sse::{Events, is_event_stream};
use super::target::{Sender, Target, handshake};
use crate::mcp::jsonrpc::{IdKey, Peek};
use crate::mcp::protocol::{
    EVENT_STREAM, LAST_EVENT_ID_HEADER as LAST_EVENT_ID, META_PROTOCOL_VERSION,
    META_PROTOCOL_VERSION_POINTER, METHOD_HEADER, NAME_HEADER,
    PROTOCOL_VERSION_HEADER as PROTOCOL_VERSION, SESSION_ID_HEADER as SESSION_ID,
};

/// How long connecting (TCP and TLS) may take before the server counts as unreachable.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a message that expects no answer may wait for the server to accept it.
pub(super) const ACCEPT_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest JSON body read from the server; an SSE body is read event by event.
pub(super) const BODY_LIMIT: usize = 64 * 1024 * 1024;

/// How long an idle connection is reused. A server closes idle connections on a timer of its
/// own (Node.js after 5 s), and a request written just as the server closes is lost with an
/// unknown outcome; staying under the common timers keeps that from happening.
const IDLE_REUSE: Duration = Duration::from_secs(4);

/// The HTTP side of one Streamable HTTP server.
#[derive(Debug)]
pub(super) struct Client {
    target: Target,
    headers: HeaderMap,
    idle: Mutex<Vec<(Instant, Sender)>>,
    session: Mutex<Option<HeaderValue>>,
    version: Mutex<Option<HeaderValue>>,
    /// The client's `initialize` and `notifications/initialized`, to open a new session with.
    handshake: Mutex<(Option<Bytes>, Option<Bytes>)>,
    renewing: tokio::sync::Mutex<()>,
    /// The `Authorization` of the gateway's client (`--listen`), sent unless `--header` sets
    /// one.
    client_authorization: Mutex<Option<HeaderValue>>,
}

impl Client {
    pub(super) fn new(target: Target, headers: HeaderMap) -> Self {
        Client {
            target,
            headers,
            idle: Mutex::new(Vec::new()),
            session: Mutex::new(None),
            version: Mutex::new(None),
            handshake: Mutex::new((None, None)),
            renewing: tokio::sync::Mutex::new(()),
            client_authorization: Mutex::new(None),
        }
    }

    /// The server's URL without its query, for messages.
    pub(super) fn shown(&self) -> &str {
        &self.target.shown
    }

    /// Takes note of the client's handshake: its `initialize` (`message`, which starts a new
    /// session: the old one's id is not sent with it) or its `notifications/initialized`.
    pub(super) fn note_handshake(&self, message: &[u8], initialize: bool, initialized: bool) {
        if initialize {
            *lock(&self.session) = None;
            *lock(&self.version) = None;
            lock(&self.handshake).0 = Some(Bytes::copy_from_slice(message));
        } else if initialized {
            lock(&self.handshake).1 = Some(Bytes::copy_from_slice(message));
        }
    }

    /// The session the server opened with its `initialize` answer.
    pub(super) fn set_session(&self, mut session: HeaderValue) {
        session.set_sensitive(true);
        *lock(&self.session) = Some(session);
    }

    /// The `Authorization` the gateway's client sent with its latest request (`None`: it sent
    /// none), for the requests sent from now on. Never logged.
    pub(super) fn set_client_authorization(&self, value: Option<HeaderValue>) {
        *lock(&self.client_authorization) = value.map(|mut value| {
            value.set_sensitive(true);
            value
        });
    }

    /// Opens a new session in place of `expired`, which the server has ended (see the module's
    /// documentation). `true` once there is a new session, also one another exchange opened.
    pub(super) async fn renew_session(&self, expired: &HeaderValue) -> bool {
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
    pub(super) async fn end_session(&self) {
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
    pub(super) fn post(&self, message: &[u8], peek: Option<&Peek>) -> Request<Full<Bytes>> {
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

    pub(super) fn request(
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
    pub(super) async fn connection(&self) -> Result<Sender, String> {
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

    pub(super) async fn connect(&self) -> Result<Sender, String> {
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
    pub(super) fn release(&self, sender: Sender) {
        if !sender.is_closed() {
            lock(&self.idle).push((Instant::now(), sender));
        }
    }

    /// One GET: reads its events until it ends (or, with `until_answered`, until the requests
    /// in `pending` are answered).
    pub(super) async fn get(
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
                self.deliver(incoming, data, pending, None, None);
            }
            if until_answered && pending.is_empty() {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Hands one message to routing, noting the answers it carries.
    pub(super) fn deliver(
        &self,
        incoming: &mpsc::UnboundedSender<Incoming>,
        message: Vec<u8>,
        pending: &mut HashSet<IdKey>,
        initialize: Option<&IdKey>,
        related: Option<&Value>,
    ) {
        let line = one_line(message);
        let answers = response_ids(&line);
        if !pending.is_empty() {
            for id in &answers {
                if initialize == Some(id) {
                    self.learn_version(&line);
                }
                pending.remove(id);
            }
        }
        let message = match related {
            Some(id) if answers.is_empty() => Incoming::Related(line, id.clone()),
            _ => Incoming::Message(line),
        };
        let _ = incoming.send(message);
    }

    /// The negotiated protocol version, from the `initialize` answer.
    pub(super) fn learn_version(&self, line: &[u8]) {
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

pub(super) enum GetError {
    NotOffered,
    /// The server ended this session.
    Expired(HeaderValue),
    Failed(String),
}

/// The first answer in a response (its JSON body, or the first event that holds one).
pub(super) async fn first_answer(response: Response<Body>) -> Option<Vec<u8>> {
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

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
