//! Messages as they come from a Streamable HTTP server, for routing: one line each, and the ids
//! of the requests and answers in them.

use serde_json::Value;

use crate::mcp::jsonrpc::{IdKey, Peek};

/// What comes back from the server, for routing.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// One message, as one line.
    Message(Vec<u8>),
    /// One message the server sent on the event stream of its answer to the request with this
    /// id (progress, a log message, a request of its own made while handling it): it belongs
    /// to that request.
    Related(Vec<u8>, Value),
    /// Requests that left and will never be answered (the connection broke, a 5xx status):
    /// their ids, and why.
    Lost(Vec<Value>, String),
}

/// The message as one line: line breaks (JSON whitespace) become spaces, one newline ends it.
pub(super) fn one_line(mut message: Vec<u8>) -> Vec<u8> {
    let end = message.trim_ascii_end().len();
    message.truncate(end);
    for b in &mut message {
        if matches!(*b, b'\n' | b'\r') {
            *b = b' ';
        }
    }
    message.push(b'\n');
    message
}

/// The ids of the requests in a message (one, or the members of a batch).
pub(crate) fn request_ids(message: &[u8]) -> Vec<Value> {
    let is_request = |p: &Peek| p.method.is_some();
    match message.trim_ascii_start().first() {
        Some(b'{') => Peek::of(message)
            .filter(is_request)
            .and_then(|p| p.id)
            .into_iter()
            .collect(),
        Some(b'[') => serde_json::from_slice::<Vec<Value>>(message)
            .unwrap_or_default()
            .into_iter()
            .filter(|m| m.get("method").is_some())
            .filter_map(|mut m| m.get_mut("id").map(Value::take))
            .filter(|id| !id.is_null())
            .collect(),
        _ => Vec::new(),
    }
}

/// The ids of the answers in a message (one, or the members of a batch).
pub(super) fn response_ids(line: &[u8]) -> Vec<IdKey> {
    match line.trim_ascii_start().first() {
        Some(b'{') => Peek::of(line)
            .filter(Peek::is_response)
            .and_then(|p| p.id)
            .map(|id| IdKey::of(&id))
            .into_iter()
            .collect(),
        Some(b'[') => serde_json::from_slice::<Vec<Value>>(line)
            .unwrap_or_default()
            .iter()
            .filter(|m| m.get("method").is_none())
            .filter_map(|m| m.get("id").map(IdKey::of))
            .collect(),
        _ => Vec::new(),
    }
}

pub(super) fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_become_one_line_with_their_other_bytes_kept() {
        assert_eq!(
            one_line(b"{\"a\": \"x y\",\r\n \"b\":1.0}\n\n".to_vec()),
            b"{\"a\": \"x y\",   \"b\":1.0}\n"
        );
    }
}
