//! `toolonce exec` after a crash: the process group of a running `exec` is SIGKILLed, so its
//! entry outlives its lease unsettled and becomes `unknown`. Under `--on-expired hold` (the
//! default) a duplicate does not run the command (exit 73) until an operator settles the entry
//! with `toolonce resolve`; under `rerun` it takes the operation over and runs it once more
//! with the same key. Real processes, real signals, one SQLite file shared by all of them.

#![cfg(unix)]

mod cli_support;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cli_support::{code, exec, json, key_of, lines, run, sqlite_url, stderr, stdout, toolonce};
use serde_json::Value;

/// The command: records the key it got (and in `before`, whether it was told that an earlier
/// attempt may have run), and on its first run only, waits to be killed (its pid in `pid`
/// tells the test it is running); later runs end at once.
const SCRIPT: &str = "echo \"$TOOLONCE_KEY\" >> keys; \
                      echo \"${TOOLONCE_MAY_HAVE_RUN_BEFORE:-unset}\" >> before; \
                      if [ ! -e first-run ]; then touch first-run; echo $$ > pid; sleep 300; fi; \
                      echo finished";

const LEASE: &[&str] = &["--lease", "1"];

/// Whether a process exists and is not a zombie.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
            !matches!(state, Some(Some('Z' | 'X')))
        }
    }
}

/// Starts `exec --lease 1 --name <name> -- sh -c SCRIPT` in a process group of its own, waits
/// until the command runs, SIGKILLs that group (as an OOM kill of the job or a `kill -9` of
/// its group would; the command, in a group of its own, follows toolonce by the parent-death
/// signal), and waits until the command is gone too.
fn crash_mid_run(dir: &Path, name: &str, extra: &[&str]) {
    let mut guard = KillOnDrop(None);
    let running = guard.0.insert(
        Command::new(env!("CARGO_BIN_EXE_toolonce"))
            .current_dir(dir)
            .env_remove("TOOLONCE_STORE")
            .env_remove("RUST_LOG")
            .args(["exec", "--store", &sqlite_url(dir), "--scope", "s"])
            .args(["--name", name])
            .args(LEASE)
            .args(extra)
            .args(["--", "sh", "-c", SCRIPT])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let pid: u32 = loop {
        if let Ok(text) = std::fs::read_to_string(dir.join("pid"))
            && let Ok(pid) = text.trim().parse()
        {
            break pid;
        }
        if let Some(status) = running.try_wait().unwrap() {
            panic!("exec ended before the command started: {status}");
        }
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    let group = format!("-{}", running.id());
    let killed = Command::new("kill")
        .args(["-KILL", "--", &group])
        .status()
        .unwrap();
    assert!(killed.success());
    running.wait().unwrap();
    // toolonce's death takes the command's own group with it (parent-death signal).
    let deadline = Instant::now() + Duration::from_secs(30);
    while alive(pid) {
        if Instant::now() > deadline {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("the command outlived its SIGKILLed toolonce");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::remove_file(dir.join("pid")).unwrap();
}

/// Waits until the entry's lease has run out (`ls --state unknown` lists it) and returns it.
fn wait_until_unknown(dir: &Path, key: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = run(dir, &["ls", "--state", "unknown", "--json"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let listed = json(&out);
        if let Some(entry) = listed["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["key"] == key)
        {
            return entry.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the entry never became unknown: {listed}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What each run found in TOOLONCE_MAY_HAVE_RUN_BEFORE (`unset` when it was not set).
fn told_before(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("before"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The keys the command was run with, one per run.
fn runs(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("keys"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_killed_run_is_held_with_exit_73_until_released_then_runs_once_with_the_same_key() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_of("deploy");
    crash_mid_run(dir.path(), "deploy", &[]);
    assert_eq!(runs(dir.path()), std::slice::from_ref(&key));

    let listed = wait_until_unknown(dir.path(), &key);
    assert_eq!(listed["state"], "unknown");
    assert_eq!(listed["scope"], "s");
    assert_eq!(listed["tool"], "deploy");
    assert_eq!(listed["attempts"], 1);

    // The default policy holds: the command is not run again, whatever the caller asks.
    for extra in [&[][..], &["--on-expired", "hold"], &["--wait", "5"]] {
        let held = exec(dir.path(), "deploy", &[LEASE, extra].concat(), SCRIPT);
        assert_eq!(code(&held), 73, "{extra:?}: {}", stderr(&held));
        assert!(held.stdout.is_empty(), "{}", stdout(&held));
        // One message, toolonce's own (the layer's log line would say it a second time, with
        // half a `resolve` command), in words for an operator, not the text written for a model.
        let text = stderr(&held);
        assert_eq!(text.lines().count(), 1, "{text}");
        let last = text.lines().last().unwrap_or_default();
        assert!(last.starts_with("toolonce: "), "{text}");
        assert!(!text.contains("you must not retry"), "{text}");
        for words in [key.as_str(), "unknown", "may have taken effect", "not run"] {
            assert!(last.contains(words), "no {words:?} in: {text}");
        }
        // Each way to settle it is a whole command that can be pasted.
        let store = sqlite_url(dir.path());
        for how in ["--done JSON", "--failed MESSAGE", "--release"] {
            let command = format!("`toolonce resolve {key} --store {store} {how}`");
            assert!(last.contains(&command), "no {command} in: {text}");
        }
    }
    assert_eq!(runs(dir.path()).len(), 1, "a held call ran the command");

    // The human listing shows what the entry is.
    let table = stdout(&run(dir.path(), &["ls", "--state", "unknown"]));
    let line = table.lines().find(|l| l.starts_with(&key)).expect(&table);
    for cell in ["unknown", " s ", "deploy", " 1 "] {
        assert!(line.contains(cell), "no {cell:?} in: {line}");
    }
    // `show` has the whole entry, the command line included.
    let shown = json(&run(dir.path(), &["show", &key, "--json"]));
    assert_eq!(shown["state"], "unknown");
    assert!(
        shown["detail"].as_str().unwrap().contains("first-run"),
        "{shown}"
    );
    assert!(!shown["first_started_at"].is_null(), "{shown}");
    assert!(!shown["lease_expired_at"].is_null(), "{shown}");

    let released = run(dir.path(), &["resolve", &key, "--release", "--json"]);
    assert_eq!(code(&released), 0, "{}", stderr(&released));
    let doc = json(&released);
    assert_eq!(doc["key"], key.as_str(), "{doc}");
    assert_eq!(doc["resolved"], "released", "{doc}");
    // What it acted on: the attempt it read, its owner named by a digest only.
    assert_eq!(doc["seen"]["state"], "unknown", "{doc}");
    assert_eq!(doc["seen"]["attempts"], 1, "{doc}");
    assert_eq!(
        doc["seen"]["owner_digest"].as_str().unwrap().len(),
        12,
        "{doc}"
    );
    assert_eq!(code(&run(dir.path(), &["show", &key])), 66);

    // Run from a command that was itself told so: the value is not inherited.
    let rerun = toolonce()
        .current_dir(dir.path())
        .env("TOOLONCE_MAY_HAVE_RUN_BEFORE", "1")
        .args(["exec", "--store", &sqlite_url(dir.path()), "--scope", "s"])
        .args(["--name", "deploy"])
        .args(LEASE)
        .args(["--", "sh", "-c", SCRIPT])
        .output()
        .unwrap();
    assert_eq!(code(&rerun), 0, "{}", stderr(&rerun));
    assert_eq!(stdout(&rerun), "finished\n");
    assert_eq!(runs(dir.path()), [key.clone(), key.clone()]);
    // An operator's release says it did not take effect: the run after it is a first run, and
    // an inherited value is not passed on.
    assert_eq!(told_before(dir.path()), ["unset", "unset"]);
    // Settled now: a duplicate replays without running it.
    let again = exec(dir.path(), "deploy", LEASE, SCRIPT);
    assert_eq!(code(&again), 0, "{}", stderr(&again));
    assert_eq!(stdout(&again), "finished\n");
    assert_eq!(runs(dir.path()).len(), 2);
}

#[test]
fn under_on_expired_rerun_a_killed_run_is_taken_over_and_runs_once_more_with_the_same_key() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_of("rotate");
    crash_mid_run(dir.path(), "rotate", &["--on-expired", "rerun"]);
    wait_until_unknown(dir.path(), &key);

    let rerun = exec(
        dir.path(),
        "rotate",
        &[LEASE, &["--on-expired", "rerun"]].concat(),
        SCRIPT,
    );
    assert_eq!(code(&rerun), 0, "{}", stderr(&rerun));
    assert_eq!(stdout(&rerun), "finished\n");
    assert_eq!(runs(dir.path()), [key.clone(), key.clone()]);
    // The rerun was told that the first attempt may have taken effect; the first was not.
    assert_eq!(told_before(dir.path()), ["unset", "1"]);
    let shown = json(&run(dir.path(), &["show", &key, "--json"]));
    assert_eq!(shown["state"], "done");
    assert_eq!(shown["attempts"], 2, "{shown}");

    // Once done, neither policy runs it again.
    for policy in ["rerun", "hold"] {
        let again = exec(
            dir.path(),
            "rotate",
            &[LEASE, &["--on-expired", policy]].concat(),
            SCRIPT,
        );
        assert_eq!(code(&again), 0, "{}", stderr(&again));
        assert_eq!(stdout(&again), "finished\n");
    }
    assert_eq!(runs(dir.path()).len(), 2);
}

#[test]
fn an_outcome_recorded_by_an_operator_is_replayed_and_the_command_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &[&str], i32, &str, &str); 3] = [
        // An exec record: replayed as if the command had run.
        (
            "record",
            &[
                "--done",
                r#"{"exit_code":0,"stdout":"deployed v42\n","stderr":"checked by hand\n"}"#,
            ],
            0,
            "deployed v42\n",
            "checked by hand\n",
        ),
        // Any other value: printed as JSON, exit 0.
        (
            "value",
            &["--done", r#"{"ticket": "OPS-7"}"#],
            0,
            "{\"ticket\":\"OPS-7\"}\n",
            "",
        ),
        (
            "failure",
            &["--failed", "rolled back by hand"],
            1,
            "",
            "rolled back by hand",
        ),
    ];
    for (name, resolution, want_code, want_stdout, want_stderr) in cases {
        let key = key_of(name);
        crash_mid_run(dir.path(), name, &[]);
        std::fs::remove_file(dir.path().join("first-run")).unwrap();
        wait_until_unknown(dir.path(), &key);
        let resolved = run(
            dir.path(),
            &[&["resolve", key.as_str()], resolution].concat(),
        );
        assert_eq!(code(&resolved), 0, "{name}: {}", stderr(&resolved));
        let before = runs(dir.path()).len();
        let replayed = exec(dir.path(), name, LEASE, SCRIPT);
        assert_eq!(code(&replayed), want_code, "{name}: {}", stderr(&replayed));
        assert_eq!(stdout(&replayed), want_stdout, "{name}");
        assert!(
            stderr(&replayed).contains(want_stderr),
            "{name}: {}",
            stderr(&replayed)
        );
        assert_eq!(runs(dir.path()).len(), before, "{name}: the command ran");
    }
}

#[test]
fn resolve_refuses_an_entry_that_settled_meanwhile_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_of("migrate");
    crash_mid_run(dir.path(), "migrate", &[]);
    wait_until_unknown(dir.path(), &key);
    // Two operators look at the same unknown entry; the first records what happened...
    let first = run(
        dir.path(),
        &["resolve", &key, "--done", r#"{"checked_by":"ada"}"#],
    );
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    // ...and the second, acting on what they saw before, is refused whatever they ask.
    for resolution in [
        &["--release"][..],
        &["--failed", "looked broken"],
        &["--done", "{}"],
    ] {
        let second = run(
            dir.path(),
            &[&["resolve", key.as_str()], resolution].concat(),
        );
        assert_eq!(code(&second), 67, "{resolution:?}: {}", stderr(&second));
        let text = stderr(&second);
        assert!(text.contains("already done"), "{text}");
        assert!(text.contains("nothing was changed"), "{text}");
    }
    // Scripts get the same answer as one JSON document.
    let refused = run(dir.path(), &["resolve", &key, "--release", "--json"]);
    assert_eq!(code(&refused), 67);
    assert_eq!(
        json(&refused),
        serde_json::json!({"key": key, "resolved": false, "state": "done"})
    );
    let shown = json(&run(dir.path(), &["show", &key, "--json"]));
    assert_eq!(shown["state"], "done");
    assert_eq!(shown["result"], serde_json::json!({"checked_by": "ada"}));
    assert!(!shown["settled_at"].is_null(), "{shown}");
    // And an entry that is not there at all is "not found".
    let absent = run(
        dir.path(),
        &[
            "resolve",
            "idem:0123456789abcdef0123456789abcdef",
            "--release",
        ],
    );
    assert_eq!(code(&absent), 66, "{}", stderr(&absent));
    assert!(
        stderr(&absent).contains("no live entry"),
        "{}",
        stderr(&absent)
    );
}

/// A running `exec` that a failed assertion must not leave behind: SIGKILLed on drop (its
/// command's group follows it, by the parent-death signal).
struct KillOnDrop(Option<std::process::Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn resolve_settles_a_stuck_running_entry_and_its_late_owner_cannot_overwrite_it() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_of("stuck");
    // A run that is still alive (a long lease) but that the operator knows is stuck.
    let script = "echo \"$TOOLONCE_KEY\" >> keys; echo $$ > pid; \
                  while [ ! -e go ]; do sleep 0.05; done; echo late";
    let mut running = KillOnDrop(Some(
        Command::new(env!("CARGO_BIN_EXE_toolonce"))
            .current_dir(dir.path())
            .env_remove("TOOLONCE_STORE")
            .env_remove("RUST_LOG")
            .args(["exec", "--store", &sqlite_url(dir.path()), "--scope", "s"])
            .args(["--name", "stuck", "--lease", "60", "--", "sh", "-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap(),
    ));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !dir.path().join("pid").exists() {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let listed = json(&run(dir.path(), &["ls", "--state", "running", "--json"]));
    assert_eq!(listed["entries"][0]["key"], key.as_str(), "{listed}");
    // Its owner is alive and renewing it: refused unless forced.
    let refused = run(dir.path(), &["resolve", &key, "--failed", "stuck, killed"]);
    assert_eq!(code(&refused), 68, "{}", stderr(&refused));
    let resolved = run(
        dir.path(),
        &["resolve", &key, "--failed", "stuck, killed", "--force"],
    );
    assert_eq!(code(&resolved), 0, "{}", stderr(&resolved));
    std::fs::write(dir.path().join("go"), "").unwrap();
    let late = running.0.take().unwrap().wait_with_output().unwrap();
    // The command's own output and code still reach whoever started it...
    assert_eq!(code(&late), 0, "{}", stderr(&late));
    // ...but the operator's outcome stands.
    let shown = json(&run(dir.path(), &["show", &key, "--json"]));
    assert_eq!(shown["state"], "failed", "{shown}");
    assert_eq!(shown["error"]["message"], "stuck, killed");
    assert_eq!(lines(&dir.path().join("keys")), 1);
}

#[test]
fn resolve_needs_exactly_one_resolution_and_valid_json() {
    let dir = tempfile::tempdir().unwrap();
    let key = "idem:0123456789abcdef0123456789abcdef";
    for args in [
        vec!["resolve", key],
        vec!["resolve", key, "--release", "--failed", "x"],
        vec!["resolve", key, "--done", "{\"a\":"],
        vec!["resolve", key, "--failed", ""],
        vec!["resolve", "idem:XYZ", "--release"],
    ] {
        let out = run(dir.path(), &args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
    }
    let out = run(dir.path(), &["resolve", key, "--done", "{\"a\":"]);
    assert!(stderr(&out).contains("line 1 column"), "{}", stderr(&out));
    // Plain text is not JSON: the message shows how to give it as a JSON string.
    let out = run(dir.path(), &["resolve", key, "--done", "sent by hand"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(r#"--done '"sent by hand"'"#),
        "{}",
        stderr(&out)
    );
}
