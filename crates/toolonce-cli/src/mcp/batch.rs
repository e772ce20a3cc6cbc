//! A client's JSON-RPC batch that holds write calls: how it is split, and its answers
//! collected into one array.
//!
//! Batches were part of MCP in protocol version 2025-03-26 only. A batch without a write call
//! passes through untouched, byte for byte, as does the server's array answer. A batch with one
//! is split, because passing it through would run its write calls around the layer: every
//! member goes to the server as a single message (write calls through the layer, so possibly
//! not at all), and the answers (the server's, the proxy's) are collected here into one array
//! for the client, in the order of the requests. JSON-RPC gives single messages and batches the
//! same meaning, and every server that took the batch takes its members one by one.
//!
//! A batch whose requests could not be told apart from requests in progress (an id twice, an id
//! taken) is refused whole, and so is one holding a write call that cannot be read exactly:
//! every request in it is answered with an error and nothing is sent. This module decides
//! ([`Plan`]); the proxy acts (claims, forwards), holding the routing tables where it must.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use toolonce::texts::Text;

use serde_json::Value;

use super::jsonrpc::{self, IdKey, Lenient};
use super::protocol::INVALID_REQUEST;
use super::stdio::ClientOut;

/// Whether a line may hold a `tools/call` (a cheap test before waiting for the tool list).
pub(super) fn may_hold_call(line: &[u8]) -> bool {
    line.windows(4).any(|w| w == b"call")
}

/// A parsed batch, its members classified.
pub(super) struct Plan {
    members: Vec<Value>,
    /// Whether each member is a write call.
    writes: Vec<bool>,
    /// The ids of its requests (members with a method and an id), in order.
    ids: Vec<IdKey>,
}

/// What becomes of one member of a split batch.
pub(super) enum Member {
    /// A write call, answered into `slot`.
    Write { message: Value, slot: usize },
    /// Another request, forwarded with its answer routed into `slot`; `list`: a `tools/list`.
    Request {
        message: Value,
        id: IdKey,
        slot: usize,
        list: bool,
    },
    /// A notification (a cancel among them), forwarded as a message of its own.
    Notification(Value),
}

impl Plan {
    /// Classifies `members`; `is_write` says whether a member is a write call.
    pub(super) fn of(members: Vec<Value>, is_write: impl Fn(&Value) -> bool) -> Self {
        let writes = members.iter().map(|m| is_call(m) && is_write(m)).collect();
        let ids = members.iter().filter_map(request_id).collect();
        Plan {
            members,
            writes,
            ids,
        }
    }

    /// Whether a member is a write call: then the batch is split.
    pub(super) fn has_writes(&self) -> bool {
        self.writes.contains(&true)
    }

    /// The ids of its requests.
    pub(super) fn ids(&self) -> &[IdKey] {
        &self.ids
    }

    /// Whether a request id is used twice in a batch that is to be split, so that answers could
    /// not be told apart.
    pub(super) fn reuses_an_id(&self) -> bool {
        let unique: HashSet<&IdKey> = self.ids.iter().collect();
        unique.len() != self.ids.len() && self.has_writes()
    }

    /// The batch's requests, and whether each is a `tools/list`, for a batch passed on whole.
    pub(super) fn requests(&self) -> impl Iterator<Item = (IdKey, bool)> + '_ {
        self.members
            .iter()
            .filter_map(|m| request_id(m).map(|id| (id, is_list(m))))
    }

    /// The answer refusing the whole batch because it `why`, if it holds a request (`None`:
    /// nothing to answer).
    pub(super) fn refusal(&self, why: &str) -> Option<Vec<u8>> {
        tracing::warn!(target: "toolonce::mcp", "refused a batch that {why}");
        let text = Text::McpBatchRefused.fill(&[("why", why)]);
        let answers: Vec<Value> = self
            .members
            .iter()
            .filter_map(|m| m.get("method").and(m.get("id")).filter(|id| !id.is_null()))
            .map(|id| {
                serde_json::from_slice(&jsonrpc::error_line(Some(id), INVALID_REQUEST, &text))
                    .expect("an answer the proxy made is JSON")
            })
            .collect();
        (!answers.is_empty()).then(|| jsonrpc::line(&Value::Array(answers)))
    }

    /// Splits the batch: the members, each with its slot in the array of answers sent to `out`.
    pub(super) fn split(self, out: ClientOut) -> (Arc<Batch>, Vec<Member>) {
        let batch = Arc::new(Batch::new(self.ids.len(), out));
        let mut slot = 0;
        let mut members = Vec::with_capacity(self.members.len());
        for (message, is_write) in self.members.into_iter().zip(self.writes) {
            let id = request_id(&message);
            members.push(if is_write {
                slot += 1;
                Member::Write {
                    message,
                    slot: slot - 1,
                }
            } else if let Some(id) = id {
                slot += 1;
                Member::Request {
                    list: is_list(&message),
                    message,
                    id,
                    slot: slot - 1,
                }
            } else {
                Member::Notification(message)
            });
        }
        (batch, members)
    }
}

/// The answer to a batch serde_json cannot read that holds a write call the proxy cannot key:
/// every request in it is answered with an error (a call with `unreadable(call)`), none is
/// sent.
pub(super) fn unreadable_refusal(
    members: &[Lenient],
    unreadable: impl Fn(&Lenient) -> Vec<u8>,
) -> Vec<u8> {
    let answers: Vec<Value> = members
        .iter()
        .filter(|m| m.method.is_some() && m.id.is_some())
        .map(|m| {
            let line = if m.method.as_deref() == Some("tools/call") {
                unreadable(m)
            } else {
                jsonrpc::error_line(
                    m.id.as_ref(),
                    INVALID_REQUEST,
                    &Text::McpBatchUnreadable.fill(&[]),
                )
            };
            serde_json::from_slice(&line).expect("an answer the proxy made is JSON")
        })
        .collect();
    tracing::warn!(target: "toolonce::mcp", "refused a batch with a write call that cannot be read exactly");
    jsonrpc::line(&Value::Array(answers))
}

fn is_call(m: &Value) -> bool {
    m.get("method").and_then(Value::as_str) == Some("tools/call")
}

fn is_list(m: &Value) -> bool {
    m.get("method").and_then(Value::as_str) == Some("tools/list")
}

/// The id of a member that is a request.
fn request_id(m: &Value) -> Option<IdKey> {
    m.get("method")
        .and(m.get("id"))
        .filter(|id| !id.is_null())
        .map(IdKey::of)
}

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
        assert_eq!(rx.try_recv().unwrap().line, b"[{\"id\":1},{\"id\":3}]\n");
    }

    #[test]
    fn a_batch_without_answers_sends_nothing() {
        let (out, mut rx) = ClientOut::channel();
        let batch = Batch::new(1, out);
        batch.settle(0, None);
        assert!(rx.try_recv().is_err());
    }
}
