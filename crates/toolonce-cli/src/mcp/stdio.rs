//! The client's side of the pipe: the proxy's own stdin and stdout, read and written by tasks of
//! the proxy's runtime.
//!
//! When stdin and stdout are pipes or sockets (as an MCP client starts a server), they are put
//! in non-blocking mode and driven by the runtime's reactor, so a message costs no thread
//! hand-off: per call, the only wake-ups are the ones between the three processes. Anything
//! else (a terminal, a file) falls back to tokio's blocking stdin and stdout.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

type Input = Box<dyn AsyncRead + Send + Unpin>;
type Output = Box<dyn AsyncWrite + Send + Unpin>;

/// The proxy's stdin, non-blocking where it can be.
pub(crate) fn stdin() -> Input {
    match nonblocking(std::io::stdin().as_fd().try_clone_to_owned()) {
        Some(Pipe::Fifo(file)) => {
            if let Ok(pipe) = tokio::net::unix::pipe::Receiver::from_file(file) {
                return Box::new(pipe);
            }
        }
        Some(Pipe::Socket(socket)) => {
            if let Ok(socket) = tokio::net::UnixStream::from_std(socket) {
                return Box::new(socket);
            }
        }
        None => {}
    }
    Box::new(tokio::io::stdin())
}

/// The proxy's stdout, non-blocking where it can be.
pub(crate) fn stdout() -> Output {
    match nonblocking(std::io::stdout().as_fd().try_clone_to_owned()) {
        Some(Pipe::Fifo(file)) => {
            if let Ok(pipe) = tokio::net::unix::pipe::Sender::from_file(file) {
                return Box::new(pipe);
            }
        }
        Some(Pipe::Socket(socket)) => {
            if let Ok(socket) = tokio::net::UnixStream::from_std(socket) {
                return Box::new(socket);
            }
        }
        None => {}
    }
    Box::new(tokio::io::stdout())
}

enum Pipe {
    Fifo(std::fs::File),
    Socket(std::os::unix::net::UnixStream),
}

/// A copy of a standard stream's descriptor, if it is a pipe or a socket (the file description
/// is shared, so non-blocking mode applies to the stream itself; nothing else in the proxy
/// uses it). Terminals and files are left alone: a terminal left non-blocking would break the
/// shell that owns it.
fn nonblocking(fd: std::io::Result<OwnedFd>) -> Option<Pipe> {
    let file = std::fs::File::from(fd.ok()?);
    let kind = file.metadata().ok()?.file_type();
    if kind.is_fifo() {
        // `pipe::{Receiver, Sender}::from_file` set non-blocking mode themselves.
        Some(Pipe::Fifo(file))
    } else if kind.is_socket() {
        let socket = std::os::unix::net::UnixStream::from(OwnedFd::from(file));
        socket.set_nonblocking(true).ok()?;
        Some(Pipe::Socket(socket))
    } else {
        None
    }
}

/// Reads newline-delimited messages from `input` in a task. Each message keeps its bytes,
/// newline included (one is added to a last line that lacks it, so whatever the proxy sends
/// after it stays a separate line). The channel closes at end of input or on an error.
pub(crate) fn spawn_reader(
    input: impl AsyncRead + Send + Unpin + 'static,
) -> mpsc::UnboundedReceiver<Vec<u8>> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut input = BufReader::with_capacity(64 * 1024, input);
        loop {
            let mut line = Vec::new();
            match input.read_until(b'\n', &mut line).await {
                Ok(0) => break,
                Ok(_) => {
                    if line.last() != Some(&b'\n') {
                        line.push(b'\n');
                    }
                    if tx.send(line).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    tracing::debug!(target: "toolonce::mcp", error = %e, "cannot read from the client");
                    break;
                }
            }
        }
    });
    rx
}

/// Where messages for the client go. Cheap to clone; sending never blocks.
#[derive(Clone, Debug)]
pub(crate) struct ClientOut(mpsc::UnboundedSender<Outgoing>);

/// One message for the client (empty: the end), and the request it belongs to when the server
/// said so: an HTTP server sent it on that request's event stream. A stdio client reads every
/// message alike; the gateway delivers it on that request's own stream.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub(crate) line: Vec<u8>,
    pub(crate) related: Option<Value>,
}

impl ClientOut {
    /// A sender and the receiving end a writer drains.
    pub(crate) fn channel() -> (ClientOut, mpsc::UnboundedReceiver<Outgoing>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (ClientOut(tx), rx)
    }

    /// Queues one message (ending with a newline). Once the writer is gone it is dropped: the
    /// client has hung up.
    pub(crate) fn send(&self, message: Vec<u8>) {
        self.send_related(message, None);
    }

    /// The same, for a message that belongs to the request `related` (see [`Outgoing`]).
    pub(crate) fn send_related(&self, message: Vec<u8>, related: Option<Value>) {
        if !message.is_empty() {
            let _ = self.0.send(Outgoing {
                line: message,
                related,
            });
        }
    }

    /// Tells the writer to flush and stop; messages sent later are dropped.
    pub(crate) fn close(&self) {
        let _ = self.0.send(Outgoing {
            line: Vec::new(),
            related: None,
        });
    }
}

/// Writes the messages of `rx` to `output` in a task, flushing whenever the queue runs dry,
/// until [`ClientOut::close`] or every sender is gone. After a write error (the client closed
/// its end) messages are drained and dropped, so senders never wait.
pub(crate) fn spawn_writer(
    mut output: impl AsyncWrite + Send + Unpin + 'static,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ok = true;
        'messages: while let Some(Outgoing {
            line: mut message, ..
        }) = rx.recv().await
        {
            loop {
                if message.is_empty() {
                    break 'messages;
                }
                if ok {
                    ok = output.write_all(&message).await.is_ok();
                }
                match rx.try_recv() {
                    Ok(next) => message = next.line,
                    Err(_) => break,
                }
            }
            if ok {
                ok = output.flush().await.is_ok();
                if !ok {
                    tracing::debug!(target: "toolonce::mcp", "the client closed its input; answers are dropped");
                }
            }
        }
        if ok {
            let _ = output.flush().await;
        }
    })
}
