//! The official MCP conformance suite (npm `@modelcontextprotocol/conformance`, pinned below)
//! runs every server scenario against a reference server directly and through `toolonce mcp`
//! in each of its three shapes; every scenario that passes directly must pass through toolonce.
//!
//! The suite drives a server over Streamable HTTP only, so each shape is put behind an HTTP
//! front, and compared with the same front without toolonce:
//!
//! | shape                         | suite talks to                                           | compared with          |
//! |-------------------------------|----------------------------------------------------------|------------------------|
//! | direct                        | the reference server over HTTP                           | (the baseline)         |
//! | relay                         | relay → reference server over stdio                      | (the baseline)         |
//! | stdio → stdio                 | relay → `toolonce mcp -- <reference server, stdio>`      | relay                  |
//! | stdio → HTTP (`--upstream`)   | relay → `toolonce mcp --upstream <reference server URL>` | relay                  |
//! | HTTP → stdio (`--listen`)     | `toolonce mcp --listen … -- <reference server, stdio>`   | direct                 |
//! | HTTP → HTTP (`--listen --upstream`) | `toolonce mcp --listen … --upstream <reference server URL>` | direct     |
//!
//! The reference server (`support/mcp_conformance_server.mjs`) and the relay
//! (`support/mcp_conformance_relay.mjs`, the SDK's Streamable HTTP server transport in front of
//! its stdio client transport) are built on the official TypeScript SDK. Node.js and npm must be
//! installed: without them this test fails, naming what is missing; it is never skipped.

#[path = "support/mcp_peer.rs"]
mod mcp_peer;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use mcp_peer::{PATIENCE, toolonce};
use serde_json::Value;

/// The suite's version. 0.1.13 is the newest that runs on Node.js 20 (0.1.14 and later import
/// `fs.globSync`, which came with Node.js 22); its server scenarios are those of 0.1.16, the
/// newest stable release (the 2026-07-28 scenarios are only in the 0.2.0 alphas).
const SUITE: &str = "@modelcontextprotocol/conformance@0.1.13";
/// The SDK the reference server, the relay and the suite's own client run on; installed beside
/// the suite so that the suite uses it too (its range, ^1.26.0, admits it).
const SDK: &str = "@modelcontextprotocol/sdk@1.32.2";

const SERVER_SCRIPT: &str = include_str!("support/mcp_conformance_server.mjs");
const RELAY_SCRIPT: &str = include_str!("support/mcp_conformance_relay.mjs");

/// Scenarios known to fail through one shape while they pass directly, each with why. The test
/// fails when one of them passes (remove it then), as it does for any other difference.
const KNOWN_GAPS: &[(Shape, &str, &str)] = &[];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    Direct,
    Relay,
    Stdio,
    Upstream,
    Listen,
    ListenUpstream,
}

impl Shape {
    const ALL: [Shape; 6] = [
        Shape::Direct,
        Shape::Relay,
        Shape::Stdio,
        Shape::Upstream,
        Shape::Listen,
        Shape::ListenUpstream,
    ];

    fn name(self) -> &'static str {
        match self {
            Shape::Direct => "direct (HTTP)",
            Shape::Relay => "relay (stdio)",
            Shape::Stdio => "toolonce stdio→stdio",
            Shape::Upstream => "toolonce --upstream",
            Shape::Listen => "toolonce --listen",
            Shape::ListenUpstream => "toolonce --listen --upstream",
        }
    }

    /// The run this shape must match.
    fn baseline(self) -> Option<Shape> {
        match self {
            Shape::Direct | Shape::Relay => None,
            Shape::Stdio | Shape::Upstream => Some(Shape::Relay),
            Shape::Listen | Shape::ListenUpstream => Some(Shape::Direct),
        }
    }
}

fn require(program: &str) {
    let found = Command::new(program).arg("--version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "`{program}` is required by this test (it runs the MCP conformance suite from npm) but \
         cannot be run: install Node.js and npm (e.g. `apt-get install nodejs npm`)"
    );
}

/// The folder holding the suite, the SDK and this test's scripts, installed once.
fn suite_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        require("node");
        require("npm");
        let version = |spec: &str| spec.rsplit_once('@').unwrap().1.to_owned();
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "npm-conformance-{}-sdk-{}",
            version(SUITE),
            version(SDK)
        ));
        let entry = dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
        let sdk = dir.join("node_modules/@modelcontextprotocol/sdk/package.json");
        if !entry.exists() || !sdk.exists() {
            let status = Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--prefix"])
                .arg(&dir)
                .args([SUITE, SDK])
                .status()
                .expect("run npm");
            assert!(status.success(), "npm install {SUITE} {SDK} failed");
        }
        assert!(
            entry.exists(),
            "{} is missing after npm install",
            entry.display()
        );
        for (name, script) in [
            ("mcp_conformance_server.mjs", SERVER_SCRIPT),
            ("mcp_conformance_relay.mjs", RELAY_SCRIPT),
        ] {
            let aside = dir.join(format!("{name}.{}", std::process::id()));
            std::fs::write(&aside, script).unwrap();
            std::fs::rename(&aside, dir.join(name)).unwrap();
        }
        dir
    })
}

fn suite_command() -> Command {
    let mut command = Command::new("node");
    command
        .arg(suite_dir().join("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
        .current_dir(suite_dir());
    command
}

/// The server scenarios the pinned suite has, from its own listing.
fn scenarios() -> Vec<String> {
    let output = suite_command()
        .args(["list", "--server"])
        .output()
        .expect("run the conformance suite");
    assert!(output.status.success(), "conformance list --server failed");
    let listed: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- "))
        .map(str::to_owned)
        .collect();
    assert!(listed.len() > 20, "conformance list --server: {listed:?}");
    listed
}

/// A process this test started (a server, the relay, a gateway), killed when dropped. Its
/// children (servers behind the relay or the gateway) end when their stdin closes.
struct Process {
    child: Child,
    port: u16,
}

impl Process {
    /// Starts `command` and waits until it says its port (`PORT=<n>` on stdout, or the
    /// gateway's `listening on http://127.0.0.1:<n>/mcp` on stderr).
    fn start(mut command: Command) -> Process {
        let mut child = command
            .current_dir(suite_dir())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {command:?}: {e}"));
        let (tx, rx) = std::sync::mpsc::channel();
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let port = line.trim().strip_prefix("PORT=").or_else(|| {
                        line.trim()
                            .strip_prefix("toolonce mcp: listening on http://127.0.0.1:")
                            .and_then(|rest| rest.strip_suffix("/mcp"))
                    });
                    match port.and_then(|p| p.parse::<u16>().ok()) {
                        Some(port) => {
                            let _ = tx.send(Ok(port));
                        }
                        // Kept for the failure message; the rest is read and dropped so that
                        // the process never blocks on a full pipe.
                        None => {
                            let _ = tx.send(Err(line));
                        }
                    }
                }
            });
        }
        drop(tx);
        let mut said = Vec::new();
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(Ok(port)) => return Process { child, port },
                Ok(Err(line)) => said.push(line),
                Err(_) => {
                    let _ = child.kill();
                    panic!("{command:?} never said its port; it said: {said:#?}");
                }
            }
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn node_script(script: &str) -> Command {
    let mut command = Command::new("node");
    command.arg(suite_dir().join(script));
    command
}

fn reference_stdio_args() -> [PathBuf; 3] {
    [
        PathBuf::from("node"),
        suite_dir().join("mcp_conformance_server.mjs"),
        PathBuf::from("stdio"),
    ]
}

/// `toolonce mcp` on the memory store and `extra` arguments. Never the default store: it
/// outlives the test, and a second run would replay the first run's calls (rightly) instead
/// of running the tools whose notifications and requests the scenarios check.
fn toolonce_mcp(extra: &[&std::ffi::OsStr]) -> Vec<PathBuf> {
    let mut args = vec![
        toolonce(),
        PathBuf::from("mcp"),
        PathBuf::from("--store"),
        PathBuf::from("memory://"),
        PathBuf::from("--scope"),
        PathBuf::from("conformance"),
    ];
    args.extend(extra.iter().map(PathBuf::from));
    args
}

/// The relay in front of the stdio server `command`.
fn relay(command: &[PathBuf]) -> Process {
    let mut relay = node_script("mcp_conformance_relay.mjs");
    relay.args(command);
    Process::start(relay)
}

/// One scenario's result: whether it passed, and its checks by status.
#[derive(Debug)]
struct Outcome {
    passed: bool,
    counts: BTreeMap<String, usize>,
    failures: Vec<String>,
}

impl Outcome {
    fn summary(&self) -> String {
        let counts: Vec<String> = self
            .counts
            .iter()
            .map(|(status, n)| format!("{n} {}", status.to_lowercase()))
            .collect();
        format!(
            "{} ({})",
            if self.passed { "pass" } else { "FAIL" },
            counts.join(", ")
        )
    }
}

/// Runs every server scenario against `url` and reads each one's `checks.json`. A scenario
/// passes when it wrote its checks and none of them is a FAILURE; one that wrote nothing failed.
fn run_suite(url: &str, scenarios: &[String]) -> BTreeMap<String, Outcome> {
    let out = tempfile::tempdir().expect("a temporary directory");
    let status = suite_command()
        .args(["server", "--suite", "all", "--url", url, "--output-dir"])
        .arg(out.path())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()
        .expect("run the conformance suite");
    // Its exit status says whether all passed; the per-scenario files say which.
    let _ = status;
    let mut found = BTreeMap::new();
    for entry in std::fs::read_dir(out.path()).unwrap() {
        let entry = entry.unwrap();
        let folder = entry.file_name().to_string_lossy().into_owned();
        // `server-<scenario>-<YYYY-MM-DDTHH-MM-SS-mmmZ>`: the timestamp has six dashes.
        let Some(scenario) = folder
            .strip_prefix("server-")
            .and_then(|rest| rest.rsplitn(7, '-').nth(6))
        else {
            continue;
        };
        let checks: Value = std::fs::read(entry.path().join("checks.json"))
            .ok()
            .and_then(|raw| serde_json::from_slice(&raw).ok())
            .unwrap_or(Value::Null);
        let checks = checks.as_array().cloned().unwrap_or_default();
        let mut counts = BTreeMap::new();
        let mut failures = Vec::new();
        for check in &checks {
            let status = check["status"].as_str().unwrap_or("?").to_owned();
            if status == "FAILURE" {
                failures.push(format!(
                    "{}: {}",
                    check["id"].as_str().unwrap_or("?"),
                    check["errorMessage"].as_str().unwrap_or("")
                ));
            }
            *counts.entry(status).or_insert(0) += 1;
        }
        let wrote = entry.path().join("checks.json").exists();
        found.insert(
            scenario.to_owned(),
            Outcome {
                passed: wrote && failures.is_empty(),
                counts,
                failures,
            },
        );
    }
    for scenario in scenarios {
        found.entry(scenario.clone()).or_insert_with(|| Outcome {
            passed: false,
            counts: BTreeMap::new(),
            failures: vec!["the suite wrote no result for it".to_owned()],
        });
    }
    found
}

/// Runs the suite through `shape`, starting (and stopping) what it needs.
fn run_shape(shape: Shape, scenarios: &[String]) -> BTreeMap<String, Outcome> {
    let reference = reference_stdio_args();
    match shape {
        Shape::Direct => {
            let mut server = node_script("mcp_conformance_server.mjs");
            server.arg("http");
            let server = Process::start(server);
            run_suite(&server.url(), scenarios)
        }
        Shape::Relay => run_suite(&relay(&reference).url(), scenarios),
        Shape::Stdio => {
            let mut command = toolonce_mcp(&["--".as_ref()]);
            command.extend(reference);
            run_suite(&relay(&command).url(), scenarios)
        }
        Shape::Upstream => {
            let mut server = node_script("mcp_conformance_server.mjs");
            server.arg("http");
            let server = Process::start(server);
            let url = server.url();
            let command = toolonce_mcp(&["--upstream".as_ref(), url.as_ref()]);
            run_suite(&relay(&command).url(), scenarios)
        }
        Shape::Listen => {
            let mut args =
                toolonce_mcp(&["--listen".as_ref(), "127.0.0.1:0".as_ref(), "--".as_ref()]);
            args.extend(reference);
            let mut gateway = Command::new(&args[0]);
            gateway.args(&args[1..]);
            run_suite(&Process::start(gateway).url(), scenarios)
        }
        Shape::ListenUpstream => {
            let mut server = node_script("mcp_conformance_server.mjs");
            server.arg("http");
            let server = Process::start(server);
            let url = server.url();
            let args = toolonce_mcp(&[
                "--listen".as_ref(),
                "127.0.0.1:0".as_ref(),
                "--upstream".as_ref(),
                url.as_ref(),
            ]);
            let mut gateway = Command::new(&args[0]);
            gateway.args(&args[1..]);
            run_suite(&Process::start(gateway).url(), scenarios)
        }
    }
}

#[test]
fn every_conformance_scenario_that_passes_directly_passes_through_toolonce_in_each_shape() {
    let scenarios = scenarios();
    let results: Vec<(Shape, BTreeMap<String, Outcome>)> = Shape::ALL
        .iter()
        .map(|&shape| (shape, run_shape(shape, &scenarios)))
        .collect();
    let of = |shape: Shape| &results.iter().find(|(s, _)| *s == shape).unwrap().1;

    // The table, for the log and for whoever reads a failure.
    let mut table = format!("{:<32}", "scenario");
    for shape in Shape::ALL {
        table.push_str(&format!(" | {:<24}", shape.name()));
    }
    table.push('\n');
    for scenario in &scenarios {
        table.push_str(&format!("{scenario:<32}"));
        for shape in Shape::ALL {
            table.push_str(&format!(" | {:<24}", of(shape)[scenario].summary()));
        }
        table.push('\n');
    }
    println!("{table}");

    let mut problems = Vec::new();
    // The reference server is written to pass every scenario; if it does not, the comparison
    // below would be hollow.
    for baseline in [Shape::Direct, Shape::Relay] {
        for scenario in &scenarios {
            let outcome = &of(baseline)[scenario];
            if !outcome.passed {
                problems.push(format!(
                    "{scenario} fails against the reference server ({}): {:?}",
                    baseline.name(),
                    outcome.failures
                ));
            }
        }
    }
    for shape in Shape::ALL {
        let Some(baseline) = shape.baseline() else {
            continue;
        };
        for scenario in &scenarios {
            let known = KNOWN_GAPS
                .iter()
                .find(|(s, name, _)| *s == shape && name == scenario);
            let through = &of(shape)[scenario];
            match (of(baseline)[scenario].passed, through.passed, known) {
                (true, false, None) => problems.push(format!(
                    "{scenario} passes {} but fails through {}: {:?}",
                    baseline.name(),
                    shape.name(),
                    through.failures
                )),
                (_, true, Some(_)) => problems.push(format!(
                    "{scenario} now passes through {}: remove it from KNOWN_GAPS",
                    shape.name()
                )),
                (_, false, Some((_, _, why))) => {
                    println!("known gap: {scenario} through {}: {why}", shape.name());
                }
                _ => {}
            }
        }
    }
    assert!(problems.is_empty(), "{table}\n{}", problems.join("\n"));
}
