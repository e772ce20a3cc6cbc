//! `toolonce mcp` in front of MCP servers we did not write: the reference servers
//! `@modelcontextprotocol/server-memory` (a knowledge graph) and
//! `@modelcontextprotocol/server-filesystem` from npm, installed on first use into the target
//! directory. Node.js and npm must be installed: without them these tests fail (they are never
//! skipped), naming what is missing.

#[path = "support/mcp_peer.rs"]
mod mcp_peer;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use mcp_peer::{Spawn, is_error, without_outcome};
use serde_json::{Value, json};

/// The versions the tests were written against; bump them deliberately.
const MEMORY: &str = "@modelcontextprotocol/server-memory@2026.8.31";
const FILESYSTEM: &str = "@modelcontextprotocol/server-filesystem@2026.8.31";

fn require(program: &str) {
    let found = Command::new(program).arg("--version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "`{program}` is required by this test (it installs an MCP server from npm) but cannot \
         be run: install Node.js and npm (e.g. `apt-get install nodejs npm`)"
    );
}

/// The entry point of `package` (`@scope/name@version`), installed with npm into a folder of
/// the target directory that belongs to that version, once.
fn npm_server(package: &str) -> PathBuf {
    require("node");
    require("npm");
    let (name, version) = package.rsplit_once('@').expect("a pinned version");
    let folder = format!("npm-{}-{version}", name.rsplit('/').next().unwrap());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(folder);
    let entry = dir.join("node_modules").join(name).join("dist/index.js");
    // Two tests of one server run in parallel: two `npm install`s into one folder trip over
    // each other's files (ENOTEMPTY, then a half-installed tree), so one installs at a time.
    static INSTALLING: Mutex<()> = Mutex::new(());
    let _one = INSTALLING.lock().unwrap_or_else(|p| p.into_inner());
    if !entry.exists() {
        let status = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .arg(package)
            .status()
            .expect("run npm");
        assert!(status.success(), "npm install {package} failed");
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
    let entry = npm_server(MEMORY);
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

/// `write_file` is marked `idempotentHint: true`: writing v1, v2, then v1 again must leave v1,
/// which only running the third call does (a replay of the first answer would say "written"
/// and leave v2). The client never lists the tools: the proxy's own listing classifies them.
#[test]
fn server_filesystem_from_npm_write_v1_v2_v1_leaves_v1() {
    let entry = npm_server(FILESYSTEM);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let mut peer = Spawn::proxy()
        .arg("--scope")
        .arg("npm-fs-test")
        .server(["node".as_ref(), entry.as_os_str(), root.as_os_str()])
        .start();
    peer.initialize();
    let file = root.join("note.txt");
    for content in ["hello v1", "hello v2", "hello v1"] {
        let answer = peer.call(
            "write_file",
            json!({"path": file.to_str().unwrap(), "content": content}),
        );
        assert!(!is_error(&answer), "{answer}");
        assert_eq!(
            answer["result"]["_meta"].get("toolonce/outcome"),
            None,
            "{answer}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), content);
    }
    let tools = peer.list_tools();
    let write_file = tools.iter().find(|t| t["name"] == "write_file").unwrap();
    assert_eq!(write_file["annotations"]["idempotentHint"], json!(true));
}

/// `edit_file` is a write the proxy deduplicates: A→B, B→A, then A→B again on purpose. Without
/// the repeat ordinal the third edit is the first one again (replayed, the file left at A);
/// with `"repeat": 2` it runs and the file ends at B, and its retry replays. The listing shows
/// the argument on the deduplicated tools only, and the server never receives it.
#[test]
fn server_filesystem_from_npm_edits_a_b_a_then_b_again_on_purpose_with_repeat() {
    let entry = npm_server(FILESYSTEM);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let received = dir.path().join("received.log");
    let script = format!(
        "tee -a '{}' | exec node '{}' '{}'",
        received.display(),
        entry.display(),
        root.display()
    );
    let mut peer = Spawn::proxy()
        .arg("--scope")
        .arg("npm-fs-repeat")
        .server(["sh", "-c", &script])
        .start();
    peer.initialize();
    let tools = peer.list_tools();
    let has_repeat = |name: &str| {
        let tool = tools.iter().find(|t| t["name"] == name).unwrap();
        tool["inputSchema"].pointer("/properties/repeat").is_some()
    };
    assert!(has_repeat("edit_file") && has_repeat("move_file"));
    assert!(!has_repeat("write_file"), "idempotentHint passes through");
    assert!(!has_repeat("read_text_file"), "readOnlyHint passes through");

    let file = root.join("temp.txt");
    std::fs::write(&file, "A\n").unwrap();
    let edit = |from: &str, to: &str| json!({"path": file.to_str().unwrap(), "edits": [{"oldText": from, "newText": to}]});
    let outcome = |answer: &Value| answer["result"]["_meta"]["toolonce/outcome"].clone();
    for (from, to) in [("A", "B"), ("B", "A")] {
        let answer = peer.call("edit_file", edit(from, to));
        assert!(!is_error(&answer), "{answer}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), format!("{to}\n"));
    }
    // A→B again, as an identical call: the first edit's answer, and the file stays at A.
    let same = peer.call("edit_file", edit("A", "B"));
    assert_eq!(outcome(&same), "replayed", "{same}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "A\n");
    let note = same["result"]["content"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["text"]
        .clone();
    assert!(note.as_str().unwrap().ends_with("\"repeat\": 2."), "{note}");
    // On purpose: it runs, and the file ends at B.
    let mut again = edit("A", "B");
    again["repeat"] = json!(2);
    let answer = peer.call("edit_file", again.clone());
    assert!(!is_error(&answer), "{answer}");
    assert_eq!(outcome(&answer), Value::Null, "{answer}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "B\n");
    // Its retry replays, and changes nothing.
    let retry = peer.call("edit_file", again);
    assert_eq!(outcome(&retry), "replayed", "{retry}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "B\n");

    let log = std::fs::read_to_string(&received).unwrap();
    let edits = log.lines().filter(|l| l.contains("\"edit_file\"")).count();
    assert_eq!(edits, 3, "A→B, B→A, A→B on purpose reached the server");
    assert!(
        !log.contains("\"repeat\""),
        "the server never saw the ordinal:\n{log}"
    );
}
