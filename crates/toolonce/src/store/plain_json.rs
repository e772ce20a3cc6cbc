//! The plain form of JSON text, recognized without parsing it: strings without escapes or
//! control characters, integers of at most 15 digits, and values built of them that are
//! exactly what serde_json writes. The Redis entry reader reads its members' strings and
//! integers with these scanners, and a stored result in this form is kept as its text
//! ([`Recorded`](crate::store::Recorded)).

use crate::store::json::MAX_STORED_DEPTH;

/// Where the JSON value starting at `at` ends, if it is in the plain form: the exact text
/// `serde_json::to_string` writes for the value it stands for. That is objects whose keys
/// strictly increase (serde_json's map is sorted, and a key given twice is not the text of any
/// value), arrays, strings without escapes or control characters, integers of at most 15
/// digits without a leading zero, `true`, `false` and `null`, no whitespace, at most
/// [`MAX_STORED_DEPTH`] levels. Every result toolonce writes of such a value is in this form;
/// anything else (a fraction, an escape, another writer's member order) answers `None` and is
/// read as a value.
pub(crate) fn plain_end(bytes: &[u8], at: usize) -> Option<usize> {
    value_end(bytes, at, MAX_STORED_DEPTH)
}

/// [`plain_end`] with `levels` left for containers.
fn value_end(bytes: &[u8], at: usize, levels: usize) -> Option<usize> {
    match *bytes.get(at)? {
        b'"' => string_end(bytes, at),
        open @ (b'{' | b'[') => {
            let object = open == b'{';
            let close = if object { b'}' } else { b']' };
            let levels = levels.checked_sub(1)?;
            let mut at = at + 1;
            if bytes.get(at) == Some(&close) {
                return Some(at + 1);
            }
            let mut previous: Option<&[u8]> = None;
            loop {
                if object {
                    let key_end = string_end(bytes, at)?;
                    let key = &bytes[at + 1..key_end - 1];
                    if previous.is_some_and(|p| p >= key) || bytes.get(key_end) != Some(&b':') {
                        return None;
                    }
                    previous = Some(key);
                    at = key_end + 1;
                }
                at = value_end(bytes, at, levels)?;
                match *bytes.get(at)? {
                    b',' => at += 1,
                    b if b == close => return Some(at + 1),
                    _ => return None,
                }
            }
        }
        b't' => word_end(bytes, at, b"true"),
        b'f' => word_end(bytes, at, b"false"),
        b'n' => word_end(bytes, at, b"null"),
        // `-0` is read as a float by serde_json, and written `-0.0`.
        b'-' if bytes.get(at + 1) == Some(&b'0') => None,
        b'-' => digits_end(bytes, at + 1),
        b'0'..=b'9' => digits_end(bytes, at),
        _ => None,
    }
}

/// The end (past its closing quote) of a string starting at `at` (its opening quote) with no
/// escape and no control character (which JSON refuses raw).
pub(crate) fn string_end(bytes: &[u8], at: usize) -> Option<usize> {
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    let mut end = at + 1;
    // Eight bytes at a time while none of them ends the plain run.
    while let Some(chunk) = bytes.get(end..end + 8) {
        let word = u64::from_le_bytes(chunk.try_into().ok()?);
        if any_special(word) {
            break;
        }
        end += 8;
    }
    while *bytes.get(end)? != b'"' {
        if special(bytes[end]) {
            return None;
        }
        end += 1;
    }
    Some(end + 1)
}

/// A byte a plain string cannot hold before its end: a quote, a backslash, a control byte.
fn special(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// Whether any byte of `word` is [`special`]: the exact answer of the usual word-at-a-time
/// tests (a byte is zero: `(w - 0x01…) & !w & 0x80…`; below n: the same with n for 0x01).
fn any_special(word: u64) -> bool {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGHS: u64 = ONES << 7;
    let zero_in = |w: u64| w.wrapping_sub(ONES) & !w & HIGHS;
    let quote = zero_in(word ^ (ONES * u64::from(b'"')));
    let backslash = zero_in(word ^ (ONES * u64::from(b'\\')));
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
    (quote | backslash | control) != 0
}

/// The end of an integer's digits starting at `at`: 1 to 15 of them (what an `i64` and an `f64`
/// both hold exactly, so every reader reads the same number), no sign, no leading zero, and no
/// fraction or exponent after them.
pub(crate) fn digits_end(bytes: &[u8], at: usize) -> Option<usize> {
    let rest = bytes.get(at..)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 15 || (digits > 1 && rest[0] == b'0') {
        return None;
    }
    // A fraction or an exponent makes a float, which is not in the plain form.
    match rest.get(digits) {
        Some(b'.' | b'e' | b'E') => None,
        _ => Some(at + digits),
    }
}

/// The end of `word` if it starts at `at`.
fn word_end(bytes: &[u8], at: usize, word: &[u8]) -> Option<usize> {
    (bytes.get(at..at + word.len())? == word).then_some(at + word.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_byte_at_every_place_of_a_word_is_found_special_or_not() {
        for place in 0..8 {
            for byte in 0..=255u8 {
                let mut bytes = *b"abcdefgh";
                bytes[place] = byte;
                let word = u64::from_le_bytes(bytes);
                assert_eq!(any_special(word), special(byte), "{byte:#x} at {place}");
            }
        }
    }

    #[test]
    fn a_string_ends_at_its_first_unescaped_quote_and_one_with_an_escape_is_not_plain() {
        assert_eq!(string_end(br#""""#, 0), Some(2));
        assert_eq!(
            string_end(br#""a long string of many words","#, 0),
            Some(29)
        );
        assert_eq!(string_end(br#"x"a""#, 1), Some(4));
        assert_eq!(string_end(br#""a\"b""#, 0), None);
        assert_eq!(string_end(b"\"a\tb\"", 0), None);
        assert_eq!(string_end(br#""unterminated"#, 0), None);
        assert_eq!(string_end(b"a", 0), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        #[test]
        fn a_word_has_a_special_byte_exactly_when_one_of_its_bytes_is(
            bytes in prop::array::uniform8(prop_oneof![
                Just(b'"'), Just(b'\\'), 0u8..0x20, 0x20u8..=0xff, Just(0x21u8), Just(0x5du8),
            ]),
        ) {
            let word = u64::from_le_bytes(bytes);
            prop_assert_eq!(any_special(word), bytes.iter().any(|&b| special(b)), "{:?}", bytes);
        }
    }
}
