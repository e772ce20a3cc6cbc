//! The fast reader of an entry in the form its writers give it: one object of the known
//! members, no whitespace, strings without escapes, times and counts as integers. That is every
//! entry toolonce (scripts, native writes) and the reference design write, and reading it
//! straight from the text costs about 70% of what serde's derived reader does (415 ns against
//! 592 for a settled entry, the result's own parse included), on every replay. Anything else
//! (an escape, a member it does not know or one given twice, whitespace, a fraction, a `null`
//! where a string or a number goes, text that is not an entry) is not judged here:
//! [`read_plain`] answers `None` and serde reads it as it always did. A test holds the two to
//! the same answer wherever this one gives one.

use std::borrow::Cow;

use serde_json::Value as Json;

use super::members::{Borrowed, Wire};
use crate::store::plain_json;
use crate::store::recorded::Recorded;

/// The entry `text` holds if it is in the plain form, else `None` (read it with serde).
pub(super) fn read_plain(text: &str) -> Option<Wire<'_>> {
    let bytes = text.as_bytes();
    if bytes.first() != Some(&b'{') {
        return None;
    }
    let mut at = 1;
    let mut status = None;
    let mut wire = Wire::default();
    // The members read so far, one bit each: a repeated one is serde's to refuse.
    let mut seen = 0u16;
    loop {
        // serde ignores members it does not know; skipping one is left to it.
        let bit = member(bytes, &mut at)?;
        if seen & (1 << bit) != 0 {
            return None;
        }
        seen |= 1 << bit;
        match bit {
            0 => status = Some(string(text, &mut at)?),
            1 => wire.started_at = Some(integer(bytes, &mut at)?),
            2 => wire.lease_until = Some(integer(bytes, &mut at)?),
            3 => wire.retention = Some(integer(bytes, &mut at)?),
            4 => wire.completed_at = Some(integer(bytes, &mut at)?),
            5 => wire.failed_at = Some(integer(bytes, &mut at)?),
            6 => wire.settled_at = Some(integer(bytes, &mut at)?),
            7 => wire.first_started_at = Some(integer(bytes, &mut at)?),
            8 => wire.attempts = Some(integer(bytes, &mut at)?),
            9 => wire.owner = Some(string(text, &mut at)?.to_owned()),
            10 => wire.fingerprint = Some(Borrowed(Cow::Borrowed(string(text, &mut at)?))),
            11 => wire.scope = Some(string(text, &mut at)?.to_owned()),
            12 => wire.tool = Some(string(text, &mut at)?.to_owned()),
            13 => wire.detail = Some(string(text, &mut at)?.to_owned()),
            // A stored `null` result is a result (`Some(Null)`, as `members::present` reads it);
            // a `null` error is no error, as serde reads an `Option`.
            14 => wire.result = Some(result(text, &mut at)?),
            _ => wire.error = Some(value(text, &mut at)?).filter(|e| !e.is_null()),
        }
        match bytes.get(at) {
            Some(b',') => at += 1,
            Some(b'}') => {
                at += 1;
                break;
            }
            _ => return None,
        }
    }
    if at != bytes.len() {
        return None;
    }
    wire.status = Cow::Borrowed(status?);
    Some(wire)
}

/// The members an entry may have, each with its quotes and colon, numbered as `read_plain`'s
/// bits.
const MEMBERS: [&[u8]; 16] = [
    b"\"status\":",
    b"\"startedAt\":",
    b"\"leaseUntil\":",
    b"\"retention\":",
    b"\"completedAt\":",
    b"\"failedAt\":",
    b"\"settledAt\":",
    b"\"firstStartedAt\":",
    b"\"attempts\":",
    b"\"owner\":",
    b"\"fingerprint\":",
    b"\"scope\":",
    b"\"tool\":",
    b"\"detail\":",
    b"\"result\":",
    b"\"error\":",
];

/// The number of the member whose name and colon are at `at`, moving `at` past them. The
/// name's first letter is compared before the whole name, so most members cost one byte
/// comparison each instead of a slice comparison.
fn member(bytes: &[u8], at: &mut usize) -> Option<usize> {
    let rest = &bytes[*at..];
    let first = *rest.get(1)?;
    let found =
        (0..MEMBERS.len()).find(|&i| MEMBERS[i][1] == first && rest.starts_with(MEMBERS[i]))?;
    *at += MEMBERS[found].len();
    Some(found)
}

/// A string at `at` with no escape and no control character (which JSON refuses raw), moving
/// `at` past its closing quote.
fn string<'a>(text: &'a str, at: &mut usize) -> Option<&'a str> {
    let end = plain_json::string_end(text.as_bytes(), *at)?;
    // Both ends are ASCII quotes in valid UTF-8, so this slice is on character boundaries.
    let string = text.get(*at + 1..end - 1);
    *at = end;
    string
}

/// An integer at `at` as serde reads it into an `f64`: digits only, no sign, no leading zero,
/// at most 15 of them so that the number is exact in an `f64` as serde's would be.
fn integer(bytes: &[u8], at: &mut usize) -> Option<f64> {
    let end = plain_json::digits_end(bytes, *at)?;
    let n = bytes[*at..end]
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    *at = end;
    Some(n as f64)
}

/// The result at `at`, moving `at` past it: kept as its text when that is in the plain form
/// (what toolonce writes for most results), else read by serde_json as any value.
fn result(text: &str, at: &mut usize) -> Option<Recorded> {
    if let Some((result, end)) = Recorded::plain_at(text, *at) {
        *at = end;
        return Some(result);
    }
    value(text, at).map(Recorded::from)
}

/// Any JSON value at `at`, read by serde_json (a result or an error is whatever the tool
/// returned), moving `at` past it.
fn value(text: &str, at: &mut usize) -> Option<Json> {
    let mut values = serde_json::Deserializer::from_str(&text[*at..]).into_iter::<Json>();
    let value = values.next()?.ok()?;
    let len = values.byte_offset();
    // serde_json reads 127 levels in all, so inside the entry's object a member may nest 126.
    // Read alone it may nest one more: a value that does (and so has 254 bytes or more) is
    // left to serde, which refuses it.
    if len >= 2 * 127 && crate::store::json::nesting_depth(&value) >= 127 {
        return None;
    }
    *at += len;
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What serde reads from `text`, or `None` where it refuses it.
    fn by_serde(text: &str) -> Option<Wire<'_>> {
        serde_json::from_str(text).ok()
    }

    #[test]
    fn every_entry_its_writers_give_takes_the_fast_path() {
        let entries = [
            // A settled entry as complete.lua and the native complete write it.
            r#"{"status":"done","result":{"cents":500,"receipt":"re_1","status":"succeeded"},"startedAt":1796310015268,"completedAt":1796310015292,"settledAt":1796310015292,"fingerprint":"49f718041ba46ba9a9f2a83a52f5a84ff66cb817eafd24fae21147dc4ca371fd","firstStartedAt":1796310015268,"attempts":1,"scope":"drive-3482","tool":"bench_charge"}"#,
            // A sticky failure.
            r#"{"status":"failed","error":{"message":"card declined","class":"permanent"},"startedAt":1,"failedAt":2,"settledAt":2,"attempts":1}"#,
            // A running entry as a claim writes it.
            r#"{"status":"running","startedAt":1796310015268,"retention":600000,"owner":"0123456789abcdef0123456789abcdef01234567","fingerprint":"00","firstStartedAt":1796310015268,"attempts":1,"scope":"s","tool":"t"}"#,
            // A reference-design worker's.
            r#"{"status":"done","startedAt":1764400000000,"result":"sent"}"#,
            r#"{"status":"done","result":null}"#,
        ];
        for text in entries {
            let plain = read_plain(text).unwrap_or_else(|| panic!("not plain: {text}"));
            assert_eq!(Some(plain), by_serde(text), "{text}");
        }
    }

    #[test]
    fn what_the_fast_path_does_not_judge_is_left_to_serde() {
        for text in [
            r#"{"status":"do\u006ee","result":1}"#,
            r#"{ "status":"done","result":1}"#,
            r#"{"status":"done","result":1} "#,
            r#"{"status":"done","result":1,"status":"failed"}"#,
            r#"{"status":"done","result":1,"extra":true}"#,
            r#"{"status":"done","result":1,"startedAt":1.5}"#,
            r#"{"status":"done","result":1,"startedAt":-1}"#,
            r#"{"status":"done","result":1,"startedAt":01}"#,
            r#"{"status":"done","result":1,"startedAt":1e3}"#,
            r#"{"status":"done","result":1,"startedAt":1234567890123456}"#,
            r#"{"status":"done","result":1,"owner":null}"#,
            r#"{"status":"done","result":"\ud83d"}"#,
            r#"{"result":1}"#,
            r#"{}"#,
            r#"[]"#,
            "{\"status\":\"do\tne\"}",
        ] {
            assert_eq!(read_plain(text), None, "{text}");
        }
    }

    #[test]
    fn a_result_nested_as_deep_as_serde_allows_inside_an_entry_is_read_and_one_level_more_is_not() {
        let nested = |levels: usize| {
            format!(
                r#"{{"status":"done","result":{}{}}}"#,
                "[".repeat(levels),
                "]".repeat(levels)
            )
        };
        // The deepest result serde reads inside an entry, found rather than assumed.
        let deepest = (1..200)
            .take_while(|&levels| by_serde(&nested(levels)).is_some())
            .last()
            .unwrap();
        assert!(deepest > 100, "serde reads {deepest} levels");
        let fits = nested(deepest);
        assert_eq!(read_plain(&fits), by_serde(&fits));
        assert!(read_plain(&fits).is_some());
        assert_eq!(read_plain(&nested(deepest + 1)), None);
    }

    /// A member's text: a known or unknown name, and a value of any kind, sometimes spaced.
    fn member() -> impl Strategy<Value = String> {
        let name = prop_oneof![
            8 => prop::sample::select(vec![
                "status", "startedAt", "leaseUntil", "retention", "completedAt", "failedAt",
                "settledAt", "firstStartedAt", "attempts", "owner", "fingerprint", "scope",
                "tool", "detail", "result", "error",
            ])
            .prop_map(str::to_owned),
            1 => "[a-zA-Z]{1,8}",
            1 => Just("st\\u0061tus".to_owned()),
        ];
        let value = prop_oneof![
            4 => prop::sample::select(vec!["\"done\"", "\"failed\"", "\"running\"", "\"x\""])
                .prop_map(str::to_owned),
            3 => "\"[ -~é\u{7f}\u{1F600}]{0,12}\"",
            1 => "\"(\\\\[nt\"\\\\/]|\\\\u00[0-7][0-9a-f]|\\\\ud83d|[a-z]){0,6}\"",
            3 => "(0|[1-9][0-9]{0,17}|-[0-9]{1,3}|[0-9]{1,3}\\.[0-9]{1,3}|[0-9]e[0-9]|0[0-9])",
            2 => prop::sample::select(vec!["null", "true", "false", "[]", "{}", "[1,{\"a\":null}]",
                "{\"message\":\"no\",\"class\":\"permanent\"}", "{\"b\":1,\"a\":[\"\\u00e9\"]}"])
                .prop_map(str::to_owned),
        ];
        // Mostly members of the kind their name wants, so that many entries are ones serde
        // reads: those are the cases that compare the two readers.
        let text = prop::sample::select(vec!["owner", "fingerprint", "scope", "tool", "detail"])
            .prop_flat_map(|name| (Just(name.to_owned()), r#""[ !#-\[\]-~é😀]{0,12}""#));
        let number = prop::sample::select(vec![
            "startedAt",
            "leaseUntil",
            "retention",
            "completedAt",
            "failedAt",
            "settledAt",
            "firstStartedAt",
            "attempts",
        ])
        .prop_flat_map(|name| {
            (
                Just(name.to_owned()),
                r"(0|[1-9][0-9]{0,15}|[0-9]{1,3}\.[0-9]{1,3})",
            )
        });
        let json = (
            prop::sample::select(vec!["result", "error"]).prop_map(str::to_owned),
            prop::sample::select(vec![
                "null",
                "7",
                r#""ok""#,
                r#"[1,{"a":null}]"#,
                r#"{"message":"no","class":"permanent"}"#,
            ])
            .prop_map(str::to_owned),
        );
        let member = prop_oneof![
            1 => (name, value),
            1 => text,
            1 => number,
            1 => json,
        ];
        (
            member,
            prop::bool::weighted(0.05),
            prop::bool::weighted(0.05),
        )
            .prop_map(|((name, value), space_before, space_after)| {
                format!(
                    "\"{name}\"{}:{}{value}",
                    if space_before { " " } else { "" },
                    if space_after { " " } else { "" }
                )
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        #[test]
        fn wherever_the_fast_path_answers_serde_answers_the_same(
            members in prop::collection::vec(member(), 0..8),
            status_first in prop::bool::weighted(0.8),
            status in prop::sample::select(vec!["done", "failed", "running"]),
            trailer in prop::sample::select(vec!["", "", "", " ", ",", "x"]),
        ) {
            let mut members = members;
            if status_first {
                members.insert(0, format!("\"status\":\"{status}\""));
            }
            let text = format!("{{{}}}{trailer}", members.join(","));
            if let Some(plain) = read_plain(&text) {
                prop_assert_eq!(Some(plain), by_serde(&text), "{}", text);
            }
        }
    }
}
