//! One proxy's life: starts the server, routes (see [`proxy`](super::proxy)) until the server
//! exits or the client hangs up, and stops in order: calls the client sent before hanging up
//! still reach the server, the server gets time to exit before it is asked harder, and every
//! call it left unanswered is settled.

use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::http::{self, Incoming};
use super::proxy::{Settings, Shared};
use super::route::Route;
use super::server::{self, Output, Server};
use super::stdio::ClientOut;

/// How long the proxy waits, after the server exited, for the rest of the server's output and
/// for the calls it left unanswered to settle.
const DRAIN: Duration = Duration::from_secs(2);

/// Runs the proxy until the server exits; returns the server's exit status.
///
/// `client_in` yields the client's messages (closing when the client hangs up) and
/// `client_out` takes the messages for the client; the caller owns the client's pipes, so
/// tests and benches can drive the proxy without a process of its own.
pub(crate) async fn run(
    settings: Settings,
    server: Server,
    mut client_in: mpsc::UnboundedReceiver<Vec<u8>>,
    client_out: ClientOut,
    shutdown_timeout: Duration,
) -> anyhow::Result<ExitStatus> {
    let (server, mut child, output) = server::start(server)?;
    let upstream = server.upstream().cloned();
    let shared = Shared::new(settings, server, client_out.clone())?;
    let mut reader = match output {
        Output::Stdout(stdout) => tokio::spawn(read_server(shared.clone(), stdout)),
        Output::Http(incoming) => tokio::spawn(read_upstream(shared.clone(), incoming)),
    };
    let mut calls = JoinSet::new();
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();

    enum End {
        ServerExited(ExitStatus),
        ClientHungUp,
    }
    let end = loop {
        tokio::select! {
            status = async { child.as_mut()?.wait().await.ok() }, if child.is_some() => {
                break End::ServerExited(status.context("cannot wait for the server")?);
            }
            line = client_in.recv() => match line {
                Some(line) => shared.on_client_message(line, &mut calls).await,
                None => break End::ClientHungUp,
            },
            Some(_) = calls.join_next(), if !calls.is_empty() => {}
            Some(()) = async { terminate.as_mut()?.recv().await }, if terminate.is_some() => {
                // Pass the request to stop on; the server's exit then ends the proxy. An HTTP
                // server goes on: the proxy stops as if the client had hung up.
                tracing::info!(target: "toolonce::mcp", "SIGTERM: stopping the server");
                match &child {
                    Some(child) => server::signal(child, "TERM").await,
                    None => break End::ClientHungUp,
                }
            }
        }
    };
    let mut drain = DRAIN;
    let status = match (end, child.as_mut(), &upstream) {
        (End::ServerExited(status), _, _) => status,
        (End::ClientHungUp, Some(child), _) => hang_up(&shared, child, shutdown_timeout).await?,
        (End::ClientHungUp, None, Some(upstream)) => {
            hang_up_http(&shared, &mut calls, upstream, shutdown_timeout).await;
            // Every answer that came is routed: the reader has nothing left to do.
            drain = Duration::ZERO;
            std::os::unix::process::ExitStatusExt::from_raw(0)
        }
        (End::ClientHungUp, None, None) => unreachable!("a server is a command or a URL"),
    };
    tracing::debug!(target: "toolonce::mcp", %status, "the server exited");

    settle_the_rest(&shared, &mut reader, &mut calls, upstream.as_ref(), drain).await;
    client_out.close();
    Ok(status)
}

/// The client hung up on an HTTP server: what was sent before still goes out and may be
/// answered, within `shutdown_timeout`; then the server's session is closed.
async fn hang_up_http(
    shared: &Shared,
    calls: &mut JoinSet<()>,
    upstream: &http::Upstream,
    shutdown_timeout: Duration,
) {
    // Calls sent before the hang-up still go out, and the requests in progress may be
    // answered (write calls' answers are recorded); a request given up, whose answer
    // may never come, is not waited for.
    let settled = async {
        shared.router().unsent_drained().await;
        while !(calls.is_empty() && shared.routes().answered()) {
            tokio::select! {
                Some(_) = calls.join_next(), if !calls.is_empty() => {}
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
    };
    if tokio::time::timeout(shutdown_timeout, settled)
        .await
        .is_err()
    {
        tracing::warn!(
            target: "toolonce::mcp",
            ?shutdown_timeout,
            "the client hung up; stopping with requests still unanswered"
        );
    }
    shared.router().server().close().await;
    upstream.close();
}

/// Reads what the server wrote before it exited (a grandchild holding its stdout must not keep
/// us here), then settles the calls it never answered: dropping their routes tells them.
async fn settle_the_rest(
    shared: &Shared,
    reader: &mut tokio::task::JoinHandle<()>,
    calls: &mut JoinSet<()>,
    upstream: Option<&Arc<http::Upstream>>,
    drain: Duration,
) {
    if tokio::time::timeout(drain, &mut *reader).await.is_err() {
        reader.abort();
    }
    if let Some(upstream) = upstream {
        upstream.end_session().await;
    }
    let unanswered: Vec<Route> = shared.routes().pending.drain().map(|(_, r)| r).collect();
    drop(unanswered);
    let settled = tokio::time::timeout(DRAIN, async { while calls.join_next().await.is_some() {} });
    if settled.await.is_err() {
        calls.abort_all();
    }
}

/// Routes what an HTTP server sends, until the upstream is closed and its exchanges are over.
async fn read_upstream(shared: Arc<Shared>, mut incoming: mpsc::UnboundedReceiver<Incoming>) {
    while let Some(message) = incoming.recv().await {
        match message {
            Incoming::Message(line) => shared.on_server_message(line, None),
            Incoming::Related(line, id) => shared.on_server_message(line, Some(id)),
            Incoming::Lost(ids, why) => {
                let upstream = shared
                    .router()
                    .server()
                    .upstream()
                    .map_or("", |u| u.shown());
                shared.fail_requests(&ids, |id| http::lost_line(id, upstream, &why));
            }
        }
    }
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
        drained = tokio::time::timeout(timeout, shared.router().unsent_drained()) => {
            if drained.is_err() {
                tracing::warn!(
                    target: "toolonce::mcp",
                    "closing the server's input with write calls not sent yet"
                );
            }
        }
        status = child.wait() => return Ok(status?),
    }
    shared.router().server().close().await;
    server::stop(child, timeout).await
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
                shared.on_server_message(line, None);
            }
            Err(e) => {
                tracing::warn!(target: "toolonce::mcp", error = %e, "cannot read from the server");
                break;
            }
        }
    }
}
