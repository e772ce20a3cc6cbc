//! What bounds the gateway's HTTP server, so that no client can hold more than its share: how
//! long a client may take to send a request's head and its body, how large a body may be, and
//! how many connections may be open at once (within the file-descriptor limit, so the gateway
//! never runs out of descriptors and stops answering everyone). When a connection comes at the
//! cap, the oldest connection that has not sent a whole request head yet is closed to make
//! room, else the oldest idle one (kept alive with no request in progress): a client that
//! holds sockets open with half a header (a slowloris), or idle after their answers, cannot
//! keep a token holder out. A connection with a request in progress (its body being read, its
//! answer being worked on or streamed) is never closed for this. The log line for a failed
//! `accept` is said at most once a second.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::{Frame, Incoming as Body, SizeHint};
use hyper::header;
use hyper::{Request, StatusCode};
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use super::request::{Answer, refuse};
use super::routes::lock;

/// The gateway's bounds, as flags of `toolonce mcp --listen`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct BoundsArgs {
    /// With --listen: how long a client may take to send a request's head (the request line
    /// and headers) once it has connected or its previous request was answered; then the
    /// connection is closed.
    #[arg(
        long,
        value_name = "SECONDS",
        value_parser = crate::args::read_timeout,
        default_value = "10",
        requires = "listen"
    )]
    header_timeout: Duration,
    /// With --listen: how long a client may take to send a request's body once its head came;
    /// then it gets 408.
    #[arg(
        long,
        value_name = "SECONDS",
        value_parser = crate::args::read_timeout,
        default_value = "30",
        requires = "listen"
    )]
    body_timeout: Duration,
    /// With --listen: the largest request body accepted, in bytes; a larger one gets 413
    /// (before it is read, when its Content-Length says so).
    #[arg(
        long,
        value_name = "BYTES",
        value_parser = clap::value_parser!(u64).range(1..=1 << 30),
        default_value = "4194304",
        requires = "listen"
    )]
    max_body: u64,
    /// With --listen: how many client connections may be open at once (lowered to half the
    /// file-descriptor limit if that is less). When a connection comes at the cap, the oldest
    /// one that has not sent a whole request head yet is closed to make room, else the oldest
    /// idle one (no request in progress); while every one has a request in progress, the new
    /// connection waits.
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..),
        default_value = "1024",
        requires = "listen"
    )]
    max_connections: u32,
}

/// The bounds the server applies.
#[derive(Debug, Clone)]
pub(crate) struct Bounds {
    pub(super) header_timeout: Duration,
    pub(super) body_timeout: Duration,
    pub(super) max_body: usize,
    pub(super) max_connections: usize,
}

impl BoundsArgs {
    pub(crate) fn bounds(&self) -> Bounds {
        Bounds {
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            max_body: usize::try_from(self.max_body).unwrap_or(usize::MAX),
            max_connections: self.max_connections as usize,
        }
    }
}

impl Bounds {
    /// The connection cap within the file-descriptor limit: the soft limit is first raised to
    /// the hard one (as servers commonly do), and connections get at most half of it, the rest
    /// being for the servers' pipes, the store and the upstream connections.
    pub(super) fn connection_cap(&self) -> usize {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let limit = getrlimit(Resource::Nofile);
        let mut soft = limit.current;
        if let (Some(current), Some(maximum)) = (limit.current, limit.maximum)
            && current < maximum
            && setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: Some(maximum),
                    maximum: Some(maximum),
                },
            )
            .is_ok()
        {
            soft = Some(maximum);
        }
        let within = soft.map_or(usize::MAX, |soft| {
            usize::try_from(soft / 2).unwrap_or(usize::MAX).max(1)
        });
        if within < self.max_connections {
            tracing::warn!(
                target: "toolonce::mcp",
                max_connections = within,
                "--max-connections lowered to half the file-descriptor limit (raise it with \
                 ulimit -n)"
            );
        }
        self.max_connections.min(within)
    }
}

/// How often a connection waiting for room looks again for an idle one: a request ending
/// does not wake it (only a connection ending does), so that answers need not say so.
const IDLE_CHECK: Duration = Duration::from_millis(50);

/// The open client connections, oldest first, within the cap.
pub(super) struct Connections {
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
pub(super) struct Slot {
    connections: Arc<Connections>,
    id: u64,
    /// Set once a whole request head came.
    pub(super) headed: Arc<AtomicBool>,
    /// Its requests in progress (see [`InProgress`]).
    pub(super) requests: Arc<AtomicUsize>,
}

/// A request in progress on its connection, from its head until its answer's body is dropped
/// (sent whole, or the connection gone): while one is, the connection is not closed to make
/// room.
pub(super) struct InProgress(Arc<AtomicUsize>);

impl InProgress {
    /// The request that just came on the connection counting `requests`; `None` if the
    /// connection is being closed to make room (the request is then not taken up).
    pub(super) fn begin(requests: &Arc<AtomicUsize>) -> Option<InProgress> {
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
pub(super) struct Answering<B> {
    pub(super) body: B,
    pub(super) _request: Option<InProgress>,
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

impl Connections {
    pub(super) fn new(cap: usize) -> Arc<Self> {
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
    pub(super) async fn room(&self) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut open = lock(&self.open);
                if open.by_age.len() < self.cap {
                    return;
                }
                let headless = open
                    .by_age
                    .iter()
                    .find(|(_, c)| !c.headed.load(Ordering::Acquire))
                    .map(|(id, _)| (*id, "sent no whole request head"));
                // Marked closing in one step, so no request is taken up on it in between.
                let victim = headless.or_else(|| {
                    open.by_age
                        .iter()
                        .find(|(_, c)| {
                            c.requests
                                .compare_exchange(0, CLOSING, Ordering::AcqRel, Ordering::Acquire)
                                .is_ok()
                        })
                        .map(|(id, _)| (*id, "was idle"))
                });
                if let Some((id, why)) = victim
                    && let Some(connection) = open.by_age.remove(&id)
                {
                    if let Some(abort) = connection.abort {
                        abort.abort();
                    }
                    tracing::debug!(
                        target: "toolonce::mcp",
                        "closed a connection that {why}, to make room"
                    );
                    return;
                }
            }
            // Woken when a connection ends or its request does (it may be idle now).
            tokio::time::timeout(IDLE_CHECK, freed).await.ok();
        }
    }

    /// Takes a place for a connection just accepted.
    pub(super) fn take(self: &Arc<Self>) -> Slot {
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

    /// Gives the connection `slot` the handle that closes it (it may have ended already).
    pub(super) fn closes_with(&self, id: u64, abort: AbortHandle) {
        if let Some(connection) = lock(&self.open).by_age.get_mut(&id) {
            connection.abort = Some(abort);
        }
    }
}

impl Slot {
    pub(super) fn id(&self) -> u64 {
        self.id
    }
}

/// A request's body within `--max-body` and `--body-timeout`; else the refusal to answer with
/// (413 before anything is read when the `Content-Length` is too large, 408 when the body is
/// not whole in time).
pub(super) async fn read_body(request: Request<Body>, bounds: &Bounds) -> Result<Bytes, Answer> {
    let too_large = || {
        refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "the body is larger than {} bytes, the limit (--max-body)",
                bounds.max_body
            ),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|len| len > bounds.max_body as u64) {
        return Err(too_large());
    }
    let collect = Limited::new(request.into_body(), bounds.max_body).collect();
    match tokio::time::timeout(bounds.body_timeout, collect).await {
        Ok(Ok(body)) => Ok(body.to_bytes()),
        Ok(Err(e)) if e.is::<LengthLimitError>() => Err(too_large()),
        Ok(Err(_)) => Err(refuse(
            StatusCode::BAD_REQUEST,
            "the body was not received whole",
        )),
        Err(_) => Err(refuse(
            StatusCode::REQUEST_TIMEOUT,
            &format!(
                "the body did not arrive within {:?} (--body-timeout)",
                bounds.body_timeout
            ),
        )),
    }
}

/// Says a failed `accept` at most once a second, with how many were not said.
#[derive(Default)]
pub(super) struct AcceptErrors {
    last: Option<Instant>,
    unsaid: u64,
}

impl AcceptErrors {
    pub(super) fn failed(&mut self, error: &std::io::Error) {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < Duration::from_secs(1))
        {
            self.unsaid += 1;
            return;
        }
        tracing::warn!(
            target: "toolonce::mcp",
            %error,
            not_said = self.unsaid,
            "cannot accept a connection (said at most once a second)"
        );
        self.last = Some(now);
        self.unsaid = 0;
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
        connections.closes_with(second.id(), task.abort_handle());
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
        assert!(lock(&connections.open).by_age.contains_key(&first.id()));
        drop(busy);
        drop(first);
        tokio::time::timeout(Duration::from_secs(1), connections.room())
            .await
            .unwrap();
    }
}
