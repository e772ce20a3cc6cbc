//! One client session of the gateway: its proxy's input, and where the messages of its server
//! go (the answer to a request on that request's stream or body, progress on the stream of the
//! request that asked for it, what an HTTP server sent on one request's answer stream and what
//! names a request as its subscription on that request's stream, anything else on the newest request's stream or the `GET` stream). A
//! proxy shared by many clients (see [`shared`](super::shared)) sends anything else nowhere:
//! it may be any of its clients'.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::header::HeaderValue;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::mcp::auth::Principal;
use crate::mcp::http::Upstream;
use crate::mcp::jsonrpc::{IdKey, Peek};

use super::shared;

/// How many messages outside any answer wait for a client that has no `GET` stream open; older
/// ones are dropped first.
const QUEUE_LIMIT: usize = 1024;

/// One client session: the input of its proxy and where the server's messages go.
pub(super) struct Session {
    pub(super) to_proxy: mpsc::UnboundedSender<Vec<u8>>,
    pub(super) routes: Arc<Mutex<Routes>>,
    /// The HTTP server, when the client's `Authorization` is passed on to it.
    pub(super) forward_to: Option<Arc<Upstream>>,
    /// For a sessionless proxy whose server gets the client's `Authorization`: the one it was
    /// started for. Only requests with that same header share it, so one client's credentials
    /// never carry another's request.
    pub(super) bound: Option<HeaderValue>,
    /// Whom the session belongs to: a request of another principal is answered as if it
    /// did not exist.
    pub(super) principal: Principal,
    /// When the client last sent a request, or was last seen with one in progress or its
    /// `GET` stream open: idleness counts from there.
    pub(super) touched: Mutex<Instant>,
    /// Whether the client did more than its handshake (a request besides `initialize`, or a
    /// `GET` stream): until then it is ended after `--handshake-idle`.
    pub(super) engaged: AtomicBool,
}

impl Session {
    pub(super) fn routes(&self) -> MutexGuard<'_, Routes> {
        lock(&self.routes)
    }

    pub(super) fn touch(&self) {
        *lock(&self.touched) = Instant::now();
    }

    /// The client did more than its handshake.
    pub(super) fn engage(&self) {
        self.engaged.store(true, Ordering::Relaxed);
    }

    /// Whether the session is idle: nothing in progress, no `GET` stream open, and no request
    /// for `idle`, or for `handshake` if the client did nothing after its handshake. A busy
    /// session counts as just touched.
    pub(super) fn idle_for(&self, idle: Duration, handshake: Duration) -> bool {
        let busy = {
            let routes = self.routes();
            !routes.waiting.is_empty() || routes.stream.as_ref().is_some_and(|s| !s.is_closed())
        };
        if busy {
            self.touch();
            return false;
        }
        let idle = if self.engaged.load(Ordering::Relaxed) {
            idle
        } else {
            idle.min(handshake)
        };
        lock(&self.touched).elapsed() >= idle
    }
}

/// Where the messages of one session's server go.
#[derive(Default)]
pub(super) struct Routes {
    /// Requests waiting for their answers, by request id.
    pub(super) waiting: HashMap<IdKey, Waiter>,
    /// The progress tokens of requests answered on an event stream (as the proxy got them),
    /// the requests, and the tokens as their clients sent them.
    pub(super) progress: HashMap<IdKey, (IdKey, Value)>,
    /// The client's `GET` stream, for messages outside any request.
    pub(super) stream: Option<mpsc::UnboundedSender<Bytes>>,
    /// Messages outside any answer, kept until the client opens a `GET` stream.
    pub(super) queued: VecDeque<Bytes>,
    /// Numbers the event streams, so that the newest one is known and a stream that ends
    /// removes only its own waiter.
    pub(super) next: u64,
    /// The session's proxy has ended: nothing more will come.
    pub(super) ended: bool,
    /// Whether the proxy is shared by many clients (requests without a session): each request
    /// then goes to it under an id of the gateway's own, and what belongs to no request in
    /// progress reaches nobody.
    pub(super) shared: bool,
}

/// How a request waits for its answer.
pub(super) enum Waiter {
    /// As one JSON body; `id` is the client's id of the request.
    Json {
        tx: oneshot::Sender<Vec<u8>>,
        id: Value,
    },
    /// On an event stream, which also carries what the server sends while handling it.
    Events {
        tx: mpsc::UnboundedSender<Bytes>,
        seq: u64,
        progress: Option<IdKey>,
        /// The client's id of the request, to answer it if the server never does.
        id: Value,
    },
}

impl Routes {
    /// Routes one message from the session's proxy; `related` is the (proxy's) id of the
    /// request the server said it belongs to.
    pub(super) fn deliver(&mut self, line: Vec<u8>, related: Option<Value>) {
        let peek = Peek::of(&line);
        if let Some(peek) = peek.as_ref().filter(|p| p.is_response()) {
            return self.answer(line, peek.id.as_ref());
        }
        let method = peek.as_ref().and_then(|p| p.method.as_deref());
        if method == Some("notifications/progress") && self.progress_sent(&line) {
            return;
        }
        if self.related_sent(&line, related) {
            return;
        }
        if self.shared {
            tracing::debug!(
                target: "toolonce::mcp",
                "dropped a message of a shared server that belongs to no request in progress"
            );
            return;
        }
        self.on_newest_stream(line);
    }

    /// An answer goes to the request waiting for it, and ends its stream.
    fn answer(&mut self, line: Vec<u8>, id: Option<&Value>) {
        let Some(waiter) = id.and_then(|id| self.waiting.remove(&IdKey::of(id))) else {
            // Its request is gone (the client closed its stream): no other request's stream
            // may carry an answer its client never asked for.
            tracing::debug!(target: "toolonce::mcp", "dropped an answer nobody waits for");
            return;
        };
        match waiter {
            Waiter::Json { tx, id } => {
                if let Some(line) = self.for_client(line, &id) {
                    let _ = tx.send(line);
                }
            }
            // The stream ends with its answer: the sender is dropped here.
            Waiter::Events {
                tx, progress, id, ..
            } => {
                if let Some(token) = progress {
                    self.progress.remove(&token);
                }
                if let Some(line) = self.for_client(line, &id) {
                    let _ = tx.send(event(&line));
                }
            }
        }
    }

    /// Progress goes to the stream of the request that asked for it; whether it went.
    fn progress_sent(&self, line: &[u8]) -> bool {
        if let Some(token) = shared::progress_of(line)
            && let Some((request, client_token)) = self.progress.get(&token)
            && let Some(Waiter::Events { tx, .. }) = self.waiting.get(request)
        {
            let line = if self.shared {
                shared::progress_for_client(line, client_token)
            } else {
                Some(line.to_vec())
            };
            if let Some(line) = line
                && tx.send(event(&line)).is_ok()
            {
                return true;
            }
        }
        false
    }

    /// What belongs to one request goes on that request's stream: what an HTTP server sent
    /// on its answer stream, and a notification that names it as its subscription (a
    /// `subscriptions/listen`). In a shared proxy the gateway's id names the request, one
    /// client's, and that client sees its own id of it. Whether it went.
    fn related_sent(&self, line: &[u8], related: Option<Value>) -> bool {
        let belongs = related
            .map(|request| IdKey::of(&request))
            .or_else(|| shared::subscription_of(line));
        if let Some(request) = belongs
            && let Some(Waiter::Events { tx, id, .. }) = self.waiting.get(&request)
        {
            let line = if self.shared {
                shared::related_for_client(line, id)
            } else {
                line.to_vec()
            };
            if tx.send(event(&line)).is_ok() {
                return true;
            }
        }
        false
    }

    /// Anything else (the server's own requests, log messages) goes on the newest request's
    /// stream: while a request is in progress, what the server sends most likely belongs to
    /// it (an elicitation, a sampling request), and the session's one client reads every
    /// stream alike. Otherwise on the GET stream, or it waits for one.
    fn on_newest_stream(&mut self, line: Vec<u8>) {
        let frame = event(&line);
        let newest = self
            .waiting
            .values()
            .filter_map(|w| match w {
                Waiter::Events { tx, seq, .. } => Some((*seq, tx)),
                Waiter::Json { .. } => None,
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

    /// An answer as its client gets it: under its own id, when the proxy is shared.
    fn for_client(&self, line: Vec<u8>, id: &Value) -> Option<Vec<u8>> {
        if !self.shared {
            return Some(line);
        }
        let line = shared::answer_for_client(&line, id);
        if line.is_none() {
            tracing::warn!(target: "toolonce::mcp", "dropped an answer whose id cannot be replaced");
        }
        line
    }
}

/// One message as a server-sent event.
pub(super) fn event(line: &[u8]) -> Bytes {
    let message = line.trim_ascii_end();
    let mut frame = Vec::with_capacity(message.len() + 24);
    frame.extend_from_slice(b"event: message\ndata: ");
    // A message is one line (the proxy's framing), so it is one `data` field.
    frame.extend_from_slice(message);
    frame.extend_from_slice(b"\n\n");
    Bytes::from(frame)
}

/// The message of an event written by [`event`].
pub(super) fn message_of(frame: &[u8]) -> Option<&[u8]> {
    frame
        .strip_prefix(b"event: message\ndata: ")?
        .strip_suffix(b"\n\n")
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
