//! What a request waits with for its answer: an event stream ([`EventBody`]) or a pending JSON
//! answer. Over HTTP, a client closing the stream or the connection before the answer came is
//! the cancellation: dropped early, either sends the proxy a `notifications/cancelled`.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::Frame;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::mcp::jsonrpc::{self, IdKey};

use super::routes::{Session, Waiter};

/// A request waiting for its JSON answer. Dropped before the answer came (the client closed
/// the connection), it cancels the request.
pub(super) struct Pending<'a> {
    pub(super) session: &'a Session,
    pub(super) key: IdKey,
    pub(super) id: Value,
    pub(super) cancel: bool,
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
    /// An event already taken from `rx`, sent first.
    pub(super) head: Option<Bytes>,
    pub(super) rx: mpsc::UnboundedReceiver<Bytes>,
    /// Held for its `Drop`: the stream closing early cancels the request.
    pub(super) _cancel: Option<Cancel>,
}

impl hyper::body::Body for EventBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(head) = self.head.take() {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        self.rx
            .poll_recv(cx)
            .map(|frame| frame.map(|frame| Ok(Frame::data(frame))))
    }
}

/// A request answered on an event stream. Dropped while the request still waits for its answer
/// (the client closed the stream: over HTTP, that is the cancellation), it cancels it.
pub(super) struct Cancel {
    pub(super) session: Arc<Session>,
    pub(super) key: IdKey,
    pub(super) id: Value,
    pub(super) seq: u64,
    pub(super) cancel: bool,
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
