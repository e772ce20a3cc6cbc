//! What the command tells its operator: log lines and messages in operator wording — never the
//! text written for a model ("you must not retry it… continue with other work") — and an
//! error's causes shown once each, not "Connection refused: Connection refused".

mod cli_support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use cli_support::{code, sqlite_url, stderr, toolonce};

/// Phrases only the layer's text for the model has.
const FOR_THE_MODEL: [&str; 5] = [
    "you must not retry",
    "Continue with other work",
    "safe to try again",
    "If you meant",
    "Not executed",
];

fn assert_operator_wording(text: &str) {
    for phrase in FOR_THE_MODEL {
        assert!(!text.contains(phrase), "{phrase:?} in:\n{text}");
    }
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[test]
fn an_unreachable_store_names_its_cause_once() {
    let refused = std::io::Error::from_raw_os_error(111).to_string();
    let url = format!("redis://127.0.0.1:{}", closed_port());
    let dir = tempfile::tempdir().unwrap();
    let ls = toolonce().args(["ls", "--store", &url]).output().unwrap();
    let exec = toolonce()
        .current_dir(dir.path())
        .args(["exec", "--store", &url, "--scope", "s", "--name", "n"])
        .args(["--", "true"])
        .output()
        .unwrap();
    for out in [ls, exec] {
        let err = stderr(&out);
        assert!(err.contains(&refused), "{err}");
        assert_eq!(err.matches(&refused).count(), 1, "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn exec_logs_a_duplicate_and_a_conflict_in_operator_wording() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let script = "touch started; sleep 2";
    let first = std::process::Command::new(env!("CARGO_BIN_EXE_toolonce"))
        .current_dir(dir.path())
        .env_remove("TOOLONCE_STORE")
        .args(["exec", "--store", &store, "--scope", "s", "--name", "slow"])
        .args(["--key-field", "/a", "--args", r#"{"a":1,"b":1}"#])
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dir.path().join("started").exists() {
        assert!(Instant::now() < deadline, "the first run never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let run = |args: &str| {
        toolonce()
            .current_dir(dir.path())
            .env("RUST_LOG", "toolonce=info")
            .args(["exec", "--store", &store, "--scope", "s", "--name", "slow"])
            .args(["--key-field", "/a", "--args", args])
            .args(["--", "sh", "-c", script])
            .output()
            .unwrap()
    };
    let duplicate = run(r#"{"a":1,"b":1}"#);
    let conflict = run(r#"{"a":1,"b":2}"#);
    let first = first.wait_with_output().unwrap();
    assert!(first.status.success());

    assert_eq!(code(&duplicate), 75, "{}", stderr(&duplicate));
    assert!(
        stderr(&duplicate).contains("outcome=\"in_flight\""),
        "{}",
        stderr(&duplicate)
    );
    assert_eq!(code(&conflict), 65, "{}", stderr(&conflict));
    assert!(
        stderr(&conflict).contains("outcome=\"conflict\""),
        "{}",
        stderr(&conflict)
    );
    for out in [&duplicate, &conflict] {
        assert_operator_wording(&stderr(out));
    }
}
