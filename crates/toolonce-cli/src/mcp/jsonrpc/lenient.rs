//! Reading what serde_json refuses but a JavaScript or Python server would accept, just far
//! enough to know whether it is a write call: its method, id and tool, its `_meta`, and the
//! members of a batch.

use serde_json::{Value, json};

use super::scan::{decode_string, member_span, skip_value, skip_ws};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
