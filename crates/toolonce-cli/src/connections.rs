//! The open client connections of an HTTP server (the gateway's and the console's), within a
//! cap, so that no client can hold more than its share. When a connection comes at the cap,
//! the oldest connection that has not sent a whole request head yet is closed to make room,
//! else the oldest idle one (kept alive with no request in progress): a client that holds
//! sockets open with half a header (a slowloris), or idle after their answers, cannot keep a
//! token holder out. A connection with a request in progress (its body being read, its answer
//! being worked on or streamed) is never closed for this; while every one has, a new
//! connection waits.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::sync::Notify;
use tokio::task::AbortHandle;

/// How often a connection waiting for room looks again for an idle one: a request ending
/// does not wake it (only a connection ending does), so that answers need not say so.
const IDLE_CHECK: Duration = Duration::from_millis(50);

/// The open client connections, oldest first, within the cap.
pub(crate) struct Connections {
    cap: usize,
    open: Mutex<Open>,
    freed: Notify,
}

#[derive(Default)]
struct Open {
    next: u64,
    by_age: BTreeMap<u64, Connection>,
}

struct Connection {
    /// Whether a whole request head came on it (a client that is not just holding a socket).
    headed: Arc<AtomicBool>,
    /// How many requests are in progress on it, or [`CLOSING`].
    requests: Arc<AtomicUsize>,
    abort: Option<AbortHandle>,
}

/// In place of a connection's count of requests in progress: it is being closed to make room,
/// so a request that comes on it now is not taken up.
const CLOSING: usize = usize::MAX;

/// One connection's place among the open ones, given up when its task ends (or is aborted).
struct Slot {
    connections: Arc<Connections>,
    id: u64,
    /// Set once a whole request head came.
    headed: Arc<AtomicBool>,
    /// Its requests in progress (see [`InProgress`]).
    requests: Arc<AtomicUsize>,
}

/// A request in progress on its connection, from its head until its answer's body is dropped
/// (sent whole, or the connection gone): while one is, the connection is not closed to make
/// room.
struct InProgress(Arc<AtomicUsize>);

impl InProgress {
    /// The request that just came on the connection counting `requests`; `None` if the
    /// connection is being closed to make room (the request is then not taken up).
    fn begin(requests: &Arc<AtomicUsize>) -> Option<InProgress> {
        requests
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n != CLOSING).then(|| n + 1)
            })
            .ok()
            .map(|_| InProgress(requests.clone()))
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An answer's body that holds its request [`InProgress`] until it is dropped.
pub(crate) struct Answering<B> {
    body: B,
    _request: Option<InProgress>,
}

impl<B: hyper::body::Body + Unpin> hyper::body::Body for Answering<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    // Kept, so that a whole body still goes with its `Content-Length`.
    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        lock(&self.connections.open).by_age.remove(&self.id);
        self.connections.freed.notify_one();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Connections {
    pub(crate) fn new(cap: usize) -> Arc<Self> {
        Arc::new(Connections {
            cap,
            open: Mutex::default(),
            freed: Notify::new(),
        })
    }

    /// Returns once there is room for a connection just accepted: at the cap, the oldest
    /// connection without a whole request head is closed, else the oldest idle one; while
    /// every one has a request in progress, this waits for one to end or become idle. (Called
    /// after `accept`, not before: a connection is only closed for one that came.)
    pub(crate) async fn room(&self) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(why) = self.make_room() {
                if let Some(why) = why {
                    tracing::debug!(
                        target: "toolonce::http",
                        "closed a connection that {why}, to make room"
                    );
                }
                return;
            }
            // Woken when a connection ends or its request does (it may be idle now).
            tokio::time::timeout(IDLE_CHECK, freed).await.ok();
        }
    }

    /// `Some` when there is room now (with why a connection was closed for it, if one was).
    fn make_room(&self) -> Option<Option<&'static str>> {
        let mut open = lock(&self.open);
        if open.by_age.len() < self.cap {
            return Some(None);
        }
        let headless = open
            .by_age
            .iter()
            .find(|(_, c)| !c.headed.load(Ordering::Acquire))
            .map(|(id, _)| (*id, "sent no whole request head"));
        // Marked closing in one step, so no request is taken up on it in between.
        let (id, why) = headless.or_else(|| {
            open.by_age
                .iter()
                .find(|(_, c)| {
                    c.requests
                        .compare_exchange(0, CLOSING, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                })
                .map(|(id, _)| (*id, "was idle"))
        })?;
        let connection = open.by_age.remove(&id)?;
        if let Some(abort) = connection.abort {
            abort.abort();
        }
        Some(Some(why))
    }

    /// Takes a place for a connection just accepted.
    fn take(self: &Arc<Self>) -> Slot {
        let headed = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicUsize::new(0));
        let mut open = lock(&self.open);
        open.next += 1;
        let id = open.next;
        open.by_age.insert(
            id,
            Connection {
                headed: headed.clone(),
                requests: requests.clone(),
                abort: None,
            },
        );
        Slot {
            connections: self.clone(),
            id,
            headed,
            requests,
        }
    }

    /// Gives the connection `id` the handle that closes it (it may have ended already).
    fn closes_with(&self, id: u64, abort: AbortHandle) {
        if let Some(connection) = lock(&self.open).by_age.get_mut(&id) {
            connection.abort = Some(abort);
        }
    }

    /// Serves `stream`, just accepted (after [`Connections::room`]), on a task of its own with
    /// `http` (its timeouts and buffer size): each request is answered by `handle`, or by
    /// `closed` when the connection is being closed to make room just then.
    pub(crate) fn serve<H, F, B>(
        self: &Arc<Self>,
        stream: tokio::net::TcpStream,
        http: http1::Builder,
        handle: H,
        closed: fn() -> Response<B>,
    ) where
        H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
        F: Future<Output = Response<B>> + Send + 'static,
        B: hyper::body::Body + Unpin + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let slot = self.take();
        let id = slot.id;
        let handle = Arc::new(handle);
        let task = tokio::spawn(async move {
            let headed = slot.headed.clone();
            let requests = slot.requests.clone();
            let _slot = slot;
            let service = hyper::service::service_fn(move |request| {
                // A whole request head came: this connection is no socket held open with half
                // a header, and while the request is in progress (until its answer's body is
                // dropped) it is not closed to make room.
                headed.store(true, Ordering::Release);
                let in_progress = InProgress::begin(&requests);
                let handle = handle.clone();
                async move {
                    let answer = match &in_progress {
                        Some(_) => handle(request).await,
                        // Closed to make room just now: the abort is on its way.
                        None => closed(),
                    };
                    Ok::<_, Infallible>(answer.map(|body| Answering {
                        body,
                        _request: in_progress,
                    }))
                }
            });
            if let Err(e) = http.serve_connection(TokioIo::new(stream), service).await {
                tracing::debug!(target: "toolonce::http", error = %e, "connection ended");
            }
        });
        self.closes_with(id, task.abort_handle());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn at_the_cap_a_connection_without_a_head_then_an_idle_one_makes_room_never_a_busy_one() {
        let connections = Connections::new(2);
        let first = connections.take();
        first.headed.store(true, Ordering::Release);
        let busy = InProgress::begin(&first.requests).unwrap();
        let second = connections.take();
        let task = tokio::spawn(std::future::pending::<()>());
        connections.closes_with(second.id, task.abort_handle());
        connections.room().await;
        assert!(task.await.unwrap_err().is_cancelled());
        assert_eq!(lock(&connections.open).by_age.len(), 1);
        drop(second);
        // Every connection has a request in progress: room waits, and cuts none.
        let third = connections.take();
        third.headed.store(true, Ordering::Release);
        let answering = InProgress::begin(&third.requests).unwrap();
        let waiting = tokio::time::timeout(Duration::from_millis(200), connections.room()).await;
        assert!(waiting.is_err());
        assert_eq!(lock(&connections.open).by_age.len(), 2);
        // The third's answer is sent: it is idle, and closed for the next one.
        drop(answering);
        tokio::time::timeout(Duration::from_secs(1), connections.room())
            .await
            .unwrap();
        assert!(InProgress::begin(&third.requests).is_none());
        assert!(lock(&connections.open).by_age.contains_key(&first.id));
        drop(busy);
        drop(first);
        tokio::time::timeout(Duration::from_secs(1), connections.room())
            .await
            .unwrap();
    }
}
