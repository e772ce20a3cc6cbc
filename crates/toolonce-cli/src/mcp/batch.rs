//! A client's JSON-RPC batch that holds write calls, answered as one array.
//!
//! Batches were part of MCP in protocol version 2025-03-26 only. A batch without a write call
//! passes through untouched, byte for byte, as does the server's array answer. A batch with one
//! is split, because passing it through would run its write calls around the layer: every
//! member goes to the server as a single message (write calls through the layer, so possibly
//! not at all), and the answers (the server's, the proxy's) are collected here into one array
//! for the client, in the order of the requests. JSON-RPC gives single messages and batches the
//! same meaning, and every server that took the batch takes its members one by one.

use std::sync::Mutex;

use super::stdio::ClientOut;

/// The answers of one split batch, as they arrive.
#[derive(Debug)]
pub(crate) struct Batch {
    state: Mutex<State>,
    out: ClientOut,
}

#[derive(Debug)]
struct State {
    /// One slot per request of the batch; `None` until answered (or for no answer).
    answers: Vec<Option<Vec<u8>>>,
    /// Slots not settled yet.
    remaining: usize,
}

impl Batch {
    /// A batch of `requests` requests (members that expect an answer).
    pub(crate) fn new(requests: usize, out: ClientOut) -> Self {
        Batch {
            state: Mutex::new(State {
                answers: vec![None; requests],
                remaining: requests,
            }),
            out,
        }
    }

    /// Settles slot `slot` with an answer (one JSON message; a trailing newline is dropped), or
    /// with none (a call the client cancelled). The last one sends the array to the client; if
    /// no slot has an answer, nothing is sent.
    pub(crate) fn settle(&self, slot: usize, answer: Option<Vec<u8>>) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if slot >= state.answers.len() || state.remaining == 0 {
            return;
        }
        state.answers[slot] = answer;
        state.remaining -= 1;
        if state.remaining > 0 {
            return;
        }
        let mut array = b"[".to_vec();
        for answer in state.answers.iter().flatten() {
            if array.len() > 1 {
                array.push(b',');
            }
            array.extend_from_slice(answer.trim_ascii_end());
        }
        array.extend_from_slice(b"]\n");
        if array.len() > 3 {
            self.out.send(array);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_sent_as_one_array_in_request_order_once_all_arrived() {
        let (out, mut rx) = ClientOut::channel();
        let batch = Batch::new(3, out);
        batch.settle(2, Some(b"{\"id\":3}\n".to_vec()));
        batch.settle(0, Some(b"{\"id\":1}".to_vec()));
        assert!(rx.try_recv().is_err());
        batch.settle(1, None);
        assert_eq!(rx.try_recv().unwrap(), b"[{\"id\":1},{\"id\":3}]\n");
    }

    #[test]
    fn a_batch_without_answers_sends_nothing() {
        let (out, mut rx) = ClientOut::channel();
        let batch = Batch::new(1, out);
        batch.settle(0, None);
        assert!(rx.try_recv().is_err());
    }
}
