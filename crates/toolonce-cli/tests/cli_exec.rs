//! `toolonce exec`: a command runs at most once per operation, and every duplicate replays its
//! exit code, stdout and stderr byte for byte. These run the real binary on a SQLite file, the
//! store several processes can share.

mod cli_support;

use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use cli_support::{code, exec, key_of, lines, sqlite_url, stderr, stdout, toolonce};

#[test]
fn exec_runs_once_and_replays_a_failing_commands_exit_code_stdout_and_stderr_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    // Non-UTF-8 bytes on both streams, a NUL, no trailing newline on stderr.
    let script =
        r"echo ran >> counter; printf 'out \377\376 done\n'; printf 'err\000\377' >&2; exit 3";
    let first = exec(dir.path(), "deploy", &[], script);
    let again = exec(dir.path(), "deploy", &[], script);
    assert_eq!(
        lines(&dir.path().join("counter")),
        1,
        "the command ran twice"
    );
    for out in [&first, &again] {
        assert_eq!(code(out), 3);
        assert_eq!(out.stdout, b"out \xff\xfe done\n");
    }
    assert_eq!(first.stderr, b"err\x00\xff");
    // The replay's stderr is the recorded bytes, then (on a line of its own) toolonce's note.
    let note = replay_note(&again);
    assert_eq!(
        again.stderr,
        [&b"err\x00\xff\n"[..], note.as_bytes(), b"\n"].concat()
    );
}

/// The line a replay ends stderr with, checked to be toolonce's own and to say it did not run.
fn replay_note(out: &Output) -> String {
    let text = stderr(out);
    let last = text.lines().last().unwrap_or_default().to_owned();
    assert!(last.starts_with("toolonce: "), "no note in: {text}");
    assert!(last.contains("not run"), "{last}");
    last
}

#[test]
fn a_replay_says_on_stderr_that_the_command_did_not_run_what_was_replayed_and_how_to_run_it_again()
{
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let script = "echo ran >> counter; echo hello; echo warning >&2";
    let first = exec(dir.path(), "greet", &[], script);
    // A run adds nothing to the command's own stderr.
    assert_eq!(stderr(&first), "warning\n");
    let again = exec(dir.path(), "greet", &[], script);
    assert_eq!(lines(&dir.path().join("counter")), 1);
    assert_eq!(stdout(&again), "hello\n");
    let note = replay_note(&again);
    assert_eq!(stderr(&again), format!("warning\n{note}\n"));
    let key = key_of("greet");
    for words in [
        key.as_str(),
        "done",
        " ago",
        "exit code 0",
        &format!("`toolonce rm {key} --store {store}`"),
    ] {
        assert!(note.contains(words), "no {words:?} in: {note}");
    }
    // When it was settled, as a timestamp.
    assert!(note.contains("Z, "), "{note}");
    assert!(!note.contains("another command line"), "{note}");

    // A recorded failure says so.
    let failing = "echo ran >> counter; exit 5";
    assert_eq!(code(&exec(dir.path(), "broken", &[], failing)), 5);
    let failed = exec(dir.path(), "broken", &[], failing);
    assert_eq!(code(&failed), 5);
    let note = replay_note(&failed);
    assert!(note.contains("failed"), "{note}");
    assert!(note.contains("exit code 5"), "{note}");
    assert_eq!(lines(&dir.path().join("counter")), 2);

    // Another command line under the same operation replays the first one's outcome, and the
    // note names the command line that was recorded.
    let changed = exec(dir.path(), "greet", &[], "echo ran >> counter; echo bye");
    assert_eq!(stdout(&changed), "hello\n");
    assert_eq!(lines(&dir.path().join("counter")), 2);
    let note = replay_note(&changed);
    assert!(note.contains("another command line"), "{note}");
    assert!(
        note.contains("sh -c 'echo ran >> counter; echo hello; echo warning >&2'"),
        "{note}"
    );
}

#[test]
fn exec_replays_a_successful_command_without_running_it() {
    let dir = tempfile::tempdir().unwrap();
    let script = "echo ran >> counter; echo hello; echo warning >&2";
    let first = exec(dir.path(), "greet", &[], script);
    let again = exec(dir.path(), "greet", &[], script);
    assert_eq!(lines(&dir.path().join("counter")), 1);
    for out in [&first, &again] {
        assert_eq!(code(out), 0, "{}", stderr(out));
        assert_eq!(stdout(out), "hello\n");
        assert!(stderr(out).starts_with("warning\n"), "{}", stderr(out));
    }
    assert_eq!(stderr(&first), "warning\n");
    // Other arguments are another operation.
    let other = exec(dir.path(), "greet", &["--args", r#"{"to":"ada"}"#], script);
    assert_eq!(code(&other), 0);
    assert_eq!(lines(&dir.path().join("counter")), 2);
}

#[test]
fn exec_hands_the_operation_key_to_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let args = r#"{"b":2,"a":1}"#;
    let out = exec(
        dir.path(),
        "charge_card",
        &["--args", args],
        r#"printf '%s %s' "$TOOLONCE_KEY" "$IDEMPOTENCY_KEY""#,
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let key = toolonce()
        .args([
            "key",
            "--scope",
            "s",
            "--tool",
            "charge_card",
            "--args",
            args,
            "--json",
        ])
        .output()
        .unwrap();
    let key = cli_support::json(&key)["key"].as_str().unwrap().to_owned();
    assert_eq!(stdout(&out), format!("{key} {key}"));
}

#[test]
fn eight_concurrent_invocations_run_the_command_once() {
    let dir = tempfile::tempdir().unwrap();
    let script = "echo ran >> counter; sleep 0.5; echo done";
    let outputs: Vec<Output> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..8)
            .map(|_| s.spawn(|| exec(dir.path(), "once", &["--wait", "30"], script)))
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    assert_eq!(
        lines(&dir.path().join("counter")),
        1,
        "the command ran more than once"
    );
    for out in &outputs {
        assert_eq!(code(out), 0, "{}", stderr(out));
        assert_eq!(stdout(out), "done\n");
    }
}

#[test]
fn transient_exit_lets_the_next_call_run_the_command_again() {
    let dir = tempfile::tempdir().unwrap();
    let script = "echo ran >> counter; echo try; exit 4";
    for expected_runs in 1..=2 {
        let out = exec(dir.path(), "flaky", &["--transient-exit"], script);
        assert_eq!(code(&out), 4);
        assert_eq!(stdout(&out), "try\n");
        assert_eq!(lines(&dir.path().join("counter")), expected_runs);
    }
    let ls = toolonce()
        .args(["ls", "--json", "--store", &sqlite_url(dir.path())])
        .output()
        .unwrap();
    assert_eq!(cli_support::json(&ls)["entries"], serde_json::json!([]));
}

#[test]
fn a_concurrent_duplicate_is_refused_with_exit_code_75_unless_told_to_wait() {
    let dir = tempfile::tempdir().unwrap();
    let script = "touch started; echo ran >> counter; sleep 3; echo slow";
    let first = std::process::Command::new(env!("CARGO_BIN_EXE_toolonce"))
        .current_dir(dir.path())
        .env_remove("TOOLONCE_STORE")
        .args(["exec", "--store", &sqlite_url(dir.path()), "--scope", "s"])
        .args(["--name", "slow", "--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !dir.path().join("started").exists() {
        assert!(
            Instant::now() < deadline,
            "the first invocation never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let refused = exec(dir.path(), "slow", &[], script);
    assert_eq!(code(&refused), 75, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("already running"),
        "{}",
        stderr(&refused)
    );
    assert!(stderr(&refused).contains("--wait SECONDS"));
    assert!(refused.stdout.is_empty());
    // A wait that runs out does not advise waiting: it says that it waited.
    let short = exec(dir.path(), "slow", &["--wait", "0.2"], script);
    assert_eq!(code(&short), 75, "{}", stderr(&short));
    let text = stderr(&short);
    assert!(text.contains("after waiting 0.2s"), "{text}");
    assert!(!text.contains("pass --wait"), "{text}");

    let waited = exec(dir.path(), "slow", &["--wait", "30"], script);
    assert_eq!(code(&waited), 0, "{}", stderr(&waited));
    assert_eq!(stdout(&waited), "slow\n");
    // It waited for the first run and replayed it: it says so.
    replay_note(&waited);

    let first = first.wait_with_output().unwrap();
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    assert_eq!(stdout(&first), "slow\n");
    assert_eq!(lines(&dir.path().join("counter")), 1);
}

#[test]
fn a_store_that_cannot_be_used_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let run = |store: &str| {
        toolonce()
            .current_dir(dir.path())
            .args(["exec", "--store", store, "--scope", "s", "--name", "n"])
            .args(["--", "touch", "ran"])
            .output()
            .unwrap()
    };
    // An outage: SQLite cannot open a directory as its file. A retry may help: exit 69.
    let out = run(&format!("sqlite://{}", dir.path().display()));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(stderr(&out).contains("not run"), "{}", stderr(&out));
    // Misconfigurations: a retry will not help, exit 2.
    let out = run("sqlite:///nonexistent-dir/x.db");
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("not run"), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("/nonexistent-dir"),
        "{}",
        stderr(&out)
    );
    let out = run("nosuch://x");
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("unknown store scheme"),
        "{}",
        stderr(&out)
    );
    assert!(
        !dir.path().join("ran").exists(),
        "the command ran without a store"
    );
}

#[test]
fn the_store_url_comes_from_toolonce_store_when_not_given() {
    let dir = tempfile::tempdir().unwrap();
    let out = toolonce()
        .current_dir(dir.path())
        .env("TOOLONCE_STORE", "nosuch://x")
        .args(["exec", "--scope", "s", "--name", "n", "--", "touch", "ran"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("nosuch://x"), "{}", stderr(&out));
    assert!(!dir.path().join("ran").exists());
}

#[test]
fn invalid_json_arguments_name_the_position_and_run_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = exec(
        dir.path(),
        "n",
        &["--args", r#"{"amount": 5,}"#],
        "touch ran",
    );
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("line 1 column 14"),
        "{}",
        stderr(&out)
    );
    assert!(!dir.path().join("ran").exists());
    assert!(
        !dir.path().join("store.db").exists(),
        "bad input opened the store"
    );
}

#[test]
fn a_command_that_cannot_start_is_released_so_the_next_call_runs() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let out = toolonce()
        .current_dir(dir.path())
        .args(["exec", "--store", &store, "--scope", "s", "--name", "n"])
        .args(["--", "/nonexistent/program"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 127);
    assert!(
        stderr(&out).contains("cannot run /nonexistent/program"),
        "{}",
        stderr(&out)
    );
    let out = exec(dir.path(), "n", &[], "echo ran >> counter");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(lines(&dir.path().join("counter")), 1);
}

#[test]
fn key_fields_make_a_changed_argument_a_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let fields = ["--key-field", "/ticket"];
    let first = exec(
        dir.path(),
        "close",
        &[
            fields[0],
            fields[1],
            "--args",
            r#"{"ticket":7,"note":"done"}"#,
        ],
        "echo ran >> counter",
    );
    assert_eq!(code(&first), 0);
    let conflict = exec(
        dir.path(),
        "close",
        &[
            fields[0],
            fields[1],
            "--args",
            r#"{"ticket":7,"note":"fixed"}"#,
        ],
        "echo ran >> counter",
    );
    assert_eq!(code(&conflict), 65, "{}", stderr(&conflict));
    assert!(
        stderr(&conflict).contains("conflict"),
        "{}",
        stderr(&conflict)
    );
    assert_eq!(lines(&dir.path().join("counter")), 1);
}

#[test]
fn a_background_grandchild_does_not_hold_exec_until_it_exits() {
    let dir = tempfile::tempdir().unwrap();
    let script = "echo ran >> counter; sleep 20 & echo started";
    let begun = Instant::now();
    let first = exec(dir.path(), "bg", &[], script);
    let took = begun.elapsed();
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    assert_eq!(stdout(&first), "started\n");
    // The grandchild sleeps for 20 s; exec must not wait for it (generous for a loaded machine).
    assert!(took < Duration::from_secs(15), "exec waited {took:?}");
    let again = exec(dir.path(), "bg", &[], script);
    assert_eq!(stdout(&again), "started\n");
    assert_eq!(lines(&dir.path().join("counter")), 1);
}

/// The peak resident memory of a running process, from /proc (Linux).
#[cfg(target_os = "linux")]
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(target_os = "linux")]
#[test]
fn a_huge_output_keeps_memory_bounded_is_recorded_and_replays_head_and_tail() {
    let dir = tempfile::tempdir().unwrap();
    let sink = dir.path().join("streamed");
    // 50 MB between two markers, then a pause so the peak is measured before the process ends.
    let script = "echo ran >> counter; echo BEGIN; head -c 50000000 /dev/zero | tr '\\0' x; \
                  echo; echo END; sleep 0.5";
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toolonce"))
        .current_dir(dir.path())
        .env_remove("TOOLONCE_STORE")
        .env_remove("RUST_LOG")
        .args(["exec", "--store", &sqlite_url(dir.path()), "--scope", "s"])
        .args(["--name", "huge", "--", "sh", "-c", script])
        .stdout(std::fs::File::create(&sink).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut peak = 0;
    while child.try_wait().unwrap().is_none() {
        if let Some(kib) = peak_rss_kib(child.id()) {
            peak = peak.max(kib);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let first = child.wait_with_output().unwrap();
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    // Everything still streamed through live.
    assert_eq!(std::fs::metadata(&sink).unwrap().len(), 50_000_000 + 11);
    assert!(peak > 0, "never measured the memory");
    assert!(
        peak < 40 * 1024,
        "toolonce held {peak} KiB for a 50 MB output"
    );

    let ls = toolonce()
        .args(["ls", "--json", "--store", &sqlite_url(dir.path())])
        .output()
        .unwrap();
    assert_eq!(cli_support::json(&ls)["entries"][0]["state"], "done");
    let again = exec(dir.path(), "huge", &[], script);
    assert_eq!(code(&again), 0, "{}", stderr(&again));
    assert_eq!(
        lines(&dir.path().join("counter")),
        1,
        "the command ran again"
    );
    let replayed = stdout(&again);
    assert!(replayed.starts_with("BEGIN\nxxx"), "{}", &replayed[..40]);
    assert!(replayed.ends_with("xxx\nEND\n"));
    let dropped = 50_000_000 + 11 - 1024 * 1024;
    let marker = format!("\n[toolonce: {dropped} bytes of output dropped here]\n");
    assert!(replayed.contains(&marker), "no marker");
    assert_eq!(replayed.len(), 1024 * 1024 + marker.len());
}

#[test]
fn max_output_caps_what_is_stored_per_stream() {
    let dir = tempfile::tempdir().unwrap();
    let script = "printf 'abcdefghij%.0s' $(seq 100); printf '0123456789%.0s' $(seq 100) >&2";
    let first = exec(dir.path(), "cap", &["--max-output", "100"], script);
    assert_eq!(first.stdout.len(), 1000, "the live output was cut");
    let again = exec(dir.path(), "cap", &["--max-output", "100"], script);
    let marker = "\n[toolonce: 900 bytes of output dropped here]\n";
    assert_eq!(
        stdout(&again),
        format!(
            "{}{marker}{}",
            "abcdefghij".repeat(5),
            "abcdefghij".repeat(5)
        )
    );
    // The recorded stderr, then (on a line of its own) the replay's note.
    let note = replay_note(&again);
    assert_eq!(
        stderr(&again),
        format!(
            "{}{marker}{}\n{note}\n",
            "0123456789".repeat(5),
            "0123456789".repeat(5)
        )
    );
    let bad = exec(dir.path(), "cap2", &["--max-output", "lots"], "touch ran");
    assert_eq!(code(&bad), 2);
    assert!(!dir.path().join("ran").exists());
}
