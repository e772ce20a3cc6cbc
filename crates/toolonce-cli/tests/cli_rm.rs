//! `toolonce rm` of a settled entry deletes only the entry it read. A real Redis server behind
//! a fault proxy holds the answer to `rm`'s read while the world changes (another operator
//! removes the entry, the agent's retry claims it again), or loses the answer to its delete:
//! `rm` then refuses with the entry it found, or says that its removal may have applied.
//! Real processes: every entry is written by `toolonce exec`.

#![cfg(unix)]

mod cli_support;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use cli_support::{code, exec_command, json, key_of, lines, stderr, stdout, toolonce};
use toolonce_testsupport::{FaultProxy, RedisServer};

/// A child killed (with its process group) when the test ends, whatever happens.
struct Group(Option<Child>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let group = format!("-{}", child.id());
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
            let _ = child.wait();
        }
    }
}

/// `toolonce <args…> --store <url>`, run in `dir`.
fn run_on(dir: &Path, url: &str, args: &[&str]) -> Output {
    toolonce()
        .current_dir(dir)
        .args(args)
        .args(["--store", url])
        .output()
        .unwrap()
}

/// `exec --name <name>` of `script` on `url`, run to its end.
fn exec_on(dir: &Path, url: &str, name: &str, script: &str) -> Output {
    exec_command(dir, url, name)
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap()
}

/// `rm <key>` on `url` started in the background, its output piped.
fn spawn_rm(dir: &Path, url: &str, key: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_toolonce"))
        .current_dir(dir)
        .env_remove("TOOLONCE_STORE")
        .env_remove("RUST_LOG")
        .args(["rm", key, "--store", url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Arms `proxy` to hold the answer to the first request that names `key` (the command's
/// read), and waits until the server has answered it.
fn hold_the_read(proxy: &FaultProxy, dir: &Path, key: &str) -> Child {
    proxy.hold_reply_to(key.as_bytes());
    let rm = spawn_rm(dir, &proxy.url("redis"), key);
    let deadline = Instant::now() + Duration::from_secs(60);
    while proxy.held() == 0 {
        assert!(Instant::now() < deadline, "rm never read the entry");
        std::thread::sleep(Duration::from_millis(5));
    }
    rm
}

fn state_on(dir: &Path, url: &str, key: &str) -> String {
    let shown = run_on(dir, url, &["show", key, "--json"]);
    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    json(&shown)["state"].as_str().unwrap().to_owned()
}

#[test]
fn rm_of_a_done_entry_removed_and_claimed_again_since_it_read_it_spares_the_new_claim() {
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(redis.addr());
    let dir = tempfile::tempdir().unwrap();
    let (url, key) = (redis.url(), key_of("charge"));
    let first = exec_on(dir.path(), &url, "charge", "echo run >> runs");
    assert_eq!(code(&first), 0, "{}", stderr(&first));

    // The operator's rm has read the done entry; its answer is on the way.
    let rm = hold_the_read(&proxy, dir.path(), &key);
    // Meanwhile another operator removes it, and the agent's retry claims it and runs.
    let other = run_on(dir.path(), &url, &["rm", &key]);
    assert_eq!(code(&other), 0, "{}", stderr(&other));
    let retry = Group(Some(
        exec_command(dir.path(), &url, "charge")
            .args([
                "--",
                "sh",
                "-c",
                "echo run >> runs; touch started; sleep 300",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap(),
    ));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dir.path().join("started").exists() {
        assert!(Instant::now() < deadline, "the retry never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    proxy.heal();

    let refused = rm.wait_with_output().unwrap();
    let err = stderr(&refused);
    assert_eq!(code(&refused), 68, "{err}");
    assert!(
        err.contains("changed since it was read: it was done, attempt 1, settled at 20")
            && err.contains("it is now running, attempt 1, owner #")
            && err.contains("nothing was changed"),
        "{err}"
    );
    assert_eq!(stdout(&refused), "");
    // The retry's claim is still there: a duplicate is told it is running, and nothing ran a
    // third time.
    assert_eq!(state_on(dir.path(), &url, &key), "running");
    let duplicate = exec_on(dir.path(), &url, "charge", "echo run >> runs");
    assert_eq!(code(&duplicate), 75, "{}", stderr(&duplicate));
    assert_eq!(lines(&dir.path().join("runs")), 2);
    drop(retry);
}

#[test]
fn rm_whose_delete_lost_its_answer_says_the_removal_may_have_been_applied() {
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(redis.addr());
    let dir = tempfile::tempdir().unwrap();
    let (url, key) = (redis.url(), key_of("charge"));
    let first = exec_on(dir.path(), &url, "charge", "echo run >> runs");
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    // An rm of another entry first, so the server has the removal's script: otherwise the
    // answer lost would be its `NOSCRIPT`, before anything was deleted.
    let warm = exec_on(dir.path(), &url, "warm", "true");
    assert_eq!(code(&warm), 0, "{}", stderr(&warm));
    let warmed = run_on(dir.path(), &url, &["rm", &key_of("warm")]);
    assert_eq!(code(&warmed), 0, "{}", stderr(&warmed));

    // rm reads the entry; then the answer to its delete (the next request naming the key)
    // is lost: Redis deleted the entry, rm never hears of it.
    let rm = hold_the_read(&proxy, dir.path(), &key);
    proxy.drop_reply_to(key.as_bytes());
    proxy.release();
    let lost = rm.wait_with_output().unwrap();
    assert_eq!(proxy.dropped(), 1, "the delete's answer was dropped");
    let err = stderr(&lost);
    assert_eq!(code(&lost), 73, "{err}");
    assert!(
        err.contains(&format!(
            "the removal of {key} may or may not have been applied"
        )) && err.contains(&format!("toolonce show {key}")),
        "{err}"
    );
    assert!(!err.contains("nothing was"), "{err}");
    // It had been applied: the entry is gone.
    let shown = run_on(dir.path(), &url, &["show", &key]);
    assert_eq!(code(&shown), 66, "{}", stderr(&shown));
}
