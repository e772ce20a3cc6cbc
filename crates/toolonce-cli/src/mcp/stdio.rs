//! The client's side of the pipe: the proxy's own stdin and stdout, each served by a plain
//! thread.
//!
//! Threads rather than `tokio::io::stdin`: tokio reads stdin on its blocking pool, and a read
//! that never returns (the client keeps stdin open after the server exited) would keep the
//! runtime from shutting down. A detached thread ends with the process. The writer is a thread
//! too so a burst of answers costs one flush, not one blocking-pool hop per message.

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::sync::mpsc;
use std::thread;

use tokio::sync::mpsc as tokio_mpsc;

/// Reads newline-delimited messages from `input` on a thread of its own. Each message keeps its
/// bytes, newline included (one is added to a last line that lacks it, so whatever the proxy
/// sends after it stays a separate line). The channel closes at end of input or on an error.
pub(crate) fn spawn_reader(
    input: impl Read + Send + 'static,
    name: &str,
) -> tokio_mpsc::UnboundedReceiver<Vec<u8>> {
    let (tx, rx) = tokio_mpsc::unbounded_channel();
    let spawned = thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let mut input = BufReader::with_capacity(64 * 1024, input);
            loop {
                let mut line = Vec::new();
                match input.read_until(b'\n', &mut line) {
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
    if let Err(e) = spawned {
        // Without the thread the channel is closed at once: the proxy sees a client that hung up.
        tracing::error!(target: "toolonce::mcp", error = %e, "cannot start the stdin thread");
    }
    rx
}

/// Where messages for the client go. Cheap to clone; sending never blocks.
#[derive(Clone, Debug)]
pub(crate) struct ClientOut(mpsc::Sender<Vec<u8>>);

impl ClientOut {
    /// A sender and the receiving end a writer drains.
    pub(crate) fn channel() -> (ClientOut, mpsc::Receiver<Vec<u8>>) {
        let (tx, rx) = mpsc::channel();
        (ClientOut(tx), rx)
    }

    /// Queues one message (ending with a newline). Once the writer is gone it is dropped: the
    /// client has hung up.
    pub(crate) fn send(&self, message: Vec<u8>) {
        if !message.is_empty() {
            let _ = self.0.send(message);
        }
    }

    /// Tells the writer to flush and stop; messages sent later are dropped.
    pub(crate) fn close(&self) {
        let _ = self.0.send(Vec::new());
    }
}

/// Writes the messages of `rx` to `output` on a thread of its own, flushing whenever the queue
/// runs dry, until [`ClientOut::close`] or every sender is gone. A write error (the client
/// closed its end) stops the writing but not the draining, so senders never block.
pub(crate) fn spawn_writer(
    output: impl Write + Send + 'static,
    rx: mpsc::Receiver<Vec<u8>>,
    name: &str,
) -> std::io::Result<thread::JoinHandle<()>> {
    thread::Builder::new().name(name.to_owned()).spawn(move || {
        let mut output = BufWriter::with_capacity(64 * 1024, output);
        let mut ok = true;
        'messages: while let Ok(mut message) = rx.recv() {
            loop {
                if message.is_empty() {
                    break 'messages;
                }
                if ok {
                    ok = output.write_all(&message).is_ok();
                }
                match rx.try_recv() {
                    Ok(next) => message = next,
                    Err(_) => break,
                }
            }
            if ok {
                ok = output.flush().is_ok();
            }
            if !ok {
                tracing::debug!(target: "toolonce::mcp", "the client closed its input; answers are dropped");
            }
        }
        if ok {
            let _ = output.flush();
        }
    })
}
