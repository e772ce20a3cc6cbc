//! What a store may hold, and how stores read it back: the nesting limit every writer checks
//! before it stores a result (so that every reader, in any language, can read what was
//! stored), and the lenient reading of text another writer produced.

/// The deepest a stored result, or a stored error's detail, may nest (levels of arrays and
/// objects; a scalar is 0). Readers parse an entry with its own wrapping around the result
/// (the Redis wire format puts a result one level and an error's detail two levels deep), and
/// serde_json reads 127 levels in all; 100 leaves room for that wrapping on every store, and
/// is the number every writer checks before storing.
pub const MAX_STORED_DEPTH: usize = 100;

use serde_json::Value;

/// How deep `value` nests: 0 for a scalar, 1 for `[]` or `{}`, one more per level. A value
/// nested more than [`RECURSION_LIMIT`] levels is walked without recursion, so one nested a
/// million levels (which a Rust tool can build) cannot overflow the stack here.
pub(crate) fn nesting_depth(value: &Value) -> usize {
    // Every result is measured before it is stored: the recursive walk allocates nothing (the
    // heap walk allocated a stack and an iterator per container, 1.15k instructions for a
    // three-member result under callgrind).
    depth_within(value, RECURSION_LIMIT).unwrap_or_else(|| deep_nesting_depth(value))
}

/// How deep [`nesting_depth`] recurses before it walks on the heap instead: a few kilobytes of
/// stack, and more than any stored value may nest ([`MAX_STORED_DEPTH`]).
const RECURSION_LIMIT: usize = 128;

/// The depth of `value`, or `None` if it nests more than `budget` levels.
fn depth_within(value: &Value, budget: usize) -> Option<usize> {
    let children: &mut dyn Iterator<Item = &Value> = match value {
        Value::Array(items) => &mut items.iter(),
        Value::Object(members) => &mut members.values(),
        _ => return Some(0),
    };
    // This container is one level of the budget; its children have the rest.
    let below = budget.checked_sub(1)?;
    let mut deepest = 0;
    for child in children {
        deepest = deepest.max(depth_within(child, below)?);
    }
    Some(deepest + 1)
}

/// [`nesting_depth`] on the heap, for values nested too deep to recurse.
fn deep_nesting_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut pending: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((value, depth)) = pending.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(members) => Box::new(members.values()),
            _ => continue,
        };
        deepest = deepest.max(depth + 1);
        pending.extend(children.map(|child| (child, depth + 1)));
    }
    deepest
}

/// Reads stored JSON text as `T`, reading another writer's lone surrogate escapes as U+FFFD
/// (see [`without_lone_surrogates`]) instead of failing on them.
pub(crate) fn read_stored<T: serde::de::DeserializeOwned>(text: &str) -> serde_json::Result<T> {
    read_lenient(text.as_bytes(), &mut None)
}

/// Reads stored JSON bytes as `T`, which may borrow from them: first as they are, then, if that
/// fails and they hold lone surrogate escapes, repaired into `repaired` (see
/// [`without_lone_surrogates`]). The one place a reader's fallback lives.
pub(crate) fn read_lenient<'a, T: serde::Deserialize<'a>>(
    raw: &'a [u8],
    repaired: &'a mut Option<Vec<u8>>,
) -> serde_json::Result<T> {
    match read_json(raw) {
        Ok(value) => Ok(value),
        Err(e) => match without_lone_surrogates(raw) {
            Some(readable) => read_json(repaired.insert(readable)),
            None => Err(e),
        },
    }
}

/// Reads JSON bytes as `T`. Text that is UTF-8 throughout (every entry, in practice) is checked
/// once and read as a `str`: reading bytes checks every string of the document on its own,
/// which cost more than the rest of reading an entry's keys. Bytes that are not UTF-8 are read
/// as bytes, to fail (or not) exactly as they always did.
fn read_json<'a, T: serde::Deserialize<'a>>(raw: &'a [u8]) -> serde_json::Result<T> {
    match std::str::from_utf8(raw) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(raw),
    }
}

/// `raw` with every lone UTF-16 surrogate escape (`\ud83d` not followed by its low half, or a
/// low half alone) replaced by `\ufffd`, or `None` if it has none. `JSON.stringify` writes a
/// string cut inside an emoji that way, and serde_json refuses it (a Rust string cannot hold
/// half a character), so a reader retries with this before calling an entry corrupt: what
/// another writer stored is read, with U+FFFD where the half character was.
pub(crate) fn without_lone_surrogates(raw: &[u8]) -> Option<Vec<u8>> {
    let hex = |at: usize| -> Option<u16> {
        let digits = raw.get(at..at + 4)?;
        u16::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
    };
    let low_at = |at: usize| -> bool {
        raw.get(at..at + 2) == Some(&b"\\u"[..])
            && hex(at + 2).is_some_and(|u| (0xDC00..0xE000).contains(&u))
    };
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    let mut i = 0;
    while i < raw.len() {
        if raw[i] != b'\\' {
            i += 1;
            continue;
        }
        // An escape: `\uXXXX` is six bytes, any other two.
        if raw.get(i + 1) != Some(&b'u') {
            i += 2;
            continue;
        }
        let Some(unit) = hex(i + 2) else {
            i += 2;
            continue;
        };
        let lone = match unit {
            0xD800..=0xDBFF if low_at(i + 6) => {
                i += 12;
                continue;
            }
            0xD800..=0xDFFF => true,
            _ => false,
        };
        if lone {
            let buffer = out.get_or_insert_with(|| Vec::with_capacity(raw.len()));
            buffer.extend_from_slice(&raw[copied..i]);
            buffer.extend_from_slice(b"\\ufffd");
            copied = i + 6;
        }
        i += 6;
    }
    let mut buffer = out?;
    buffer.extend_from_slice(&raw[copied..]);
    Some(buffer)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn lone_surrogates_become_replacement_characters_and_pairs_stay() {
        let fixed = |raw: &str| {
            without_lone_surrogates(raw.as_bytes()).map(|v| String::from_utf8(v).unwrap())
        };
        assert_eq!(fixed(r#""caf\ud83d""#).as_deref(), Some(r#""caf\ufffd""#));
        assert_eq!(
            fixed(r#""\ude00 x \ud83d\ude00""#).as_deref(),
            Some(r#""\ufffd x \ud83d\ude00""#)
        );
        assert_eq!(fixed(r#""\ud83d\ude00""#), None);
        assert_eq!(
            fixed(r#""\\ud83d""#),
            None,
            "an escaped backslash, then text"
        );
        assert_eq!(fixed(r#"{"a":"\u00e9"}"#), None);
        let value: Value =
            serde_json::from_slice(&without_lone_surrogates(br#"["\udc00"]"#).unwrap()).unwrap();
        assert_eq!(value, serde_json::json!(["\u{fffd}"]));
    }

    #[test]
    fn stored_bytes_read_as_text_or_as_bytes_give_what_serde_json_gives_for_bytes() {
        let cases: [&[u8]; 7] = [
            b"{\"status\":\"done\",\"result\":{\"note\":\"caf\\u00e9 \xc3\xa9\"}}",
            br#"["\ud83d\ude00","\"quoted\""]"#,
            // Not UTF-8: inside a string, outside one, and cut inside a character.
            b"[\"\xff\"]",
            b"[1,\xfe]",
            b"\"\xc3\"",
            br#"{"a":1"#,
            br#"["\ud83d"]"#,
        ];
        for raw in cases {
            let ours = read_json::<Value>(raw).map_err(|e| e.to_string());
            let theirs = serde_json::from_slice::<Value>(raw).map_err(|e| e.to_string());
            assert_eq!(ours, theirs, "{}", String::from_utf8_lossy(raw));
        }
        // A value that borrows from the bytes still can.
        let borrowed: &str = read_json(br#""plain""#).unwrap();
        assert_eq!(borrowed, "plain");
        // And the lenient reader still repairs a lone surrogate.
        let repaired: Value = read_lenient(br#"["caf\ud83d"]"#, &mut None).unwrap();
        assert_eq!(repaired, json!(["caf\u{fffd}"]));
    }

    #[test]
    fn depth_counts_levels_of_arrays_and_objects() {
        assert_eq!(nesting_depth(&json!(1)), 0);
        assert_eq!(nesting_depth(&json!([])), 1);
        assert_eq!(nesting_depth(&json!({"a": [1, {"b": []}]})), 4);
        assert_eq!(nesting_depth(&json!([[1], [[[2]]], 3])), 4);
    }

    #[test]
    fn depth_is_exact_on_either_side_of_the_recursion_limit() {
        for levels in [
            RECURSION_LIMIT - 1,
            RECURSION_LIMIT,
            RECURSION_LIMIT + 1,
            RECURSION_LIMIT + 2,
        ] {
            let mut value = json!({"leaf": 1});
            for _ in 1..levels {
                // A shallow sibling at every level, so neither walk can stop at the first child.
                value = json!([[], value, {"x": 2}]);
            }
            assert_eq!(nesting_depth(&value), levels, "{levels} levels");
            assert_eq!(deep_nesting_depth(&value), levels, "{levels} levels");
        }
    }

    #[test]
    fn depth_of_a_value_nested_a_hundred_thousand_levels_does_not_overflow() {
        let mut value = json!(0);
        for _ in 0..100_000 {
            value = Value::Array(vec![value]);
        }
        assert_eq!(nesting_depth(&value), 100_000);
        // Dropping it recursively would overflow the test thread's stack: take it apart.
        while let Value::Array(mut items) = value {
            value = items.pop().unwrap_or(Value::Null);
        }
    }
}
