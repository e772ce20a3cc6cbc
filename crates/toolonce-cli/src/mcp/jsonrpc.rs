//! Just enough JSON-RPC 2.0 to route messages without re-encoding them: a cheap look at a line
//! (its `method` and `id`, skipping everything else), request ids as map keys, the byte splice
//! that adds the operation key to a request's `params._meta`, and the few answers the proxy
//! writes itself.

use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny};
use serde_json::{Value, json};

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
/// `params._meta["toolonce/key"] = key`, every other byte kept as it was.
///
/// The request is spliced rather than re-serialized so the server sees the client's arguments
/// exactly: a re-encoding would reorder members and could change numbers (an integer beyond
/// 64 bits parses as a double). A `toolonce/key` the client sent (its own key) has its value
/// replaced, so the server sees one member; without one, the member is added last in `_meta`.
///
/// `None` if the structure is not what a `tools/call` has (no `params` object, or a `_meta`
/// that is not an object).
pub(crate) fn add_meta_key(request: &[u8], key: &str) -> Option<Vec<u8>> {
    let key_member = format!("{}:{}", json!(META_KEY), json!(key));
    let params = member_span(request, 0, "params")?;
    if request.get(params.start) != Some(&b'{') {
        return None;
    }
    let (at, insert) = match member_span(request, params.start, "_meta") {
        Some(meta) => {
            if request.get(meta.start) != Some(&b'{') {
                return None;
            }
            // With a name given twice, this is the last one: the one a last-wins parser
            // (JavaScript's, serde_json's) keeps.
            if let Some(value) = member_span(request, meta.start, META_KEY) {
                let mut out = Vec::with_capacity(request.len() + key.len());
                out.extend_from_slice(&request[..value.start]);
                out.extend_from_slice(json!(key).to_string().as_bytes());
                out.extend_from_slice(&request[value.end..]);
                return Some(out);
            }
            (meta.end - 1, with_comma(request, meta.clone(), key_member))
        }
        None => (
            params.end - 1,
            with_comma(
                request,
                params.clone(),
                format!("\"_meta\":{{{key_member}}}"),
            ),
        ),
    };
    let mut out = Vec::with_capacity(request.len() + insert.len());
    out.extend_from_slice(&request[..at]);
    out.extend_from_slice(insert.as_bytes());
    out.extend_from_slice(&request[at..]);
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

/// The byte range of the value of member `name` of the object that starts at `start` (after
/// any whitespace). Scans the text once, skipping nested values; member names with escapes are
/// decoded before comparing. With duplicate names the last one counts, as in serde_json.
fn member_span(text: &[u8], start: usize, name: &str) -> Option<std::ops::Range<usize>> {
    let mut i = skip_ws(text, start);
    if text.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(text, i + 1);
    let mut found = None;
    if text.get(i) == Some(&b'}') {
        return None;
    }
    loop {
        let name_end = skip_string(text, i)?;
        let raw = &text[i..name_end];
        let matches = if raw.contains(&b'\\') {
            decode_string(raw)?.0 == name
        } else {
            &raw[1..raw.len() - 1] == name.as_bytes()
        };
        i = skip_ws(text, name_end);
        if text.get(i) != Some(&b':') {
            return None;
        }
        let value_start = skip_ws(text, i + 1);
        let value_end = skip_value(text, value_start)?;
        if matches {
            found = Some(value_start..value_end);
        }
        i = skip_ws(text, value_end);
        match text.get(i) {
            Some(b',') => i = skip_ws(text, i + 1),
            Some(b'}') => return found,
            _ => return None,
        }
    }
}

/// `{"_meta": …}` with the `params._meta` of a request serde_json cannot read as a whole (see
/// [`Lenient`]), if that part of it is exact JSON.
pub(crate) fn lenient_meta(text: &[u8]) -> Option<Value> {
    let params = member_span(text, skip_ws(text, 0), "params")?;
    let meta = member_span(text, params.start, "_meta")?;
    let meta: Value = serde_json::from_slice(&text[meta]).ok()?;
    Some(json!({ "_meta": meta }))
}

/// What a lenient reading finds in one JSON object that serde_json refuses (invalid UTF-8, a
/// lone surrogate escape, a number beyond f64, nesting deeper than 127 levels): the parsers of
/// JavaScript and Python servers accept all of these, so the proxy must know whether such a
/// line is a write call before it lets it through.
#[derive(Debug, Default)]
pub(crate) struct Lenient {
    pub(crate) method: Option<String>,
    /// The id, as the client wrote it if serde_json can read it, else its lenient decoding
    /// (a string) or `null`.
    pub(crate) id: Option<Value>,
    /// `params.name`, and whether it was decoded exactly (no invalid UTF-8, no lone surrogate).
    pub(crate) tool: Option<(String, bool)>,
}

impl Lenient {
    /// Reads the object spanning `text`. `None` if it is not an object even to a lenient
    /// parser (unbalanced, a member without a value): no JSON parser accepts it either.
    pub(crate) fn of(text: &[u8]) -> Option<Lenient> {
        let start = skip_ws(text, 0);
        // The scan must reach the end of the object: a line that is not even that is refused
        // by every parser.
        skip_value(text, start)?;
        let method = member_span(text, start, "method")
            .and_then(|span| decode_string(&text[span]))
            .map(|(method, _)| method);
        let id = member_span(text, start, "id").map(|span| {
            let raw = &text[span];
            serde_json::from_slice::<Value>(raw)
                .ok()
                .or_else(|| decode_string(raw).map(|(s, _)| Value::String(s)))
                .unwrap_or(Value::Null)
        });
        let tool = member_span(text, start, "params")
            .and_then(|params| member_span(text, params.start, "name"))
            .and_then(|span| decode_string(&text[span]));
        Some(Lenient {
            method,
            id: id.filter(|id| !id.is_null()),
            tool,
        })
    }
}

/// The members of the JSON array spanning `text`, as byte ranges, read leniently (see
/// [`Lenient`]). `None` if it is not an array even to a lenient parser.
pub(crate) fn array_members(text: &[u8]) -> Option<Vec<std::ops::Range<usize>>> {
    let mut i = skip_ws(text, 0);
    if text.get(i) != Some(&b'[') {
        return None;
    }
    i = skip_ws(text, i + 1);
    let mut members = Vec::new();
    if text.get(i) == Some(&b']') {
        return Some(members);
    }
    loop {
        let end = skip_value(text, i)?;
        members.push(i..end);
        i = skip_ws(text, end);
        match text.get(i) {
            Some(b',') => i = skip_ws(text, i + 1),
            Some(b']') => return Some(members),
            _ => return None,
        }
    }
}

/// Decodes a JSON string (with its quotes) as a lenient parser would: invalid UTF-8 and lone
/// surrogate escapes become U+FFFD. The flag says whether the decoding was exact.
fn decode_string(raw: &[u8]) -> Option<(String, bool)> {
    let inner = raw.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    let mut exact = std::str::from_utf8(inner).is_ok();
    let mut bytes = Vec::with_capacity(inner.len());
    let mut units: Vec<u16> = Vec::new();
    let flush = |units: &mut Vec<u16>, bytes: &mut Vec<u8>, exact: &mut bool| {
        for c in char::decode_utf16(units.drain(..)) {
            let c = c.unwrap_or_else(|_| {
                *exact = false;
                char::REPLACEMENT_CHARACTER
            });
            bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
        }
    };
    let mut i = 0;
    while i < inner.len() {
        if inner[i] != b'\\' {
            flush(&mut units, &mut bytes, &mut exact);
            bytes.push(inner[i]);
            i += 1;
            continue;
        }
        let escaped = *inner.get(i + 1)?;
        if escaped == b'u' {
            let hex = std::str::from_utf8(inner.get(i + 2..i + 6)?).ok()?;
            units.push(u16::from_str_radix(hex, 16).ok()?);
            i += 6;
            continue;
        }
        flush(&mut units, &mut bytes, &mut exact);
        bytes.push(match escaped {
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            other => other,
        });
        i += 2;
    }
    flush(&mut units, &mut bytes, &mut exact);
    Some((String::from_utf8_lossy(&bytes).into_owned(), exact))
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

fn skip_ws(text: &[u8], mut i: usize) -> usize {
    while text
        .get(i)
        .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
    {
        i += 1;
    }
    i
}

/// The index just past the string starting at `i`.
fn skip_string(text: &[u8], i: usize) -> Option<usize> {
    if text.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    loop {
        match text.get(j)? {
            b'"' => return Some(j + 1),
            b'\\' => j += 2,
            _ => j += 1,
        }
    }
}

/// The index just past the value starting at `i`.
fn skip_value(text: &[u8], i: usize) -> Option<usize> {
    match text.get(i)? {
        b'"' => skip_string(text, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match text.get(j)? {
                    b'"' => {
                        j = skip_string(text, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            // A number, true, false or null: up to the next delimiter.
            let mut j = i;
            while text
                .get(j)
                .is_some_and(|b| !matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
            {
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn splice(text: &str) -> Value {
        let out = add_meta_key(text.as_bytes(), "idem:k").expect("spliced");
        serde_json::from_slice(&out).expect("still JSON")
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
    fn lenient_reading_finds_method_id_and_tool_in_what_serde_json_refuses() {
        let deep = format!(
            r#"{{"id":3,"method":"tools/call","params":{{"name":"t","arguments":{}{}}}}}"#,
            "[".repeat(300),
            "]".repeat(300)
        );
        for text in [
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"to":"\ud800"}}}"#.to_vec(),
            br#"{"id":1,"method":"tools\/call","params":{"arguments":{"n":1e400},"name":"t"}}"#.to_vec(),
            b"{\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"t\",\"arguments\":{\"s\":\"\xff\"}}}".to_vec(),
            deep.into_bytes(),
        ] {
            assert!(serde_json::from_slice::<Value>(&text).is_err());
            let l = Lenient::of(&text).expect("read leniently");
            assert_eq!(l.method.as_deref(), Some("tools/call"));
            assert!(l.id.is_some());
            assert_eq!(l.tool, Some(("t".to_owned(), true)));
        }
        // A tool name that cannot be read exactly says so.
        let l = Lenient::of(br#"{"id":"a","method":"tools/call","params":{"name":"t\udc00"}}"#)
            .unwrap();
        assert_eq!(l.id, Some(json!("a")));
        assert!(!l.tool.unwrap().1);
        // What no parser accepts is not read at all.
        assert!(Lenient::of(b"{\"id\":1,\"method\":").is_none());
    }

    #[test]
    fn the_meta_of_an_unreadable_request_is_read_if_it_is_exact() {
        let text = br#"{"id":1,"method":"tools/call","params":{"_meta":{"v":"x"},"arguments":{"s":"\ud800"}}}"#;
        assert!(serde_json::from_slice::<Value>(text).is_err());
        assert_eq!(lenient_meta(text), Some(json!({"_meta": {"v": "x"}})));
        let text = br#"{"id":1,"params":{"_meta":{"v":"\ud800"}}}"#;
        assert_eq!(lenient_meta(text), None);
        assert_eq!(lenient_meta(br#"{"id":1,"params":{}}"#), None);
    }

    #[test]
    fn array_members_are_found_without_parsing_them() {
        let text = br#"[ {"a":"\ud800"} , 1e400, [[["x"]]] ]"#;
        let members = array_members(text).unwrap();
        let parts: Vec<&[u8]> = members.iter().map(|r| &text[r.clone()]).collect();
        assert_eq!(
            parts,
            [&br#"{"a":"\ud800"}"#[..], b"1e400", br#"[[["x"]]]"#]
        );
        assert_eq!(array_members(b"[]").unwrap().len(), 0);
        assert!(array_members(b"[1,").is_none());
    }

    #[test]
    fn equal_numbers_are_one_id_and_strings_differ_from_numbers() {
        assert!(IdKey::of(&json!(1)) == IdKey::of(&serde_json::from_str("1.0").unwrap()));
        assert!(IdKey::of(&json!(1)) != IdKey::of(&json!("1")));
        assert!(IdKey::of(&json!(u64::MAX)) == IdKey::of(&json!(u64::MAX)));
    }
}
