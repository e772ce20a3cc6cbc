//! Tests of the recorded result: which texts are kept as they are (exactly the text serde_json
//! writes for their value, held so by property tests), and that a result reads, compares, prints
//! and serializes alike however it is held.

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::store::MAX_STORED_DEPTH;

/// What a model read for a result before results were kept as text.
fn content_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => serde_json::to_string(other).unwrap(),
    }
}

/// Whether all of `text` is in the plain form.
fn plain(text: &str) -> bool {
    plain_end(text.as_bytes(), 0) == Some(text.len())
}

/// Asserts that `text`, read as a stored result, is kept as text and reads as `value`.
fn assert_kept(text: &str, value: &Value) {
    assert!(plain(text), "{text} is in the plain form");
    let recorded = Recorded::read(text).unwrap();
    assert!(
        matches!(recorded.0, Repr::Text(_)),
        "{text} is kept as text"
    );
    assert_eq!(&recorded.to_value(), value, "{text}");
    assert_eq!(recorded.to_json(), serde_json::to_string(value).unwrap());
    assert_eq!(recorded.content(), content_of(value), "{text}");
}

#[test]
fn results_as_toolonce_writes_them_are_kept_as_text() {
    for value in [
        json!({"cents": 500, "receipt": "re_000000000001", "status": "succeeded"}),
        json!({"a": [1, -2, true, false, null, "x", {}, []], "b": {"c": {"d": "é ✓ 🦀"}}}),
        json!("sent"),
        json!(""),
        json!(0),
        json!(-7),
        json!(999_999_999_999_999u64),
        json!(null),
        json!([]),
        json!({}),
        json!({"": 1, "a": 2, "ab": 3, "b": 4, "é": 5}),
        json!("a string with / and DEL \u{7f}"),
    ] {
        assert_kept(&serde_json::to_string(&value).unwrap(), &value);
    }
}

#[test]
fn texts_outside_the_plain_form_are_read_as_values_as_before() {
    for text in [
        r#"{"b":1,"a":2}"#,
        r#"{"a":1,"a":2}"#,
        r#"{"a": 1}"#,
        " 1",
        "1 ",
        "1.5",
        "1.0",
        "-0",
        "01",
        "1e3",
        "1E3",
        "-",
        "1234567890123456",
        r#""a\"b""#,
        r#""\u0041""#,
        r#""\ud83d""#,
        "\"a\tb\"",
        "[1,]",
        "{\"a\":1,}",
        "tru",
        "nul",
    ] {
        assert!(!plain(text), "{text} is not in the plain form");
        match (Recorded::read(text), read_stored::<Value>(text)) {
            (Ok(recorded), Ok(value)) => {
                assert!(matches!(recorded.0, Repr::Value(_)), "{text}");
                assert_eq!(recorded.to_value(), value, "{text}");
            }
            (Err(_), Err(_)) => {}
            (ours, before) => panic!("{text}: {ours:?} against {before:?}"),
        }
    }
    // A lone surrogate is repaired, as every stored result is.
    assert_eq!(Recorded::read(r#""\ud83d""#).unwrap(), json!("\u{fffd}"));
}

#[test]
fn the_plain_form_nests_as_deep_as_a_stored_result_may_and_no_deeper() {
    let nested = |levels: usize| format!("{}{}", "[".repeat(levels), "]".repeat(levels));
    assert!(plain(&nested(MAX_STORED_DEPTH)));
    assert!(!plain(&nested(MAX_STORED_DEPTH + 1)));
    // One level more is still read, as a value.
    let deeper = Recorded::read(&nested(MAX_STORED_DEPTH + 1)).unwrap();
    assert!(matches!(deeper.0, Repr::Value(_)));
    let objects = |levels: usize| format!("{}1{}", r#"{"a":"#.repeat(levels), "}".repeat(levels));
    assert!(plain(&objects(MAX_STORED_DEPTH)));
    assert!(!plain(&objects(MAX_STORED_DEPTH + 1)));
}

#[test]
fn a_result_inside_a_larger_text_ends_where_its_value_does() {
    let text = r#"{"result":{"a":[1,2]},"startedAt":1}"#;
    let (result, end) = Recorded::plain_at(text, 10).unwrap();
    assert_eq!(result, json!({"a": [1, 2]}));
    assert_eq!(&text[end..], r#","startedAt":1}"#);
    assert!(Recorded::plain_at(r#"{"result":1.5}"#, 10).is_none());
}

#[test]
fn kept_as_text_or_as_a_value_a_result_compares_prints_and_serializes_alike() {
    let value = json!({"id": "ch_1", "n": [1, "two", null]});
    let text = Recorded::read(&serde_json::to_string(&value).unwrap()).unwrap();
    let held = Recorded::from(value.clone());
    assert!(matches!(text.0, Repr::Text(_)));
    assert_eq!(text, held);
    assert_eq!(held, text);
    assert_eq!(text, value);
    assert_eq!(value, text);
    assert_ne!(text, Recorded::from(json!({"id": "ch_2"})));
    assert_eq!(format!("{text:?}"), format!("{value:?}"));
    assert_eq!(format!("{held:?}"), format!("{value:?}"));
    assert_eq!(serde_json::to_value(&text).unwrap(), value);
    assert_eq!(text.content(), held.content());
    assert_eq!(Value::from(text), value);
}

/// Values whose text may or may not be in the plain form: floats, escapes, control
/// characters, big and negative numbers, nesting.
fn any_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (0i64..1000).prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "[a-c\"\\\\/\u{0}-\u{1f}\u{7f}é🦀]{0,6}".prop_map(Value::String),
        "[a-z]{0,4}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map("[a-c\"é]{0,3}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// Whatever text of a value the plain form accepts is that value's own text, so a replay
    /// shows the model the very bytes it showed before results were kept as text.
    #[test]
    fn every_value_whose_text_is_plain_reads_back_as_that_value(value in any_value()) {
        let text = serde_json::to_string(&value).unwrap();
        let recorded = Recorded::read(&text).unwrap();
        prop_assert_eq!(&recorded.to_value(), &value);
        prop_assert_eq!(recorded.content(), content_of(&value));
        prop_assert_eq!(recorded.to_json(), text.as_str());
    }

    /// Any text the plain form accepts, however it came about (another writer's member order,
    /// a key given twice, a space, a float, an escape), is what serde_json writes for the
    /// value it reads from it: one text per value, so kept text and values compare alike.
    #[test]
    fn every_text_the_plain_form_accepts_is_the_text_serde_json_writes(text in any_text()) {
        if plain(&text) {
            let value: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(serde_json::to_string(&value).unwrap(), text);
        }
    }
}

/// JSON texts, most of them valid, as writers other than serde_json may give them.
fn any_text() -> impl Strategy<Value = String> {
    let leaf = prop::sample::select(vec![
        "1",
        "-3",
        "0",
        "01",
        "-0",
        "1.5",
        "1e2",
        "12345678901234",
        "1234567890123456",
        "\"a\"",
        "\"\"",
        "\"é\"",
        "\"\\n\"",
        "\"\\u0061\"",
        "true",
        "false",
        "null",
        " 1",
    ])
    .prop_map(str::to_owned);
    leaf.prop_recursive(4, 32, 4, |inner| {
        let key = prop::sample::select(vec!["\"a\"", "\"b\"", "\"c\"", "\"\\u0061\"", "\"\""]);
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4)
                .prop_map(|items| format!("[{}]", items.join(","))),
            prop::collection::vec((key, inner), 0..4).prop_map(|members| {
                let members: Vec<String> = members
                    .into_iter()
                    .map(|(k, v)| format!("{k}:{v}"))
                    .collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    })
}
