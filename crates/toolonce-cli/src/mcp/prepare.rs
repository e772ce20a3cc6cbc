//! `toolonce mcp`'s arguments checked, and turned into what they ask to run: a gateway or a
//! proxy on stdio. Nothing is started here; a bad argument stops the command before anything
//! is logged or spawned.

use std::ffi::OsString;
use std::sync::Arc;

use anyhow::Context;

use super::args::McpArgs;
use super::{auth, config, http, listen, server, store};

/// What `toolonce mcp` was asked to run, checked: a gateway (given its store, once opened, and
/// the store's URL), or a proxy on stdio.
pub(super) enum Prepared {
    Gateway(
        Box<dyn FnOnce(Arc<store::LazyStore>) -> listen::Gateway + Send>,
        String,
    ),
    Stdio(Box<Settings>),
}

pub(super) struct Settings {
    pub(super) url: String,
    pub(super) scope: String,
    pub(super) server_id: String,
    pub(super) config: Arc<config::Config>,
    pub(super) server: server::Server,
}

/// What a gateway and a stdio proxy are both built from.
struct Checked {
    config: config::Config,
    auth: auth::Auth,
    server: server::Server,
    scope: String,
    server_id: String,
}

/// Checks the arguments and builds what they ask for; nothing is started yet.
pub(super) async fn prepare(mut args: McpArgs) -> anyhow::Result<Prepared> {
    let config = config_of(&args)?;
    let listen = args.listen.as_deref().map(listen_addr).transpose()?;
    let auth = auth_of(&args).await?;
    // The server first: a bad URL or header stops the proxy before anything is logged.
    let server = server_of(&args)?;
    let scope = scope_of(args.scope.take())?;
    let server_id = server_id_of(args.server_id.take(), &args)?;
    tracing::info!(target: "toolonce::mcp", %server_id, "server id");
    let checked = Checked {
        config,
        auth,
        server,
        scope,
        server_id,
    };
    if let Some(addr) = listen {
        return gateway(args, addr, checked);
    }
    Ok(Prepared::Stdio(Box::new(Settings {
        url: args.store,
        scope: checked.scope,
        server_id: checked.server_id,
        config: Arc::new(checked.config),
        server: checked.server,
    })))
}

/// The configuration file, with the flags that override it.
fn config_of(args: &McpArgs) -> anyhow::Result<config::Config> {
    let config = match &args.config {
        Some(path) => config::Config::load(path)?,
        None => config::Config::default(),
    };
    let config = match (&args.repeat_argument, args.no_repeat_argument) {
        (Some(name), _) => config.with_repeat_argument(Some(name))?,
        (None, true) => config.with_repeat_argument(None)?,
        (None, false) => config,
    };
    Ok(if args.dedupe_idempotent {
        config.with_idempotent_as_write()
    } else {
        config
    })
}

/// Who may use the gateway: a shared token, OAuth bearer JWTs, or anybody.
async fn auth_of(args: &McpArgs) -> anyhow::Result<auth::Auth> {
    Ok(match &args.require_token {
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
    })
}

/// The server: an `--upstream` URL with its headers, or the command after `--`.
fn server_of(args: &McpArgs) -> anyhow::Result<server::Server> {
    Ok(match &args.upstream {
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
    })
}

/// `--scope`, or a random one for this process.
fn scope_of(scope: Option<String>) -> anyhow::Result<String> {
    Ok(match scope {
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
    })
}

/// `--server-id`, or one derived from the server's URL or command line.
fn server_id_of(server_id: Option<String>, args: &McpArgs) -> anyhow::Result<String> {
    Ok(match server_id {
        Some(id) if id.is_empty() || id.contains(['\0', '/']) => {
            anyhow::bail!("--server-id must be non-empty and must contain neither `/` nor NUL")
        }
        Some(id) => id,
        None => match &args.upstream {
            Some(url) => default_upstream_id(url),
            None => default_server_id(&args.command),
        },
    })
}

/// A gateway on `addr`, built once its store is open.
fn gateway(
    args: McpArgs,
    addr: std::net::SocketAddr,
    checked: Checked,
) -> anyhow::Result<Prepared> {
    let Checked {
        config,
        auth,
        server,
        scope,
        server_id,
    } = checked;
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
    let console = console_token(&args)?;
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
    Ok(Prepared::Gateway(Box::new(gateway), args.store))
}

/// The console's token with `--console`: the shared token, or one printed at start.
fn console_token(args: &McpArgs) -> anyhow::Result<Option<listen::ConsoleToken>> {
    Ok(match (args.console, &args.require_token) {
        (false, _) => None,
        (true, Some(var)) => Some(listen::ConsoleToken::Given(
            std::env::var(var).unwrap_or_default(),
        )),
        (true, None) => Some(listen::ConsoleToken::Printed(crate::console::random_hex(
            32,
        )?)),
    })
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
