//! `toolonce mcp` in front of an MCP server we did not write: the reference knowledge-graph
//! server `@modelcontextprotocol/server-memory` from npm, installed on first use into the
//! target directory. Node.js and npm must be installed: without them this test fails (it is
//! never skipped), naming what is missing.

#[path = "support/mcp_peer.rs"]
mod mcp_peer;

use std::path::{Path, PathBuf};
use std::process::Command;

use mcp_peer::{Spawn, is_error, without_outcome};
use serde_json::{Value, json};

/// The version the test was written against; bump it deliberately.
const PACKAGE: &str = "@modelcontextprotocol/server-memory@2026.8.31";

fn require(program: &str) {
    let found = Command::new(program).arg("--version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "`{program}` is required by this test (it installs an MCP server from npm) but cannot \
         be run: install Node.js and npm (e.g. `apt-get install nodejs npm`)"
    );
}

/// The server's entry point, installed with npm into the target directory once.
fn server_memory() -> PathBuf {
    require("node");
    require("npm");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("npm-server-memory");
    let entry = dir.join("node_modules/@modelcontextprotocol/server-memory/dist/index.js");
    if !entry.exists() {
        let status = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .arg(PACKAGE)
            .status()
            .expect("run npm");
        assert!(status.success(), "npm install {PACKAGE} failed");
    }
    assert!(
        entry.exists(),
        "{} is missing after npm install",
        entry.display()
    );
    entry
}

#[test]
fn server_memory_from_npm_creates_an_entity_once_and_replays_the_duplicate() {
    let entry = server_memory();
    let dir = tempfile::tempdir().unwrap();
    let memory = dir.path().join("memory.jsonl");
    let received = dir.path().join("received.log");
    // `tee` records what reaches the server, byte for byte.
    let script = format!(
        "tee -a '{}' | exec node '{}'",
        received.display(),
        entry.display()
    );
    let mut peer = Spawn::proxy()
        .arg("--scope")
        .arg("npm-test")
        .env("MEMORY_FILE_PATH", memory.to_str().unwrap())
        .server(["sh", "-c", &script])
        .start();

    let init = peer.initialize();
    assert_eq!(init["serverInfo"]["name"], "memory-server", "{init}");
    let tools = peer.list_tools();
    let read_graph = tools
        .iter()
        .find(|t| t["name"] == "read_graph")
        .expect("read_graph is listed");
    // The server marks its reads; the proxy learns that from this very listing.
    assert_eq!(read_graph["annotations"]["readOnlyHint"], json!(true));

    let entities = json!({"entities": [
        {"name": "Ada Lovelace", "entityType": "person", "observations": ["wrote the first program"]}
    ]});
    let first = peer.call("create_entities", entities.clone());
    assert!(!is_error(&first), "{first}");
    assert!(
        first["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Ada Lovelace")
    );
    // The model asks again: the server alone would answer `[]` (nothing new); the proxy replays
    // the first answer, so the model cannot tell a retry happened.
    let again = peer.call("create_entities", entities);
    assert_eq!(without_outcome(&again), without_outcome(&first));
    assert_eq!(again["result"]["_meta"]["toolonce/outcome"], "replayed");

    let graph = peer.call("read_graph", json!({}));
    let text = graph["result"]["content"][0]["text"].as_str().unwrap();
    let graph: Value = serde_json::from_str(text).unwrap();
    assert_eq!(graph["entities"].as_array().unwrap().len(), 1, "{graph}");
    let graph_again = peer.call("read_graph", json!({}));
    assert!(!is_error(&graph_again));

    let log = std::fs::read_to_string(&received).unwrap();
    let count = |method_and_tool: &str| log.lines().filter(|l| l.contains(method_and_tool)).count();
    assert_eq!(
        count("\"create_entities\""),
        1,
        "the duplicate never reached the server"
    );
    assert_eq!(count("\"read_graph\""), 2, "reads pass through every time");
    assert!(
        log.contains("\"toolonce/key\":\"idem:"),
        "the key went along in _meta"
    );
    let stored = std::fs::read_to_string(&memory).unwrap();
    assert_eq!(stored.lines().count(), 1, "{stored}");

    peer.close_stdin();
    assert_eq!(
        peer.wait(std::time::Duration::from_secs(15)).code(),
        Some(0)
    );
}
