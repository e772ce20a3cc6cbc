//! `GET /metrics` on the gateway: scraped after real calls through it, the exposition text
//! parsed, the numbers checked; behind the gateway's token and Origin check; no key, scope or
//! token in any label.

use std::collections::BTreeMap;

use super::*;

/// One sample of the exposition: the metric's name, its labels, its value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The samples of a Prometheus text exposition (format 0.0.4): `name{k="v",…} value` lines.
fn parse(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line:?}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|e| panic!("{line:?}: {e}")),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series, BTreeMap::new()),
            Some((name, rest)) => {
                let rest = rest.strip_suffix('}').unwrap_or_else(|| panic!("{line:?}"));
                let labels = rest
                    .split("\",")
                    .filter(|pair| !pair.is_empty())
                    .map(|pair| {
                        let (k, v) = pair.split_once("=\"").unwrap_or_else(|| panic!("{line:?}"));
                        (k.to_owned(), v.trim_end_matches('"').to_owned())
                    })
                    .collect();
                (name, labels)
            }
        };
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    samples
}

/// The value of the sample `name` with exactly `labels`, if the exposition has it.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let wanted: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    samples
        .iter()
        .find(|s| s.name == name && s.labels == wanted)
        .map(|s| s.value)
}

fn scrape(port: u16, headers: &str) -> Raw {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{headers}\r\n"
    )
    .unwrap();
    read_raw(stream)
}

const CONFIG: &str = r#"
[tools.hang]
lease = "300ms"
call_timeout = "200ms"
"#;

#[test]
fn metrics_count_calls_by_tool_and_outcome_time_them_and_show_the_store_by_state() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    let config = dir.path().join("toolonce.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let store = format!("sqlite://{}", dir.path().join("toolonce.db").display());
    let mut command = Command::new(toolonce());
    command
        .args(["mcp", "--store", &store, "--scope", "metrics-scope-3f9a"])
        .args([
            "--listen",
            "127.0.0.1:0",
            "--require-token",
            "GATEWAY_TOKEN",
        ])
        .args(["--config", config.to_str().unwrap(), "--"])
        .arg(test_server())
        .env("GATEWAY_TOKEN", GATEWAY_TOKEN)
        .env("MCP_TEST_COUNTER", &counter)
        .env_remove("MCP_TEST_LOG");
    let mut gateway = Gateway::spawn(command);
    let port = gateway.port;
    let bearer = format!("Authorization: Bearer {GATEWAY_TOKEN}\r\n");

    // As /mcp: no token, a wrong one, another Origin are refused.
    assert_eq!(scrape(port, "").status(), 401);
    assert_eq!(
        scrape(port, "Authorization: Bearer not-the-token\r\n").status(),
        401
    );
    let foreign = format!("{bearer}Origin: https://evil.example\r\n");
    assert_eq!(scrape(port, &foreign).status(), 403);

    let session = {
        let answer = raw(port, "POST", &format!("{JSON_ONLY}{bearer}"), INITIALIZE);
        assert_eq!(answer.status(), 200, "{}", answer.body);
        let session = format!(
            "{bearer}Mcp-Session-Id: {}\r\n",
            answer.header("mcp-session-id").unwrap()
        );
        let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        raw(port, "POST", &format!("{JSON_ONLY}{session}"), initialized);
        session
    };
    let mut keys = Vec::new();
    let mut call = |id: &str, tool: &str, args: Value| {
        let answer = raw_call(port, &session, id, tool, &args);
        if let Some(key) = answer.pointer("/result/_meta/toolonce~1key") {
            keys.push(key.as_str().unwrap().to_owned());
        }
        answer
    };
    call("1", "charge", json!({"amount": 1}));
    let replay = call("2", "charge", json!({"amount": 1}));
    assert_eq!(outcome(&replay["result"]), Some("replayed"), "{replay}");
    call("3", "charge", json!({"amount": 2}));
    call("4", "fail", json!({}));
    call("5", "hang", json!({}));
    // The hung call's lease (300 ms) runs out: its entry is unknown.
    std::thread::sleep(Duration::from_millis(800));

    let answer = scrape(port, &bearer);
    assert_eq!(answer.status(), 200, "{}", answer.body);
    assert!(
        answer
            .header("content-type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4"),
        "{}",
        answer.head
    );
    let samples = parse(&answer.body);
    let calls = |tool, outcome| {
        value(
            &samples,
            "toolonce_calls_total",
            &[("tool", tool), ("outcome", outcome)],
        )
    };
    assert_eq!(calls("charge", "executed"), Some(2.0), "{}", answer.body);
    assert_eq!(calls("charge", "replayed"), Some(1.0), "{}", answer.body);
    assert_eq!(calls("fail", "executed"), Some(1.0), "{}", answer.body);
    // The histogram: two executed charges, their durations summed, in cumulative buckets.
    let duration = |suffix: &str, extra: &[(&str, &str)]| {
        let mut labels = vec![("tool", "charge"), ("outcome", "executed")];
        labels.extend_from_slice(extra);
        value(
            &samples,
            &format!("toolonce_call_duration_seconds{suffix}"),
            &labels,
        )
    };
    assert_eq!(duration("_count", &[]), Some(2.0), "{}", answer.body);
    assert_eq!(duration("_bucket", &[("le", "+Inf")]), Some(2.0));
    let sum = duration("_sum", &[]).unwrap();
    assert!(sum > 0.0 && sum < 10.0, "{sum}");
    // The store's census: two done charges, the kept isError answer, the hung call unknown.
    let entries = |state| value(&samples, "toolonce_entries", &[("state", state)]);
    assert_eq!(entries("done"), Some(2.0), "{}", answer.body);
    assert_eq!(entries("failed"), Some(1.0), "{}", answer.body);
    assert_eq!(entries("unknown"), Some(1.0), "{}", answer.body);
    assert_eq!(entries("running"), Some(0.0), "{}", answer.body);
    let waited = value(&samples, "toolonce_oldest_unknown_age_seconds", &[]).unwrap();
    assert!((0.2..10.0).contains(&waited), "{waited}");

    // No label names a key, the scope, the token or a session: only these label names.
    assert!(!keys.is_empty());
    for sample in &samples {
        for (name, label) in &sample.labels {
            assert!(
                ["tool", "outcome", "state", "le"].contains(&name.as_str()),
                "label {name} in {sample:?}"
            );
            for secret in keys.iter().map(String::as_str).chain([
                "metrics-scope-3f9a",
                GATEWAY_TOKEN,
                "idem:",
            ]) {
                assert!(!label.contains(secret), "{sample:?} shows {secret}");
            }
        }
    }

    // Scraped again at once: the counters move, the store is not counted again (at most one
    // census per interval, however often the route is scraped).
    raw_call(port, &session, "6", "charge", &json!({"amount": 3}));
    let samples = parse(&scrape(port, &bearer).body);
    assert_eq!(
        value(
            &samples,
            "toolonce_calls_total",
            &[("tool", "charge"), ("outcome", "executed")]
        ),
        Some(3.0)
    );
    assert_eq!(
        value(&samples, "toolonce_entries", &[("state", "done")]),
        Some(2.0)
    );
    // Only GET.
    let post = raw_path(port, "POST", "/metrics", &bearer);
    assert_eq!(post.status(), 405);
    assert_eq!(post.header("allow").as_deref(), Some("GET"));
    gateway.stop();
}

fn raw_path(port: u16, method: &str, path: &str, headers: &str) -> Raw {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
         Content-Length: 0\r\n{headers}\r\n"
    )
    .unwrap();
    read_raw(stream)
}
