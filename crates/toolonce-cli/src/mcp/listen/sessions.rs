//! The gateway's sessions: opening one (its own proxy and server process, or session on the
//! HTTP server) within `--max-sessions` and its principal's `--max-sessions-per-principal`,
//! the pool of proxies for requests without a session (protocol 2026-07-28), of which a
//! principal holds at most as many (and a quarter of the pool), and ending the sessions idle
//! for `--session-idle` (`--handshake-idle` for one that did nothing after its handshake).

use std::collections::HashMap;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use toolonce::texts::Text;

use hyper::header::HeaderValue;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::mcp::auth::Principal;
use crate::mcp::http::Upstream;
use crate::mcp::jsonrpc;
use crate::mcp::lifecycle;
use crate::mcp::protocol::INTERNAL_ERROR;
use crate::mcp::proxy;
use crate::mcp::server;
use crate::mcp::stdio::ClientOut;
use serde_json::Value;

use super::routes::{Routes, Session, Waiter, event, lock};

/// What the gateway needs to start a proxy for each session.
pub(crate) struct Gateway {
    pub(crate) addr: SocketAddr,
    /// How clients are authenticated, and whether their `Authorization` goes on.
    pub(crate) auth: crate::mcp::auth::Auth,
    pub(crate) backend: Backend,
    pub(crate) scope: String,
    pub(crate) server_id: String,
    pub(crate) config: Arc<crate::mcp::config::Config>,
    pub(crate) store: Arc<crate::mcp::store::LazyStore>,
    /// A session with nothing in progress and no request for this long is ended.
    pub(crate) session_idle: Duration,
    /// A session that did nothing after its handshake is ended after this long.
    pub(crate) handshake_idle: Duration,
    /// How many sessions may be open at once.
    pub(crate) max_sessions: usize,
    /// How many of them one principal may have open (and how many proxies for requests
    /// without a session it may hold); `None` when every client is one principal (no
    /// credentials are checked or passed on, or one shared token), and never for the
    /// anonymous principal.
    pub(crate) max_sessions_per_principal: Option<usize>,
    /// What bounds the HTTP server (timeouts, body size, connections).
    pub(crate) bounds: super::limits::Bounds,
    /// The operator console under /console (`--console`), with its token.
    pub(crate) console: Option<ConsoleToken>,
}

/// The token of the console the gateway serves: the gateway's own (`--require-token`), or a
/// random one printed at start.
pub(crate) enum ConsoleToken {
    Given(String),
    Printed(String),
}

/// The server behind the gateway.
pub(crate) enum Backend {
    /// A command started for each session.
    Command {
        program: OsString,
        args: Vec<OsString>,
    },
    /// A Streamable HTTP server: each client session of the gateway has its own session there.
    Http {
        url: String,
        headers: Vec<String>,
        /// Whether the client's `Authorization` goes on to the server (only when asked, with
        /// `--forward-authorization`: by default it is the gateway's, and stays there).
        forward_authorization: bool,
    },
}

pub(super) struct State {
    pub(super) gateway: Gateway,
    /// The operator console, when `--console` serves it.
    pub(super) console: Option<Arc<crate::console::Console>>,
    pub(super) sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// Proxies for requests without a session (protocol 2026-07-28 has none), each shared by
    /// many clients (see [`shared`](super::shared)). A request goes to the first with fewer
    /// than [`SHARED_LOAD`] requests in progress; another is started when all have as many.
    pub(super) sessionless: Mutex<Vec<Arc<Session>>>,
    pub(super) proxies: Mutex<JoinSet<()>>,
    /// How many sessions' servers are running: a session counts from its `initialize` until
    /// its server has exited (not just until `DELETE` forgot its id), so `--max-sessions`
    /// bounds the processes (or upstream sessions) alive at once.
    pub(super) live_sessions: Arc<AtomicUsize>,
    /// The same per principal, for `--max-sessions-per-principal` (absent at zero).
    pub(super) live_by_principal: Arc<Mutex<HashMap<Principal, usize>>>,
}

impl State {
    pub(super) fn sessions(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        lock(&self.sessions)
    }

    /// The session `id` if it belongs to `principal`, touched (under the sessions' lock: an
    /// idle session is either ended before this request or not ended for it). Another
    /// principal's session is not there for this one, as the MCP security guidance asks: a
    /// session id that leaked is no way into someone else's session.
    pub(super) fn session_of(&self, id: &str, principal: &Principal) -> Option<Arc<Session>> {
        self.sessions()
            .get(id)
            .filter(|s| s.principal == *principal)
            .inspect(|s| s.touch())
            .cloned()
    }

    /// How many sessions `principal` may have open, if it has a quota.
    fn quota_of(&self, principal: &Principal) -> Option<usize> {
        self.gateway
            .max_sessions_per_principal
            .filter(|_| !principal.is_anonymous())
    }

    /// Ends the session `id` if it belongs to `principal`; whether it did.
    pub(super) fn end_session_of(&self, id: &str, principal: &Principal) -> bool {
        let mut sessions = self.sessions();
        if sessions.get(id).is_some_and(|s| s.principal == *principal) {
            sessions.remove(id);
            return true;
        }
        false
    }
}

/// Ends the sessions idle for `--session-idle`, as `DELETE` would: dropping a session's input
/// is the client hanging up, so its proxy stops the server (or ends the HTTP server's session).
/// Checked a few times per idle period, so a session lasts at most a quarter longer.
pub(super) async fn end_idle_sessions(state: std::sync::Weak<State>) {
    let Some((idle, handshake)) = state
        .upgrade()
        .map(|s| (s.gateway.session_idle, s.gateway.handshake_idle))
    else {
        return;
    };
    let period =
        (idle.min(handshake) / 4).clamp(Duration::from_millis(10), Duration::from_secs(30));
    loop {
        tokio::time::sleep(period).await;
        let Some(state) = state.upgrade() else {
            return;
        };
        let mut ended = Vec::new();
        state.sessions().retain(|id, session| {
            let idle = session.idle_for(idle, handshake);
            if idle {
                ended.push((id.clone(), session.engaged.load(Ordering::Relaxed)));
            }
            !idle
        });
        for (id, engaged) in ended {
            let why = if engaged {
                "ended a session idle for --session-idle"
            } else {
                "ended a session that sent no request after its handshake for --handshake-idle"
            };
            tracing::info!(target: "toolonce::mcp", session = %id, "{why}");
        }
    }
}

/// How many sessionless proxies may run at once; beyond, an idle one is ended for a new one.
const SESSIONLESS_LIMIT: usize = 64;

/// How many requests a sessionless proxy takes at once before another is started (its server
/// may handle one request at a time).
const SHARED_LOAD: usize = 16;

/// A principal may hold at most this share of [`SESSIONLESS_LIMIT`] (and no more than its
/// `--max-sessions-per-principal`), so that others find room.
const SESSIONLESS_PER_PRINCIPAL: usize = SESSIONLESS_LIMIT / 4;

/// Every sessionless proxy is busy and there may be no more.
#[derive(Debug)]
pub(super) struct Busy;

impl std::fmt::Display for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("every proxy for requests without a session is busy")
    }
}

impl std::error::Error for Busy {}

/// The proxy for a message without a session: for a request, the first proxy of `principal` (for the same
/// `Authorization`, when that goes on to the server) with fewer than [`SHARED_LOAD`] requests
/// in progress, or a new one; a notification goes to the first one (`None` when there is none:
/// nothing is in progress that it could be about).
pub(super) fn sessionless_proxy(
    state: &Arc<State>,
    principal: &Principal,
    id: Option<&Value>,
    authorization: &Option<HeaderValue>,
) -> anyhow::Result<Option<Arc<Session>>> {
    let forwards = matches!(
        state.gateway.backend,
        Backend::Http {
            forward_authorization: true,
            ..
        }
    );
    let bound = if forwards {
        authorization.clone()
    } else {
        None
    };
    let mut proxies = lock(&state.sessionless);
    proxies.retain(|p| !p.routes().ended);
    let found = proxies
        .iter()
        .filter(|p| p.bound == bound && p.principal == *principal)
        .find(|p| id.is_none() || p.routes().waiting.len() < SHARED_LOAD)
        .cloned();
    match (found, id) {
        (Some(session), _) => Ok(Some(session)),
        (None, None) => Ok(None),
        (None, Some(_)) => {
            if let Some(cap) = state.quota_of(principal) {
                let cap = cap.min(SESSIONLESS_PER_PRINCIPAL);
                if proxies.iter().filter(|p| p.principal == *principal).count() >= cap {
                    return Err(OverQuota::Sessionless(cap).into());
                }
            }
            if proxies.len() >= SESSIONLESS_LIMIT {
                // Dropping an idle proxy's input is a client hanging up: it ends.
                let idle = proxies
                    .iter()
                    .position(|p| p.routes().waiting.is_empty())
                    .ok_or(Busy)?;
                proxies.remove(idle);
            }
            let session = start_session(state, principal, None, bound)?;
            proxies.push(session.clone());
            Ok(Some(session))
        }
    }
}

/// As many sessions are open as `--max-sessions` allows.
#[derive(Debug)]
pub(super) struct AtLimit(usize);

impl std::fmt::Display for AtLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the gateway has {} sessions open, its limit (--max-sessions): end one with DELETE \
             or try again later",
            self.0
        )
    }
}

impl std::error::Error for AtLimit {}

/// One principal has as many sessions open (or proxies for requests without a session busy)
/// as `--max-sessions-per-principal` allows it.
#[derive(Debug)]
pub(super) enum OverQuota {
    Sessions(usize),
    Sessionless(usize),
}

impl std::fmt::Display for OverQuota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OverQuota::Sessions(n) => write!(
                f,
                "you have {n} sessions open, the limit per principal \
                 (--max-sessions-per-principal): end one with DELETE or try again later"
            ),
            OverQuota::Sessionless(n) => write!(
                f,
                "too many of your requests without a session are in progress: a principal \
                 gets at most {n} shared proxies of {SHARED_LOAD} requests each \
                 (--max-sessions-per-principal); try again later"
            ),
        }
    }
}

impl std::error::Error for OverQuota {}

/// Opens a session: a new id, and its proxy; [`AtLimit`] at `--max-sessions`, [`OverQuota`] at
/// the principal's quota, before any server is started.
pub(super) fn open_session(
    state: &Arc<State>,
    principal: &Principal,
) -> anyhow::Result<(String, Arc<Session>)> {
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    let id: String = random.iter().map(|b| format!("{b:02x}")).collect();
    // Counted and inserted under one lock, so concurrent `initialize`s never pass the limit.
    // (Starting a session only prepares its server: the process starts in its proxy's task.)
    // A session ended (DELETE, idle) still counts until its server has exited.
    let mut sessions = state.sessions();
    let max = state.gateway.max_sessions;
    if state.live_sessions.load(Ordering::Acquire) >= max {
        return Err(AtLimit(max).into());
    }
    if let Some(quota) = state.quota_of(principal) {
        let open = lock(&state.live_by_principal)
            .get(principal)
            .copied()
            .unwrap_or(0);
        if open >= quota {
            return Err(OverQuota::Sessions(quota).into());
        }
    }
    let live = Live::count(state, principal);
    let session = start_session(state, principal, Some((id.clone(), live)), None)?;
    sessions.insert(id.clone(), session.clone());
    Ok((id, session))
}

/// A session's place in [`State::live_sessions`] and its principal's in
/// [`State::live_by_principal`], given up once its proxy (and so its server) has ended.
pub(super) struct Live {
    all: Arc<AtomicUsize>,
    by_principal: Arc<Mutex<HashMap<Principal, usize>>>,
    principal: Principal,
}

impl Live {
    fn count(state: &State, principal: &Principal) -> Live {
        state.live_sessions.fetch_add(1, Ordering::AcqRel);
        *lock(&state.live_by_principal)
            .entry(principal.clone())
            .or_default() += 1;
        Live {
            all: state.live_sessions.clone(),
            by_principal: state.live_by_principal.clone(),
            principal: principal.clone(),
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.all.fetch_sub(1, Ordering::AcqRel);
        let mut by_principal = lock(&self.by_principal);
        if let Some(open) = by_principal.get_mut(&self.principal) {
            *open -= 1;
            if *open == 0 {
                by_principal.remove(&self.principal);
            }
        }
    }
}

/// Starts a proxy, and the server command or a session with the HTTP server, for the session
/// `id` of `principal` with its place among the live ones (`None`: for requests without a
/// session, with the `Authorization` it is `bound` to). Its operations are in the principal's
/// scope.
pub(super) fn start_session(
    state: &Arc<State>,
    principal: &Principal,
    id: Option<(String, Live)>,
    bound: Option<HeaderValue>,
) -> anyhow::Result<Arc<Session>> {
    let gateway = &state.gateway;
    let (server, forward_to) = server_of(&gateway.backend)?;
    let (to_proxy, client_in) = mpsc::unbounded_channel();
    let (client_out, mut out_rx) = ClientOut::channel();
    // A proxy for requests without a session is shared by many clients.
    let routes = Arc::new(Mutex::new(Routes {
        shared: id.is_none(),
        ..Routes::default()
    }));
    let settings = proxy::Settings {
        scope: principal.scope(&gateway.scope),
        server_id: gateway.server_id.clone(),
        config: gateway.config.clone(),
        store: gateway.store.clone(),
    };
    let shutdown_timeout = gateway.config.proxy.shutdown_timeout;
    let delivered = routes.clone();
    let state_for_end = Arc::downgrade(state);
    let (session_id, live) = id.unzip();
    lock(&state.proxies).spawn(async move {
        // Given up when the task ends: the server has exited by then (or was killed).
        let _live = live;
        let routing = delivered.clone();
        let deliver = tokio::spawn(async move {
            while let Some(out) = out_rx.recv().await {
                if out.line.is_empty() {
                    break;
                }
                lock(&routing).deliver(out.line, out.related);
            }
        });
        let status = lifecycle::run(
            settings,
            server,
            client_in,
            client_out.clone(),
            shutdown_timeout,
        )
        .await;
        client_out.close();
        let _ = deliver.await;
        end_routes(&delivered);
        log_end(&status);
        if let Some(state) = state_for_end.upgrade()
            && let Some(id) = &session_id
        {
            state.sessions().remove(id);
        }
    });
    Ok(Arc::new(Session {
        to_proxy,
        routes,
        forward_to,
        bound,
        principal: principal.clone(),
        touched: Mutex::new(Instant::now()),
        engaged: std::sync::atomic::AtomicBool::new(false),
    }))
}

/// The server a session's proxy starts: the command, or a session with the HTTP server (and
/// that server, when the client's `Authorization` goes on to it).
fn server_of(backend: &Backend) -> anyhow::Result<(server::Server, Option<Arc<Upstream>>)> {
    Ok(match backend {
        Backend::Command { program, args } => {
            let mut command = tokio::process::Command::new(program);
            command.args(args);
            (server::Server::Command(command), None)
        }
        Backend::Http {
            url,
            headers,
            forward_authorization,
        } => {
            let (upstream, incoming) = Upstream::new(url, headers)?;
            let forward_to = forward_authorization.then(|| upstream.clone());
            (server::Server::Http(upstream, incoming), forward_to)
        }
    })
}

/// The session's proxy has ended: nothing more will come.
fn end_routes(routes: &Mutex<Routes>) {
    // Requests the server never answered learn it: a JSON one from its sender being
    // dropped (502), one on an event stream from an error answer. The GET stream ends.
    let mut routes = lock(routes);
    routes.ended = true;
    for (_, waiter) in routes.waiting.drain() {
        if let Waiter::Events { tx, id, .. } = waiter {
            let _ = tx.send(event(&jsonrpc::error_line(
                Some(&id),
                INTERNAL_ERROR,
                &Text::McpServerExited.fill(&[]),
            )));
        }
    }
    routes.progress.clear();
    routes.stream = None;
    routes.queued.clear();
}

fn log_end(status: &anyhow::Result<std::process::ExitStatus>) {
    match status {
        Ok(status) => {
            tracing::info!(target: "toolonce::mcp", %status, "a session's server exited");
        }
        Err(e) => {
            tracing::warn!(target: "toolonce::mcp", error = %e, "a session's proxy failed");
        }
    }
}
