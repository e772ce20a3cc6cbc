//! The canonical text of a JSON value: the JSON Canonicalization Scheme (RFC 8785), with one
//! deliberate difference for large integers. The operation key and the fingerprint are hashes of
//! this text, so two argument documents that mean the same thing must give the same bytes here,
//! in this process, in another one, and in another language.
//!
//! # What canonical means
//!
//! - Objects have their members sorted by key **at every depth**, comparing keys as sequences of
//!   UTF-16 code units (RFC 8785 §3.2.3). A widespread reference implementation sorts only the
//!   top-level keys, by passing them as the replacer list of `JSON.stringify(args, keys)`; that
//!   list is applied at every depth, so every nested key not also used at the top is silently
//!   dropped: `{"payment":{"card":"A"}}` and `{"payment":{"card":"B"}}` both become
//!   `{"payment":{}}` and share a key. Here nested objects are sorted, never pruned.
//! - No whitespace between tokens.
//! - Strings use the minimal JSON escaping: `\"`, `\\`, `\b`, `\t`, `\n`, `\f`, `\r`, other
//!   control characters as `\u00xx` (lowercase hex), everything else literal (including U+007F
//!   and U+2028).
//! - Floating-point numbers are written in the ECMAScript shortest round-trip form (`100.0` and
//!   `1e2` are `100`, `1e21` is `1e+21`, `-0` is `0`).
//! - **Integers keep their exact digits.** RFC 8785 reads every number as an IEEE double, so two
//!   64-bit ids above 2^53 − 1 (9007199254740993 and 9007199254740992, say) would round to the
//!   same double and make two different operations share a key. An integer that `serde_json`
//!   holds as `i64` or `u64` is therefore written digit for digit. Within ±2^53 this is the very
//!   text RFC 8785 produces, so flat arguments with ordinary numbers get the same canonical text
//!   (and key) as any RFC 8785 implementation.
//!
//! Canonicalization is iterative, never recursive, so a value nested arbitrarily deep is refused
//! with [`Error::TooDeep`] instead of overflowing the stack.

use std::cmp::Ordering;

use serde_json::{Map, Value};

use crate::{Error, Result};

/// The default limit on nesting: levels of arrays and objects (a scalar is level 0, `[]` is 1).
pub const DEFAULT_MAX_DEPTH: usize = 128;

/// The default limit on the size of argument text: 1 MiB.
pub const DEFAULT_MAX_BYTES: usize = 1 << 20;

/// How deep `serde_json` nests before it refuses to parse: it stops at its 128th level of
/// arrays and objects, so the deepest document it accepts has 127 levels.
const PARSER_MAX_DEPTH: usize = 127;

/// Limits on the argument documents accepted by [`parse_args`].
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The deepest nesting accepted, counted in levels of arrays and objects: `1` is scalar
    /// members only in one array or object, `0` allows only a bare scalar. Deeper documents are
    /// refused with [`Error::TooDeep`]. Parsing text never accepts more than 127 levels, whatever
    /// this says (that is `serde_json`'s own limit).
    pub max_depth: usize,
    /// The longest argument text accepted, in bytes of UTF-8. Longer text is refused with
    /// [`Error::ArgumentsTooLarge`] before it is parsed.
    pub max_bytes: usize,
}

impl Default for Limits {
    /// [`DEFAULT_MAX_DEPTH`] levels and [`DEFAULT_MAX_BYTES`] bytes.
    fn default() -> Self {
        Limits {
            max_depth: DEFAULT_MAX_DEPTH,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// Returns the canonical text of `value`, nesting at most [`DEFAULT_MAX_DEPTH`] levels.
///
/// # Errors
///
/// [`Error::TooDeep`] if `value` nests deeper than [`DEFAULT_MAX_DEPTH`].
///
/// # Example
///
/// ```
/// let args = serde_json::json!({"b": [1.0, "\u{1f}"], "a": {"y": 1e21, "x": -0.0}});
/// let text = toolonce::canonical::canonicalize(&args)?;
/// assert_eq!(text, r#"{"a":{"x":0,"y":1e+21},"b":[1,"\u001f"]}"#);
/// # Ok::<(), toolonce::Error>(())
/// ```
pub fn canonicalize(value: &Value) -> Result<String> {
    let mut out = String::with_capacity(256);
    canonicalize_into(value, DEFAULT_MAX_DEPTH, &mut out)?;
    Ok(out)
}

/// Appends the canonical text of `value` to `out`, nesting at most `max_depth` levels of arrays
/// and objects.
///
/// This never recurses: any `max_depth` is safe, even `usize::MAX` on a value nested a million
/// levels deep.
///
/// # Errors
///
/// [`Error::TooDeep`] if `value` nests deeper than `max_depth`. `out` then holds a prefix of the
/// canonical text.
pub fn canonicalize_into(value: &Value, max_depth: usize, out: &mut String) -> Result<()> {
    // One frame per open array or object. The sorted members of every open object live in one
    // shared buffer, used as a stack: an object's members are pushed when it opens and popped
    // when it closes, so canonicalizing allocates the same two vectors whatever the shape.
    let mut frames: Vec<Frame<'_>> = Vec::new();
    let mut members: Vec<(&String, &Value)> = Vec::new();
    let mut current = value;
    loop {
        match current {
            Value::Null => out.push_str("null"),
            Value::Bool(true) => out.push_str("true"),
            Value::Bool(false) => out.push_str("false"),
            Value::Number(n) => write_number(out, n),
            Value::String(s) => write_string(out, s),
            Value::Array(items) => {
                if frames.len() >= max_depth {
                    return Err(Error::TooDeep { limit: max_depth });
                }
                out.push('[');
                frames.push(Frame::Array {
                    items: items.iter(),
                    first: true,
                });
            }
            Value::Object(map) => {
                if frames.len() >= max_depth {
                    return Err(Error::TooDeep { limit: max_depth });
                }
                out.push('{');
                let start = push_sorted(&mut members, map);
                frames.push(Frame::Object {
                    start,
                    next: start,
                    end: members.len(),
                });
            }
        }
        // Close every finished container, then move to the next value to write.
        current = loop {
            let Some(frame) = frames.last_mut() else {
                return Ok(());
            };
            match frame {
                Frame::Array { items, first } => match items.next() {
                    Some(item) => {
                        if !*first {
                            out.push(',');
                        }
                        *first = false;
                        break item;
                    }
                    None => {
                        out.push(']');
                        frames.pop();
                    }
                },
                Frame::Object { start, next, end } => {
                    if *next < *end {
                        let (key, item) = members[*next];
                        if *next > *start {
                            out.push(',');
                        }
                        *next += 1;
                        write_string(out, key);
                        out.push(':');
                        break item;
                    }
                    out.push('}');
                    members.truncate(*start);
                    frames.pop();
                }
            }
        };
    }
}

/// An array or object whose members are being written.
enum Frame<'a> {
    Array {
        items: std::slice::Iter<'a, Value>,
        first: bool,
    },
    /// Members `next..end` of the shared member buffer are still to be written.
    Object {
        start: usize,
        next: usize,
        end: usize,
    },
}

/// Appends the members of `map` to `members`, sorted by key in UTF-16 order, and returns where
/// they start.
fn push_sorted<'a>(
    members: &mut Vec<(&'a String, &'a Value)>,
    map: &'a Map<String, Value>,
) -> usize {
    let start = members.len();
    members.extend(map.iter());
    // Without `preserve_order`, `Map` iterates in byte order, which is almost always UTF-16
    // order already; the sort notices a sorted run in one pass. With `preserve_order` enabled
    // by some other crate in the build, this is where the real sorting happens.
    members[start..].sort_unstable_by(|a, b| cmp_utf16(a.0, b.0));
    start
}

/// Compares two strings by their UTF-16 code units, as RFC 8785 orders object keys.
///
/// UTF-8 byte order is code point order, and so is UTF-16 order except in one case: a character
/// in U+E000..=U+FFFF sorts *after* a supplementary character (U+10000 and above) in UTF-16,
/// because the latter starts with a surrogate (0xD800..=0xDFFF), but *before* it in code point
/// order. Strings diverge first at a byte where everything before is the same, so that byte
/// starts a character in both strings or continues two characters with the same lead byte (the
/// same range). The case is therefore seen in that byte alone: lead bytes 0xEE/0xEF
/// (U+E000..=U+FFFF) against 0xF0..=0xF4 (supplementary).
fn cmp_utf16(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    match a.iter().zip(b).position(|(x, y)| x != y) {
        None => a.len().cmp(&b.len()),
        Some(i) => {
            let (x, y) = (a[i], b[i]);
            if x >= 0xEE && y >= 0xEE && (x >= 0xF0) != (y >= 0xF0) {
                y.cmp(&x)
            } else {
                x.cmp(&y)
            }
        }
    }
}

/// Writes a number: integers with their exact digits, floats in ECMAScript form.
fn write_number(out: &mut String, n: &serde_json::Number) {
    if let Some(u) = n.as_u64() {
        write_u64(out, u);
    } else if let Some(i) = n.as_i64() {
        if i < 0 {
            out.push('-');
        }
        write_u64(out, i.unsigned_abs());
    } else if let Some(f) = n.as_f64() {
        // A `Value` never holds NaN or an infinity (serde_json refuses them), and `-0.0` is
        // written as `0`, as ECMAScript's Number::toString does.
        out.push_str(ryu_js::Buffer::new().format(f));
    }
}

/// Writes the decimal digits of `n`.
fn write_u64(out: &mut String, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &digit in &buf[i..] {
        out.push(char::from(digit));
    }
}

/// For each byte: 0 if it is written as is, otherwise the letter after the backslash of its
/// escape (`u` for `\u00xx`).
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Writes `s` as a JSON string with minimal escaping: the bytes `JSON.stringify` and
/// serde_json write too, so other writers' text can be built with it.
pub(crate) fn write_string(out: &mut String, s: &str) {
    out.push('"');
    let mut run_start = 0;
    for (i, &b) in s.as_bytes().iter().enumerate() {
        let escape = ESCAPE[b as usize];
        if escape == 0 {
            continue;
        }
        // `b` is ASCII, so `i` is a character boundary.
        out.push_str(&s[run_start..i]);
        out.push('\\');
        out.push(char::from(escape));
        if escape == b'u' {
            out.push_str("00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        run_start = i + 1;
    }
    out.push_str(&s[run_start..]);
    out.push('"');
}

/// Parses argument text into a [`Value`] within `limits`.
///
/// The size is checked first, so oversized text is refused without being read.
///
/// # Errors
///
/// - [`Error::ArgumentsTooLarge`] if `json` is longer than `limits.max_bytes`;
/// - [`Error::TooDeep`] if it nests deeper than `limits.max_depth`, or deeper than the 127
///   levels `serde_json` parses at most (the error then names the lower of the two);
/// - [`Error::InvalidArguments`] if it is not one JSON document, or holds a number too large for
///   a double (`1e400`); the message names the line and column.
pub fn parse_args(json: &str, limits: &Limits) -> Result<Value> {
    if json.len() > limits.max_bytes {
        return Err(Error::ArgumentsTooLarge {
            size: json.len(),
            limit: limits.max_bytes,
        });
    }
    let value: Value = serde_json::from_str(json).map_err(|e| {
        // serde_json has no public error code; this message is stable and documented in its
        // source as the recursion limit.
        if e.to_string().starts_with("recursion limit exceeded") {
            Error::TooDeep {
                limit: limits.max_depth.min(PARSER_MAX_DEPTH),
            }
        } else {
            Error::InvalidArguments(e.to_string())
        }
    })?;
    if limits.max_depth < PARSER_MAX_DEPTH && depth_exceeds(&value, limits.max_depth) {
        return Err(Error::TooDeep {
            limit: limits.max_depth,
        });
    }
    Ok(value)
}

/// Whether `value` nests more than `max_depth` levels of arrays and objects (iteratively).
fn depth_exceeds(value: &Value, max_depth: usize) -> bool {
    // Each pending value with the number of arrays and objects around it.
    let mut pending: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((value, around)) = pending.pop() {
        match value {
            Value::Array(items) if around < max_depth => {
                pending.extend(items.iter().map(|item| (item, around + 1)));
            }
            Value::Object(map) if around < max_depth => {
                pending.extend(map.values().map(|item| (item, around + 1)));
            }
            Value::Array(_) | Value::Object(_) => return true,
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn canon(text: &str) -> String {
        canonicalize(&serde_json::from_str(text).unwrap()).unwrap()
    }

    #[test]
    fn strings_use_minimal_escaping() {
        assert_eq!(
            canon(r#""\"\\\/\b\f\n\r\t""#),
            r#""\"\\/\b\f\n\r\t""#,
            "short escapes, and the solidus is not escaped"
        );
        assert_eq!(
            canon(r#""\u0000\u0001\u000b\u000e\u001f\u001F""#),
            r#""\u0000\u0001\u000b\u000e\u001f\u001f""#
        );
        assert_eq!(
            canon(r#""\u007f\u0080\u2028\u2029\u00e9\ud83d\ude00""#),
            "\"\u{7f}\u{80}\u{2028}\u{2029}é😀\""
        );
        assert_eq!(canon(r#""a\u0041""#), r#""aA""#);
        assert_eq!(canon(r#""""#), r#""""#);
    }

    #[test]
    fn numbers_take_ecmascript_form() {
        let cases = [
            ("100.0", "100"),
            ("1e2", "100"),
            ("-0", "0"),
            ("-0.0", "0"),
            ("0.0", "0"),
            ("1e21", "1e+21"),
            ("1e20", "100000000000000000000"),
            ("123456789012345680000", "123456789012345680000"),
            ("1e-6", "0.000001"),
            ("1e-7", "1e-7"),
            ("0.1", "0.1"),
            ("333333333.33333329", "333333333.3333333"),
            ("4.50", "4.5"),
            ("1E+23", "1e+23"),
            ("-1.5e-300", "-1.5e-300"),
            ("5e-324", "5e-324"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
            ("9007199254740993.0", "9007199254740992"),
        ];
        for (text, want) in cases {
            assert_eq!(canon(text), want, "for {text}");
        }
    }

    #[test]
    fn integers_keep_their_exact_digits() {
        for text in [
            "9007199254740993",
            "9007199254740992",
            "-9007199254740993",
            "18446744073709551615",
            "-9223372036854775808",
            "9223372036854775807",
            "0",
            "-1",
        ] {
            assert_eq!(canon(text), text);
        }
        assert_eq!(
            canonicalize(&json!(u64::MAX)).unwrap(),
            "18446744073709551615"
        );
        assert_eq!(
            canonicalize(&json!(i64::MIN)).unwrap(),
            "-9223372036854775808"
        );
    }

    #[test]
    fn integers_beyond_64_bits_become_doubles_and_too_large_numbers_are_refused() {
        assert_eq!(canon("18446744073709551616"), "18446744073709552000");
        let err = parse_args("{\"a\":1e400}", &Limits::default()).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArguments(m) if m.contains("line 1 column")),
            "{err}"
        );
    }

    #[test]
    fn keys_sort_by_utf16_code_units_as_in_rfc_8785() {
        // RFC 8785 §3.2.3: the example's keys, scrambled.
        let args = json!({
            "\u{20ac}": "Euro Sign",
            "\r": "Carriage Return",
            "\u{fb33}": "Hebrew Letter Dalet With Dagesh",
            "1": "One",
            "\u{1f600}": "Emoji: Grinning Face",
            "\u{80}": "Control",
            "\u{f6}": "Latin Small Letter O With Diaeresis",
        });
        let text = canonicalize(&args).unwrap();
        let values: Vec<&str> = text.split('"').skip(3).step_by(4).collect();
        assert_eq!(
            values,
            [
                "Carriage Return",
                "One",
                "Control",
                "Latin Small Letter O With Diaeresis",
                "Euro Sign",
                "Emoji: Grinning Face",
                "Hebrew Letter Dalet With Dagesh",
            ],
            "{text}"
        );
    }

    #[test]
    fn nested_objects_are_sorted_and_kept() {
        assert_eq!(
            canon(r#"{"z":{"b":[{"d":1,"c":2}],"a":null},"y":[],"x":{}}"#),
            r#"{"x":{},"y":[],"z":{"a":null,"b":[{"c":2,"d":1}]}}"#
        );
        assert_eq!(
            canon(" [ 1 , { } , [ ] , true , false , null ] "),
            "[1,{},[],true,false,null]"
        );
    }

    #[test]
    fn depth_is_limited() {
        let value = json!([[[1]]]);
        let mut out = String::new();
        canonicalize_into(&value, 3, &mut out).unwrap();
        assert_eq!(out, "[[[1]]]");
        let err = canonicalize_into(&value, 2, &mut String::new()).unwrap_err();
        assert!(matches!(err, Error::TooDeep { limit: 2 }));
        canonicalize_into(&json!(1), 0, &mut out).unwrap();
        assert!(canonicalize_into(&json!({}), 0, &mut out).is_err());
    }

    #[test]
    fn parse_args_enforces_its_limits() {
        let small = Limits {
            max_depth: 2,
            max_bytes: 10,
        };
        assert!(matches!(
            parse_args("[[1]]", &small),
            Ok(v) if v == json!([[1]])
        ));
        assert!(matches!(
            parse_args("[[[1]]]", &small),
            Err(Error::TooDeep { limit: 2 })
        ));
        assert!(matches!(
            parse_args("[1,2,3,4,5,6]", &small),
            Err(Error::ArgumentsTooLarge {
                size: 13,
                limit: 10
            })
        ));
        let err = parse_args("{\n\"a\": tru}", &Limits::default()).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArguments(m) if m.contains("line 2 column")),
            "{err}"
        );
    }

    #[test]
    fn parse_args_accepts_what_serde_json_can_nest_and_no_more() {
        let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(parse_args(&nest(PARSER_MAX_DEPTH), &Limits::default()).is_ok());
        assert!(matches!(
            parse_args(&nest(PARSER_MAX_DEPTH + 1), &Limits::default()),
            Err(Error::TooDeep {
                limit: PARSER_MAX_DEPTH
            })
        ));
    }

    fn utf16_order(a: &str, b: &str) -> Ordering {
        a.encode_utf16().cmp(b.encode_utf16())
    }

    #[test]
    fn utf16_comparison_handles_the_bmp_and_supplementary_edge() {
        let chars = [
            "",
            "a",
            "\u{7f}",
            "\u{80}",
            "\u{d7ff}",
            "\u{e000}",
            "\u{fb33}",
            "\u{ffff}",
            "\u{10000}",
            "\u{1f600}",
            "\u{10ffff}",
        ];
        for a in chars {
            for b in chars {
                for suffix in ["", "x", "\u{ffff}", "\u{10000}"] {
                    let a = format!("q{a}{suffix}");
                    let b = format!("q{b}");
                    assert_eq!(cmp_utf16(&a, &b), utf16_order(&a, &b), "{a:?} vs {b:?}");
                    assert_eq!(cmp_utf16(&b, &a), utf16_order(&b, &a), "{b:?} vs {a:?}");
                }
            }
        }
    }

    fn any_text() -> impl Strategy<Value = String> {
        let ch = prop_oneof![
            any::<char>(),
            proptest::char::range('\u{e000}', '\u{ffff}'),
            proptest::char::range('\u{10000}', '\u{10ffff}'),
            proptest::char::range('a', 'c'),
        ];
        proptest::collection::vec(ch, 0..6).prop_map(|cs| cs.into_iter().collect())
    }

    proptest! {
        #[test]
        fn utf16_comparison_matches_encode_utf16(a in any_text(), b in any_text()) {
            prop_assert_eq!(cmp_utf16(&a, &b), utf16_order(&a, &b));
        }

        #[test]
        fn integers_read_back_exactly(i in any::<i64>(), u in any::<u64>()) {
            prop_assert_eq!(canon(&i.to_string()), i.to_string());
            prop_assert_eq!(canon(&u.to_string()), u.to_string());
        }
    }
}
