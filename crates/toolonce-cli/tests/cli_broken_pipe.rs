//! A reader that closes the pipe early (`toolonce … | head -1`) ends toolonce quietly, as it
//! ends any Unix tool: no panic, no message. Real pipes, closed before toolonce writes.

#![cfg(unix)]

mod cli_support;

use std::process::{Command, Stdio};

use cli_support::sqlite_url;

/// Runs toolonce with its stdout a pipe whose reading end is closed before it starts, so its
/// first write to stdout fails whatever the timing.
fn with_closed_stdout(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    Command::new(env!("CARGO_BIN_EXE_toolonce"))
        .current_dir(dir)
        .env_remove("TOOLONCE_STORE")
        .env_remove("RUST_LOG")
        .args(args)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn a_closed_stdout_ends_every_subcommand_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let store = sqlite_url(dir.path());
    let filled = cli_support::exec(dir.path(), "filled", &[], "echo hello");
    assert_eq!(cli_support::code(&filled), 0);
    let key = Command::new(env!("CARGO_BIN_EXE_toolonce"))
        .args(["key", "--json", "--scope", "s", "--tool", "filled"])
        .output()
        .unwrap();
    let key = cli_support::json(&key)["key"].as_str().unwrap().to_owned();
    let cases: Vec<Vec<&str>> = vec![
        vec!["key", "--scope", "s", "--tool", "t"],
        vec!["key", "--json", "--scope", "s", "--tool", "t"],
        vec!["ls", "--store", &store],
        vec!["ls", "--json", "--store", &store],
        vec!["show", &key, "--store", &store],
        vec!["show", &key, "--json", "--store", &store],
        vec!["purge", "--store", &store],
        vec!["--help"],
    ];
    // Repeated: the runtime's threads and the store make each run a little different.
    for _ in 0..5 {
        for args in &cases {
            let out = with_closed_stdout(dir.path(), args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.is_empty(), "{args:?} wrote {err}");
            assert_eq!(out.status.code(), Some(141), "{args:?}: {err}");
        }
    }
}

#[test]
fn a_replay_into_a_closed_pipe_still_exits_with_the_recorded_code() {
    let dir = tempfile::tempdir().unwrap();
    let script = "echo ran >> counter; seq 1 100000; exit 3";
    let first = cli_support::exec(dir.path(), "big", &[], script);
    assert_eq!(cli_support::code(&first), 3);
    for _ in 0..5 {
        let out = with_closed_stdout(
            dir.path(),
            &[
                "exec",
                "--store",
                &sqlite_url(dir.path()),
                "--scope",
                "s",
                "--name",
                "big",
                "--",
                "sh",
                "-c",
                script,
            ],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(out.status.code(), Some(3), "{err}");
    }
    assert_eq!(cli_support::lines(&dir.path().join("counter")), 1);
}
