//! One POST and what comes back: its answer as a JSON body or an event stream (resumed with a
//! GET when it ends early), a refusal (4xx: nothing ran), or a loss (the connection broke, a
//! 5xx: nobody knows). A request sent in a session the server has ended is sent again in a new
//! one.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use toolonce::texts::Text;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming as Body;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::Value;
use tokio::sync::mpsc;

use super::client::{BODY_LIMIT, Client, GetError};
use super::message::Incoming;
use super::sse::{Events, is_event_stream};
use super::target::Sender;
use crate::mcp::jsonrpc::{self, IdKey, Peek};
use crate::mcp::protocol::{
    HTTP_STATUS_KEY, INVALID_REQUEST, SESSION_ID_HEADER as SESSION_ID, WWW_AUTHENTICATE_KEY,
};

/// How many times a POST's event stream is resumed with a GET before its requests are lost.
const RESUME_ATTEMPTS: usize = 3;

/// The JSON-RPC codes of the proxy's own answers: a refusal before anything ran (4xx), and an
/// answer that did not come (the outcome is unknown).
const REFUSED: i64 = INVALID_REQUEST;

/// The answer to a POST; a request the connection closed on before it left is sent once more
/// on a new one.
async fn sent(
    upstream: &Client,
    sender: Sender,
    response: impl Future<
        Output = Result<Response<Body>, hyper::client::conn::TrySendError<Request<Full<Bytes>>>>,
    >,
) -> Result<(Sender, Response<Body>), String> {
    match response.await {
        Ok(response) => Ok((sender, response)),
        Err(mut e) => match e.take_message() {
            // The connection closed before the request left: once more on a new one.
            Some(request) => {
                let mut sender = upstream.connect().await?;
                let response = sender
                    .send_request(request)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok((sender, response))
            }
            None => Err(e.into_error().to_string()),
        },
    }
}

/// One POST and what comes back.
pub(super) struct Exchange {
    pub(super) client: Arc<Client>,
    pub(super) incoming: mpsc::UnboundedSender<Incoming>,
    /// The message, to send again in a new session.
    pub(super) message: Bytes,
    /// The session it was sent in.
    pub(super) session: Option<HeaderValue>,
    /// The ids of the requests in the message.
    pub(super) requests: Vec<Value>,
    /// Those not answered yet.
    pub(super) pending: HashSet<IdKey>,
    pub(super) initialize: Option<IdKey>,
}

impl Exchange {
    /// Waits for the answer to the POST (sent once more, on a new connection or in a new
    /// session, when the first went nowhere), and hands on what it carries.
    pub(super) async fn run(
        mut self,
        sender: Sender,
        response: impl Future<
            Output = Result<
                Response<Body>,
                hyper::client::conn::TrySendError<Request<Full<Bytes>>>,
            >,
        >,
    ) {
        let upstream = self.client.clone();
        let (sender, response) = match sent(&upstream, sender, response).await {
            Ok(pair) => pair,
            Err(e) => return self.lost(&e),
        };
        let in_session = self.session.is_some();
        let (sender, response) = match self.in_a_live_session(sender, response).await {
            Ok(pair) => pair,
            Err(e) => return self.lost(&e),
        };
        if self.initialize.is_some()
            && let Some(session) = response.headers().get(SESSION_ID)
        {
            upstream.set_session(session.clone());
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
            self.read_stream(sender, response).await;
        } else {
            self.read_body(sender, response).await;
        }
    }

    /// The answer, or, when the server ended the session the POST was sent in, the answer to
    /// the same message sent in a new one.
    async fn in_a_live_session(
        &mut self,
        sender: Sender,
        response: Response<Body>,
    ) -> Result<(Sender, Response<Body>), String> {
        let upstream = self.client.clone();
        if response.status() == StatusCode::NOT_FOUND
            && let Some(session) = self.session.take()
            && upstream.renew_session(&session).await
        {
            // Not processed in the ended session: once more in the new one.
            let peek = Peek::of(&self.message);
            let request = upstream.post(&self.message, peek.as_ref());
            let mut sender = upstream.connection().await?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| e.to_string())?;
            return Ok((sender, response));
        }
        Ok((sender, response))
    }

    /// An answer as an event stream: each event handed on, the stream resumed when it ends
    /// before every request is answered.
    async fn read_stream(mut self, sender: Sender, response: Response<Body>) {
        let upstream = self.client.clone();
        let mut events = Events::new(response.into_body());
        let mut last_event = None;
        while let Some(event) = events.next().await {
            if let Some(id) = event.id.and_then(|id| HeaderValue::from_str(&id).ok()) {
                last_event = Some(id);
            }
            if let Some(data) = event.data {
                // What comes on the stream of one request's answer belongs to it.
                let related = match self.requests.as_slice() {
                    [id] => Some(id),
                    _ => None,
                };
                upstream.deliver(
                    &self.incoming,
                    data,
                    &mut self.pending,
                    self.initialize.as_ref(),
                    related,
                );
            }
        }
        if events.complete {
            upstream.release(sender);
        }
        if !self.pending.is_empty() {
            self.resume(last_event, events.error).await;
        }
    }

    /// An answer as a JSON body (or a 202 without one).
    async fn read_body(mut self, mut sender: Sender, response: Response<Body>) {
        let upstream = self.client.clone();
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
                        None,
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
                .client
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
        let refusal = serde_json::from_slice::<Value>(&body).ok();
        let said = refusal
            .as_ref()
            .and_then(|m| {
                m.pointer("/error/message")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| status.canonical_reason().unwrap_or("").to_owned());
        let shown = self.client.shown();
        tracing::warn!(target: "toolonce::mcp", upstream = %shown, %status, "the MCP server refused a message");
        if status.is_server_error() {
            return self.lost(&format!("HTTP {status}: {said}"));
        }
        let session = if session_ended {
            Text::McpHttpSessionEnded.fill(&[])
        } else {
            String::new()
        };
        if let [id] = &self.requests[..]
            && let Some(error) = refusal.and_then(|r| own_refusal(r, id, status))
        {
            let _ = self
                .incoming
                .send(Incoming::Message(jsonrpc::line(&serde_json::json!({
                    "jsonrpc": "2.0",
                    "id": id,
                    "error": error,
                }))));
            return;
        }
        for id in &self.requests {
            let text = Text::McpHttpRefused.fill(&[
                ("upstream", shown),
                ("status", &status.to_string()),
                ("said", &said.to_string()),
                ("session", &session),
            ]);
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
            upstream = %self.client.shown(),
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

/// The server's own JSON-RPC error in a 4xx body that answers the request `id`, with a code
/// that says nothing ran (a 2026-07-28 server answers an unknown method with 404 and -32601, an
/// unsupported version with 400 and -32022, ...): passed on as the server wrote it, so that its
/// client learns what the server said (the versions it supports, the capability it needs), with
/// the status beside its `data` for a gateway (see `listen`). Any other refusal is the proxy's
/// own -32600, which also says nothing ran.
fn own_refusal(refusal: Value, id: &Value, status: StatusCode) -> Option<Value> {
    let Value::Object(mut refusal) = refusal else {
        return None;
    };
    if refusal.get("id") != Some(id) {
        return None;
    }
    let mut error = refusal.remove("error")?;
    let code = error.get("code").and_then(Value::as_i64)?;
    if !crate::mcp::answer::refused_before_running(code) {
        return None;
    }
    // Data the status cannot be put beside (not an object) goes on without it.
    if let Value::Object(data) = error
        .as_object_mut()?
        .entry("data")
        .or_insert_with(|| Value::Object(serde_json::Map::new()))
    {
        data.insert(HTTP_STATUS_KEY.to_owned(), Value::from(status.as_u16()));
    }
    Some(error)
}
