//! The proxy itself: starts the server, routes every message between the client and the server,
//! hands write calls to [`call`], and runs the lifecycle (the server's exit ends
//! the proxy; the client hanging up ends the server).

use std::collections::{HashMap, HashSet, VecDeque};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::task::JoinSet;
use toolonce::{Layer, Store};

use super::batch::Batch;
use super::call::{self, Call, Sink};
use super::config::Config;
use super::jsonrpc::{self, IdKey, Peek};
use super::stdio::ClientOut;
use super::tools::Tools;

/// How long the proxy waits, after the server exited, for the rest of the server's output and
/// for the calls it left unanswered to settle.
const DRAIN: Duration = Duration::from_secs(2);

/// How many given-up request ids are remembered so that a late answer is dropped rather than
/// sent to a client that already has one.
const ABANDONED_MEMORY: usize = 4096;

/// What the proxy needs besides the server command.
pub(crate) struct Settings {
    pub(crate) scope: String,
    pub(crate) config: Arc<Config>,
    pub(crate) store: Arc<dyn Store>,
}

/// The server's stdin. Whoever has a message writes it directly (no writer task in between:
/// one wake-up less per message); the async mutex keeps messages whole and in order, and a
/// full pipe holds the writer back, as it would hold back the client without the proxy.
#[derive(Debug)]
pub(super) struct ServerIn(tokio::sync::Mutex<Option<ChildStdin>>);

/// Exclusive use of the server's stdin, for writes that must keep an order with routing.
pub(super) struct ServerInGuard<'a>(tokio::sync::MutexGuard<'a, Option<ChildStdin>>);

impl ServerIn {
    pub(super) async fn lock(&self) -> ServerInGuard<'_> {
        ServerInGuard(self.0.lock().await)
    }

    /// Writes one message; `false` if the server's stdin is closed.
    pub(super) async fn send(&self, message: &[u8]) -> bool {
        self.lock().await.send(message).await
    }

    /// Closes the server's stdin.
    async fn close(&self) {
        self.0.lock().await.take();
    }
}

impl ServerInGuard<'_> {
    /// Writes one message; `false` if the server's stdin is closed. After a write error (the
    /// server closed its end) it is closed for good.
    pub(super) async fn send(&mut self, message: &[u8]) -> bool {
        let Some(stdin) = self.0.as_mut() else {
            return false;
        };
        // `write_all` is not cancel-safe (a dropped write may leave half a line), so no caller
        // drops this future: the routing loop awaits it, and calls are aborted only at exit.
        match stdin.write_all(message).await {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(target: "toolonce::mcp", error = %e, "cannot write to the server");
                *self.0 = None;
                false
            }
        }
    }
}

/// Where the answer to a request id the proxy consumes goes.
#[derive(Debug)]
pub(super) enum Route {
    /// A forwarded write call waiting for the server's answer.
    Call(oneshot::Sender<Vec<u8>>),
    /// A member of a split batch: its answer fills a slot of the batch.
    Batch(Arc<Batch>, usize),
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
}

impl Routes {
    /// Forgets the call `id` is waiting for and drops the server's answer if one comes later.
    pub(super) fn abandon(&mut self, id: &IdKey) {
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

/// Counts the write calls whose request has not gone to the server yet (being claimed, or
/// waiting for another run of the operation), so that a client that sends a call and hangs up
/// at once still has it delivered before the server's input is closed, as without the proxy.
#[derive(Debug, Default)]
pub(super) struct Unsent {
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
    shared: Arc<Shared>,
    settled: AtomicBool,
}

impl UnsentCall {
    fn new(shared: Arc<Shared>) -> Self {
        shared.unsent.count.fetch_add(1, Ordering::AcqRel);
        UnsentCall {
            shared,
            settled: AtomicBool::new(false),
        }
    }

    /// The request went out, or never will.
    pub(super) fn settle(&self) {
        if !self.settled.swap(true, Ordering::AcqRel)
            && self.shared.unsent.count.fetch_sub(1, Ordering::AcqRel) == 1
        {
            self.shared.unsent.drained.notify_waiters();
        }
    }
}

impl Drop for UnsentCall {
    fn drop(&mut self) {
        self.settle();
    }
}

/// State shared by the routing loop, the server reader and the calls.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) scope: String,
    pub(super) config: Arc<Config>,
    pub(super) tools: Tools,
    pub(super) layer: Layer,
    pub(super) server_in: ServerIn,
    unsent: Unsent,
    pub(super) to_client: ClientOut,
    /// A std mutex: every critical section is a few map operations and channel sends that
    /// never block, and none holds it across an `.await`.
    routes: Mutex<Routes>,
}

impl Shared {
    pub(super) fn routes(&self) -> MutexGuard<'_, Routes> {
        self.routes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Handles one message from the client.
    async fn on_client_message(self: &Arc<Self>, line: Vec<u8>, calls: &mut JoinSet<()>) {
        match line.trim_ascii_start().first() {
            Some(b'{') => {
                if let Some(peek) = Peek::of(&line) {
                    match (peek.method.as_deref(), &peek.id) {
                        (Some("tools/call"), Some(_)) => {
                            if let Some(call) = self.write_call_in(&line) {
                                self.start_call(call, Sink::Client(self.to_client.clone()), calls);
                                return;
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
                        _ => {}
                    }
                }
            }
            Some(b'[') if self.split_batch(&line, calls).await => return,
            // Malformed or not an object: the server answers it as it would without us.
            _ => {}
        }
        self.server_in.send(&line).await;
    }

    /// The write call in this `tools/call` line, or `None` if it calls a read tool or is not a
    /// well-formed call (which the server then rejects itself).
    fn write_call_in(&self, line: &[u8]) -> Option<Call> {
        let message: Value = serde_json::from_slice(line).ok()?;
        self.write_call(message, line.to_vec())
    }

    /// The write call in `message` (whose bytes are `request`), if it is one.
    fn write_call(&self, message: Value, request: Vec<u8>) -> Option<Call> {
        if message.get("method").and_then(Value::as_str) != Some("tools/call") {
            return None;
        }
        let id = message.get("id").filter(|id| !id.is_null())?.clone();
        let params = message.get("params")?;
        let tool = params.get("name")?.as_str()?;
        if !self.tools.is_write(tool) {
            return None;
        }
        // MCP makes `arguments` optional: no arguments and `{}` are the same operation.
        let arguments = match params.get("arguments") {
            None | Some(Value::Null) => Value::Object(serde_json::Map::new()),
            Some(args) => args.clone(),
        };
        Some(Call {
            id_key: IdKey::of(&id),
            id,
            tool: tool.to_owned(),
            arguments,
            request,
        })
    }

    /// Registers `call` for cancellation and starts it.
    fn start_call(self: &Arc<Self>, call: Call, sink: Sink, calls: &mut JoinSet<()>) {
        let (cancel_tx, cancel_rx) = watch::channel(false);
        {
            let mut routes = self.routes();
            if routes.calls.contains_key(&call.id_key) || routes.pending.contains_key(&call.id_key)
            {
                drop(routes);
                tracing::warn!(
                    target: "toolonce::mcp",
                    id = ?call.id_key,
                    "the client reused the id of a request in progress"
                );
                let text = format!(
                    "Not executed: this call of `{}` reuses the request id of a call still in \
                     progress, so its answer could not be told apart. Send it with a new id.",
                    call.tool
                );
                sink.answer(Some(jsonrpc::result_line(
                    &call.id,
                    &jsonrpc::tool_error(&text),
                )));
                return;
            }
            routes.calls.insert(call.id_key.clone(), cancel_tx);
        }
        let unsent = UnsentCall::new(self.clone());
        calls.spawn(call::run(self.clone(), call, cancel_rx, sink, unsent));
    }

    /// Handles a `notifications/cancelled` (parsed `message`, bytes `line`). Returns whether it
    /// concerned an intercepted call, in which case it is forwarded only if the call already
    /// reached the server.
    async fn cancel(&self, message: &Value, line: &[u8]) -> bool {
        let Some(id) = message.pointer("/params/requestId") else {
            return false;
        };
        let id = IdKey::of(id);
        match self.routes().calls.get(&id) {
            Some(switch) => switch.send_replace(true),
            None => return false,
        };
        // A call forwards its request holding the server's stdin, and checks the switch after
        // taking it. So with stdin held here, either the request is out (its route is in place)
        // and the cancel follows it, or the request never goes out: a cancel never overtakes
        // its request, and never reaches the server for a request the server did not get.
        let mut stdin = self.server_in.lock().await;
        if self.routes().pending.contains_key(&id) {
            stdin.send(line).await;
        }
        true
    }

    /// Splits a batch that holds write calls (see [`batch`](super::batch)). Returns `false`
    /// if the batch passes through as it is.
    async fn split_batch(self: &Arc<Self>, line: &[u8], calls: &mut JoinSet<()>) -> bool {
        let Ok(members) = serde_json::from_slice::<Vec<Value>>(line) else {
            return false;
        };
        let request_id = |m: &Value| {
            m.get("method")
                .and(m.get("id"))
                .filter(|id| !id.is_null())
                .map(IdKey::of)
        };
        let is_list = |m: &Value| m.get("method").and_then(Value::as_str) == Some("tools/list");
        let writes: Vec<bool> = members
            .iter()
            .map(|m| self.write_call(m.clone(), Vec::new()).is_some())
            .collect();
        if !writes.contains(&true) {
            let mut routes = self.routes();
            for member in members.iter().filter(|m| is_list(m)) {
                if let Some(id) = request_id(member) {
                    routes.lists.insert(id);
                }
            }
            return false;
        }
        let ids: Vec<IdKey> = members.iter().filter_map(request_id).collect();
        {
            let routes = self.routes();
            let unique: HashSet<&IdKey> = ids.iter().collect();
            if unique.len() != ids.len()
                || ids
                    .iter()
                    .any(|id| routes.pending.contains_key(id) || routes.calls.contains_key(id))
            {
                tracing::warn!(
                    target: "toolonce::mcp",
                    "a batch with write calls reuses request ids; passed through without deduplication"
                );
                return false;
            }
        }
        let batch = Arc::new(Batch::new(ids.len(), self.to_client.clone()));
        let mut slot = 0;
        for (member, is_write) in members.into_iter().zip(writes) {
            let id = request_id(&member);
            if is_write {
                let request = jsonrpc::line(&member);
                let call = self
                    .write_call(member, request)
                    .expect("classified as a write call above");
                self.start_call(call, Sink::Batch(batch.clone(), slot), calls);
                slot += 1;
            } else if let Some(id) = id {
                {
                    let mut routes = self.routes();
                    if is_list(&member) {
                        routes.lists.insert(id.clone());
                    }
                    routes.pending.insert(id, Route::Batch(batch.clone(), slot));
                }
                self.server_in.send(&jsonrpc::line(&member)).await;
                slot += 1;
            } else {
                let line = jsonrpc::line(&member);
                let is_cancel =
                    member.get("method").and_then(Value::as_str) == Some("notifications/cancelled");
                if !(is_cancel && self.cancel(&member, &line).await) {
                    self.server_in.send(&line).await;
                }
            }
        }
        true
    }

    /// Handles one message from the server.
    fn on_server_message(&self, line: Vec<u8>) {
        match line.trim_ascii_start().first() {
            Some(b'{') => {
                if let Some(peek) = Peek::of(&line)
                    && peek.is_response()
                    && let Some(id) = &peek.id
                {
                    let id = IdKey::of(id);
                    let (listed, route, abandoned) = {
                        let mut routes = self.routes();
                        let route = routes.pending.remove(&id);
                        (
                            routes.lists.remove(&id),
                            route,
                            routes.abandoned.contains(&id),
                        )
                    };
                    if listed && let Ok(message) = serde_json::from_slice::<Value>(&line) {
                        self.learn(&message);
                    }
                    match route {
                        Some(Route::Call(tx)) => match tx.send(line) {
                            Ok(()) => return,
                            // The call is gone (the proxy is shutting down): pass it on.
                            Err(line) => {
                                self.to_client.send(line);
                                return;
                            }
                        },
                        Some(Route::Batch(batch, slot)) => {
                            batch.settle(slot, Some(line));
                            return;
                        }
                        None if abandoned => {
                            tracing::debug!(
                                target: "toolonce::mcp",
                                id = ?id,
                                "dropped a late answer to a call given up"
                            );
                            return;
                        }
                        None => {}
                    }
                }
            }
            Some(b'[') => {
                // A batch answer passes through; it may answer a batched tools/list.
                if !self.routes().lists.is_empty()
                    && let Ok(members) = serde_json::from_slice::<Vec<Value>>(&line)
                {
                    for member in members {
                        let listed = member
                            .get("id")
                            .is_some_and(|id| self.routes().lists.remove(&IdKey::of(id)));
                        if listed {
                            self.learn(&member);
                        }
                    }
                }
            }
            _ => {}
        }
        self.to_client.send(line);
    }

    fn learn(&self, response: &Value) {
        if let Some(result) = response.get("result") {
            self.tools.learn(result);
        }
    }
}

/// Runs the proxy until the server exits; returns the server's exit status.
///
/// `client_in` yields the client's messages (closing when the client hangs up) and
/// `client_out` takes the messages for the client; the caller owns the client's pipes, so
/// tests and benches can drive the proxy without a process of its own.
pub(crate) async fn run(
    settings: Settings,
    mut command: Command,
    mut client_in: mpsc::UnboundedReceiver<Vec<u8>>,
    client_out: ClientOut,
    shutdown_timeout: Duration,
) -> anyhow::Result<ExitStatus> {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    let program = command
        .as_std()
        .get_program()
        .to_string_lossy()
        .into_owned();
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot start the MCP server `{program}`"))?;
    let stdin = child
        .stdin
        .take()
        .context("the server's stdin is not piped")?;
    let stdout = child
        .stdout
        .take()
        .context("the server's stdout is not piped")?;
    let shared = Arc::new(Shared {
        scope: settings.scope,
        tools: Tools::new(settings.config.clone()),
        config: settings.config,
        layer: Layer::new(settings.store),
        server_in: ServerIn(tokio::sync::Mutex::new(Some(stdin))),
        unsent: Unsent::default(),
        to_client: client_out.clone(),
        routes: Mutex::new(Routes::default()),
    });
    let mut reader = tokio::spawn(read_server(shared.clone(), stdout));
    let mut calls = JoinSet::new();
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();

    enum End {
        ServerExited(ExitStatus),
        ClientHungUp,
    }
    let end = loop {
        tokio::select! {
            status = child.wait() => break End::ServerExited(status?),
            line = client_in.recv() => match line {
                Some(line) => shared.on_client_message(line, &mut calls).await,
                None => break End::ClientHungUp,
            },
            Some(_) = calls.join_next(), if !calls.is_empty() => {}
            Some(()) = async { terminate.as_mut()?.recv().await }, if terminate.is_some() => {
                // Pass the request to stop on; the server's exit then ends the proxy.
                tracing::info!(target: "toolonce::mcp", "SIGTERM: stopping the server");
                signal(&child, "TERM").await;
            }
        }
    };
    let status = match end {
        End::ServerExited(status) => status,
        End::ClientHungUp => hang_up(&shared, &mut child, shutdown_timeout).await?,
    };
    tracing::debug!(target: "toolonce::mcp", %status, "the server exited");

    // Read what the server wrote before it exited (a grandchild holding its stdout must not
    // keep us here), then settle the calls it never answered: dropping their routes tells them.
    if tokio::time::timeout(DRAIN, &mut reader).await.is_err() {
        reader.abort();
    }
    let unanswered: Vec<Route> = shared.routes().pending.drain().map(|(_, r)| r).collect();
    drop(unanswered);
    let settled = tokio::time::timeout(DRAIN, async { while calls.join_next().await.is_some() {} });
    if settled.await.is_err() {
        calls.abort_all();
    }
    client_out.close();
    Ok(status)
}

/// The client closed its input: close the server's, as the client would have done without the
/// proxy, and give the server time to exit before asking harder.
async fn hang_up(
    shared: &Shared,
    child: &mut Child,
    timeout: Duration,
) -> anyhow::Result<ExitStatus> {
    // Write calls the client sent before hanging up still reach the server first (one waiting
    // for another run of its operation, at most for the shutdown timeout).
    tokio::select! {
        drained = tokio::time::timeout(timeout, shared.unsent.drained()) => {
            if drained.is_err() {
                tracing::warn!(
                    target: "toolonce::mcp",
                    "closing the server's input with write calls not sent yet"
                );
            }
        }
        status = child.wait() => return Ok(status?),
    }
    shared.server_in.close().await;
    if let Ok(status) = tokio::time::timeout(timeout, child.wait()).await {
        return Ok(status?);
    }
    tracing::warn!(
        target: "toolonce::mcp",
        ?timeout,
        "the server did not exit after its input closed; sending SIGTERM"
    );
    signal(child, "TERM").await;
    if let Ok(status) = tokio::time::timeout(timeout, child.wait()).await {
        return Ok(status?);
    }
    tracing::warn!(target: "toolonce::mcp", "the server ignored SIGTERM; killing it");
    child.kill().await?;
    Ok(child.wait().await?)
}

/// Sends a signal by name to the child through `kill(1)`: the standard library only offers
/// SIGKILL, and unsafe code (for `libc::kill`) is forbidden in this workspace.
async fn signal(child: &Child, name: &str) {
    let Some(pid) = child.id() else { return };
    let sent = Command::new("kill")
        .args(["-s", name, &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
    if let Err(e) = sent {
        tracing::warn!(target: "toolonce::mcp", error = %e, "cannot run kill(1)");
    }
}

/// Reads the server's messages and routes each, until its stdout closes.
async fn read_server(shared: Arc<Shared>, stdout: ChildStdout) {
    let mut input = BufReader::with_capacity(64 * 1024, stdout);
    loop {
        let mut line = Vec::new();
        match input.read_until(b'\n', &mut line).await {
            Ok(0) => break,
            Ok(_) => {
                if line.last() != Some(&b'\n') {
                    line.push(b'\n');
                }
                shared.on_server_message(line);
            }
            Err(e) => {
                tracing::warn!(target: "toolonce::mcp", error = %e, "cannot read from the server");
                break;
            }
        }
    }
}
