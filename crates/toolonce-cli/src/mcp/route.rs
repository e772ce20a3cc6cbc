//! The routing tables: which request ids the proxy consumes the answers of, which are in
//! progress or given up, and the one way to send a request whose answer must come back here.
//!
//! Request ids: write calls go to the server under the client's own id, so the proxy never
//! lets two requests in progress share one: a write call whose id is taken (by a request in
//! progress, or by a call given up whose answer may still come) is refused, and so is a
//! request forwarded as it came whose id an intercepted call is waiting on. An answer is only
//! ever stored for the request it answers.
//!
//! Ordering: a write call's request and the client's cancel of it both go out holding the
//! server's input ([`Router::send_awaiting`], [`Router::cancel_call`]), so a cancel never
//! overtakes its request, and never reaches the server for a request the server did not get.
//! Callers get these operations, never the tables' mutex or the server's input.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, oneshot, watch};
use toolonce::texts::Text;

use super::batch::Batch;
use super::jsonrpc::IdKey;
use super::server::ServerHandle;

/// How many given-up request ids are remembered so that a late answer is dropped rather than
/// sent to a client that already has one.
const ABANDONED_MEMORY: usize = 4096;

/// Where the answer to a request id the proxy consumes goes.
#[derive(Debug)]
pub(super) enum Route {
    /// A forwarded write call waiting for the server's answer.
    Call(oneshot::Sender<Vec<u8>>),
    /// A member of a split batch: its answer fills a slot of the batch.
    Batch(Arc<Batch>, usize),
    /// One of the proxy's own `tools/list` requests.
    List(oneshot::Sender<Vec<u8>>),
}

/// The request ids the proxy keeps track of.
#[derive(Debug, Default)]
pub(super) struct Routes {
    /// Server answers the proxy consumes instead of passing them on.
    pub(super) pending: HashMap<IdKey, Route>,
    /// `tools/list` requests whose answers teach the proxy the tools' kinds.
    pub(super) lists: HashSet<IdKey>,
    /// Intercepted write calls in progress, with the switch that tells them the client
    /// cancelled.
    pub(super) calls: HashMap<IdKey, watch::Sender<bool>>,
    /// Calls given up (timed out, cancelled): a late answer from the server is dropped.
    abandoned: HashSet<IdKey>,
    abandoned_order: VecDeque<IdKey>,
    /// Client requests forwarded as they came and not answered yet: a write call must not
    /// take their ids, or their answers would be recorded as its own.
    pub(super) passing: HashSet<IdKey>,
}

impl Routes {
    /// Why a write call may not use `id` now, if it may not.
    pub(super) fn id_taken(&self, id: &IdKey) -> Option<String> {
        if self.calls.contains_key(id) || self.pending.contains_key(id) || self.passing.contains(id)
        {
            Some(Text::McpIdInProgress.fill(&[]))
        } else if self.abandoned.contains(id) {
            Some(Text::McpIdGivenUp.fill(&[]))
        } else {
            None
        }
    }

    /// Whether no request is waiting for the server's answer (given-up calls aside).
    pub(super) fn answered(&self) -> bool {
        self.pending.is_empty() && self.passing.is_empty()
    }

    /// Stops dropping answers to `id`; returns whether they were being dropped.
    pub(super) fn forget_abandoned(&mut self, id: &IdKey) -> bool {
        let abandoned = self.abandoned.remove(id);
        if abandoned {
            self.abandoned_order.retain(|k| k != id);
        }
        abandoned
    }

    /// Forgets the request `id` is waiting for and drops the server's answer if one comes.
    fn abandon(&mut self, id: &IdKey) {
        self.pending.remove(id);
        if self.abandoned.insert(id.clone()) {
            self.abandoned_order.push_back(id.clone());
            if self.abandoned_order.len() > ABANDONED_MEMORY
                && let Some(old) = self.abandoned_order.pop_front()
            {
                self.abandoned.remove(&old);
            }
        }
    }
}

/// Why [`Router::send_awaiting`] did not send a request.
#[derive(Debug)]
pub(super) enum NotSent {
    /// The client cancelled it first.
    Cancelled,
    /// The server's input is closed, or its URL does not answer.
    Unreachable,
}

/// The routing tables and the server's input they order writes to; shared by the routing loop,
/// the server reader, the calls and the proxy's own listings.
#[derive(Debug)]
pub(super) struct Router {
    /// A std mutex: every critical section is a few map operations and channel sends that
    /// never block, and none holds it across an `.await`.
    routes: Mutex<Routes>,
    server: ServerHandle,
    unsent: Unsent,
}

impl Router {
    pub(super) fn new(server: ServerHandle) -> Self {
        Router {
            routes: Mutex::new(Routes::default()),
            server,
            unsent: Unsent::default(),
        }
    }

    /// The tables, for the routing loop (never held across an `.await`).
    pub(super) fn routes(&self) -> MutexGuard<'_, Routes> {
        self.routes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The server's end.
    pub(super) fn server(&self) -> &ServerHandle {
        &self.server
    }

    /// Sends a message that needs no route (a notification, a cancel of a call given up);
    /// `false` if the server's input is closed.
    pub(super) async fn send(&self, message: &[u8]) -> bool {
        self.server.send(message).await
    }

    /// Sends the write call `request` under `id` unless the client cancelled it, with its route
    /// in place before it leaves: the receiver gets the server's answer. `unsent` is settled
    /// once the request went out or never will.
    pub(super) async fn send_awaiting(
        &self,
        id: &IdKey,
        request: &[u8],
        cancel: &watch::Receiver<bool>,
        unsent: &UnsentCall,
    ) -> Result<oneshot::Receiver<Vec<u8>>, NotSent> {
        let (tx, rx) = oneshot::channel();
        // Holding the server's input, the client's cancel is checked and the route put in place
        // before the request leaves: neither the answer nor a cancel can overtake it (see
        // `cancel_call`).
        let mut input = self.server.lock().await;
        if *cancel.borrow() {
            return Err(NotSent::Cancelled);
        }
        self.routes().pending.insert(id.clone(), Route::Call(tx));
        let sent = input.send(request).await;
        unsent.settle();
        if !sent {
            self.routes().pending.remove(id);
            return Err(NotSent::Unreachable);
        }
        Ok(rx)
    }

    /// Sends one of the proxy's own requests under `id`; the receiver gets the server's answer,
    /// `None` if the request could not be sent.
    pub(super) async fn request(
        &self,
        id: &IdKey,
        request: &[u8],
    ) -> Option<oneshot::Receiver<Vec<u8>>> {
        let (tx, rx) = oneshot::channel();
        self.routes().pending.insert(id.clone(), Route::List(tx));
        self.server.send(request).await.then_some(rx)
    }

    /// The client cancelled the request `id` (`line` is its `notifications/cancelled`). If it
    /// is an intercepted call, the call learns it, the cancel goes to the server only if the
    /// request did, and `true` is returned.
    pub(super) async fn cancel_call(&self, id: &IdKey, line: &[u8]) -> bool {
        match self.routes().calls.get(id) {
            Some(switch) => switch.send_replace(true),
            None => return false,
        };
        // A call sends its request holding the server's input, and checks the switch after
        // taking it. So with the input held here, either the request is out (its route is in
        // place) and the cancel follows it, or the request never goes out.
        let mut input = self.server.lock().await;
        if self.routes().pending.contains_key(id) {
            input.send(line).await;
        }
        true
    }

    /// Gives up the request `id`: its answer, if it ever comes, is dropped, and an HTTP server's
    /// exchange for it ends.
    pub(super) fn abandon(&self, id: &IdKey) {
        self.routes().abandon(id);
        self.server.give_up(id);
    }

    /// The intercepted call `id` has ended.
    pub(super) fn call_ended(&self, id: &IdKey) {
        self.routes().calls.remove(id);
    }

    /// A place in the count of write calls not sent yet, for a call about to start.
    pub(super) fn unsent_call(self: &Arc<Self>) -> UnsentCall {
        UnsentCall::new(self.clone())
    }

    /// Returns once every write call started has sent its request or ended.
    pub(super) async fn unsent_drained(&self) {
        self.unsent.drained().await;
    }
}

/// Counts the write calls whose request has not gone to the server yet (being claimed, or
/// waiting for another run of the operation), so that a client that sends a call and hangs up
/// at once still has it delivered before the server's input is closed, as without the proxy.
#[derive(Debug, Default)]
struct Unsent {
    count: AtomicUsize,
    drained: Notify,
}

impl Unsent {
    /// Returns once no call is left unsent.
    async fn drained(&self) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.count.load(Ordering::Acquire) == 0 {
                return;
            }
            drained.await;
        }
    }
}

/// One call's place in [`Unsent`], given up when its request is sent or the call ends.
#[derive(Debug)]
pub(super) struct UnsentCall {
    router: Arc<Router>,
    settled: AtomicBool,
}

impl UnsentCall {
    fn new(router: Arc<Router>) -> Self {
        router.unsent.count.fetch_add(1, Ordering::AcqRel);
        UnsentCall {
            router,
            settled: AtomicBool::new(false),
        }
    }

    /// The request went out, or never will.
    pub(super) fn settle(&self) {
        if !self.settled.swap(true, Ordering::AcqRel)
            && self.router.unsent.count.fetch_sub(1, Ordering::AcqRel) == 1
        {
            self.router.unsent.drained.notify_waiters();
        }
    }
}

impl Drop for UnsentCall {
    fn drop(&mut self) {
        self.settle();
    }
}
