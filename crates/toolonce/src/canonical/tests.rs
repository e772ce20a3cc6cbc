//! The canonical text's tests: escaping, numbers, key order, depth, the argument limits.

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
fn integers_beyond_64_bits_are_refused_as_text_and_too_large_numbers_too() {
    // serde_json reads the integer as the nearest double, which 18446744073709551615 + 2 reads
    // as too: as argument text it is refused, never keyed as that double.
    assert_eq!(canon("18446744073709551616"), "18446744073709552000");
    let err = parse_args("{\"a\":18446744073709551616}", &Limits::default()).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArguments(m) if m.contains("18446744073709551616 does not fit in 64 bits")),
        "{err}"
    );
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

fn any_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
            .prop_map(Value::from),
        any_text().prop_map(Value::String),
    ]
}

fn any_value() -> impl Strategy<Value = Value> {
    any_scalar().prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(any_text(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn nested(value: &Value) -> String {
    let mut out = String::new();
    write_nested(value, DEFAULT_MAX_DEPTH, &mut out).unwrap();
    out
}

#[test]
fn a_flat_object_with_keys_on_both_sides_of_u_ffff_is_still_sorted_in_utf16_order() {
    // Byte order (the map's) puts U+E000 first; UTF-16 order puts the surrogate pair first.
    let value = json!({"\u{e000}": 1, "\u{10000}": 2, "a": "x"});
    let Value::Object(map) = &value else {
        unreachable!()
    };
    assert!(
        !is_flat_and_sorted(map),
        "the short way must decline this map"
    );
    let Value::Object(usual) = json!({"cents": 500, "n": 1, "note": null}) else {
        unreachable!()
    };
    assert!(
        is_flat_and_sorted(&usual),
        "the short way takes the usual arguments"
    );
    assert_eq!(
        canonicalize(&value).unwrap(),
        "{\"a\":\"x\",\"\u{10000}\":2,\"\u{e000}\":1}"
    );
}

#[test]
fn a_flat_object_is_refused_at_depth_zero_as_any_object_is() {
    for value in [json!({}), json!({"a": 1})] {
        let err = canonicalize_into(&value, 0, &mut String::new()).unwrap_err();
        assert!(matches!(err, Error::TooDeep { limit: 0 }));
    }
}

proptest! {
    #[test]
    fn flat_objects_come_out_as_the_long_way_writes_them(
        members in proptest::collection::btree_map(any_text(), any_scalar(), 0..12),
    ) {
        let value = Value::Object(members.into_iter().collect());
        prop_assert_eq!(canonicalize(&value).unwrap(), nested(&value));
    }

    #[test]
    fn any_value_comes_out_as_the_long_way_writes_it(value in any_value()) {
        prop_assert_eq!(canonicalize(&value).unwrap(), nested(&value));
    }
}
