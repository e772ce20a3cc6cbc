//! Server-sent events (`text/event-stream`), as the proxy reads them from a Streamable HTTP
//! server: the bodies of POSTs that answer with a stream, and the GET stream.

use http_body_util::BodyExt;
use hyper::Response;
use hyper::body::Incoming as Body;
use hyper::header;

use crate::mcp::protocol::EVENT_STREAM;

/// One server-sent event.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Event {
    /// The data of a `message` event (the default type); `None` for other types and for
    /// events without data, or with empty data (such as the event that opens a resumable
    /// stream, which only sets an id): those are no message.
    pub(super) data: Option<Vec<u8>>,
    pub(super) id: Option<String>,
    pub(super) retry: Option<u64>,
}

/// The events of an SSE body, parsed as they arrive.
pub(super) struct Events {
    body: Body,
    parser: Parser,
    ready: std::collections::VecDeque<Event>,
    /// Whether the body ended cleanly.
    pub(super) complete: bool,
    pub(super) error: Option<String>,
}

impl Events {
    pub(super) fn new(body: Body) -> Self {
        Events {
            body,
            parser: Parser::default(),
            ready: Default::default(),
            complete: false,
            error: None,
        }
    }

    pub(super) async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            if self.complete || self.error.is_some() {
                return None;
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.parser.feed(&data, &mut self.ready);
                    }
                }
                Some(Err(e)) => self.error = Some(e.to_string()),
                None => self.complete = true,
            }
        }
    }
}

/// The `text/event-stream` format: lines end with CR, LF or CRLF; a blank line ends an event.
#[derive(Debug, Default)]
struct Parser {
    line: Vec<u8>,
    /// The last byte was a CR: an LF right after it ends no second line.
    after_cr: bool,
    data: Vec<u8>,
    has_data: bool,
    event: Vec<u8>,
    id: Option<String>,
    retry: Option<u64>,
}

impl Parser {
    fn feed(&mut self, bytes: &[u8], out: &mut std::collections::VecDeque<Event>) {
        for &b in bytes {
            match b {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.line);
                    self.field(&line, out);
                }
                _ => {
                    self.after_cr = false;
                    self.line.push(b);
                }
            }
        }
    }

    fn field(&mut self, line: &[u8], out: &mut std::collections::VecDeque<Event>) {
        if line.is_empty() {
            let message = self.event.is_empty() || self.event == b"message";
            let data = std::mem::take(&mut self.data);
            let event = Event {
                data: (self.has_data && message && !data.trim_ascii().is_empty()).then_some(data),
                id: self.id.take(),
                retry: self.retry.take(),
            };
            self.has_data = false;
            self.event.clear();
            if event != Event::default() {
                out.push_back(event);
            }
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (name, mut value) = match line.iter().position(|&b| b == b':') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &[][..]),
        };
        if value.first() == Some(&b' ') {
            value = &value[1..];
        }
        match name {
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => self.event = value.to_vec(),
            b"id" if !value.contains(&0) => {
                self.id = Some(String::from_utf8_lossy(value).into_owned());
            }
            b"retry" => self.retry = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()),
            _ => {}
        }
    }
}

pub(super) fn is_event_stream(response: &Response<Body>) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with(EVENT_STREAM))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<Event> {
        let mut parser = Parser::default();
        let mut out = std::collections::VecDeque::new();
        for chunk in chunks {
            parser.feed(chunk, &mut out);
        }
        out.into_iter().collect()
    }

    #[test]
    fn events_split_anywhere_and_any_line_ending_parse_the_same() {
        let whole: &[u8] = b"event: message\r\nid: 7\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n: ping\n\ndata:x\r\rdata: y\n\n";
        let expected = events(&[whole]);
        assert_eq!(expected.len(), 3, "{expected:?}");
        assert_eq!(expected[0].data.as_deref(), Some(&b"{\"a\":\n1}"[..]));
        assert_eq!(expected[0].id.as_deref(), Some("7"));
        assert_eq!(expected[1].data.as_deref(), Some(&b"x"[..]));
        assert_eq!(expected[2].data.as_deref(), Some(&b"y"[..]));
        for split in 0..whole.len() {
            let (a, b) = whole.split_at(split);
            assert_eq!(events(&[a, b]), expected, "split at {split}");
        }
    }

    #[test]
    fn events_of_other_types_and_ids_alone_carry_no_message() {
        let out = events(&[b"id: 3\nretry: 500\ndata: \n\nevent: ping\ndata: 1\n\n"]);
        let only_id = Event {
            data: None,
            id: Some("3".into()),
            retry: Some(500),
        };
        assert_eq!(out, vec![only_id]);
    }
}
