//! The server's end, one [`ServerHandle`] whether it is a child process (its stdin and stdout)
//! or a Streamable HTTP server ([`Upstream`]): starting it, writing to it, and stopping it.
//! What the server says is routed by [`proxy`](super::proxy), which reads [`Output`].

use std::process::{ExitStatus, Stdio};
use std::sync::Arc;

use anyhow::Context;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::mpsc;

use super::http::{Incoming, Upstream};
use super::jsonrpc::IdKey;

/// The server: a command the proxy starts, or a Streamable HTTP server it reaches.
pub(crate) enum Server {
    Command(Command),
    Http(Arc<Upstream>, mpsc::UnboundedReceiver<Incoming>),
}

/// Where the server's messages come from.
pub(super) enum Output {
    Stdout(ChildStdout),
    Http(mpsc::UnboundedReceiver<Incoming>),
}

/// The server's input: its stdin, or the HTTP upstream. Whoever has a message writes it
/// directly (no writer task in between: one wake-up less per message); the async mutex keeps
/// messages whole and in order, and a full pipe holds the writer back, as it would hold back
/// the client without the proxy.
#[derive(Debug)]
pub(super) struct ServerHandle {
    input: tokio::sync::Mutex<Option<ServerEnd>>,
    /// The HTTP server, when the server is one.
    upstream: Option<Arc<Upstream>>,
}

#[derive(Debug)]
enum ServerEnd {
    Stdin(ChildStdin),
    Http(Arc<Upstream>),
}

/// Exclusive use of the server's input, for writes that must keep an order with routing.
pub(super) struct ServerInGuard<'a>(tokio::sync::MutexGuard<'a, Option<ServerEnd>>);

/// Starts the server (a command with piped stdin and stdout; an HTTP server needs no start):
/// its input, the child process if there is one, and where its messages come from.
pub(super) fn start(server: Server) -> anyhow::Result<(ServerHandle, Option<Child>, Output)> {
    Ok(match server {
        Server::Command(command) => {
            let (child, stdin, stdout) = spawn(command)?;
            (
                ServerHandle {
                    input: tokio::sync::Mutex::new(Some(ServerEnd::Stdin(stdin))),
                    upstream: None,
                },
                Some(child),
                Output::Stdout(stdout),
            )
        }
        Server::Http(upstream, incoming) => (
            ServerHandle {
                input: tokio::sync::Mutex::new(Some(ServerEnd::Http(upstream.clone()))),
                upstream: Some(upstream),
            },
            None,
            Output::Http(incoming),
        ),
    })
}

impl ServerHandle {
    pub(super) async fn lock(&self) -> ServerInGuard<'_> {
        ServerInGuard(self.input.lock().await)
    }

    /// Writes one message; `false` if the server's stdin is closed.
    pub(super) async fn send(&self, message: &[u8]) -> bool {
        self.lock().await.send(message).await
    }

    /// Closes the server's input (its stdin; an HTTP server is closed with [`Upstream::close`]).
    pub(super) async fn close(&self) {
        self.input.lock().await.take();
    }

    /// The HTTP server, when the server is one.
    pub(super) fn upstream(&self) -> Option<&Arc<Upstream>> {
        self.upstream.as_ref()
    }

    /// The proxy gave up the request `id`: an HTTP server's exchange for it ends.
    pub(super) fn give_up(&self, id: &IdKey) {
        if let Some(upstream) = &self.upstream {
            upstream.give_up(id);
        }
    }
}

impl ServerInGuard<'_> {
    /// Writes one message; `false` if the server's stdin is closed. After a write error (the
    /// server closed its end) it is closed for good. An HTTP server that cannot be reached
    /// now may be reached by the next message.
    pub(super) async fn send(&mut self, message: &[u8]) -> bool {
        let stdin = match self.0.as_mut() {
            None => return false,
            Some(ServerEnd::Http(upstream)) => return upstream.send(message).await,
            Some(ServerEnd::Stdin(stdin)) => stdin,
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

/// Starts the server command with piped stdin and stdout.
fn spawn(mut command: Command) -> anyhow::Result<(Child, ChildStdin, ChildStdout)> {
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
    Ok((child, stdin, stdout))
}

/// Stops a server whose input is closed: it gets `timeout` to exit, then SIGTERM, then
/// SIGKILL.
pub(super) async fn stop(
    child: &mut Child,
    timeout: std::time::Duration,
) -> anyhow::Result<ExitStatus> {
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
pub(super) async fn signal(child: &Child, name: &str) {
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
