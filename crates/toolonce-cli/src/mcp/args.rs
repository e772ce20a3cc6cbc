//! `toolonce mcp`'s command line: every flag, its help and its defaults (checked and turned
//! into what it asks for by [`prepare`](super::prepare)).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use super::listen::BoundsArgs;

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
    pub(super) store: String,
    /// The scope of the operation keys (a run, session or agent id). Without one, each proxy
    /// process picks a random scope, so duplicates are caught only within that process:
    /// deduplicating across restarts or resumed agents needs a scope and a durable store.
    #[arg(long, value_name = "ID", env = "TOOLONCE_SCOPE")]
    pub(super) scope: Option<String>,
    /// The name of the MCP server in operation keys, so that same-named tools of different
    /// servers sharing a store and scope never share keys. Keep it when the server's command
    /// line changes (a new version); default: derived from the server's command line.
    #[arg(long, value_name = "NAME", env = "TOOLONCE_SERVER_ID")]
    pub(super) server_id: Option<String>,
    /// A remote MCP server speaking Streamable HTTP, instead of a server command: the proxy
    /// POSTs the client's messages to this URL (TLS with the system's trusted roots).
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    pub(super) upstream: Option<String>,
    /// A header sent with every request to the --upstream server, as `Name: value` (such as
    /// `Authorization: Bearer TOKEN`); repeatable. Values are never logged. With --listen, it
    /// replaces a client's header of the same name.
    #[arg(long, value_name = "NAME: VALUE")]
    pub(super) header: Vec<String>,
    /// Serve Streamable HTTP at `/mcp` on this address instead of stdio, as `PORT` (on
    /// 127.0.0.1) or `IP:PORT`, in front of the server command or the --upstream server: each
    /// client session gets its own server process (or session on the --upstream server) and
    /// every session shares the store and the scope. Answers are event streams for clients
    /// that accept them. Only loopback unless another address is given.
    #[arg(long, value_name = "ADDR")]
    pub(super) listen: Option<String>,
    /// With --listen: the name of an environment variable holding the bearer token clients
    /// must send (`Authorization: Bearer TOKEN`); others get 401. Its holders are one
    /// principal. The token is never logged, nor sent to an --upstream server (give the
    /// server's credentials with --header).
    #[arg(long, value_name = "VAR", requires = "listen")]
    pub(super) require_token: Option<String>,
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
    pub(super) oauth_jwks: Option<String>,
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
    pub(super) oauth_jwks_min_age: Duration,
    /// With --oauth-jwks: the issuer whose tokens are accepted (their `iss`).
    #[arg(long, value_name = "URL", requires = "oauth_jwks")]
    pub(super) oauth_issuer: Option<String>,
    /// With --oauth-jwks: the gateway's resource URI, as clients reach it (such as
    /// https://gateway.example.com/mcp): a token's `aud` must name it (RFC 8707).
    #[arg(long, value_name = "URI", requires = "oauth_jwks")]
    pub(super) oauth_resource: Option<String>,
    /// With --oauth-jwks: an authorization server named in the metadata (repeatable;
    /// default: --oauth-issuer).
    #[arg(long, value_name = "URL", requires = "oauth_jwks")]
    pub(super) oauth_authorization_server: Vec<String>,
    /// With --listen and --upstream: pass each client's own `Authorization` on to the server
    /// (by default the gateway keeps it and reaches the server with --header, as the MCP
    /// authorization specification requires of a proxy). Unless --oauth-jwks checks tokens,
    /// each distinct Authorization is then a principal of its own.
    #[arg(long, requires = "listen", conflicts_with = "require_token")]
    pub(super) forward_authorization: bool,
    /// With --listen: also serve the operator console (`toolonce console`) under /console, on
    /// the gateway's store. Its token is the --require-token one; without it, a random token
    /// printed at start (in the URL to open). Not with --oauth-jwks yet.
    #[arg(long, requires = "listen", conflicts_with = "oauth_jwks")]
    pub(super) console: bool,
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
    pub(super) session_idle: Duration,
    /// With --listen: how many sessions may be open at once; an initialize beyond gets 503 and
    /// starts no server.
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..),
        default_value = "256",
        requires = "listen"
    )]
    pub(super) max_sessions: u32,
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
    pub(super) max_sessions_per_principal: Option<u32>,
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
    pub(super) handshake_idle: Duration,
    #[command(flatten)]
    pub(super) bounds: BoundsArgs,
    /// A TOML file of per-tool settings (kind, key_fields, in_flight, lease, retention,
    /// call_timeout, on_error, on_tool_error, failure_retention, on_expired, repeat_argument).
    #[arg(long, value_name = "FILE", env = "TOOLONCE_MCP_CONFIG")]
    pub(super) config: Option<PathBuf>,
    /// The optional argument by which the model says it performs a write again on purpose
    /// (2, 3, …): added to every write tool's listed inputSchema, taken out of the arguments
    /// before keying and forwarding (default: repeat; a tool's own config section wins).
    #[arg(long, value_name = "NAME", conflicts_with = "no_repeat_argument")]
    pub(super) repeat_argument: Option<String>,
    /// Shows the model no repeat argument: a write with identical arguments is one operation.
    #[arg(long)]
    pub(super) no_repeat_argument: bool,
    /// Deduplicates tools marked idempotentHint as writes too (they pass through by default),
    /// so a resumed run is answered from one history by every write tool of the server.
    #[arg(long)]
    pub(super) dedupe_idempotent: bool,
    /// The MCP server to start, after `--` (or --upstream).
    #[arg(
        last = true,
        required_unless_present = "upstream",
        value_name = "SERVER COMMAND"
    )]
    pub(super) command: Vec<OsString>,
}
