//! The proxy itself: routes every message between the client and the server, hands write calls
//! to [`call`], has the server's tools listed ([`Listing`]), and splits batches that hold write
//! calls. Its life (start, the end of either side, shutdown) is [`lifecycle`](super::lifecycle)'s.
//!
//! Which request ids may be used when, and how a request and its cancel keep their order, is
//! [`route`](super::route)'s to say. The proxy's own requests (its `tools/list`) use string ids
//! with a random prefix no client picks.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinSet;
use toolonce::Layer;
use toolonce::texts::Text;

use super::answer;
use super::batch::{self, Member, Plan};
use super::call::{self, Call, Sink};
use super::config::Config;
use super::http;
use super::jsonrpc::{self, IdKey, Lenient, Peek};
use super::protocol::INVALID_REQUEST;
use super::repeat;
use super::route::{Route, Router, Routes};
use super::server::ServerHandle;
use super::stdio::ClientOut;
use super::store::LazyStore;
use super::tools::{Listing, Tools};

/// What the proxy needs besides the server command.
pub(crate) struct Settings {
    pub(crate) scope: String,
    /// The server's part of every operation key's tool part (see `--server-id`).
    pub(crate) server_id: String,
    pub(crate) config: Arc<Config>,
    pub(crate) store: Arc<LazyStore>,
}

/// State shared by the routing loop, the server reader and the proxy's own listings.
#[derive(Debug)]
pub(super) struct Shared {
    /// What the write calls share (they get this, not the routing loop's state).
    context: Arc<call::Context>,
    /// The routing tables and the server's end (the same as `context.router`).
    router: Arc<Router>,
    /// The proxy's own listing of the tools, and what it learnt.
    listing: Arc<Listing>,
    /// Whether the client has initialized the session (the proxy may send requests of its own).
    initialized: AtomicBool,
    to_client: ClientOut,
}

impl Shared {
    pub(super) fn routes(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.router.routes()
    }

    /// Handles one message from the client.
    pub(super) async fn on_client_message(
        self: &Arc<Self>,
        line: Vec<u8>,
        calls: &mut JoinSet<()>,
    ) {
        match line.trim_ascii_start().first() {
            Some(b'{') => {
                let Some(peek) = Peek::of(&line) else {
                    if !self.refuse_unparsable(&line).await {
                        self.forward(&line).await;
                    }
                    return;
                };
                match (peek.method.as_deref(), &peek.id) {
                    (Some("tools/call"), Some(_)) => {
                        let message = serde_json::from_slice::<Value>(&line);
                        match &message {
                            Ok(message) => self.list_for_modern(message.get("params")),
                            // Its `_meta` may still be readable, and classifying it needs a
                            // listing as much.
                            Err(_) => {
                                self.list_for_modern(jsonrpc::lenient_meta(&line).as_ref());
                            }
                        }
                        self.listed().await;
                        match message {
                            Ok(message) => {
                                if let Some(call) =
                                    Call::of(&self.listing.tools, message, line.clone())
                                {
                                    self.start_call(
                                        call,
                                        Sink::Client(self.to_client.clone()),
                                        calls,
                                    );
                                    return;
                                }
                            }
                            Err(_) => {
                                if self.refuse_unparsable(&line).await {
                                    return;
                                }
                            }
                        }
                    }
                    (Some("tools/list"), Some(id)) => {
                        self.routes().lists.insert(IdKey::of(id));
                    }
                    (Some("notifications/cancelled"), None) => {
                        if let Ok(message) = serde_json::from_slice::<Value>(&line)
                            && self.cancel(&message, &line).await
                        {
                            return;
                        }
                    }
                    (Some("notifications/initialized"), None) => {
                        // The session is open: the proxy may now ask for the tools itself.
                        self.router.send(&line).await;
                        self.initialized.store(true, Ordering::Release);
                        self.list_tools(None);
                        return;
                    }
                    _ => {}
                }
                if peek.method.is_some()
                    && let Some(id) = &peek.id
                    && !self.pass_id(id)
                {
                    return;
                }
            }
            Some(b'[') if self.split_batch(&line, calls).await => return,
            // Malformed or not an object: the server answers it as it would without us.
            _ => {}
        }
        self.forward(&line).await;
    }

    /// Sends a message on as it came. A message an HTTP server could not be sent gets no
    /// answer from it, so its requests are answered here (a stdio server whose input is closed
    /// is exiting, and ends the proxy).
    async fn forward(&self, line: &[u8]) {
        if !self.router.send(line).await
            && let Some(upstream) = self.router.server().upstream()
        {
            self.fail_requests(&http::request_ids(line), |id| {
                http::unsent_line(id, upstream.shown())
            });
        }
    }

    /// Answers requests the server will not answer (not sent, or lost on the way back): a
    /// request passed on as it came, or a member of a split batch, gets `answer`; a write call
    /// or the proxy's own listing learns it from its route being dropped.
    pub(super) fn fail_requests(&self, ids: &[Value], answer: impl Fn(&Value) -> Vec<u8>) {
        for id in ids {
            let key = IdKey::of(id);
            let (route, passing) = {
                let mut routes = self.routes();
                routes.lists.remove(&key);
                let route = routes.pending.remove(&key);
                (route, routes.passing.remove(&key))
            };
            match route {
                Some(Route::Call(_) | Route::List(_)) => {}
                Some(Route::Batch(batch, slot)) => batch.settle(slot, Some(answer(id))),
                None if passing => self.to_client.send(answer(id)),
                None => {}
            }
        }
    }

    /// Takes note of a request forwarded as it came under `id`. `false` (and the client is
    /// answered with an error) if an intercepted call is waiting on that id: the server's
    /// answer could not be told apart from the call's.
    fn pass_id(&self, id: &Value) -> bool {
        let key = IdKey::of(id);
        let mut routes = self.routes();
        if routes.calls.contains_key(&key) || routes.pending.contains_key(&key) {
            drop(routes);
            tracing::warn!(target: "toolonce::mcp", id = ?key, "the client reused the id of a write call in progress");
            self.to_client.send(jsonrpc::error_line(
                Some(id),
                INVALID_REQUEST,
                &Text::McpRequestIdReused.fill(&[]),
            ));
            return false;
        }
        // A late answer to a call given up under this id now goes to the client, which asked
        // again; it is never recorded.
        routes.forget_abandoned(&key);
        routes.passing.insert(key);
        true
    }

    /// Waits (a bounded time) for the proxy's own listing of the tools, if one is in progress.
    async fn listed(&self) {
        self.listing.listed().await;
    }

    /// Lists the tools before classifying a call of protocol 2026-07-28 or later, if needed
    /// (see [`Listing::list_for_modern`]).
    fn list_for_modern(&self, params: Option<&Value>) {
        self.listing.list_for_modern(params);
    }

    /// Starts the proxy's own listing of the server's tools (see [`Listing::list`]).
    fn list_tools(&self, meta: Option<Value>) {
        self.listing.list(meta);
    }

    /// Answers a line that serde_json cannot read, if it holds a write call: a JSON-RPC error,
    /// and the line is not forwarded (see [`Lenient`]). Returns whether it was answered; a
    /// line that is no call of a write tool passes on as it came.
    async fn refuse_unparsable(&self, line: &[u8]) -> bool {
        let Some(lenient) = Lenient::of(line) else {
            return false;
        };
        if !self.unkeyable_write(&lenient).await {
            return false;
        }
        tracing::warn!(target: "toolonce::mcp", tool = ?lenient.tool, "refused a write call that cannot be read exactly");
        self.to_client.send(answer::unreadable_call(&lenient));
        true
    }

    /// Whether a leniently read message is a write call the proxy cannot key.
    async fn unkeyable_write(&self, message: &Lenient) -> bool {
        if message.method.as_deref() != Some("tools/call") || message.id.is_none() {
            return false;
        }
        self.listed().await;
        match &message.tool {
            Some((name, true)) => self.listing.tools.is_write(name),
            // A name that cannot be read exactly is no tool the proxy knows as a read.
            _ => true,
        }
    }

    /// Registers `call` for cancellation and starts it.
    fn start_call(self: &Arc<Self>, call: Call, sink: Sink, calls: &mut JoinSet<()>) {
        let (cancel_tx, cancel_rx) = watch::channel(false);
        {
            let mut routes = self.routes();
            if let Some(why) = routes.id_taken(&call.id_key) {
                drop(routes);
                tracing::warn!(
                    target: "toolonce::mcp",
                    id = ?call.id_key,
                    "the client {why}"
                );
                let text = Text::McpIdTaken.fill(&[("tool", &call.tool), ("why", &why)]);
                sink.answer(Some(answer::proxy_answer(
                    &call.id,
                    &text,
                    "not_executed",
                    None,
                )));
                return;
            }
            routes.calls.insert(call.id_key.clone(), cancel_tx);
        }
        let unsent = self.router.unsent_call();
        calls.spawn(call::run(
            self.context.clone(),
            call,
            cancel_rx,
            sink,
            unsent,
        ));
    }

    /// Handles a `notifications/cancelled` (parsed `message`, bytes `line`). Returns whether it
    /// concerned an intercepted call, in which case it is forwarded only if the call already
    /// reached the server.
    async fn cancel(&self, message: &Value, line: &[u8]) -> bool {
        let Some(id) = message.pointer("/params/requestId") else {
            return false;
        };
        self.router.cancel_call(&IdKey::of(id), line).await
    }

    /// Splits a batch that holds write calls (see [`batch`](super::batch)). Returns `false`
    /// if the batch passes through as it is.
    async fn split_batch(self: &Arc<Self>, line: &[u8], calls: &mut JoinSet<()>) -> bool {
        if batch::may_hold_call(line) {
            self.listed().await;
        }
        let Ok(members) = serde_json::from_slice::<Vec<Value>>(line) else {
            return self.refuse_unparsable_batch(line).await;
        };
        let plan = Plan::of(members, |m| {
            Call::of(&self.listing.tools, m.clone(), Vec::new()).is_some()
        });
        {
            let mut routes = self.routes();
            if plan.reuses_an_id() {
                drop(routes);
                return self.refuse_batch(&plan, &Text::McpBatchIdTwice.fill(&[]));
            }
            let taken = |id: &IdKey| {
                if plan.has_writes() {
                    routes.id_taken(id).is_some()
                } else {
                    routes.calls.contains_key(id) || routes.pending.contains_key(id)
                }
            };
            if plan.ids().iter().any(taken) {
                drop(routes);
                return self.refuse_batch(&plan, &Text::McpIdInProgress.fill(&[]));
            }
            if !plan.has_writes() {
                for (id, list) in plan.requests() {
                    if list {
                        routes.lists.insert(id.clone());
                    }
                    routes.passing.insert(id);
                }
                return false;
            }
        }
        let (batch, members) = plan.split(self.to_client.clone());
        for member in members {
            match member {
                Member::Write { message, slot } => {
                    let request = jsonrpc::line(&message);
                    let call = Call::of(&self.listing.tools, message, request)
                        .expect("classified as a write call above");
                    self.start_call(call, Sink::Batch(batch.clone(), slot), calls);
                }
                Member::Request {
                    message,
                    id,
                    slot,
                    list,
                } => {
                    {
                        let mut routes = self.routes();
                        if list {
                            routes.lists.insert(id.clone());
                        }
                        routes.pending.insert(id, Route::Batch(batch.clone(), slot));
                    }
                    self.forward(&jsonrpc::line(&message)).await;
                }
                Member::Notification(message) => {
                    let line = jsonrpc::line(&message);
                    let is_cancel = message.get("method").and_then(Value::as_str)
                        == Some("notifications/cancelled");
                    if !(is_cancel && self.cancel(&message, &line).await) {
                        self.forward(&line).await;
                    }
                }
            }
        }
        true
    }

    /// Answers every request of a batch refused whole; returns `true` (it was handled).
    fn refuse_batch(&self, plan: &Plan, why: &str) -> bool {
        if let Some(answer) = plan.refusal(why) {
            self.to_client.send(answer);
        }
        true
    }

    /// A batch serde_json cannot read: refused whole if a member is a write call it cannot key
    /// (every request in it is answered with an error, none is sent), else passed on.
    async fn refuse_unparsable_batch(&self, line: &[u8]) -> bool {
        let Some(members) = jsonrpc::array_members(line) else {
            return false;
        };
        let members: Vec<Lenient> = members
            .into_iter()
            .filter_map(|span| Lenient::of(&line[span]))
            .collect();
        let mut refused = false;
        for member in &members {
            refused |= self.unkeyable_write(member).await;
        }
        if !refused {
            let mut routes = self.routes();
            for id in members
                .iter()
                .filter(|m| m.method.is_some())
                .filter_map(|m| m.id.as_ref())
            {
                routes.passing.insert(IdKey::of(id));
            }
            return false;
        }
        let answer = batch::unreadable_refusal(&members, answer::unreadable_call);
        self.to_client.send(answer);
        true
    }

    /// Handles one message from the server; `related` is the request it belongs to, when the
    /// server said so (see [`http::Incoming::Related`]).
    pub(super) fn on_server_message(self: &Arc<Self>, line: Vec<u8>, related: Option<Value>) {
        let line = match line.trim_ascii_start().first() {
            Some(b'{') => match self.on_server_object(line) {
                Some(line) => line,
                None => return,
            },
            Some(b'[') => self.on_server_batch(line),
            _ => line,
        };
        self.to_client.send_related(line, related);
    }

    /// One message (not a batch) from the server: a change of its tools is listed again, and
    /// an answer goes to what waits for it. What is left to pass on to the client, if anything.
    fn on_server_object(self: &Arc<Self>, mut line: Vec<u8>) -> Option<Vec<u8>> {
        let peek = Peek::of(&line);
        if let Some(peek) = &peek
            && peek.method.as_deref() == Some("notifications/tools/list_changed")
            && peek.id.is_none()
        {
            if self.initialized.load(Ordering::Acquire) {
                self.list_tools(None);
            } else if let Some(meta) = self.listing.tools.modern_meta() {
                self.list_tools(Some(meta));
            }
        }
        let Some(peek) = peek.filter(Peek::is_response) else {
            return Some(line);
        };
        let Some(id) = &peek.id else {
            return Some(line);
        };
        let id = IdKey::of(id);
        let (listed, route, abandoned) = {
            let mut routes = self.routes();
            let route = routes.pending.remove(&id);
            // The late answer to a call given up frees its id: the next write
            // call may take it again.
            let abandoned = route.is_none() && routes.forget_abandoned(&id);
            if route.is_none() {
                routes.passing.remove(&id);
            }
            (routes.lists.remove(&id), route, abandoned)
        };
        if listed && let Ok(mut message) = serde_json::from_slice::<Value>(&line) {
            self.learn(&message);
            // The client's listing shows write tools the repeat argument.
            if repeat::add_to_listing(&self.listing.tools, &mut message) {
                line = jsonrpc::line(&message);
            }
        }
        self.route_answer(route, abandoned, &id, line)
    }

    /// An answer to where its request waits: a write call, a batch, the proxy's own listing.
    /// `Some` when nothing waits for it: it goes on to the client.
    fn route_answer(
        &self,
        route: Option<Route>,
        abandoned: bool,
        id: &IdKey,
        line: Vec<u8>,
    ) -> Option<Vec<u8>> {
        match route {
            Some(Route::Call(tx)) => {
                // The call is gone (the proxy is shutting down): pass it on.
                if let Err(line) = tx.send(line) {
                    self.to_client.send(line);
                }
                None
            }
            Some(Route::Batch(batch, slot)) => {
                batch.settle(slot, Some(line));
                None
            }
            Some(Route::List(tx)) => {
                let _ = tx.send(line);
                None
            }
            None if abandoned => {
                tracing::debug!(
                    target: "toolonce::mcp",
                    id = ?id,
                    "dropped a late answer to a call given up"
                );
                None
            }
            None => Some(line),
        }
    }

    /// A batch answer passes through; it may answer a batched tools/list.
    fn on_server_batch(&self, mut line: Vec<u8>) -> Vec<u8> {
        let watched = {
            let routes = self.routes();
            !routes.lists.is_empty() || !routes.passing.is_empty()
        };
        if watched && let Ok(mut members) = serde_json::from_slice::<Vec<Value>>(&line) {
            let mut changed = false;
            for member in &mut members {
                let Some(id) = member.get("id").map(IdKey::of) else {
                    continue;
                };
                let listed = {
                    let mut routes = self.routes();
                    routes.passing.remove(&id);
                    routes.lists.remove(&id)
                };
                if listed {
                    self.learn(member);
                    changed |= repeat::add_to_listing(&self.listing.tools, member);
                }
            }
            if changed {
                line = jsonrpc::line(&Value::Array(members));
            }
        }
        line
    }

    fn learn(&self, response: &Value) {
        if let Some(result) = response.get("result") {
            self.listing.tools.learn(result);
        }
    }
}

impl Shared {
    /// The routing state of one proxy whose server end is `server`.
    pub(super) fn new(
        settings: Settings,
        server: ServerHandle,
        to_client: ClientOut,
    ) -> anyhow::Result<Arc<Self>> {
        let router = Arc::new(Router::new(server));
        let listing = Listing::new(Tools::new(settings.config.clone()), router.clone())?;
        let listing = Arc::new(listing);
        let context = Arc::new(call::Context {
            scope: settings.scope,
            server_id: settings.server_id,
            config: settings.config.clone(),
            layer: Layer::new(settings.store),
            router: router.clone(),
            given_up: Default::default(),
        });
        Ok(Arc::new(Shared {
            context,
            router,
            listing,
            initialized: AtomicBool::new(false),
            to_client,
        }))
    }

    /// The routing tables and the server's end.
    pub(super) fn router(&self) -> &Router {
        &self.router
    }
}
