//! The shared store-URL vectors (`tests/data/store_urls.json`, read by the TypeScript package
//! too): every URL gives, in every implementation, one parsed result or one refusal, and no
//! refusal or displayed URL shows a password. The test fails when a vector is left unread.

use serde_json::{Value, json};

use super::open::{Named, name};
use super::url::redact_url;

/// The parsed URL in the vectors' neutral form, by the functions `open` uses.
fn describe(url: &str) -> crate::Result<Value> {
    let (named, url) = name(url)?;
    match named {
        Named::Memory => Ok(json!({"kind": "memory"})),
        Named::Sqlite(path) => Ok(json!({"kind": "sqlite", "path": path})),
        Named::Redis => super::redis::describe(&url),
        Named::Postgres => super::postgres::describe(&url),
    }
}

/// The vector's `store` over the defaults of its kind.
fn expected(data: &Value, store: &Value) -> Value {
    let kind = store["kind"].as_str().unwrap();
    let mut full = data["defaults"].get(kind).cloned().unwrap_or(json!({}));
    for (k, v) in store.as_object().unwrap() {
        full[k] = v.clone();
    }
    full
}

fn secrets(v: &Value) -> Vec<String> {
    match &v["secret"] {
        Value::Null => vec![],
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a.iter().map(|s| s.as_str().unwrap().to_owned()).collect(),
        other => panic!("secret {other}"),
    }
}

fn assert_hidden(url: &str, text: &str, secrets: &[String]) {
    for secret in secrets {
        assert!(
            !text.contains(secret.as_str()),
            "{url}: {text:?} shows {secret:?}"
        );
    }
}

#[tokio::test]
async fn every_shared_url_vector_gives_its_result_or_its_refusal() {
    let data: Value =
        serde_json::from_str(include_str!("../../tests/data/store_urls.json")).unwrap();
    let vectors = data["vectors"].as_array().unwrap();
    assert!(vectors.len() > 150, "{} vectors", vectors.len());
    let mut read = 0;
    let mut failed = Vec::new();
    for v in vectors {
        let one = std::panic::AssertUnwindSafe(check(&data, v));
        match futures_util::FutureExt::catch_unwind(one).await {
            Ok(()) => read += 1,
            Err(e) => failed.push(
                e.downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_else(|| format!("{:?}", v["url"])),
            ),
        }
    }
    assert!(
        failed.is_empty(),
        "{} failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
    assert_eq!(read, vectors.len());
}

/// One vector: its result or its refusal, by `describe` and by `open`.
async fn check(data: &Value, v: &Value) {
    {
        let url = v["url"].as_str().unwrap();
        let hidden = secrets(v);
        assert_ne!(
            v["rust"], "unsupported",
            "{url}: no vector is Rust-only yet"
        );
        assert_hidden(url, &redact_url(url), &hidden);
        match (&v["store"], &v["refused"]) {
            (Value::Object(_), Value::Null) => {
                let got = describe(url).unwrap_or_else(|e| panic!("{url}: {e}"));
                assert_eq!(got, expected(data, &v["store"]), "{url}");
            }
            (Value::Null, Value::String(words)) => {
                let message = match describe(url) {
                    Err(crate::Error::Config(m)) => m,
                    other => panic!("{url}: expected a refusal, got {other:?}"),
                };
                assert!(message.contains(words.as_str()), "{url}: {message}");
                assert_hidden(url, &message, &hidden);
                // `open` refuses it the same way, before connecting to anything.
                match super::open(url).await {
                    Err(crate::Error::Config(m)) => {
                        assert!(m.contains(words.as_str()), "{url}: open: {m}");
                        assert_hidden(url, &m, &hidden);
                    }
                    Err(other) => panic!("{url}: open: {other}"),
                    Ok(_) => panic!("{url}: open accepted it"),
                }
            }
            _ => panic!("{url}: a vector has `store` or `refused`"),
        }
    }
}
