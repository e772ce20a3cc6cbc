//! `toolonce key`: the key, canonical form and fingerprint of a call, checked against the key
//! vectors that independent RFC 8785 implementations produced (kept in the library crate's
//! `tests/data/keys.json`).

mod cli_support;

use cli_support::{code, json, stderr, stdout, toolonce};
use serde_json::Value;

const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../toolonce/tests/data/keys.json"
);

#[test]
fn key_prints_the_vector_key_and_canonical_form() {
    let out = toolonce()
        .args(["key", "--scope", "run-1", "--tool", "charge_card"])
        .args(["--args", r#"{"b":2,"a":1}"#])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("key          idem:9f0b3421dcbdce0306031ee0ad3dedcc\n"),
        "{text}"
    );
    assert!(text.contains("canonical    {\"a\":1,\"b\":2}\n"), "{text}");
    let fingerprint = text
        .lines()
        .find_map(|l| l.strip_prefix("fingerprint  "))
        .expect("a fingerprint line");
    assert_eq!(fingerprint.len(), 64, "{text}");
}

#[test]
fn key_agrees_with_every_shared_vector() {
    let text = std::fs::read_to_string(VECTORS).expect("read crates/toolonce/tests/data/keys.json");
    let file: Value = serde_json::from_str(&text).unwrap();
    let vectors = file["vectors"].as_array().expect("a vectors array");
    assert!(!vectors.is_empty());
    for v in vectors {
        let out = toolonce()
            .args(["key", "--json", "--args", "-"])
            .args(["--scope", v["run_id"].as_str().unwrap()])
            .args(["--tool", v["tool"].as_str().unwrap()])
            .write_stdin(v["args_json"].as_str().unwrap())
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{v}: {}", stderr(&out));
        let doc = json(&out);
        assert_eq!(doc["key"], v["key"], "{v}");
        assert_eq!(doc["canonical"], v["canonical"], "{v}");
    }
}

#[test]
fn key_reads_arguments_from_standard_input_and_prints_json() {
    let out = toolonce()
        .args([
            "key",
            "--scope",
            "run-1",
            "--name",
            "charge_card",
            "--args",
            "-",
            "--json",
        ])
        .write_stdin("{\n  \"b\": 2,\n  \"a\": 1\n}\n")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let doc = json(&out);
    assert_eq!(doc["key"], "idem:9f0b3421dcbdce0306031ee0ad3dedcc");
    assert_eq!(doc["canonical"], r#"{"a":1,"b":2}"#);
    assert_eq!(doc["scope"], "run-1");
    assert_eq!(doc["tool"], "charge_card");
    assert_eq!(doc["key_object"], Value::Null);
}

#[test]
fn key_fields_key_on_the_projection_and_keep_the_full_fingerprint() {
    let run = |args: &str| {
        let out = toolonce()
            .args(["key", "--scope", "s", "--tool", "t", "--json"])
            .args(["--key-field", "/payment/card", "--args", args])
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        json(&out)
    };
    let a = run(r#"{"payment":{"card":"A"},"note":"rent"}"#);
    let b = run(r#"{"payment":{"card":"A"},"note":"rent for May"}"#);
    assert_eq!(a["key_object"], serde_json::json!({"/payment/card": "A"}));
    assert_eq!(a["key"], b["key"]);
    assert_ne!(a["fingerprint"], b["fingerprint"]);

    let text = toolonce()
        .args([
            "key",
            "--scope",
            "s",
            "--tool",
            "t",
            "--key-field",
            "/payment/card",
        ])
        .args(["--args", r#"{"payment":{"card":"A"}}"#])
        .output()
        .unwrap();
    assert!(
        stdout(&text).contains("key object   {\"/payment/card\":\"A\"}\n"),
        "{}",
        stdout(&text)
    );
}

#[test]
fn invalid_json_arguments_name_the_line_and_column() {
    let out = toolonce()
        .args([
            "key",
            "--scope",
            "s",
            "--tool",
            "t",
            "--args",
            "{\"a\": 1,\n  }",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("line 2 column 3"), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
}

#[test]
fn an_empty_scope_or_a_bad_key_field_is_refused() {
    let out = toolonce()
        .args(["key", "--scope", "", "--tool", "t"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("invalid scope: is empty"),
        "{}",
        stderr(&out)
    );

    let out = toolonce()
        .args(["key", "--scope", "s", "--tool", "t", "--key-field", "card"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("invalid key field \"card\""),
        "{}",
        stderr(&out)
    );
    // It says what a pointer must look like, and how this one would be written.
    assert!(
        stderr(&out).contains("must start with \"/\""),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("\"/card\""), "{}", stderr(&out));
}
