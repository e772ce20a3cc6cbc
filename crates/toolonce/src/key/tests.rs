//! The key's unit tests: its form, named keys, fingerprints, key fields.

use super::*;
use serde_json::json;

#[test]
fn a_named_key_hashes_the_marker_and_the_name_where_arguments_would_be() {
    let args = serde_json::json!({"n": 1});
    let named = derive_named("s", "srv/t", "step-1", &args).unwrap();
    let by_hand = OperationKey::derive("s", "srv/t", "\0toolonce/key\0step-1").unwrap();
    assert_eq!(named.key, by_hand);
    assert_eq!(
        named.fingerprint,
        derive("s", "srv/t", &args, None).unwrap().fingerprint
    );
    assert_ne!(named.key, derive("s", "srv/t", &args, None).unwrap().key);
}

#[test]
fn a_named_key_refuses_the_parts_a_derived_key_refuses() {
    let args = serde_json::json!({});
    assert!(matches!(
        derive_named("", "t", "n", &args),
        Err(Error::InvalidKeyPart { part: "scope", .. })
    ));
    assert!(matches!(
        derive_named("s", "a\0b", "n", &args),
        Err(Error::InvalidKeyPart {
            part: "tool name",
            ..
        })
    ));
}

#[test]
fn key_has_the_documented_form() {
    let key = OperationKey::derive("run-1", "charge_card", "{}").unwrap();
    assert_eq!(key.as_str().len(), 37);
    assert_eq!(key.as_str().parse::<OperationKey>().unwrap(), key);
    assert_eq!(key.to_string(), key.as_str());
    assert_eq!(format!("{key:?}"), format!("{:?}", key.as_str()));
    assert_eq!(key.idempotency_key(), key.as_str());
}

#[test]
fn key_is_the_truncated_sha256_of_the_separated_parts() {
    // sha256("s\0t\0{}") computed independently.
    let digest: [u8; 32] = Sha256::digest(b"s\0t\0{}").into();
    let want: String = std::iter::once("idem:".to_owned())
        .chain(digest[..16].iter().map(|b| format!("{b:02x}")))
        .collect();
    assert_eq!(OperationKey::derive("s", "t", "{}").unwrap().as_str(), want);
}

#[test]
fn malformed_keys_are_refused() {
    for text in [
        "",
        "idem:",
        "idem:6CBC65F0AA6D3F844178448AA38D1EE9",
        "idem:6cbc65f0aa6d3f844178448aa38d1ee",
        "idem:6cbc65f0aa6d3f844178448aa38d1ee9a",
        "idex:6cbc65f0aa6d3f844178448aa38d1ee9",
        "idem:6cbc65f0aa6d3f844178448aa38d1eg9",
        " idem:6cbc65f0aa6d3f844178448aa38d1ee9",
    ] {
        assert!(
            matches!(text.parse::<OperationKey>(), Err(Error::InvalidKey(t)) if t == text),
            "{text:?}"
        );
    }
}

#[test]
fn keys_and_fingerprints_serialize_as_strings_and_are_checked_when_read() {
    let derived = derive("r", "t", &json!({"a": 1}), None).unwrap();
    let text = serde_json::to_string(&derived.key).unwrap();
    assert_eq!(text, format!("\"{}\"", derived.key));
    assert_eq!(
        serde_json::from_str::<OperationKey>(&text).unwrap(),
        derived.key
    );
    assert!(serde_json::from_str::<OperationKey>("\"idem:x\"").is_err());

    let text = serde_json::to_string(&derived.fingerprint).unwrap();
    assert_eq!(
        serde_json::from_str::<Fingerprint>(&text).unwrap(),
        derived.fingerprint
    );
    assert!(serde_json::from_str::<Fingerprint>("\"abc\"").is_err());
}

#[test]
fn fingerprint_is_the_sha256_of_the_canonical_text() {
    assert_eq!(
        Fingerprint::of_canonical("").as_str(),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    let text = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    assert_eq!(text.parse::<Fingerprint>().unwrap().as_str(), text);
    assert!(text.to_uppercase().parse::<Fingerprint>().is_err());
    assert!(text[1..].parse::<Fingerprint>().is_err());
}

#[test]
fn pointers_are_checked() {
    for ok in ["", "/", "/a", "/a~0b/~1", "/0/-", "/é"] {
        assert!(KeyFields::new([ok]).is_ok(), "{ok:?}");
    }
    for bad in ["a", "/a~", "/a~2", "~0", "/~x"] {
        assert!(
            matches!(KeyFields::new([bad]), Err(Error::InvalidPointer { pointer, .. }) if pointer == bad),
            "{bad:?}"
        );
    }
    assert!(matches!(
        KeyFields::new(Vec::<String>::new()),
        Err(Error::InvalidPointer { .. })
    ));
}

#[test]
fn projection_follows_rfc_6901() {
    let args = json!({"a/b": 1, "m~n": 2, "list": [10, 20], "x": null});
    let fields =
        KeyFields::new(["/a~1b", "/m~0n", "/list/1", "/x", "/missing", "/list/7"]).unwrap();
    assert_eq!(
        fields.project(&args),
        json!({"/a~1b": 1, "/m~0n": 2, "/list/1": 20, "/x": null})
    );
    assert_eq!(
        KeyFields::new([""]).unwrap().project(&args),
        json!({"": args})
    );
}
