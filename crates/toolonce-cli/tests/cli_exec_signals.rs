//! `toolonce exec` under signals: a signal to toolonce reaches the command, toolonce waits for
//! it and records its outcome, so no copy of the command is left running without a heartbeat
//! and no retry runs a second copy beside it. Real processes, real signals (sent with `kill`).

#![cfg(unix)]

mod cli_support;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cli_support::{code, exec, exec_command, json, lines, sqlite_url, stderr, toolonce};

/// Starts `toolonce exec --lease 1 … -- sh -c <script>` in `dir`, in a process group of its own
/// so that a signal to "its group" reaches it and what it started, never the test runner.
fn start(dir: &Path, name: &str, script: &str) -> Child {
    exec_command(dir, &sqlite_url(dir), name)
        .args(["--lease", "1", "--", "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap()
}

/// Waits until `dir/file` holds a process id and returns it.
fn wait_for_pid(dir: &Path, file: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(text) = std::fs::read_to_string(dir.join(file))
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        assert!(Instant::now() < deadline, "the command never wrote {file}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a process exists and is not a zombie (a container's init may never reap one).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
            !matches!(state, Some(Some('Z' | 'X')))
        }
    }
}

/// Waits up to a generous deadline for the process to be gone.
fn gone_soon(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

fn kill(signal: &str, target: &str) {
    let status = Command::new("kill")
        .args([signal, "--", target])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} {target} failed");
}

/// Kills what an old build left behind, so a failing test does not leak processes.
fn reap(pids: &[u32]) {
    for &pid in pids {
        if alive(pid) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

/// The state of the store's only entry, from `toolonce ls --json`.
fn only_state(dir: &Path) -> String {
    let ls = toolonce()
        .args(["ls", "--json", "--store", &sqlite_url(dir)])
        .output()
        .unwrap();
    let entries = json(&ls)["entries"].clone();
    assert_eq!(entries.as_array().unwrap().len(), 1, "{entries}");
    entries[0]["state"].as_str().unwrap().to_owned()
}

/// The command traps the signal (it may be written to clean up) and ends with its own code.
const TRAPPING: &str = "echo ran >> counter; trap 'echo trapped >> trapped; exit 7' TERM INT HUP; \
                        echo $$ > pid; while :; do sleep 0.1; done";

fn a_signal_to_toolonce_alone_stops_the_command_and_records_its_outcome(signal: &str) {
    let dir = tempfile::tempdir().unwrap();
    let running = start(dir.path(), "sig", TRAPPING);
    let pid = wait_for_pid(dir.path(), "pid");
    kill(signal, &running.id().to_string());
    let out = running.wait_with_output().unwrap();
    let stopped = gone_soon(pid);
    reap(&[pid]);
    assert!(stopped, "the command outlived toolonce after {signal}");
    assert_eq!(
        lines(&dir.path().join("trapped")),
        1,
        "the command never got the signal"
    );
    assert_eq!(code(&out), 7, "{}", stderr(&out));
    assert_eq!(only_state(dir.path()), "failed");
    // After the lease, a retry replays the recorded outcome instead of running a second copy.
    std::thread::sleep(Duration::from_millis(1500));
    let again = exec(dir.path(), "sig", &["--lease", "1"], TRAPPING);
    reap(&[wait_for_pid(dir.path(), "pid")]);
    assert_eq!(code(&again), 7, "{}", stderr(&again));
    assert_eq!(
        lines(&dir.path().join("counter")),
        1,
        "the command ran twice"
    );
}

#[test]
fn sigterm_to_toolonce_alone_stops_the_command_and_records_its_outcome() {
    a_signal_to_toolonce_alone_stops_the_command_and_records_its_outcome("-TERM");
}

#[test]
fn sigint_to_toolonce_alone_stops_the_command_and_records_its_outcome() {
    a_signal_to_toolonce_alone_stops_the_command_and_records_its_outcome("-INT");
}

#[test]
fn sighup_to_toolonce_alone_stops_the_command_and_records_its_outcome() {
    a_signal_to_toolonce_alone_stops_the_command_and_records_its_outcome("-HUP");
}

#[test]
fn ctrl_c_to_the_whole_process_group_leaves_no_entry_running() {
    let dir = tempfile::tempdir().unwrap();
    // No trap: the command dies of SIGINT as most commands do.
    let running = start(dir.path(), "ctrl-c", "echo $$ > pid; exec sleep 300");
    let pid = wait_for_pid(dir.path(), "pid");
    kill("-INT", &format!("-{}", running.id()));
    let out = running.wait_with_output().unwrap();
    let stopped = gone_soon(pid);
    reap(&[pid]);
    assert!(stopped, "the command outlived toolonce");
    assert_eq!(code(&out), 130, "{}", stderr(&out));
    assert_eq!(only_state(dir.path()), "failed");
    let shown = toolonce()
        .args(["ls", "--json", "--store", &sqlite_url(dir.path())])
        .output()
        .unwrap();
    let key = json(&shown)["entries"][0]["key"]
        .as_str()
        .unwrap()
        .to_owned();
    let shown = toolonce()
        .args(["show", &key, "--json", "--store", &sqlite_url(dir.path())])
        .output()
        .unwrap();
    assert_eq!(json(&shown)["error"]["detail"]["exit_code"], 130);
}

#[test]
fn a_command_that_ignores_the_signal_is_killed_after_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let script = "trap '' TERM; echo $$ > pid; while :; do sleep 0.1; done";
    let mut running = Command::new(env!("CARGO_BIN_EXE_toolonce"))
        .current_dir(dir.path())
        .env_remove("TOOLONCE_STORE")
        .args(["exec", "--store", &sqlite_url(dir.path()), "--scope", "s"])
        .args([
            "--name", "stubborn", "--grace", "0.5", "--", "sh", "-c", script,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = wait_for_pid(dir.path(), "pid");
    kill("-TERM", &running.id().to_string());
    let status = running.wait().unwrap();
    let stopped = gone_soon(pid);
    reap(&[pid]);
    assert!(stopped, "the command outlived toolonce");
    assert_eq!(status.code(), Some(128 + 9));
    assert_eq!(only_state(dir.path()), "failed");
}

#[cfg(target_os = "linux")]
#[test]
fn sigkill_to_toolonce_kills_the_command_and_its_children_too() {
    let dir = tempfile::tempdir().unwrap();
    let script = "echo $$ > pid; sleep 300 & echo $! > child; wait";
    let mut running = start(dir.path(), "killed", script);
    let pid = wait_for_pid(dir.path(), "pid");
    let child = wait_for_pid(dir.path(), "child");
    kill("-KILL", &running.id().to_string());
    running.wait().unwrap();
    let stopped = [gone_soon(pid), gone_soon(child)];
    reap(&[pid, child]);
    assert_eq!(
        stopped,
        [true, true],
        "the command or its child outlived a SIGKILLed toolonce"
    );
}

#[test]
fn a_signal_while_waiting_for_a_concurrent_run_stops_the_wait_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let script = "echo ran >> counter; echo $$ > pid; sleep 3; echo first";
    let first = start(dir.path(), "waited", script);
    let pid = wait_for_pid(dir.path(), "pid");
    let waiter = Command::new(env!("CARGO_BIN_EXE_toolonce"))
        .current_dir(dir.path())
        .env_remove("TOOLONCE_STORE")
        .args(["exec", "--store", &sqlite_url(dir.path()), "--scope", "s"])
        .args(["--name", "waited", "--lease", "1", "--wait", "600"])
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    // Let the waiter reach its wait (a signal earlier must have the same effect anyway).
    std::thread::sleep(Duration::from_millis(500));
    kill("-INT", &waiter.id().to_string());
    let waited = waiter.wait_with_output().unwrap();
    assert_eq!(code(&waited), 130, "{}", stderr(&waited));
    assert!(
        stderr(&waited).contains("before the command started"),
        "{}",
        stderr(&waited)
    );
    assert!(waited.stdout.is_empty());
    let first = first.wait_with_output().unwrap();
    reap(&[pid]);
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    assert_eq!(lines(&dir.path().join("counter")), 1);
    assert_eq!(only_state(dir.path()), "done");
}
