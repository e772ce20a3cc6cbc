//! A scanner over JSON text that finds members and values without parsing them: what the
//! `_meta` splice and the lenient reading of messages serde_json refuses are built on. It
//! accepts what JavaScript's and Python's parsers accept (invalid UTF-8, lone surrogates,
//! numbers beyond f64, any depth), since those are the peers whose messages it looks at.

/// The byte range of the value of member `name` of the object that starts at `start` (after
/// any whitespace). Scans the text once, skipping nested values; member names with escapes are
/// decoded before comparing. With duplicate names the last one counts, as in serde_json.
pub(super) fn member_span(text: &[u8], start: usize, name: &str) -> Option<std::ops::Range<usize>> {
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

/// Decodes a JSON string (with its quotes) as a lenient parser would: invalid UTF-8 and lone
/// surrogate escapes become U+FFFD. The flag says whether the decoding was exact.
pub(super) fn decode_string(raw: &[u8]) -> Option<(String, bool)> {
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

pub(super) fn skip_ws(text: &[u8], mut i: usize) -> usize {
    while text
        .get(i)
        .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
    {
        i += 1;
    }
    i
}

/// The index just past the string starting at `i`.
pub(super) fn skip_string(text: &[u8], i: usize) -> Option<usize> {
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
pub(super) fn skip_value(text: &[u8], i: usize) -> Option<usize> {
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
