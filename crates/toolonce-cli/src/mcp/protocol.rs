//! The names and numbers of the protocols the proxy speaks, each defined once: JSON-RPC 2.0's
//! error codes, MCP's `_meta` members and Streamable HTTP's headers, and toolonce's own members
//! (`toolonce/key`, `toolonce/outcome`) in the messages it adds to or writes.
//!
//! Only names live here; what the proxy does with them lives with the job that does it.

/// JSON-RPC 2.0: the message is not JSON.
pub(crate) const PARSE_ERROR: i64 = -32700;
/// JSON-RPC 2.0: the message is no valid request (also: a request whose id is taken, and a
/// refusal before anything ran, such as an HTTP server's 4xx).
pub(crate) const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC 2.0: no such method.
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC 2.0: invalid params (in MCP also an unknown tool); the proxy's answer to a write
/// call it cannot key.
pub(crate) const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC 2.0: an internal error; the proxy's answer to a request whose answer never came.
pub(crate) const INTERNAL_ERROR: i64 = -32603;
/// JSON-RPC 2.0's first implementation-defined server error; the gateway's for other HTTP
/// refusals.
pub(crate) const SERVER_ERROR: i64 = -32000;
/// MCP 2026-07-28: a header does not match the message.
pub(crate) const HEADER_MISMATCH: i64 = -32020;
/// MCP 2026-07-28: the request needs a client capability it did not declare.
pub(crate) const MISSING_CLIENT_CAPABILITY: i64 = -32021;
/// MCP 2026-07-28: the server does not speak the request's protocol version.
pub(crate) const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// The member under `params._meta` that carries the operation key to the server, and from the
/// client a key of its own (see [`call`](super::call)); replays carry it too.
pub(crate) const META_KEY: &str = toolonce::meta::KEY;
/// The member of a result's `_meta` (or a JSON-RPC error's `data`) that says what the proxy did
/// (`replayed`, `in_flight`, `not_executed`, …): it tells a replay from a first answer.
pub(crate) const OUTCOME_KEY: &str = toolonce::meta::OUTCOME;

/// The `_meta` member of an executed call's answer that says its outcome was not simply
/// recorded (it may not survive a failover of the store, or was not recorded at all): the
/// layer's notice, for a person.
pub(crate) const NOTICE_KEY: &str = toolonce::meta::NOTICE;
/// The member of an error's `data` with which the proxy's HTTP client tells the gateway the
/// HTTP status an upstream server refused a request with.
pub(crate) const HTTP_STATUS_KEY: &str = "toolonce/httpStatus";
/// The same for the upstream server's `WWW-Authenticate` challenge.
pub(crate) const WWW_AUTHENTICATE_KEY: &str = "toolonce/wwwAuthenticate";

/// The `params._meta` member in which a request of protocol 2026-07-28 or later names its
/// protocol version (earlier versions agree on one in `initialize`).
pub(crate) const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// [`META_PROTOCOL_VERSION`] as a JSON pointer below `params`' parent (`/` escaped as `~1`).
pub(crate) const META_PROTOCOL_VERSION_POINTER: &str =
    "/_meta/io.modelcontextprotocol~1protocolVersion";
/// The client's capabilities, required by a 2026-07-28 server in every request.
pub(crate) const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// Who the client is, which a 2026-07-28 server may want in every request.
pub(crate) const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";

/// The first protocol version without sessions, whose requests each name their version.
/// (Versions are dates, so they compare as text.)
pub(crate) const FIRST_SESSIONLESS_VERSION: &str = "2026-07-28";

/// Streamable HTTP's session header.
pub(crate) const SESSION_ID_HEADER: &str = "mcp-session-id";
/// Streamable HTTP's protocol version header.
pub(crate) const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";
/// MCP 2026-07-28: the request's method, as a header.
pub(crate) const METHOD_HEADER: &str = "mcp-method";
/// MCP 2026-07-28: the request's tool, prompt or resource, as a header.
pub(crate) const NAME_HEADER: &str = "mcp-name";
/// Server-sent events: the last event a client saw, to resume a stream after it.
pub(crate) const LAST_EVENT_ID_HEADER: &str = "last-event-id";
/// The media type of an event stream.
pub(crate) const EVENT_STREAM: &str = "text/event-stream";
