//! `toolonce mcp`: a transparent MCP stdio proxy that makes an MCP server's write tools
//! idempotent.
//!
//! The agent's MCP client starts `toolonce mcp -- <server command>` instead of the server; the
//! proxy starts the server as its child and relays newline-delimited JSON-RPC between them.
//! With `--upstream URL` instead of a command, the server is a remote Streamable HTTP server
//! (see [`http`]): the client still speaks stdio to the proxy, and every rule below holds.
//!
//! # Design
//!
//! - **Messages, not a protocol library.** The proxy reads lines and looks only at `method` and
//!   `id`; every line it does not intercept is forwarded as the original bytes, so unknown
//!   fields, member order, number spelling, protocol version and capabilities are exactly what
//!   the two ends sent. (An SDK-based proxy re-encodes every message and was not transparent.)
//! - **Only write calls are touched.** A `tools/call` of a tool the server's `tools/list`
//!   marked `readOnlyHint: true` or `idempotentHint: true` passes through; any other tool,
//!   including one not listed, is a write (the configuration can say otherwise per tool). The
//!   proxy lists the server's tools itself once the client has initialized the session (with
//!   protocol 2026-07-28, which has none: before the first tool call of each protocol version)
//!   and whenever the server says they changed, so classification never depends on the client.
//!   The write call is keyed on (scope, server id + tool, canonical arguments) and claimed in
//!   the store (through the [`Layer`](toolonce::Layer)); only the winner is forwarded,
//!   with the key added as `params._meta["toolonce/key"]` (spliced into the client's bytes) and
//!   the client's own request id, so ids never clash. The server's answer is recorded and sent
//!   on as it came; duplicates are answered from the store under their own id, with
//!   `_meta["toolonce/outcome"]` saying so.
//! - **A write it cannot key is never forwarded.** A `tools/call` that serde_json refuses but
//!   a JavaScript or Python server would accept (invalid UTF-8, lone surrogate escapes,
//!   numbers beyond f64, nesting deeper than 127) is read leniently just far enough to find its
//!   method, id and tool: a write is answered with a JSON-RPC error and not sent on (alone or
//!   in a batch); a pass-through tool goes on as it came.
//! - **Every write answer is a tool result.** In flight, conflict, store outage (fail closed:
//!   not forwarded), timeout: each is a `CallToolResult` with `isError: true` that tells the
//!   model what happened and whether to retry; reads never touch the store.
//! - **Nothing blocks forever.** A forwarded call waits at most `call_timeout`; a cancelled
//!   one at most `cancel_grace` and one lease (an answer in that time is recorded). Then the proxy stops renewing the claim, which expires with
//!   its lease: the outcome is unknown, so it is neither recorded nor released, and the entry
//!   becomes `unknown`. An identical call then is held (`on_expired = "hold"`, the default:
//!   answered `unknown` until a person runs `toolonce resolve`) or forwarded again with the
//!   same key (`"rerun"`).
//! - **Batches** (JSON arrays, protocol 2025-03-26 only) pass through untouched unless they
//!   hold a write call; then they are split so the write calls go through the layer too, and
//!   answered as one array (see [`batch`]).
//! - **One thread.** The proxy runs on a single-threaded runtime with non-blocking stdio: a
//!   relay gains nothing from more threads and pays for every wake-up that crosses them.
//!
//! # Layout
//!
//! - [`config`]: the TOML configuration and per-tool policies.
//! - [`embed`]: the stdio proxy run in-process on any pair of byte streams (for tests).
//! - [`protocol`]: every header name, `_meta` member and JSON-RPC code, defined once.
//! - [`jsonrpc`]: looking at messages without decoding them, the `_meta` splice, answers.
//! - [`tools`]: read/write classification from `tools/list`, and the proxy's own listing.
//! - [`proxy`]: routing between the client and the server.
//! - [`lifecycle`]: one proxy's life: start, the end of either side, shutdown in order.
//! - [`route`]: the routing tables, and sending a request whose answer comes back.
//! - [`server`]: the server's end, a child process or an HTTP server, behind one handle.
//! - [`call`]: one intercepted write call through the layer.
//! - [`repeat`]: the repeat argument, shown in the listing of write tools and taken out of
//!   their calls; [`note`]: what a replay tells the model.
//! - [`answer`]: what the server's answer means for the store, and the answers the proxy
//!   writes itself (replays, explanations): MCP semantics without I/O.
//! - [`batch`]: batches (protocol 2025-03-26) that hold write calls: how they are split
//!   (the proxy acts on the plan), and their answers collected into one array.
//! - [`store`]: a store opened lazily, so an outage at start-up fails writes, not the proxy
//!   (a store that can never work fails the proxy at start).
//! - [`stdio`]: the client's side: the proxy's stdin and stdout.
//! - [`http`]: the server's side when it is a Streamable HTTP server: its client (connections,
//!   session, requests), one exchange per POST, server-sent events, the target URL.
//! - [`listen`]: `--listen`, the client's side as a Streamable HTTP server (a gateway): one
//!   proxy and server process (or HTTP server session) per client session, all sharing the
//!   store and the scope. Its sessions, their routing, request bodies and the HTTP checks each
//!   have a file under `listen/`.
//! - [`auth`]: who may use the gateway and as whom: a shared token or OAuth bearer JWTs, the
//!   principal that scopes every operation of a client's calls, RFC 9728 metadata.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

mod answer;
mod auth;
mod batch;
mod call;
mod config;
pub(crate) mod embed;
mod given_up;
mod http;
mod jsonrpc;
mod lifecycle;
mod listen;
mod note;
mod protocol;
mod proxy;
mod repeat;
mod route;
mod server;
mod stdio;
mod store;
mod tools;

/// Arguments of `toolonce mcp`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples, as the command of an mcpServers entry:\n  \
                  toolonce mcp --store sqlite:///var/lib/agent/toolonce.db --scope my-agent -- \
                  npx -y @modelcontextprotocol/server-memory\n  \
                  toolonce mcp --store sqlite:///var/lib/agent/toolonce.db --scope my-agent \
                  --upstream https://mcp.example.com/mcp --header 'Authorization: Bearer TOKEN'\n\
                  As a shared Streamable HTTP gateway:\n  \
                  toolonce mcp --store redis://redis.internal --scope team --listen 127.0.0.1:8931 \
                  --upstream https://mcp.example.com/mcp")]
pub(crate) struct McpArgs {
    /// The store: memory://, sqlite://PATH, redis://HOST, postgres://HOST.
    #[arg(long, value_name = "URL", env = "TOOLONCE_STORE", default_value = crate::DEFAULT_STORE)]
    store: String,
    /// The scope of the operation keys (a run, session or agent id). Without one, each proxy
    /// process picks a random scope, so duplicates are caught only within that process:
    /// deduplicating across restarts or resumed agents needs a scope and a durable store.
    #[arg(long, value_name = "ID", env = "TOOLONCE_SCOPE")]
    scope: Option<String>,
    /// The name of the MCP server in operation keys, so that same-named tools of different
    /// servers sharing a store and scope never share keys. Keep it when the server's command
    /// line changes (a new version); default: derived from the server's command line.
    #[arg(long, value_name = "NAME", env = "TOOLONCE_SERVER_ID")]
    server_id: Option<String>,
    /// A remote MCP server speaking Streamable HTTP, instead of a server command: the proxy
    /// POSTs the client's messages to this URL (TLS with the system's trusted roots).
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    upstream: Option<String>,
    /// A header sent with every request to the --upstream server, as `Name: value` (such as
    /// `Authorization: Bearer TOKEN`); repeatable. Values are never logged. With --listen, it
    /// replaces a client's header of the same name.
    #[arg(long, value_name = "NAME: VALUE")]
    header: Vec<String>,
    /// Serve Streamable HTTP at `/mcp` on this address instead of stdio, as `PORT` (on
    /// 127.0.0.1) or `IP:PORT`, in front of the server command or the --upstream server: each
    /// client session gets its own server process (or session on the --upstream server) and
    /// every session shares the store and the scope. Answers are event streams for clients
    /// that accept them. Only loopback unless another address is given.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// With --listen: the name of an environment variable holding the bearer token clients
    /// must send (`Authorization: Bearer TOKEN`); others get 401. Its holders are one
    /// principal. The token is never logged, nor sent to an --upstream server (give the
    /// server's credentials with --header).
    #[arg(long, value_name = "VAR", requires = "listen")]
    require_token: Option<String>,
    /// With --listen: accept OAuth 2.1 bearer JWTs signed with a key of this JWK Set (a file,
    /// or an http:// or https:// URL), of --oauth-issuer, for --oauth-resource; others get
    /// 401 pointing at the protected resource metadata the gateway serves (RFC 9728). Each
    /// subject (and client) is a principal of its own. The set is loaded at start, again
    /// before its Cache-Control max-age runs out (10 minutes without one; from 30 s to 24 h),
    /// and for an unknown key id (at most every 30 s); a removed key is refused from then on.
    /// While loads fail, the last set is used for a grace (the max-age again, 5 min to 1 h),
    /// then requests get 503.
    #[arg(
        long,
        value_name = "FILE|URL",
        requires_all = ["listen", "oauth_issuer", "oauth_resource"],
        conflicts_with = "require_token"
    )]
    oauth_jwks: Option<String>,
    /// For tests only: the least max-age of the --oauth-jwks key set and the least time
    /// between its loads, in seconds (default 30).
    #[arg(
        long,
        hide = true,
        env = "TOOLONCE_TEST_JWKS_MIN_AGE",
        value_name = "SECONDS",
        value_parser = crate::args::read_timeout,
        default_value = "30",
        requires = "oauth_jwks"
    )]
    oauth_jwks_min_age: Duration,
    /// With --oauth-jwks: the issuer whose tokens are accepted (their `iss`).
    #[arg(long, value_name = "URL", requires = "oauth_jwks")]
    oauth_issuer: Option<String>,
    /// With --oauth-jwks: the gateway's resource URI, as clients reach it (such as
    /// https://gateway.example.com/mcp): a token's `aud` must name it (RFC 8707).
    #[arg(long, value_name = "URI", requires = "oauth_jwks")]
    oauth_resource: Option<String>,
    /// With --oauth-jwks: an authorization server named in the metadata (repeatable;
    /// default: --oauth-issuer).
    #[arg(long, value_name = "URL", requires = "oauth_jwks")]
    oauth_authorization_server: Vec<String>,
    /// With --listen and --upstream: pass each client's own `Authorization` on to the server
    /// (by default the gateway keeps it and reaches the server with --header, as the MCP
    /// authorization specification requires of a proxy). Unless --oauth-jwks checks tokens,
    /// each distinct Authorization is then a principal of its own.
    #[arg(long, requires = "listen", conflicts_with = "require_token")]
    forward_authorization: bool,
    /// With --listen: also serve the operator console (`toolonce console`) under /console, on
    /// the gateway's store. Its token is the --require-token one; without it, a random token
    /// printed at start (in the URL to open). Not with --oauth-jwks yet.
    #[arg(long, requires = "listen", conflicts_with = "oauth_jwks")]
    console: bool,
    /// With --listen: end a session (stop its server, or end its session on the --upstream
    /// server, as DELETE does) once it has had no request in progress, no GET stream open and
    /// no request for this many seconds; a later request on it gets 404 (initialize again).
    #[arg(
        long,
        value_name = "SECONDS",
        value_parser = crate::args::session_idle,
        default_value = "1800",
        requires = "listen"
    )]
    session_idle: Duration,
    /// With --listen: how many sessions may be open at once; an initialize beyond gets 503 and
    /// starts no server.
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..),
        default_value = "256",
        requires = "listen"
    )]
    max_sessions: u32,
    /// With --listen: how many of those sessions one principal (an OAuth subject and client,
    /// or a forwarded Authorization) may have open; an initialize beyond gets 429 and starts
    /// no server. It also bounds the principal's share of the proxies for requests without a
    /// session (at most 16 of their 64). Default: a quarter of --max-sessions, at least 1. Not
    /// applied with --require-token or without credentials, where every client is one
    /// principal.
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..),
        requires = "listen"
    )]
    max_sessions_per_principal: Option<u32>,
    /// With --listen: end a session that sent no request after initialize (and opened no GET
    /// stream) once it has been idle this many seconds, so that abandoned handshakes free
    /// their slot; --session-idle applies once it has sent one.
    #[arg(
        long,
        value_name = "SECONDS",
        value_parser = crate::args::session_idle,
        default_value = "60",
        requires = "listen"
    )]
    handshake_idle: Duration,
    #[command(flatten)]
    bounds: listen::BoundsArgs,
    /// A TOML file of per-tool settings (kind, key_fields, in_flight, lease, retention,
    /// call_timeout, on_error, on_tool_error, failure_retention, on_expired, repeat_argument).
    #[arg(long, value_name = "FILE", env = "TOOLONCE_MCP_CONFIG")]
    config: Option<PathBuf>,
    /// The optional argument by which the model says it performs a write again on purpose
    /// (2, 3, …): added to every write tool's listed inputSchema, taken out of the arguments
    /// before keying and forwarding (default: repeat; a tool's own config section wins).
    #[arg(long, value_name = "NAME", conflicts_with = "no_repeat_argument")]
    repeat_argument: Option<String>,
    /// Shows the model no repeat argument: a write with identical arguments is one operation.
    #[arg(long)]
    no_repeat_argument: bool,
    /// Deduplicates tools marked idempotentHint as writes too (they pass through by default),
    /// so a resumed run is answered from one history by every write tool of the server.
    #[arg(long)]
    dedupe_idempotent: bool,
    /// The MCP server to start, after `--` (or --upstream).
    #[arg(
        last = true,
        required_unless_present = "upstream",
        value_name = "SERVER COMMAND"
    )]
    command: Vec<OsString>,
}

/// Runs the proxy; the exit code is the server's.
pub(crate) async fn run(args: McpArgs) -> anyhow::Result<ExitCode> {
    match prepare(args).await? {
        Prepared::Gateway(gateway, url) => {
            on_own_thread(async move {
                let store = open_store(&url).await?;
                listen::serve(gateway(Arc::new(store))).await
            })
            .await
        }
        Prepared::Stdio(settings) => {
            on_own_thread(serve(*settings, stdio::stdin(), stdio::stdout())).await
        }
    }
}

/// What `toolonce mcp` was asked to run, checked: a gateway (given its store, once opened, and
/// the store's URL), or a proxy on stdio.
enum Prepared {
    Gateway(
        Box<dyn FnOnce(Arc<store::LazyStore>) -> listen::Gateway + Send>,
        String,
    ),
    Stdio(Box<Settings>),
}

/// Checks the arguments and builds what they ask for; nothing is started yet.
async fn prepare(args: McpArgs) -> anyhow::Result<Prepared> {
    let config = match &args.config {
        Some(path) => config::Config::load(path)?,
        None => config::Config::default(),
    };
    let config = match (&args.repeat_argument, args.no_repeat_argument) {
        (Some(name), _) => config.with_repeat_argument(Some(name))?,
        (None, true) => config.with_repeat_argument(None)?,
        (None, false) => config,
    };
    let config = if args.dedupe_idempotent {
        config.with_idempotent_as_write()
    } else {
        config
    };
    let listen = args.listen.as_deref().map(listen_addr).transpose()?;
    let auth = match &args.require_token {
        Some(var) => match std::env::var(var) {
            Ok(token) if !token.trim().is_empty() && token.trim() == token => {
                auth::Auth::shared_token(token)
            }
            Ok(_) => anyhow::bail!(
                "--require-token {var}: the variable is empty or has surrounding whitespace"
            ),
            Err(_) => anyhow::bail!("--require-token {var}: the environment variable is not set"),
        },
        None => match &args.oauth_jwks {
            Some(jwks) => {
                let settings = auth::OAuthSettings {
                    issuer: args.oauth_issuer.clone().unwrap_or_default(),
                    resource: args.oauth_resource.clone().unwrap_or_default(),
                    jwks: jwks.clone(),
                    authorization_servers: args.oauth_authorization_server.clone(),
                    jwks_floor: args.oauth_jwks_min_age,
                };
                auth::Auth::oauth(settings, args.forward_authorization).await?
            }
            None => auth::Auth::nobody(args.forward_authorization),
        },
    };
    // The server first: a bad URL or header stops the proxy before anything is logged.
    let server = match &args.upstream {
        Some(url) => {
            let (upstream, incoming) = http::Upstream::new(url, &args.header)?;
            server::Server::Http(upstream, incoming)
        }
        None if !args.header.is_empty() => {
            anyhow::bail!("--header is for an --upstream server")
        }
        // Checked here: clap's `requires` lets it pass beside a server command.
        None if args.forward_authorization => {
            anyhow::bail!(
                "--forward-authorization is for an --upstream server: a server command gets no \
                 HTTP credentials"
            )
        }
        None => {
            let (program, server_args) = args
                .command
                .split_first()
                .context("no server command after --")?;
            let mut command = tokio::process::Command::new(program);
            command.args(server_args);
            server::Server::Command(command)
        }
    };
    let scope = match args.scope {
        Some(scope) if scope.is_empty() || scope.contains('\0') => {
            anyhow::bail!("--scope must be non-empty and must not contain NUL")
        }
        Some(scope) => scope,
        None => {
            let scope = random_scope()?;
            tracing::warn!(
                target: "toolonce::mcp",
                %scope,
                "no --scope given: using a random scope for this process, so calls are \
                 deduplicated only until it exits"
            );
            scope
        }
    };
    let server_id = match args.server_id {
        Some(id) if id.is_empty() || id.contains(['\0', '/']) => {
            anyhow::bail!("--server-id must be non-empty and must contain neither `/` nor NUL")
        }
        Some(id) => id,
        None => match &args.upstream {
            Some(url) => default_upstream_id(url),
            None => default_server_id(&args.command),
        },
    };
    tracing::info!(target: "toolonce::mcp", %server_id, "server id");
    if let Some(addr) = listen {
        if !addr.ip().is_loopback() && !auth.checks() {
            tracing::warn!(
                target: "toolonce::mcp",
                %addr,
                "listening beyond loopback without --require-token or --oauth-jwks: anyone \
                 who reaches this address can call the server's tools"
            );
        }
        let backend = match server {
            server::Server::Command(command) => listen::Backend::Command {
                program: command.as_std().get_program().to_owned(),
                args: command.as_std().get_args().map(ToOwned::to_owned).collect(),
            },
            // Checked above; each session opens its own (see `listen`).
            server::Server::Http(..) => listen::Backend::Http {
                url: args.upstream.clone().expect("an HTTP server has a URL"),
                headers: args.header.clone(),
                forward_authorization: auth.forwards(),
            },
        };
        let (session_idle, max_sessions) = (args.session_idle, args.max_sessions as usize);
        let handshake_idle = args.handshake_idle;
        // One shared token is one principal: a quota would only lower --max-sessions.
        let max_sessions_per_principal = args.require_token.is_none().then(|| {
            args.max_sessions_per_principal
                .map_or((max_sessions / 4).max(1), |n| n as usize)
        });
        let bounds = args.bounds.bounds();
        let console = match (args.console, &args.require_token) {
            (false, _) => None,
            (true, Some(var)) => Some(listen::ConsoleToken::Given(
                std::env::var(var).unwrap_or_default(),
            )),
            (true, None) => Some(listen::ConsoleToken::Printed(crate::console::random_hex(
                32,
            )?)),
        };
        let gateway = move |store| listen::Gateway {
            console,
            addr,
            auth,
            backend,
            scope,
            server_id,
            config: Arc::new(config),
            store,
            session_idle,
            handshake_idle,
            max_sessions,
            max_sessions_per_principal,
            bounds,
        };
        return Ok(Prepared::Gateway(Box::new(gateway), args.store));
    }
    Ok(Prepared::Stdio(Box::new(Settings {
        url: args.store,
        scope,
        server_id,
        config: Arc::new(config),
        server,
    })))
}

/// `--listen` as an address: a bare port is on 127.0.0.1.
fn listen_addr(text: &str) -> anyhow::Result<std::net::SocketAddr> {
    if let Ok(port) = text.parse::<u16>() {
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse().map_err(|_| {
        anyhow::anyhow!("--listen {text}: expected PORT or IP:PORT (such as 127.0.0.1:8931)")
    })
}

/// Runs `work` on a single-threaded runtime of its own and returns the exit code.
async fn on_own_thread(
    work: impl std::future::Future<Output = anyhow::Result<std::process::ExitStatus>> + Send + 'static,
) -> anyhow::Result<ExitCode> {
    // The proxy runs on a single-threaded runtime of its own. A relay gains nothing from more
    // threads and pays for every wake-up that crosses them: on one thread, the only wake-ups
    // per message are those between the client, the proxy and the server.
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("toolonce-mcp".into())
        .spawn(move || {
            let status = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(anyhow::Error::from)
                .map(|runtime| {
                    let status = runtime.block_on(work);
                    // Not waiting for blocking tasks: a fallback blocking read of stdin may
                    // never return.
                    runtime.shutdown_background();
                    status
                });
            let _ = tx.send(status.and_then(|status| status));
        })
        .context("cannot start the proxy's thread")
        .map_err(crate::exit::internal)?;
    let status = rx
        .await
        .context("the proxy's thread failed")
        .map_err(crate::exit::internal)??;
    Ok(ExitCode::from(crate::exit::of_status(status)))
}

struct Settings {
    url: String,
    scope: String,
    server_id: String,
    config: Arc<config::Config>,
    server: server::Server,
}

/// Opens the store. One that can never work stops the proxy before the server starts (exit
/// code 2); one that is down is retried by every write call.
async fn open_store(url: &str) -> anyhow::Result<store::LazyStore> {
    store::LazyStore::open(url).await.map_err(|e| {
        anyhow::anyhow!(
            "cannot use the store {}: {}",
            toolonce::store::redact_url(url),
            e.report()
        )
    })
}

/// The stdio proxy, its client's side on `input` and `output` (the process's stdin and stdout,
/// or the streams of an in-process caller: see [`embed`]).
async fn serve(
    settings: Settings,
    input: impl tokio::io::AsyncRead + Send + Unpin + 'static,
    output: impl tokio::io::AsyncWrite + Send + Unpin + 'static,
) -> anyhow::Result<std::process::ExitStatus> {
    let store = open_store(&settings.url).await?;
    let client_in = stdio::spawn_reader(input);
    let (client_out, out_rx) = stdio::ClientOut::channel();
    let writer = stdio::spawn_writer(output, out_rx);
    let shutdown_timeout = settings.config.proxy.shutdown_timeout;
    let proxy = proxy::Settings {
        scope: settings.scope,
        server_id: settings.server_id,
        config: settings.config,
        store: Arc::new(store),
    };
    let status = lifecycle::run(
        proxy,
        settings.server,
        client_in,
        client_out.clone(),
        shutdown_timeout,
    )
    .await;
    // Every answer is flushed before the process exits.
    client_out.close();
    let _ = writer.await;
    status
}

/// The server id used when none is given: `cmd-` and 64 bits of a hash of the server's command
/// line, so that it stays the same across restarts and differs between servers.
fn default_server_id(command: &[OsString]) -> String {
    let words: Vec<String> = command
        .iter()
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    let text = serde_json::to_string(&words).expect("strings always serialize");
    let hash = toolonce::key::Fingerprint::of_canonical(&text);
    format!("cmd-{}", &hash.as_str()[..16])
}

/// The server id used for an --upstream server when none is given: `url-` and 64 bits of a
/// hash of the URL (the headers, which change with every new token, are not part of it).
fn default_upstream_id(url: &str) -> String {
    let hash = toolonce::key::Fingerprint::of_canonical(url);
    format!("url-{}", &hash.as_str()[..16])
}

/// A scope no other proxy process will pick: 64 random bits.
fn random_scope() -> anyhow::Result<String> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness for a scope: {e}"))?;
    Ok(format!("mcp-{:016x}", u64::from_le_bytes(bytes)))
}
