//! Operation keys against the key vectors (`tests/data/keys.json`), against `serde_jcs` as an
//! oracle for RFC 8785, and against the contract's promises (`docs/contract.md`: nesting,
//! separators, large integers, limits, key fields).

use proptest::prelude::*;
use serde_json::{Value, json};
use toolonce::Error;
use toolonce::canonical::{self, Limits, canonicalize, canonicalize_into, parse_args};
use toolonce::key::{KeyFields, OperationKey, derive};

/// Key vectors produced by independent RFC 8785 implementations, kept with the crate so a clone
/// tests itself.
const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/keys.json");

#[test]
fn every_shared_vector_gives_its_canonical_text_and_key() {
    let text = std::fs::read_to_string(VECTORS)
        .unwrap_or_else(|e| panic!("cannot read the key vectors at {VECTORS}: {e}"));
    let file: Value = serde_json::from_str(&text).expect("keys.json is JSON");
    let vectors = file["vectors"]
        .as_array()
        .expect("keys.json has a \"vectors\" array");
    assert!(!vectors.is_empty(), "keys.json has no vectors");

    let field = |v: &Value, name: &str| -> String {
        v[name]
            .as_str()
            .unwrap_or_else(|| panic!("vector field {name:?} missing in {v}"))
            .to_owned()
    };
    let mut failures = Vec::new();
    for (i, vector) in vectors.iter().enumerate() {
        let (scope, tool) = (field(vector, "run_id"), field(vector, "tool"));
        let args = match parse_args(&field(vector, "args_json"), &Limits::default()) {
            Ok(args) => args,
            Err(e) => {
                failures.push(format!("vector {i}: args_json does not parse: {e}"));
                continue;
            }
        };
        match canonicalize(&args) {
            Ok(text) if text == field(vector, "canonical") => {}
            Ok(text) => failures.push(format!(
                "vector {i}: canonical\n   got  {text}\n   want {}",
                field(vector, "canonical")
            )),
            Err(e) => failures.push(format!("vector {i}: canonicalize failed: {e}")),
        }
        match derive(&scope, &tool, &args, None) {
            Ok(d) if d.key.as_str() == field(vector, "key") => {}
            Ok(d) => failures.push(format!(
                "vector {i}: key {} instead of {}",
                d.key,
                field(vector, "key")
            )),
            Err(e) => failures.push(format!("vector {i}: derive failed: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} vectors fail:\n{}",
        failures.len(),
        vectors.len(),
        failures.join("\n")
    );
}

fn key(scope: &str, tool: &str, args: &Value) -> OperationKey {
    derive(scope, tool, args, None).unwrap().key
}

#[test]
fn nested_arguments_that_differ_never_share_a_key() {
    let a = key("run-1", "charge_card", &json!({"payment": {"card": "A"}}));
    let b = key("run-1", "charge_card", &json!({"payment": {"card": "B"}}));
    assert_ne!(a, b);
}

#[test]
fn key_order_does_not_change_the_key() {
    let a = parse_args(
        r#"{"b":2,"a":{"y":[1,{"q":1,"p":2}],"x":0}}"#,
        &Limits::default(),
    )
    .unwrap();
    let b = parse_args(
        r#"{"a":{"x":0,"y":[1,{"p":2,"q":1}]},"b":2}"#,
        &Limits::default(),
    )
    .unwrap();
    assert_eq!(key("s", "t", &a), key("s", "t", &b));
}

#[test]
fn number_spelling_does_not_change_the_key() {
    let spellings = ["100", "100.0", "1e2", "1.00E+2"];
    let keys: Vec<_> = spellings
        .iter()
        .map(|n| {
            key(
                "s",
                "t",
                &parse_args(&format!("{{\"amount\":{n}}}"), &Limits::default()).unwrap(),
            )
        })
        .collect();
    assert!(keys.windows(2).all(|w| w[0] == w[1]), "{keys:?}");
}

#[test]
fn empty_or_nul_scope_is_an_error_never_a_key() {
    let args = json!({});
    for (scope, tool, part, reason) in [
        ("", "t", "scope", "is empty"),
        ("a\0b", "t", "scope", "contains NUL"),
        ("s", "", "tool name", "is empty"),
        ("s", "t\0", "tool name", "contains NUL"),
    ] {
        match derive(scope, tool, &args, None) {
            Err(Error::InvalidKeyPart { part: p, reason: r }) => {
                assert_eq!((p, r), (part, reason), "for {scope:?}, {tool:?}");
            }
            other => panic!("{scope:?}, {tool:?} gave {other:?}"),
        }
        assert!(OperationKey::derive(scope, tool, "{}").is_err());
    }
}

#[test]
fn scope_and_tool_are_checked_before_the_arguments() {
    let mut deep = json!(1);
    for _ in 0..200 {
        deep = json!([deep]);
    }
    assert!(matches!(
        derive("", "t", &deep, None),
        Err(Error::InvalidKeyPart { .. })
    ));
    assert!(matches!(
        derive("s", "t", &deep, None),
        Err(Error::TooDeep { limit: 128 })
    ));
}

#[test]
fn separator_keeps_ab_c_apart_from_a_bc() {
    let args = json!({"x": 1});
    assert_ne!(key("ab", "c", &args), key("a", "bc", &args));
    let canonical = canonicalize(&args).unwrap();
    assert_ne!(
        OperationKey::derive("ab", "c", &canonical).unwrap(),
        OperationKey::derive("a", "bc", &canonical).unwrap()
    );
}

#[test]
fn large_distinct_integers_never_share_a_key() {
    let limits = Limits::default();
    let a = parse_args(r#"{"id":9007199254740993}"#, &limits).unwrap();
    let b = parse_args(r#"{"id":9007199254740992}"#, &limits).unwrap();
    assert_eq!(canonicalize(&a).unwrap(), r#"{"id":9007199254740993}"#);
    assert_ne!(key("s", "t", &a), key("s", "t", &b));
    let max = parse_args(r#"{"id":18446744073709551615}"#, &limits).unwrap();
    let below = parse_args(r#"{"id":18446744073709551614}"#, &limits).unwrap();
    assert_ne!(key("s", "t", &max), key("s", "t", &below));
}

/// Holds a deeply nested value and takes it apart one level at a time when dropped (even when
/// an assertion fails): `serde_json::Value`'s own drop recurses once per level, which would
/// overflow the test thread's stack at this depth.
struct Deep(Value);

impl Drop for Deep {
    fn drop(&mut self) {
        let mut value = std::mem::take(&mut self.0);
        while let Value::Array(mut items) = value {
            value = items.pop().unwrap_or_default();
        }
    }
}

#[test]
fn a_hundred_thousand_deep_array_is_an_error_not_a_crash() {
    const DEPTH: usize = 100_000;
    let text = format!("{}{}", "[".repeat(DEPTH), "]".repeat(DEPTH));
    assert!(matches!(
        parse_args(&text, &Limits::default()),
        Err(Error::TooDeep { .. })
    ));

    // A value nested that deep cannot come from parsing; build it by hand, iteratively.
    let mut deep = Deep(Value::Null);
    for _ in 0..DEPTH {
        deep.0 = Value::Array(vec![std::mem::take(&mut deep.0)]);
    }
    assert!(matches!(
        canonicalize(&deep.0),
        Err(Error::TooDeep { limit: 128 })
    ));
    assert!(matches!(
        derive("s", "t", &deep.0, None),
        Err(Error::TooDeep { .. })
    ));
    // Without a limit it still does not recurse: the whole text comes out.
    let mut out = String::new();
    canonicalize_into(&deep.0, usize::MAX, &mut out).unwrap();
    assert_eq!(out.len(), 2 * DEPTH + "null".len());
}

#[test]
fn arguments_over_the_size_limit_are_refused() {
    let big = format!(
        "{{\"body\":\"{}\"}}",
        "x".repeat(canonical::DEFAULT_MAX_BYTES)
    );
    match parse_args(&big, &Limits::default()) {
        Err(Error::ArgumentsTooLarge { size, limit }) => {
            assert_eq!((size, limit), (big.len(), canonical::DEFAULT_MAX_BYTES));
        }
        other => panic!("{other:?}"),
    }
    let exactly = format!("\"{}\"", "x".repeat(canonical::DEFAULT_MAX_BYTES - 2));
    assert!(parse_args(&exactly, &Limits::default()).is_ok());
}

#[test]
fn invalid_json_is_an_error_that_says_where() {
    match parse_args("{\"a\": 1,\n \"b\": }", &Limits::default()) {
        Err(Error::InvalidArguments(message)) => {
            assert!(message.contains("line 2 column"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn key_fields_ignore_the_other_fields() {
    let fields = KeyFields::new(["/to", "/amount"]).unwrap();
    let first = json!({"to": "acct-1", "amount": 5, "note": "rent"});
    let rephrased = json!({"note": "rent for May", "amount": 5, "to": "acct-1"});
    let a = derive("run", "pay", &first, Some(&fields)).unwrap();
    let b = derive("run", "pay", &rephrased, Some(&fields)).unwrap();
    assert_eq!(a.key, b.key);
    assert_ne!(a.fingerprint, b.fingerprint, "a non-key field differs");
    let other = derive(
        "run",
        "pay",
        &json!({"to": "acct-2", "amount": 5, "note": "rent"}),
        Some(&fields),
    )
    .unwrap();
    assert_ne!(a.key, other.key);
}

#[test]
fn fingerprint_covers_all_arguments_and_not_the_scope() {
    let args = json!({"to": "acct-1", "amount": 5});
    let a = derive("run-1", "pay", &args, None).unwrap();
    let b = derive("run-2", "pay", &args, None).unwrap();
    assert_ne!(a.key, b.key);
    assert_eq!(a.fingerprint, b.fingerprint);
    let fields = KeyFields::new(["/to"]).unwrap();
    assert_eq!(
        derive("run-1", "pay", &args, Some(&fields))
            .unwrap()
            .fingerprint,
        a.fingerprint
    );
}

#[test]
fn a_missing_key_field_and_a_null_one_give_different_keys() {
    let fields = KeyFields::new(["/ref"]).unwrap();
    let missing = derive("s", "t", &json!({}), Some(&fields)).unwrap();
    let null = derive("s", "t", &json!({"ref": null}), Some(&fields)).unwrap();
    assert_ne!(missing.key, null.key);
}

#[test]
fn invalid_key_field_pointers_are_errors() {
    for bad in ["to", "/a~2", "/a~"] {
        assert!(
            matches!(KeyFields::new([bad]), Err(Error::InvalidPointer { .. })),
            "{bad:?}"
        );
    }
    assert!(KeyFields::new(Vec::<&str>::new()).is_err());
}

// ---- RFC 8785 against serde_jcs -----------------------------------------------------------

/// Strings with the characters canonicalization cares about: controls, quotes, backslashes,
/// U+007F, line separators, and both sides of the UTF-16/UTF-8 ordering edge.
fn any_string() -> impl Strategy<Value = String> {
    let ch = prop_oneof![
        4 => proptest::char::range('a', 'e'),
        2 => any::<char>(),
        1 => proptest::char::range('\0', '\u{1f}'),
        1 => prop_oneof![Just('"'), Just('\\'), Just('/'), Just('\u{7f}'), Just('\u{2028}')],
        1 => proptest::char::range('\u{e000}', '\u{ffff}'),
        1 => proptest::char::range('\u{10000}', '\u{10ffff}'),
    ];
    proptest::collection::vec(ch, 0..8).prop_map(|chars| chars.into_iter().collect())
}

/// Finite doubles, from all bit patterns (every exponent) and from short decimals.
fn any_float() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<u64>()
            .prop_map(f64::from_bits)
            .prop_filter("finite", |f| f.is_finite()),
        (-1_000_000i64..1_000_000, 0u32..8).prop_map(|(m, e)| m as f64 / 10f64.powi(e as i32)),
        Just(-0.0),
        Just(1e21),
        Just(1e-7),
    ]
}

/// JSON documents whose integers stay within ±2^53, where exact digits and RFC 8785 agree.
fn any_document() -> impl Strategy<Value = Value> {
    const SAFE: i64 = 1 << 53;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-SAFE..=SAFE).prop_map(Value::from),
        any_float().prop_map(Value::from),
        any_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            proptest::collection::vec((any_string(), inner), 0..8)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn canonical_text_equals_serde_jcs(doc in any_document()) {
        let ours = canonicalize(&doc).unwrap();
        let oracle = serde_jcs::to_string(&doc).unwrap();
        prop_assert_eq!(ours, oracle);
    }

    #[test]
    fn canonicalizing_canonical_text_changes_nothing(doc in any_document()) {
        let once = canonicalize(&doc).unwrap();
        // A double from 2^64 up to 10^21 is written in digits alone (ECMAScript's form), which
        // as text is an integer literal beyond 64 bits: refused, since texts of other integers
        // would read as that double too.
        if let Some(integer) = canonical::first_inexact_integer(once.as_bytes()) {
            let refused = parse_args(&once, &Limits::default());
            prop_assert!(matches!(refused, Err(Error::InvalidArguments(ref why)) if why.contains(integer)));
            return Ok(());
        }
        let reparsed = parse_args(&once, &Limits::default()).unwrap();
        let twice = canonicalize(&reparsed).unwrap();
        prop_assert_eq!(&once, &twice);
        prop_assert_eq!(
            derive("s", "t", &doc, None).unwrap().key,
            derive("s", "t", &reparsed, None).unwrap().key
        );
    }
}

/// The number vectors every implementation runs (`tests/data/key_numbers.json`).
const NUMBER_VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/key_numbers.json");

fn number_vectors() -> Value {
    let text = std::fs::read_to_string(NUMBER_VECTORS)
        .unwrap_or_else(|e| panic!("cannot read {NUMBER_VECTORS}: {e}"));
    serde_json::from_str(&text).expect("key_numbers.json is JSON")
}

fn cases<'v>(file: &'v Value, list: &str) -> &'v Vec<Value> {
    let cases = file[list]
        .as_array()
        .unwrap_or_else(|| panic!("no {list:?} list"));
    assert!(!cases.is_empty(), "the {list:?} list is empty");
    cases
}

#[test]
fn integer_texts_keep_their_exact_digits_as_the_shared_number_vectors_say() {
    let file = number_vectors();
    let (scope, tool) = (
        file["run_id"].as_str().unwrap(),
        file["tool"].as_str().unwrap(),
    );
    for case in cases(&file, "exact") {
        let args = parse_args(case["args_json"].as_str().unwrap(), &Limits::default())
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(canonicalize(&args).unwrap(), case["canonical"], "{case}");
        let derived = derive(scope, tool, &args, None).unwrap();
        assert_eq!(derived.key.as_str(), case["key"], "{case}");
    }
}

#[test]
fn integer_texts_beyond_64_bits_are_refused_as_the_shared_number_vectors_say() {
    let file = number_vectors();
    for case in cases(&file, "refused") {
        match parse_args(case["args_json"].as_str().unwrap(), &Limits::default()) {
            Err(Error::InvalidArguments(why)) => {
                let names = case["names"].as_str().unwrap();
                assert!(
                    why.contains(names) && why.contains("64 bits"),
                    "{case}: {why}"
                );
            }
            other => panic!("{case}: {other:?}"),
        }
    }
}

#[test]
fn doubles_and_integers_of_rust_key_as_the_shared_number_vectors_say() {
    let file = number_vectors();
    let mut checked = 0;
    for case in cases(&file, "values") {
        let value = &case["value"];
        let held: Option<Value> = if let Some(text) = value["double"].as_str() {
            Some(Value::from(text.parse::<f64>().unwrap()))
        } else if let Some(digits) = value["integer"].as_str() {
            // An integer Rust cannot hold (beyond 64 bits) is only ever text: refused there.
            digits
                .parse::<i64>()
                .map(Value::from)
                .or_else(|_| digits.parse::<u64>().map(Value::from))
                .ok()
                .or_else(|| {
                    assert_eq!(case["refused"], true, "{case}");
                    assert!(parse_args(digits, &Limits::default()).is_err(), "{case}");
                    None
                })
        } else {
            // NaN, the infinities, Map and Set: a serde_json value cannot hold them.
            None
        };
        let Some(held) = held else { continue };
        assert_eq!(canonicalize(&held).unwrap(), case["canonical"], "{case}");
        checked += 1;
    }
    assert!(checked >= 5, "only {checked} values checked");
}

/// The repeat ordinal's vectors (`tests/data/key_repeats.json`), which the TypeScript package
/// runs too: what the tool gets, the ordinal, the key, or the refusal naming the argument.
#[test]
fn every_repeat_vector_gives_its_arguments_ordinal_and_key_or_is_refused() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/key_repeats.json");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(file["max"], json!(toolonce::repeat::MAX));
    assert_eq!(file["default_name"], toolonce::repeat::DEFAULT_NAME);
    let vectors = file["vectors"].as_array().expect("vectors");
    assert!(vectors.len() > 20, "{} vectors", vectors.len());
    let mut failures = Vec::new();
    for (i, v) in vectors.iter().enumerate() {
        let text = |name: &str| v[name].as_str().unwrap_or_else(|| panic!("{name} in {v}"));
        // Parsed as JSON, not with the argument limits: an integer beyond 64 bits is the
        // ordinal's to refuse here.
        let mut args: Value = serde_json::from_str(text("args_json")).unwrap();
        let taken = toolonce::repeat::take(&mut args, text("repeat_name"));
        match (taken, v.get("refused")) {
            (Err(refused), Some(name)) if refused.name == *name => {
                let message = refused.message(text("tool"));
                let quoted = format!("`{}`", name.as_str().unwrap());
                assert!(message.starts_with("Not executed: ") && message.contains(&quoted));
            }
            (Ok(repeat), None) => {
                let derived =
                    toolonce::key::derive_repeat(text("run_id"), text("tool"), &args, None, repeat)
                        .unwrap();
                let got = (
                    canonicalize(&args).unwrap(),
                    json!(repeat.get()),
                    derived.key.to_string(),
                );
                let want = (
                    text("tool_args_json").to_owned(),
                    v["ordinal"].clone(),
                    text("key").to_owned(),
                );
                if got != want {
                    failures.push(format!(
                        "vector {i} ({}): {got:?} != {want:?}",
                        text("note")
                    ));
                }
            }
            (got, want) => failures.push(format!(
                "vector {i} ({}): {got:?}, refused {want:?}",
                text("note")
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_repeat_follows_a_named_key_and_a_key_fields_projection() {
    use toolonce::repeat::Repeat;
    let args = json!({"order": "o-1", "note": "again"});
    let two = Repeat::new(2).unwrap();
    let named = toolonce::key::derive_named("s", "t", "step-1", &args).unwrap();
    let named_two = toolonce::key::derive_named_repeat("s", "t", "step-1", &args, two).unwrap();
    let by_hand = OperationKey::derive("s", "t", "\0toolonce/key\0step-1\0toolonce/repeat\x002");
    assert_eq!(named_two.key, by_hand.unwrap());
    assert_ne!(named_two.key, named.key);
    assert_eq!(named_two.fingerprint, named.fingerprint);
    let fields = KeyFields::new(["/order"]).unwrap();
    let projected = toolonce::key::derive_repeat("s", "t", &args, Some(&fields), two).unwrap();
    let by_hand = OperationKey::derive("s", "t", "{\"/order\":\"o-1\"}\0toolonce/repeat\x002");
    assert_eq!(projected.key, by_hand.unwrap());
    let first = toolonce::key::derive_repeat("s", "t", &args, Some(&fields), Repeat::FIRST);
    assert_eq!(
        first.unwrap().key,
        derive("s", "t", &args, Some(&fields)).unwrap().key
    );
}
