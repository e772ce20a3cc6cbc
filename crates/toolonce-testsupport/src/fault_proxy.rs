//! A fault-injecting TCP proxy: it listens on a free loopback port, forwards every connection
//! to a target, and on command drops a connection instead of forwarding a reply, delays
//! replies, or refuses and closes connections. Tests put it between a store client and a real
//! server to lose exactly the reply they mean to lose (the request reached the server and was
//! applied, the answer never arrives), which is what a network fault does and what no mock can
//! show about a real client library.
//!
//! A *reply* is what the server sends after the client last spoke: the first bytes from the
//! server following bytes from the client begin a new reply, and later bytes before the client
//! speaks again belong to it. That fits request/response protocols such as RESP and
//! PostgreSQL's, where one request is answered before the next one is sent. Replies are
//! counted across all connections of the proxy, in the order they arrive.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

/// A TCP proxy on 127.0.0.1 in front of `target`, with faults to inject.
///
/// Every control takes effect for replies and connections that come after it. Dropping the
/// proxy stops it and closes every connection it forwards.
///
/// ```no_run
/// use toolonce_testsupport::{FaultProxy, RedisServer};
///
/// let redis = RedisServer::start();
/// let proxy = FaultProxy::start(redis.addr());
/// proxy.drop_reply(1); // the next reply is lost: its connection is closed instead
/// // ... point the client at proxy.url("redis") ...
/// ```
pub struct FaultProxy {
    addr: SocketAddr,
    target: SocketAddr,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    faults: Mutex<Faults>,
    stopped: AtomicBool,
}

#[derive(Default)]
struct Faults {
    /// Replies seen so far, across connections.
    replies: u64,
    /// The reply (by its number) whose connection is closed instead of forwarding it.
    drop_at: Option<u64>,
    /// How many replies were dropped.
    dropped: u64,
    /// Slept before forwarding each reply.
    delay: Duration,
    /// Close new connections at once, without connecting to the target.
    refuse: bool,
    /// Hold every byte from the server (of every connection) until cleared: a link that
    /// stalls, as a replication link to a slow or partitioned replica does.
    stalled: bool,
    /// Where new connections go, once [`FaultProxy::retarget`] moved them.
    retarget: Option<SocketAddr>,
    /// How many times `close_connections` ran: a stalled connection older than the last one
    /// was closed, and drops what it holds.
    closes: u64,
    /// Both sockets of every open connection, to close them on command.
    open: Vec<(TcpStream, TcpStream)>,
    /// A request containing these bytes stalls every reply from its own on.
    hold_on: Option<Vec<u8>>,
    /// Replies that began while stalled.
    held: u64,
    /// The reply to a request containing these bytes is dropped.
    drop_on: Option<Vec<u8>>,
}

impl Shared {
    fn faults(&self) -> MutexGuard<'_, Faults> {
        // A panicking pump thread leaves only counters behind, which stay consistent.
        self.faults.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port that forwards to `target`.
    ///
    /// # Panics
    ///
    /// If no loopback port can be bound.
    pub fn start(target: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap_or_else(|e| panic!("fault proxy: cannot bind a loopback port: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("fault proxy: cannot read its port: {e}"));
        let shared = Arc::new(Shared::default());
        let accepting = shared.clone();
        thread::Builder::new()
            .name(format!("fault-proxy-{}", addr.port()))
            .spawn(move || accept_loop(listener, target, accepting))
            .unwrap_or_else(|e| panic!("fault proxy: cannot start its thread: {e}"));
        FaultProxy {
            addr,
            target,
            shared,
        }
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Where the proxy forwards to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// `scheme://127.0.0.1:PORT/`, the proxy's address as a URL.
    pub fn url(&self, scheme: &str) -> String {
        format!("{scheme}://127.0.0.1:{}/", self.addr.port())
    }

    /// Closes the connection carrying the `n`th reply from now (`1`: the next one) instead of
    /// forwarding it: the server did the work, the client never hears of it. Replaces an
    /// earlier `drop_reply` that has not fired yet.
    ///
    /// # Panics
    ///
    /// If `n` is 0.
    pub fn drop_reply(&self, n: u64) {
        assert!(n > 0, "drop_reply counts from 1 (the next reply)");
        let mut faults = self.shared.faults();
        faults.drop_at = Some(faults.replies + n);
    }

    /// How many replies were dropped so far.
    pub fn dropped(&self) -> u64 {
        self.shared.faults().dropped
    }

    /// How many replies the proxy has seen (forwarded or dropped) so far.
    pub fn replies(&self) -> u64 {
        self.shared.faults().replies
    }

    /// Waits before forwarding each reply from now on (`Duration::ZERO`: no delay).
    pub fn delay_replies(&self, delay: Duration) {
        self.shared.faults().delay = delay;
    }

    /// While set, new connections are accepted and closed at once, as a server that is down
    /// behind a load balancer would.
    pub fn refuse_connections(&self, refuse: bool) {
        self.shared.faults().refuse = refuse;
    }

    /// Closes every open connection (both sides), as a network partition or a restart would.
    pub fn close_connections(&self) {
        let open = {
            let mut faults = self.shared.faults();
            faults.closes += 1;
            std::mem::take(&mut faults.open)
        };
        for (client, server) in open {
            close(&client);
            close(&server);
        }
    }

    /// Holds every byte the server sends from now on, on every connection, until
    /// [`heal`](Self::heal); what is held when [`close_connections`](Self::close_connections)
    /// runs is never delivered. Between a primary and its replica, this is a replica that
    /// stopped receiving the replication stream: whatever is written from now on, only the
    /// primary has.
    pub fn stall(&self) {
        self.shared.faults().stalled = true;
    }

    /// Holds the reply to the next request that contains `pattern` (a command's name, a
    /// script's SHA-1), and every byte the server sends after it on any connection, until
    /// [`heal`](Self::heal): the server handled the request and its client waits for the
    /// answer, while the test changes what the client read. [`held`](Self::held) says when
    /// the reply has arrived.
    ///
    /// # Panics
    ///
    /// If `pattern` is empty.
    pub fn hold_reply_to(&self, pattern: &[u8]) {
        assert!(!pattern.is_empty(), "hold_reply_to needs bytes to look for");
        self.shared.faults().hold_on = Some(pattern.to_vec());
    }

    /// Lets held replies flow again, leaving every other fault as it is (a
    /// [`drop_reply_to`](Self::drop_reply_to) armed while they were held still fires).
    pub fn release(&self) {
        self.shared.faults().stalled = false;
    }

    /// How many replies began while replies were held.
    pub fn held(&self) -> u64 {
        self.shared.faults().held
    }

    /// Closes the connection carrying the reply to the next request that contains `pattern`
    /// instead of forwarding it, as [`drop_reply`](Self::drop_reply) does for a reply by
    /// number.
    ///
    /// # Panics
    ///
    /// If `pattern` is empty.
    pub fn drop_reply_to(&self, pattern: &[u8]) {
        assert!(!pattern.is_empty(), "drop_reply_to needs bytes to look for");
        self.shared.faults().drop_on = Some(pattern.to_vec());
    }

    /// Sends the connections accepted from now on to `target` instead (those open stay where
    /// they are): a virtual address moved to another server, as after a failover.
    pub fn retarget(&self, target: SocketAddr) {
        self.shared.faults().retarget = Some(target);
    }

    /// Clears every fault: replies flow again, undelayed, and connections are accepted.
    pub fn heal(&self) {
        let mut faults = self.shared.faults();
        faults.drop_at = None;
        faults.delay = Duration::ZERO;
        faults.refuse = false;
        faults.stalled = false;
        faults.hold_on = None;
        faults.drop_on = None;
    }
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag; a refused connect means it is gone.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        self.close_connections();
    }
}

fn close(stream: &TcpStream) {
    let _ = stream.shutdown(Shutdown::Both);
}

fn accept_loop(listener: TcpListener, target: SocketAddr, shared: Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stopped.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        let (refuse, to) = {
            let faults = shared.faults();
            (faults.refuse, faults.retarget.unwrap_or(target))
        };
        if refuse {
            close(&client);
            continue;
        }
        let Ok(server) = TcpStream::connect(to) else {
            close(&client);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (Ok(c1), Ok(c2), Ok(s1), Ok(s2)) = (
            client.try_clone(),
            client.try_clone(),
            server.try_clone(),
            server.try_clone(),
        ) else {
            close(&client);
            close(&server);
            continue;
        };
        let epoch = {
            let mut faults = shared.faults();
            faults.open.push((c1, s1));
            faults.closes
        };
        // Set when the client sends; the server's next bytes then begin a new reply. It is set
        // before the request is forwarded, so the reply can never overtake it.
        let spoke = Arc::new(AtomicBool::new(false));
        // Set when the request just forwarded is one whose reply is to be dropped.
        let drop_next = Arc::new(AtomicBool::new(false));
        let link = Link {
            spoke: spoke.clone(),
            drop_next: drop_next.clone(),
        };
        let shared_up = shared.clone();
        let up = thread::spawn(move || {
            let _ = pump_requests(client, server, &link, &shared_up);
        });
        let shared_down = shared.clone();
        let link = Link { spoke, drop_next };
        let down = thread::spawn(move || {
            let _ = pump_replies(s2, c2, &link, &shared_down, epoch);
        });
        drop((up, down));
    }
}

/// What the two pumps of one connection tell each other.
struct Link {
    /// The client spoke: the server's next bytes begin a new reply.
    spoke: Arc<AtomicBool>,
    /// The next reply is to be dropped ([`FaultProxy::drop_reply_to`]).
    drop_next: Arc<AtomicBool>,
}

/// Whether `pattern` occurs in `bytes`.
fn contains(bytes: &[u8], pattern: &[u8]) -> bool {
    bytes.windows(pattern.len()).any(|w| w == pattern)
}

/// Client to server: forwards requests, marking that the client spoke and, before the
/// request can be answered, whether its reply is to be held or dropped.
fn pump_requests(
    mut client: TcpStream,
    mut server: TcpStream,
    link: &Link,
    shared: &Shared,
) -> io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = client.read(&mut buf)?;
        if n == 0 {
            close(&server);
            return Ok(());
        }
        link.spoke.store(true, Ordering::SeqCst);
        {
            let mut faults = shared.faults();
            if faults
                .hold_on
                .as_deref()
                .is_some_and(|p| contains(&buf[..n], p))
            {
                faults.hold_on = None;
                faults.stalled = true;
            }
            if faults
                .drop_on
                .as_deref()
                .is_some_and(|p| contains(&buf[..n], p))
            {
                faults.drop_on = None;
                link.drop_next.store(true, Ordering::SeqCst);
            }
        }
        server.write_all(&buf[..n])?;
    }
}

/// Server to client: forwards replies, applying the faults to each new one.
fn pump_replies(
    mut server: TcpStream,
    mut client: TcpStream,
    link: &Link,
    shared: &Shared,
    epoch: u64,
) -> io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = server.read(&mut buf)?;
        if n == 0 {
            close(&client);
            return Ok(());
        }
        let mut delay = Duration::ZERO;
        if link.spoke.swap(false, Ordering::SeqCst) {
            let mut faults = shared.faults();
            faults.replies += 1;
            let marked = link.drop_next.swap(false, Ordering::SeqCst);
            if marked || faults.drop_at == Some(faults.replies) {
                if !marked {
                    faults.drop_at = None;
                }
                faults.dropped += 1;
                drop(faults);
                close(&client);
                close(&server);
                return Ok(());
            }
            if faults.stalled {
                faults.held += 1;
            }
            delay = faults.delay;
        }
        if !delay.is_zero() {
            thread::sleep(delay);
        }
        // A stalled link holds what it read; a closed connection drops it (the write fails).
        loop {
            let faults = shared.faults();
            if faults.closes != epoch {
                return Ok(());
            }
            if !faults.stalled || shared.stopped.load(Ordering::SeqCst) {
                break;
            }
            drop(faults);
            thread::sleep(Duration::from_millis(5));
        }
        client.write_all(&buf[..n])?;
    }
}

#[cfg(test)]
mod tests;
