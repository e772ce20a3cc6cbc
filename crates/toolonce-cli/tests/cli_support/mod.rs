//! Helpers shared by the end-to-end tests of the `toolonce` binary.

#![allow(dead_code)] // Each test file uses a different part.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

/// The real binary, with no store picked up from the environment and a timeout so a hung
/// command fails the test instead of stalling it.
pub(crate) fn toolonce() -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::new(env!("CARGO_BIN_EXE_toolonce"));
    cmd.env_remove("TOOLONCE_STORE")
        .env_remove("RUST_LOG")
        .timeout(Duration::from_secs(120));
    cmd
}

/// `toolonce exec --store <dir>/store.db --scope s --name <name> <extra…> -- sh -c <script>`,
/// run in `dir`.
pub(crate) fn exec(dir: &Path, name: &str, extra: &[&str], script: &str) -> Output {
    toolonce()
        .current_dir(dir)
        .args([
            "exec",
            "--store",
            &sqlite_url(dir),
            "--scope",
            "s",
            "--name",
            name,
        ])
        .args(extra)
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap()
}

/// `toolonce exec --store <url> --scope s --name <name>` in `dir` as a std `Command` (for a
/// test that spawns it and acts while it runs), with no store picked up from the environment:
/// the caller adds the rest of its options, `-- <command>`, and its stdio.
pub(crate) fn exec_command(dir: &Path, url: &str, name: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_toolonce"));
    cmd.current_dir(dir)
        .env_remove("TOOLONCE_STORE")
        .env_remove("RUST_LOG")
        .args(["exec", "--store", url, "--scope", "s", "--name", name]);
    cmd
}

/// The URL of a SQLite store file in `dir`.
pub(crate) fn sqlite_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("store.db").display())
}

pub(crate) fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The exit code, failing the test with the output if the process had none.
pub(crate) fn code(out: &Output) -> i32 {
    out.status
        .code()
        .unwrap_or_else(|| panic!("killed by a signal: {out:?}"))
}

/// Parses stdout as one JSON document.
pub(crate) fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {}", stdout(out)))
}

/// How many lines a counter file has (0 if it does not exist).
pub(crate) fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

/// `toolonce <args…> --store <the dir's store>`, run in `dir`.
pub(crate) fn run(dir: &Path, args: &[&str]) -> Output {
    toolonce()
        .current_dir(dir)
        .args(args)
        .args(["--store", &sqlite_url(dir)])
        .output()
        .unwrap()
}

/// The key `exec --scope s --name <name>` uses (no `--args`).
pub(crate) fn key_of(name: &str) -> String {
    let out = toolonce()
        .args(["key", "--json", "--scope", "s", "--tool", name])
        .output()
        .unwrap();
    json(&out)["key"].as_str().unwrap().to_owned()
}
