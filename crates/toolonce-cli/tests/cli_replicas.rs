//! `toolonce exec` on a Redis store with `replicas=1`: a result that the replica did not
//! acknowledge is the command's (it ran, its exit status stands), and the command says, beside
//! its output, that the record may not survive a failover.

mod cli_support;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use cli_support::{code, exec, exec_command, stderr, stdout};
use toolonce_testsupport::ReplicatedRedis;

/// `toolonce exec` on `url` of `script`, its output piped.
fn exec_on(dir: &Path, url: &str, script: &str) -> std::process::Child {
    exec_command(dir, url, "charge")
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_result_the_replica_did_not_acknowledge_is_kept_and_the_command_warns_that_it_may_be_lost() {
    let set = ReplicatedRedis::start();
    let dir = tempfile::tempdir().unwrap();
    // 2 s: the claim must be acknowledged by a healthy replica, which on a loaded machine has
    // taken over 200 ms; the stalled result then waits the whole 2 s.
    let url = format!(
        "{}?replicas=1&replica_timeout_ms=2000",
        set.front.url("redis")
    );
    // The command marks that it started, then runs a moment: long enough for the test to
    // stall the replication link after the claim and before the result.
    let script = "echo run >> runs; touch started; sleep 1; echo charged";
    let child = exec_on(dir.path(), &url, script);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !dir.path().join("started").exists() {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    set.link.stall();
    let first = child.wait_with_output().unwrap();
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    assert_eq!(stdout(&first), "charged\n");
    let warning = stderr(&first);
    assert!(
        warning.contains("toolonce: warning: operation idem:")
            && warning.contains("only 0 of the 1 replicas asked (replicas=1) acknowledged")
            && warning.contains("the record may be lost"),
        "{warning}"
    );
    set.link.heal();

    // The record stands on the primary: the duplicate replays it, without a warning.
    let again = exec_on(dir.path(), &url, script)
        .wait_with_output()
        .unwrap();
    assert_eq!(code(&again), 0, "{}", stderr(&again));
    assert_eq!(stdout(&again), "charged\n");
    assert!(!stderr(&again).contains("warning"), "{}", stderr(&again));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("runs")).unwrap(),
        "run\n"
    );
}

#[test]
fn a_result_on_a_store_without_replicas_asked_carries_no_warning() {
    let dir = tempfile::tempdir().unwrap();
    let out = exec(dir.path(), "plain", &[], "echo charged");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
}
