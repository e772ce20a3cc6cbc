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
use std::sync::{Arc, Mutex};
use std::time::Duration;
use toolonce::texts::Text;

use anyhow::Context;
use bytes::Bytes;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;

use super::jsonrpc::{self, IdKey, Peek};
use super::protocol::{INTERNAL_ERROR, OUTCOME_KEY, SESSION_ID_HEADER as SESSION_ID};

mod client;
mod exchange;
mod message;
mod sse;
mod target;

use client::{ACCEPT_TIMEOUT, Client, GetError, lock};
use exchange::Exchange;
pub(crate) use message::{Incoming, request_ids};
pub(crate) use target::tls_connector;
use target::{Sender, Target};

/// The JSON-RPC code of the proxy's answer to a request whose answer did not come (the outcome
/// is unknown), or that could not be sent.
const INTERNAL: i64 = INTERNAL_ERROR;

/// A Streamable HTTP MCP server, as the proxy's server end.
#[derive(Debug)]
pub(crate) struct Upstream {
    client: Arc<Client>,
    /// Cloned by every exchange in progress: routing ends when the last clone is gone.
    incoming: Mutex<Option<mpsc::UnboundedSender<Incoming>>>,
    /// Serializes messages that expect no answer (see the module's documentation).
    accepting: tokio::sync::Mutex<()>,
    closed: watch::Sender<bool>,
    stream_opened: AtomicBool,
    /// The exchanges in progress of one request each, by request id, so that one whose request
    /// the proxy gave up is ended (a server may never answer a cancelled request).
    exchanges: Mutex<HashMap<IdKey, AbortHandle>>,
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
            client: Arc::new(Client::new(target, map)),
            incoming: Mutex::new(Some(tx)),
            accepting: tokio::sync::Mutex::new(()),
            closed: watch::Sender::new(false),
            stream_opened: AtomicBool::new(false),
            exchanges: Mutex::new(HashMap::new()),
        };
        Ok((Arc::new(upstream), rx))
    }

    /// The server's URL without its query, for messages.
    pub(crate) fn shown(&self) -> &str {
        self.client.shown()
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
        // A new session: the client's `initialize` goes without the old one's id.
        self.client
            .note_handshake(message, initialize.is_some(), initialized);
        let request = self.client.post(message, peek.as_ref());
        let session = request.headers().get(SESSION_ID).cloned();
        // Without an answer to wait for, the next message waits for this one to be accepted.
        let accepting = if requests.is_empty() {
            Some(self.accepting.lock().await)
        } else {
            None
        };
        let Some(mut sender) = self.connection().await else {
            return false;
        };
        let response = sender.try_send_request(request);
        let single = match requests.as_slice() {
            [id] => Some(IdKey::of(id)),
            _ => None,
        };
        let exchange = Exchange {
            client: self.client.clone(),
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
                    upstream = %self.client.shown(),
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

    /// A connection to send on, or `None` (said in the log) when the server cannot be reached.
    async fn connection(&self) -> Option<Sender> {
        match self.client.connection().await {
            Ok(sender) => Some(sender),
            Err(e) => {
                tracing::warn!(
                    target: "toolonce::mcp",
                    upstream = %self.client.shown(),
                    error = %e,
                    "cannot reach the MCP server; the message was not sent"
                );
                None
            }
        }
    }

    /// The `Authorization` the gateway's client sent with its latest request (`None`: it sent
    /// none), for the requests sent from now on. Never logged.
    pub(crate) fn set_client_authorization(&self, value: Option<HeaderValue>) {
        self.client.set_client_authorization(value);
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

    /// Ends the session with DELETE, if there is one (a server may refuse with 405).
    pub(crate) async fn end_session(&self) {
        self.client.end_session().await;
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
                .client
                .get(&incoming, &mut pending, &mut last_event, &mut retry, false)
                .await
            {
                Ok(()) => failures = 0,
                Err(GetError::NotOffered) => {
                    tracing::debug!(target: "toolonce::mcp", "the MCP server offers no GET stream");
                    return;
                }
                Err(GetError::Expired(session)) => {
                    if !self.client.renew_session(&session).await {
                        failures += 1;
                        retry = Duration::from_secs(1 << failures.min(5));
                    }
                }
                Err(GetError::Failed(e)) => {
                    failures += 1;
                    if failures == 1 {
                        tracing::warn!(
                            target: "toolonce::mcp",
                            upstream = %self.client.shown(),
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
}

/// The answer the client gets for a request whose answer will not come.
pub(crate) fn lost_line(id: &Value, upstream: &str, why: &str) -> Vec<u8> {
    jsonrpc::line(&serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": INTERNAL,
            "message": Text::McpLost.fill(&[("upstream", upstream), ("why", why)]),
            "data": {OUTCOME_KEY: "server_gone"},
        },
    }))
}

/// The answer the client gets for a request that could not be sent.
pub(crate) fn unsent_line(id: &Value, upstream: &str) -> Vec<u8> {
    jsonrpc::error_line(
        Some(id),
        INTERNAL,
        &Text::McpUnsent.fill(&[("upstream", upstream)]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let request = upstream
            .client
            .request(hyper::Method::POST, Bytes::new(), None, None);
        assert_eq!(request.headers()["x-api-key"], "k1");
        assert!(!format!("{:?}", request.headers()).contains("k1"));
    }
}
