//! `toolonce resolve` and `toolonce rm` against a live owner: a real `toolonce exec` holds the
//! key (its heartbeat renewing a short lease) while an operator tries to settle or delete it.
//! Both are refused with exit 68 and the time the lease ends, and nothing changes; once the
//! owner is SIGKILLed and its lease has run out, the same resolve acts. Real processes and
//! signals, one SQLite file shared by all of them.

#![cfg(unix)]

mod cli_support;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use cli_support::{code, exec_command, json, key_of, lines, run, sqlite_url, stderr};

/// A child killed (with its process group) when the test ends, whatever happens.
struct Group(Option<Child>);

impl Group {
    fn kill(&mut self) {
        if let Some(mut child) = self.0.take() {
            let group = format!("-{}", child.id());
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
            let _ = child.wait();
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts `exec --lease 1 --name <name>` of a command that records its run and then sleeps,
/// in a process group of its own, and waits until the command runs.
fn live_exec(dir: &Path, name: &str) -> Group {
    let script = "echo run >> runs; echo $$ > pid; sleep 300";
    let group = Group(Some(
        exec_command(dir, &sqlite_url(dir), name)
            .args(["--lease", "1", "--", "sh", "-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap(),
    ));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dir.join("pid").exists() {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::remove_file(dir.join("pid")).unwrap();
    group
}

fn state_of(dir: &Path, key: &str) -> String {
    let shown = run(dir, &["show", key, "--json"]);
    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    json(&shown)["state"].as_str().unwrap().to_owned()
}

/// Asserts that an operator command was refused for a live claim: exit 68, a message that
/// says when its lease ends, nothing changed.
fn assert_refused_as_live(out: &Output) {
    let err = stderr(out);
    assert_eq!(code(out), 68, "{err}");
    assert!(
        err.contains("is running; its lease ends in ") && err.contains("nothing was changed"),
        "{err}"
    );
    // "(at 2026-…Z)": the instant too, not only the remaining time.
    assert!(err.contains("(at 20") && err.contains("Z)"), "{err}");
    // The owner is named by a digest, never by its token.
    assert!(err.contains("owner #"), "{err}");
}

#[test]
fn resolve_release_of_a_key_a_live_exec_holds_is_refused_until_its_lease_ends() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_of("live");
    let mut owner = live_exec(dir.path(), "live");
    // Past its first lease: only the heartbeat keeps the claim live.
    std::thread::sleep(Duration::from_millis(2500));
    for resolution in [
        &["--release"][..],
        &["--done", "{}"],
        &["--failed", "operator"],
    ] {
        let refused = run(
            dir.path(),
            &[&["resolve", key.as_str()], resolution].concat(),
        );
        assert_refused_as_live(&refused);
        assert_eq!(state_of(dir.path(), &key), "running");
    }
    let refused = run(dir.path(), &["resolve", &key, "--release", "--json"]);
    assert_eq!(code(&refused), 68);
    let doc = json(&refused);
    assert_eq!(doc["resolved"], false, "{doc}");
    assert_eq!(doc["state"], "running", "{doc}");
    assert!(doc["lease_ends_at"].is_string(), "{doc}");
    // A duplicate is still told it is running: the claim was never released.
    let duplicate = cli_support::exec(dir.path(), "live", &[], "echo run >> runs");
    assert_eq!(code(&duplicate), 75, "{}", stderr(&duplicate));
    assert_eq!(lines(&dir.path().join("runs")), 1);

    // The owner dies: its lease runs out, the entry is unknown, and the same command acts.
    owner.kill();
    let deadline = Instant::now() + Duration::from_secs(30);
    while state_of(dir.path(), &key) != "unknown" {
        assert!(Instant::now() < deadline, "the lease never ran out");
        std::thread::sleep(Duration::from_millis(100));
    }
    let released = run(dir.path(), &["resolve", &key, "--release"]);
    assert_eq!(code(&released), 0, "{}", stderr(&released));
    let said = cli_support::stdout(&released);
    assert!(said.contains("unknown, attempt 1, owner #"), "{said}");
    assert_eq!(code(&run(dir.path(), &["show", &key])), 66);
}

#[test]
fn rm_of_a_live_claim_is_refused_without_force_and_with_it_deletes_only_that_claim() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_of("rm-live");
    let _owner = live_exec(dir.path(), "rm-live");
    let refused = run(dir.path(), &["rm", &key]);
    assert_refused_as_live(&refused);
    assert_eq!(state_of(dir.path(), &key), "running");
    let removed = run(dir.path(), &["rm", &key, "--force"]);
    assert_eq!(code(&removed), 0, "{}", stderr(&removed));
    assert_eq!(code(&run(dir.path(), &["show", &key])), 66);
}

#[test]
fn a_second_operator_cannot_release_the_claim_the_agent_made_after_the_first_released_it() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_of("twice");
    // A run that died: its entry turns unknown.
    let mut crashed = live_exec(dir.path(), "twice");
    crashed.kill();
    let deadline = Instant::now() + Duration::from_secs(30);
    while state_of(dir.path(), &key) != "unknown" {
        assert!(Instant::now() < deadline, "the lease never ran out");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The first operator releases it; the agent's retry claims it and runs.
    let first = run(dir.path(), &["resolve", &key, "--release"]);
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let _retry = live_exec(dir.path(), "twice");
    // The second operator, working from the same ticket, releases it too: refused.
    let second = run(dir.path(), &["resolve", &key, "--release"]);
    assert_refused_as_live(&second);
    // So a duplicate does not run beside the retry.
    let duplicate = cli_support::exec(dir.path(), "twice", &[], "echo run >> runs");
    assert_eq!(code(&duplicate), 75, "{}", stderr(&duplicate));
    assert_eq!(
        lines(&dir.path().join("runs")),
        2,
        "the crashed run and the retry"
    );
}
