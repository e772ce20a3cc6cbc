//! Integers that cannot be keyed exactly. `serde_json` holds an integer as `i64` or `u64`;
//! one beyond 64 bits it reads as the nearest double, so
//! `123456789012345678901234567890` and `123456789012345678901234567891` would become one
//! number and share a key (one call would replay the other's result). The parsed value cannot
//! tell such an integer from a double written as one (`1e29`), so the text is looked at: an
//! integer literal (no fraction, no exponent) that does not fit in 64 bits is refused,
//! never keyed as another number. Every implementation refuses the same texts
//! (`tests/data/key_numbers.json`).

/// The shortest run of digits that may not fit in 64 bits: `u64::MAX` has 20 digits and
/// `i64::MIN` 19, so every integer of 18 digits or fewer fits.
const FITS_ALWAYS: usize = 18;

/// The first integer literal in the JSON text `text` that does not fit in 64 bits (`i64` when
/// negative, `u64` otherwise), as written, or `None`. Strings are skipped; the text need not be
/// valid JSON (the parser judges that). Text without a run of 19 digits, almost every argument
/// document, is passed over without being scanned for tokens.
pub fn first_inexact_integer(text: &[u8]) -> Option<&str> {
    if !has_long_digit_run(text) {
        return None;
    }
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'"' => i = after_string(text, i),
            b'-' | b'0'..=b'9' => {
                let end = number_end(text, i);
                let token = &text[i..end];
                if !fits_in_64_bits(token) {
                    return std::str::from_utf8(token).ok();
                }
                i = end;
            }
            _ => i += 1,
        }
    }
    None
}

fn has_long_digit_run(text: &[u8]) -> bool {
    let mut run = 0;
    for &b in text {
        if b.is_ascii_digit() {
            run += 1;
            if run > FITS_ALWAYS {
                return true;
            }
        } else {
            run = 0;
        }
    }
    false
}

/// The index after the string that opens at `start` (or the end of the text).
fn after_string(text: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while i < text.len() {
        match text[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    text.len()
}

/// The index after the number token that starts at `start`.
fn number_end(text: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while i < text.len() && matches!(text[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-') {
        i += 1;
    }
    i
}

/// Whether `token` is a double (it has a fraction or an exponent) or an integer of 64 bits.
fn fits_in_64_bits(token: &[u8]) -> bool {
    if token.iter().any(|b| matches!(b, b'.' | b'e' | b'E')) {
        return true;
    }
    let Ok(text) = std::str::from_utf8(token) else {
        return true;
    };
    match text.strip_prefix('-') {
        Some(_) => text.parse::<i64>().is_ok() || !looks_like_integer(&text[1..]),
        None => text.parse::<u64>().is_ok() || !looks_like_integer(text),
    }
}

/// Whether `digits` is a run of digits at all (a malformed token is the parser's to refuse).
fn looks_like_integer(digits: &str) -> bool {
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::first_inexact_integer;

    fn inexact(text: &str) -> Option<&str> {
        first_inexact_integer(text.as_bytes())
    }

    #[test]
    fn integers_of_64_bits_are_exact() {
        assert_eq!(inexact(r#"{"id":18446744073709551615}"#), None);
        assert_eq!(inexact(r#"{"id":-9223372036854775808}"#), None);
        assert_eq!(inexact(r#"[9007199254740993,1]"#), None);
    }

    #[test]
    fn integers_beyond_64_bits_are_named() {
        assert_eq!(
            inexact(r#"{"id":18446744073709551616}"#),
            Some("18446744073709551616")
        );
        assert_eq!(
            inexact(r#"{"a":[1,{"b":-9223372036854775809}]}"#),
            Some("-9223372036854775809")
        );
        assert_eq!(
            inexact(r#"{"id":123456789012345678901234567890}"#),
            Some("123456789012345678901234567890")
        );
    }

    #[test]
    fn doubles_written_with_many_digits_are_not_integers() {
        assert_eq!(inexact(r#"{"x":123456789012345678901234567890.5}"#), None);
        assert_eq!(inexact(r#"{"x":1234567890123456789012e3}"#), None);
        assert_eq!(inexact(r#"{"x":1e400}"#), None);
    }

    #[test]
    fn digits_inside_strings_are_not_numbers() {
        assert_eq!(
            inexact(r#"{"phone":"123456789012345678901234567890"}"#),
            None
        );
        assert_eq!(
            inexact(
                r#"{"s":"a\"123456789012345678901234567890","n":123456789012345678901234567890}"#
            ),
            Some("123456789012345678901234567890")
        );
        assert_eq!(inexact(r#"{"s\\":"123456789012345678901234567890"}"#), None);
    }
}
