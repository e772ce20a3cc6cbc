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

mod exact;

pub use exact::first_inexact_integer;

/// Why an integer beyond 64 bits is refused: it would be keyed as the nearest double, the key
/// of other integers too.
pub fn inexact_integer_message(integer: &str) -> String {
    crate::texts::Text::InexactInteger.fill(&[("integer", integer)])
}

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
    if let Value::Object(map) = value
        && max_depth >= 1
        && is_flat_and_sorted(map)
    {
        write_flat(map, out);
        return Ok(());
    }
    write_nested(value, max_depth, out)
}

/// Whether every member of `map` is a scalar and its keys already come in UTF-16 order as the
/// map iterates them: most tool arguments. Without `preserve_order` the map iterates in byte
/// order, which is UTF-16 order unless keys hold characters on both sides of U+FFFF; that is
/// checked here, not assumed, and such a map (or one in insertion order) goes the long way.
fn is_flat_and_sorted(map: &Map<String, Value>) -> bool {
    let mut previous: Option<&str> = None;
    for (key, member) in map {
        if matches!(member, Value::Array(_) | Value::Object(_)) {
            return false;
        }
        if previous.is_some_and(|previous| cmp_utf16(previous, key) != Ordering::Less) {
            return false;
        }
        previous = Some(key);
    }
    true
}

/// Writes a flat object whose keys iterate in order: the same text as [`write_nested`], with
/// neither its frame stack nor its member buffer (two allocations per call).
fn write_flat(map: &Map<String, Value>, out: &mut String) {
    out.push('{');
    for (i, (key, member)) in map.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(out, key);
        out.push(':');
        write_scalar(out, member);
    }
    out.push('}');
}

/// Writes a value that is not an array or an object.
fn write_scalar(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(_) | Value::Object(_) => unreachable!("write_scalar is given scalars only"),
    }
}

/// Writes any value, iteratively, nesting at most `max_depth` levels.
fn write_nested(value: &Value, max_depth: usize, out: &mut String) -> Result<()> {
    // One frame per open array or object. The sorted members of every open object live in one
    // shared buffer, used as a stack: an object's members are pushed when it opens and popped
    // when it closes, so canonicalizing allocates the same two vectors whatever the shape.
    let mut frames: Vec<Frame<'_>> = Vec::new();
    let mut members: Vec<(&String, &Value)> = Vec::new();
    let mut current = value;
    loop {
        match current {
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {
                write_scalar(out, current);
            }
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
    // Digits only, so always UTF-8; pushed as one slice, where a char at a time checked the
    // capacity and encoded each (a replay's 23 digits: 807 instructions that way, 550 this).
    out.push_str(std::str::from_utf8(&buf[i..]).unwrap_or_default());
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
///   a double (`1e400`); the message names the line and column; or if it holds an integer
///   literal beyond 64 bits, which would be keyed as the nearest double
///   ([`first_inexact_integer`]).
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
    if let Some(integer) = first_inexact_integer(json.as_bytes()) {
        return Err(Error::InvalidArguments(inexact_integer_message(integer)));
    }
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
mod tests;
