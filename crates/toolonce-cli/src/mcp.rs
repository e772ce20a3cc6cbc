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
//! - [`args`]: the command line; [`prepare`]: it checked, and turned into a gateway or a stdio
//!   proxy to run.
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

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;

mod answer;
mod args;
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
mod prepare;
mod protocol;
mod proxy;
mod repeat;
mod route;
mod server;
mod stdio;
mod store;
mod tools;

pub(crate) use args::McpArgs;
use prepare::{Prepared, Settings, prepare};

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
