//! Just enough JSON-RPC 2.0 to route messages without re-encoding them: a cheap look at a line
//! (its `method` and `id`, skipping everything else), request ids as map keys, the byte splice
//! that adds the operation key to a request's `params._meta`, and the few answers the proxy
//! writes itself. The splice stands on a scanner of JSON text (`scan`); the reading of what
//! serde_json refuses is in `lenient`.

use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny};
use serde_json::{Value, json};

mod lenient;
mod scan;

pub(crate) use lenient::{Lenient, array_members, lenient_meta};
use scan::member_span;

use super::protocol::{
    META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_KEY, META_PROTOCOL_VERSION, OUTCOME_KEY,
};

/// What routing needs to know about one message, read without building a tree of the rest.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Peek {
    /// The method of a request or notification.
    #[serde(default)]
    pub(crate) method: Option<String>,
    /// The id of a request or a response; `None` for a notification (or `"id": null`).
    #[serde(default)]
    pub(crate) id: Option<Value>,
    #[serde(default)]
    result: Present,
    #[serde(default)]
    error: Present,
}

impl Peek {
    /// Looks at one line. `None` if it is not a JSON object (malformed, a batch, a scalar): the
    /// caller passes such lines on untouched, or handles batches itself.
    pub(crate) fn of(line: &[u8]) -> Option<Peek> {
        match serde_json::from_slice(line) {
            Ok(peek) => Some(peek),
            // Valid JSON the quick look refuses (a member twice, a method that is not a
            // string): read it as the peer's parser would, the last member winning.
            Err(e) if e.is_data() => {
                let Value::Object(message) = serde_json::from_slice(line).ok()? else {
                    return None;
                };
                Some(Peek {
                    method: message
                        .get("method")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    id: message.get("id").filter(|id| !id.is_null()).cloned(),
                    result: Present(message.contains_key("result")),
                    error: Present(message.contains_key("error")),
                })
            }
            Err(_) => None,
        }
    }

    /// Whether this is a response (it has a `result` or an `error` and no `method`).
    pub(crate) fn is_response(&self) -> bool {
        self.method.is_none() && (self.result.0 || self.error.0)
    }
}

/// Whether a member is present at all, whatever its value (even `null`), without keeping it.
#[derive(Debug, Default)]
struct Present(bool);

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(d).map(|_| Present(true))
    }
}

/// A request id as a map key. Ids are strings or numbers; `1` and `1.0` are the same number (a
/// peer in JavaScript answers `1.0` with `1`), `"1"` and `1` are different ids.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) enum IdKey {
    Str(String),
    Num(String),
    Other(String),
}

impl IdKey {
    pub(crate) fn of(id: &Value) -> IdKey {
        match id {
            Value::String(s) => IdKey::Str(s.clone()),
            Value::Number(n) => IdKey::Num(number_text(n)),
            other => IdKey::Other(other.to_string()),
        }
    }
}

fn number_text(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    match n.as_f64() {
        // 2^53: below it every integral double is exactly an i64.
        Some(f) if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 => {
            // The range check above makes this cast exact.
            #[allow(clippy::cast_possible_truncation)]
            let i = f as i64;
            i.to_string()
        }
        _ => n.to_string(),
    }
}

impl fmt::Debug for IdKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdKey::Str(s) => write!(f, "{s:?}"),
            IdKey::Num(s) | IdKey::Other(s) => f.write_str(s),
        }
    }
}

/// A successful response with `id` and `result`, as one line.
pub(crate) fn result_line(id: &Value, result: &Value) -> Vec<u8> {
    line(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// A `CallToolResult` with one text block and `isError: true`: how the proxy answers a write
/// call it did not forward (in flight, conflict, store outage, timeout).
pub(crate) fn tool_error(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// A `notifications/cancelled` for `request_id`, as one line.
pub(crate) fn cancelled_line(request_id: &Value, reason: &str) -> Vec<u8> {
    line(&json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": request_id, "reason": reason},
    }))
}

/// Serializes `value` followed by a newline.
pub(crate) fn line(value: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(value).expect("a JSON value always serializes");
    out.push(b'\n');
    out
}

/// The other per-request members a 2026-07-28 server needs (the client's capabilities are
/// required) or may want (who is asking), copied to the proxy's own requests.
const CLIENT_META: [&str; 2] = [META_CLIENT_CAPABILITIES, META_CLIENT_INFO];

/// For the `params` of a request of protocol 2026-07-28 or later: its protocol version, and
/// the `_meta` for a request the proxy sends on the client's behalf to the same server (the
/// version, the capabilities and the client's identity; never its log level, progress token or
/// anything else, which would make the server send notifications the client did not ask for).
/// `None` for a request without a per-request protocol version (protocol 2025-11-25 or
/// earlier).
pub(crate) fn own_request_meta(params: &Value) -> Option<(String, Value)> {
    let meta = params.get("_meta")?.as_object()?;
    let version = meta.get(META_PROTOCOL_VERSION)?.as_str()?.to_owned();
    let mut own = serde_json::Map::new();
    own.insert(
        META_PROTOCOL_VERSION.to_owned(),
        Value::String(version.clone()),
    );
    for name in CLIENT_META {
        if let Some(value) = meta.get(name) {
            own.insert(name.to_owned(), value.clone());
        }
    }
    Some((version, Value::Object(own)))
}

/// Returns `request` (one JSON object on one line, already known to parse) with
/// `params._meta["toolonce/key"] = key`, every other byte kept as it was (see
/// [`with_meta_member`]). A `toolonce/key` the client sent (its own key) has its value
/// replaced, so the server sees one member.
///
/// `None` if the structure is not what a `tools/call` has (no `params` object, or a `_meta`
/// that is not an object).
pub(crate) fn add_meta_key(request: &[u8], key: &str) -> Option<Vec<u8>> {
    with_meta_member(request, "params", META_KEY, &json!(key))
}

/// `text` (one JSON object) with `PARENT._meta[NAME] = value`, where `PARENT` is a top-level
/// member (`params` of a request, `result` of an answer), every other byte kept as it was.
///
/// The message is spliced rather than re-serialized so the peer sees the other side's bytes
/// exactly: a re-encoding would reorder members and could change numbers (an integer beyond
/// 64 bits parses as a double). A `NAME` already there has its value replaced; without one,
/// the member is added last in `_meta` (created if absent).
///
/// `None` if `PARENT` is not an object, or its `_meta` is there and not an object.
pub(crate) fn with_meta_member(
    text: &[u8],
    parent: &str,
    name: &str,
    value: &Value,
) -> Option<Vec<u8>> {
    let value = value.to_string();
    let member = format!("{}:{value}", json!(name));
    let parent = member_span(text, 0, parent)?;
    if text.get(parent.start) != Some(&b'{') {
        return None;
    }
    let (at, insert) = match member_span(text, parent.start, "_meta") {
        Some(meta) => {
            if text.get(meta.start) != Some(&b'{') {
                return None;
            }
            // With a name given twice, this is the last one: the one a last-wins parser
            // (JavaScript's, serde_json's) keeps.
            if let Some(old) = member_span(text, meta.start, name) {
                let mut out = Vec::with_capacity(text.len() + value.len());
                out.extend_from_slice(&text[..old.start]);
                out.extend_from_slice(value.as_bytes());
                out.extend_from_slice(&text[old.end..]);
                return Some(out);
            }
            (meta.end - 1, with_comma(text, meta.clone(), member))
        }
        None => (
            parent.end - 1,
            with_comma(text, parent.clone(), format!("\"_meta\":{{{member}}}")),
        ),
    };
    let mut out = Vec::with_capacity(text.len() + insert.len());
    out.extend_from_slice(&text[..at]);
    out.extend_from_slice(insert.as_bytes());
    out.extend_from_slice(&text[at..]);
    Some(out)
}

/// The text of a request's `params.arguments`, as the client wrote it (the last member of each
/// name, as serde_json reads it), or `None` when it has none.
pub(crate) fn arguments_text(request: &[u8]) -> Option<&[u8]> {
    let params = member_span(request, 0, "params")?;
    let arguments = member_span(request, params.start, "arguments")?;
    Some(&request[arguments])
}

/// `answer` (a response, read or not by serde_json) with its top-level `id` replaced by `id`,
/// everything else as it came: how a duplicate gets the very bytes the first caller got.
/// `None` if no top-level `id` member is found.
pub(crate) fn with_id(answer: &[u8], id: &Value) -> Option<Vec<u8>> {
    let span = member_span(answer, 0, "id")?;
    let id = id.to_string();
    let mut out = Vec::with_capacity(answer.len() + id.len());
    out.extend_from_slice(&answer[..span.start]);
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(&answer[span.end..]);
    Some(out)
}

/// `text` (one JSON object, read or not by serde_json) with the value of the member at `path`
/// (member names from the top level down) replaced by `value`, every other byte as it came.
/// `None` if a member on the path is missing or an object on it is not one. How the gateway
/// gives a request of a shared proxy an id (or progress token) of its own, and the answer back
/// the client's.
pub(crate) fn with_member(text: &[u8], path: &[&str], value: &Value) -> Option<Vec<u8>> {
    let mut start = 0;
    let mut span = None;
    for name in path {
        let found = member_span(text, start, name)?;
        start = found.start;
        span = Some(found);
    }
    let span = span?;
    let value = value.to_string();
    let mut out = Vec::with_capacity(text.len() + value.len());
    out.extend_from_slice(&text[..span.start]);
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(&text[span.end..]);
    Some(out)
}

/// `member` prefixed with a comma unless the object spanning `object` is empty.
fn with_comma(text: &[u8], object: std::ops::Range<usize>, member: String) -> String {
    let inner = &text[object.start + 1..object.end - 1];
    if inner.iter().all(u8::is_ascii_whitespace) {
        member
    } else {
        format!(",{member}")
    }
}

/// A JSON-RPC error answer the proxy gives to a request it did not send on, with `id` (or
/// `null`), as one line; its `data` says that nothing ran.
pub(crate) fn error_line(id: Option<&Value>, code: i64, message: &str) -> Vec<u8> {
    line(&json!({
        "jsonrpc": "2.0",
        "id": id.cloned().unwrap_or(Value::Null),
        "error": {"code": code, "message": message, "data": {OUTCOME_KEY: "not_executed"}},
    }))
}

#[cfg(test)]
mod tests {
    #[test]
    fn with_id_replaces_only_the_top_level_id_of_bytes_serde_json_refuses() {
        let answer = br#"{"jsonrpc":"2.0","id":7,"result":{"id":"inner","text":"caf\ud83d"}}"#;
        let swapped = super::with_id(answer, &serde_json::json!("dup-1")).unwrap();
        assert_eq!(
            swapped,
            br#"{"jsonrpc":"2.0","id":"dup-1","result":{"id":"inner","text":"caf\ud83d"}}"#
                .to_vec()
        );
        assert!(super::with_id(b"not json", &serde_json::json!(1)).is_none());
    }

    use super::*;

    fn splice(text: &str) -> Value {
        let out = add_meta_key(text.as_bytes(), "idem:k").expect("spliced");
        serde_json::from_slice(&out).expect("still JSON")
    }

    #[test]
    fn with_member_replaces_only_the_member_at_its_path() {
        let text = br#"{"id":1,"params":{"progressToken":"no","_meta":{"progressToken":"t","x":"\ud83d"}}}"#;
        let out = with_member(text, &["params", "_meta", "progressToken"], &json!(7)).unwrap();
        assert_eq!(
            out,
            br#"{"id":1,"params":{"progressToken":"no","_meta":{"progressToken":7,"x":"\ud83d"}}}"#
        );
        assert!(with_member(text, &["params", "missing"], &json!(7)).is_none());
        assert!(with_member(text, &["id", "x"], &json!(7)).is_none());
    }

    #[test]
    fn key_is_added_to_params_without_a_meta() {
        let v = splice(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"b":1,"a":2}}}"#,
        );
        assert_eq!(v["params"]["_meta"], json!({"toolonce/key": "idem:k"}));
        assert_eq!(v["params"]["arguments"], json!({"b": 1, "a": 2}));
    }

    #[test]
    fn key_is_added_last_to_an_existing_meta() {
        let v = splice(r#"{"params":{"_meta":{"progressToken":7},"name":"t"},"id":"x"}"#);
        assert_eq!(
            v["params"]["_meta"],
            json!({"progressToken": 7, "toolonce/key": "idem:k"})
        );
        let v = splice(r#"{"params":{"_meta":{ },"name":"t"}}"#);
        assert_eq!(v["params"]["_meta"], json!({"toolonce/key": "idem:k"}));
    }

    #[test]
    fn a_client_sent_key_has_its_value_replaced_in_place() {
        let text = r#"{"params":{"_meta":{"a":1, "toolonce/key" : "step-1","b":[2]},"name":"t"}}"#;
        let out = String::from_utf8(add_meta_key(text.as_bytes(), "idem:k").unwrap()).unwrap();
        assert_eq!(
            out,
            r#"{"params":{"_meta":{"a":1, "toolonce/key" : "idem:k","b":[2]},"name":"t"}}"#
        );
        // Given twice, the last one (the one a last-wins parser keeps) is replaced.
        let v = splice(r#"{"params":{"_meta":{"toolonce/key":"a","toolonce/key":7}}}"#);
        assert_eq!(v["params"]["_meta"]["toolonce/key"], "idem:k");
    }

    #[test]
    fn own_requests_carry_the_clients_protocol_version_and_capabilities_only() {
        let params = json!({"name": "t", "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
            "io.modelcontextprotocol/logLevel": "debug",
            "progressToken": 5,
            "toolonce/key": "k",
        }});
        let (version, meta) = own_request_meta(&params).unwrap();
        assert_eq!(version, "2026-07-28");
        assert_eq!(
            meta,
            json!({
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
            })
        );
        assert!(own_request_meta(&json!({"_meta": {"progressToken": 1}})).is_none());
        assert!(own_request_meta(&json!({"name": "t"})).is_none());
    }

    #[test]
    fn splicing_keeps_every_other_byte() {
        let text = r#"{ "id" : 1 , "params" : { "arguments" : {"n": 123456789012345678901234567890, "s": "}\"{"} } , "x-extra": [1, {"a": "]"}] }"#;
        let out = String::from_utf8(add_meta_key(text.as_bytes(), "idem:k").unwrap()).unwrap();
        assert_eq!(
            out,
            r#"{ "id" : 1 , "params" : { "arguments" : {"n": 123456789012345678901234567890, "s": "}\"{"} ,"_meta":{"toolonce/key":"idem:k"}} , "x-extra": [1, {"a": "]"}] }"#
        );
    }

    #[test]
    fn empty_params_and_escaped_member_names_are_handled() {
        let v = splice(r#"{"params":{}}"#);
        assert_eq!(v["params"], json!({"_meta": {"toolonce/key": "idem:k"}}));
        let v = splice(r#"{"par\u0061ms":{"\u005fmeta":{"a":1}}}"#);
        assert_eq!(
            v["params"]["_meta"],
            json!({"a": 1, "toolonce/key": "idem:k"})
        );
    }

    #[test]
    fn splice_refuses_shapes_it_cannot_extend() {
        assert!(add_meta_key(br#"{"id":1}"#, "k").is_none());
        assert!(add_meta_key(br#"{"params":[1]}"#, "k").is_none());
        assert!(add_meta_key(br#"{"params":{"_meta":null}}"#, "k").is_none());
    }

    #[test]
    fn peek_reads_method_and_id_and_tells_responses_apart() {
        let p = Peek::of(br#"{"jsonrpc":"2.0","id":3,"result":null}"#).unwrap();
        assert!(p.is_response());
        assert_eq!(p.id, Some(json!(3)));
        let p =
            Peek::of(br#"{"id":"a","method":"ping","params":{"deep":[1,2,{"x":null}]}}"#).unwrap();
        assert!(!p.is_response());
        assert_eq!(p.method.as_deref(), Some("ping"));
        assert!(Peek::of(b"[1]").is_none());
        // A member twice: the last one counts, as in JavaScript.
        let p = Peek::of(br#"{"method":"ping","method":"tools/call","id":1}"#).unwrap();
        assert_eq!(p.method.as_deref(), Some("tools/call"));
        assert!(Peek::of(b"{oops").is_none());
    }

    #[test]
    fn equal_numbers_are_one_id_and_strings_differ_from_numbers() {
        assert!(IdKey::of(&json!(1)) == IdKey::of(&serde_json::from_str("1.0").unwrap()));
        assert!(IdKey::of(&json!(1)) != IdKey::of(&json!("1")));
        assert!(IdKey::of(&json!(u64::MAX)) == IdKey::of(&json!(u64::MAX)));
    }
}
