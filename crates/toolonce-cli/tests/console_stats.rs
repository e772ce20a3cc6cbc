//! The console's figures against real processes and real stores: entries by state from the
//! store's census where it answers one (SQLite, exact at a million entries), from its pages
//! where it does not (Redis), each sample saying which; `/metrics` on `toolonce console`
//! behind the console's token, with the gateway's metric names and no key or scope in it.

#![cfg(unix)]

#[path = "support/console_process.rs"]
mod console_process;

use std::time::{Duration, Instant};

use console_process::{Process, login, send, start};
use serde_json::{Value, json};
use toolonce::{About, Claim, ClaimRequest, OwnerToken, key};

/// One unknown entry (`send_email`, scope `team-7f3c`) and one done one (`render`); returns
/// their keys.
async fn seed(url: &str) -> (String, String) {
    let store = toolonce::store::open(url).await.unwrap();
    let u = key::derive("team-7f3c", "send_email", &json!({"to": "a@b"}), None).unwrap();
    let about = About::new("team-7f3c", "send_email");
    let owner = OwnerToken::generate();
    let req =
        ClaimRequest::new(&u.key, &u.fingerprint, &owner, Duration::from_millis(50)).about(&about);
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    let d = key::derive("team-7f3c", "render", &json!({}), None).unwrap();
    let about = About::new("team-7f3c", "render");
    let owner = OwnerToken::generate();
    let req =
        ClaimRequest::new(&d.key, &d.fingerprint, &owner, Duration::from_secs(60)).about(&about);
    assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
    let _ = store
        .complete(&d.key, owner, &json!({"ok": 1}), Duration::from_secs(3600))
        .await
        .unwrap();
    // The unknown entry's lease (50 ms) runs out.
    tokio::time::sleep(Duration::from_millis(200)).await;
    (u.key.to_string(), d.key.to_string())
}

/// The console's newest stats sample (the first is taken as it starts), within `patience`.
fn last_sample(c: &Process, cookie: &str, patience: Duration) -> (Value, Value) {
    let deadline = Instant::now() + patience;
    loop {
        let stats = send(
            c.port,
            "GET",
            "/console/api/stats",
            &[("Cookie", cookie)],
            b"",
        )
        .json();
        if let Some(last) = stats["samples"].as_array().and_then(|s| s.last()).cloned() {
            return (stats, last);
        }
        assert!(Instant::now() < deadline, "no sample: {stats}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_million_entries_are_counted_by_the_stores_census_exactly_and_within_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let url = format!("sqlite://{}", path.display());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (_, done) = rt.block_on(seed(&url));
    // A million more done entries, copies of the done one under keys of their own: far more
    // than a walk of the store's pages reads (200 pages of 500).
    let db = rusqlite::Connection::open(&path).unwrap();
    let columns: Vec<String> = db
        .prepare("SELECT name FROM pragma_table_info('toolonce_entries')")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let copied: Vec<String> = columns
        .iter()
        .map(|c| match c.as_str() {
            "key" => "substr(key, 1, length(key) - 7) || printf('%07d', n)".to_owned(),
            other => other.to_owned(),
        })
        .collect();
    db.execute_batch(&format!(
        "WITH RECURSIVE n(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM n WHERE n < 1000000) \
         INSERT INTO toolonce_entries ({}) SELECT {} FROM toolonce_entries, n WHERE key = '{done}'",
        columns.join(", "),
        copied.join(", ")
    ))
    .unwrap();
    drop(db);
    let started = Instant::now();
    let c = start(&["console"], &url, &[], &dir.path().join("stderr"));
    let cookie = login(c.port, &c.token);
    let (stats, last) = last_sample(&c, &cookie, Duration::from_secs(20));
    assert_eq!(last["source"], "census", "{stats}");
    assert_eq!(last["complete"], true, "{stats}");
    assert_eq!(
        (
            last["unknown"].clone(),
            last["done"].clone(),
            last["running"].clone()
        ),
        (json!(1), json!(1_000_001), json!(0)),
        "{stats}"
    );
    assert!(
        last["oldest_unknown_ms"].as_u64().unwrap() >= 100,
        "{stats}"
    );
    assert!(last["census_ms"].as_f64().unwrap() < 2000.0, "{stats}");
    assert!(last["store_page_ms"].as_f64().unwrap() >= 0.0, "{stats}");
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn a_store_without_a_census_is_counted_from_its_pages_and_the_sample_says_so() {
    let redis = toolonce_testsupport::RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let url = redis.url();
    tokio::runtime::Runtime::new().unwrap().block_on(seed(&url));
    let c = start(&["console"], &url, &[], &dir.path().join("stderr"));
    let cookie = login(c.port, &c.token);
    let (stats, last) = last_sample(&c, &cookie, Duration::from_secs(10));
    assert_eq!(last["source"], "pages", "{stats}");
    assert_eq!(last["complete"], true, "{stats}");
    assert_eq!(
        (last["unknown"].clone(), last["done"].clone()),
        (json!(1), json!(1)),
        "{stats}"
    );
    assert!(
        last["oldest_unknown_ms"].as_u64().unwrap() >= 100,
        "{stats}"
    );
}

/// The metric names of an exposition (its samples' names, without labels).
fn names(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split(['{', ' ']).next().unwrap().to_owned())
        .collect()
}

#[test]
fn metrics_on_the_console_need_its_token_and_carry_the_gateways_names_without_keys_or_scopes() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let (unknown, done) = tokio::runtime::Runtime::new().unwrap().block_on(seed(&url));
    let token = "console-token-4d2e9a71b3";
    let c = start(
        &["console", "--require-token", "CONSOLE_TOKEN"],
        &url,
        &[("CONSOLE_TOKEN", token), ("RUST_LOG", "trace")],
        &dir.path().join("stderr"),
    );
    // A given token is never printed.
    assert_eq!(c.token, "");
    assert!(!c.url.contains(token), "{}", c.url);
    let bearer = format!("Bearer {token}");
    assert_eq!(send(c.port, "GET", "/metrics", &[], b"").status, 401);
    let wrong = send(
        c.port,
        "GET",
        "/metrics",
        &[("Authorization", "Bearer nope")],
        b"",
    );
    assert_eq!(wrong.status, 401);
    // The page's session is no scraper's credential, and a browser page of another origin
    // is refused even with the token.
    let cookie = login(c.port, token);
    assert_eq!(
        send(c.port, "GET", "/metrics", &[("Cookie", &cookie)], b"").status,
        401
    );
    let foreign = [
        ("Authorization", bearer.as_str()),
        ("Origin", "http://evil.example"),
    ];
    assert_eq!(send(c.port, "GET", "/metrics", &foreign, b"").status, 403);
    let scraped = send(
        c.port,
        "GET",
        "/metrics",
        &[("Authorization", &bearer)],
        b"",
    );
    assert_eq!(scraped.status, 200, "{}", scraped.body);
    assert!(
        scraped
            .head
            .contains("content-type: text/plain; version=0.0.4"),
        "{}",
        scraped.head
    );
    let text = &scraped.body;
    assert!(
        text.contains("toolonce_entries{state=\"unknown\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("toolonce_entries{state=\"done\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("toolonce_oldest_unknown_age_seconds "),
        "{text}"
    );
    for secret in [unknown.as_str(), done.as_str(), "team-7f3c", token, "idem:"] {
        assert!(!text.contains(secret), "{secret} in\n{text}");
    }
    // The gateway's /metrics of the same store names the same gauges.
    let gateway = start(
        &["mcp", "--console", "--", "cat"],
        &url,
        &[],
        &dir.path().join("gateway-stderr"),
    );
    let of_gateway = send(gateway.port, "GET", "/metrics", &[], b"");
    assert_eq!(of_gateway.status, 200, "{}", of_gateway.body);
    let (console_names, gateway_names) = (names(text), names(&of_gateway.body));
    for name in ["toolonce_entries", "toolonce_oldest_unknown_age_seconds"] {
        assert!(console_names.contains(name), "{console_names:?}");
        assert!(gateway_names.contains(name), "{gateway_names:?}");
    }
    assert!(
        console_names.is_subset(&gateway_names),
        "{console_names:?} {gateway_names:?}"
    );
    drop(c);
    let log = std::fs::read_to_string(dir.path().join("stderr")).unwrap();
    assert!(!log.contains(token), "the token in the log:\n{log}");
}
