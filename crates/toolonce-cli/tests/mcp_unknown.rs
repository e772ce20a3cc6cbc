//! `toolonce mcp` when the MCP server is killed in the middle of a write call: whether the call
//! took effect is unknown, so its entry outlives its lease as `unknown`. A duplicate sent to a
//! new proxy (the client restarted it) is then held under `on_expired = "hold"` (the default:
//! not forwarded, answered with outcome `unknown`) and forwarded again with the same key under
//! `"rerun"`. Real processes: the proxy, the test server (SIGKILLed), a SQLite file both proxies
//! share.

#![cfg(target_os = "linux")]

#[path = "support/mcp_peer.rs"]
mod mcp_peer;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use mcp_peer::{Peer, Spawn, is_error, text};
use serde_json::{Value, json};

const SCOPE: &str = "agent-7";
const SERVER_ID: &str = "payments";

/// A proxy on the SQLite store in `dir`, with a fixed scope and server id (so a restarted
/// proxy names the same operations) and this configuration.
fn proxy(dir: &Path, config: &str) -> Peer {
    let store = format!("sqlite://{}", dir.join("store.db").display());
    let mut peer = Spawn::proxy()
        .arg("--store")
        .arg(&store)
        .arg("--scope")
        .arg(SCOPE)
        .arg("--server-id")
        .arg(SERVER_ID)
        .config(config)
        .start();
    peer.initialize();
    peer.list_tools();
    peer
}

/// The children of a process, from /proc.
fn children(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid …: the command name may hold spaces and parentheses.
        let parent = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if parent == Some(pid) {
            found.push(child);
        }
    }
    found
}

/// Sends a write call, waits until the server has started it, and SIGKILLs the server. The
/// proxy answers the call `server_gone` and exits.
fn kill_server_mid_call(peer: &mut Peer, tool: &str, args: &Value) {
    let id = peer.call_async(tool, args.clone());
    peer.eventually("the call to reach the server", |p| p.count(tool) == 1);
    let servers = children(peer.pid());
    assert_eq!(servers.len(), 1, "the proxy has one child, its server");
    let status = Command::new("kill")
        .args(["-KILL", &servers[0].to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let answer = peer.response(&id);
    assert!(is_error(&answer), "{answer}");
    assert_eq!(answer["result"]["_meta"]["toolonce/outcome"], "server_gone");
    peer.wait(Duration::from_secs(30));
}

/// Waits until the operation's lease has run out: `toolonce ls --state unknown` lists it.
fn wait_until_unknown(dir: &Path, key: &str) -> Value {
    let store = format!("sqlite://{}", dir.join("store.db").display());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = Command::new(mcp_peer::toolonce())
            .args(["ls", "--state", "unknown", "--json", "--store", &store])
            .env_remove("TOOLONCE_STORE")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
        if let Some(entry) = listed["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["key"] == key)
        {
            return entry.clone();
        }
        assert!(Instant::now() < deadline, "never unknown: {listed}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn key_of(tool: &str, args: &Value) -> String {
    toolonce::key::derive(SCOPE, &format!("{SERVER_ID}/{tool}"), args, None)
        .unwrap()
        .key
        .to_string()
}

#[test]
fn a_server_killed_mid_call_leaves_it_unknown_and_hold_never_forwards_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[defaults]\nlease = \"1s\"";
    let args = json!({"to": "ada@example.com", "ms": 60000});
    let key = key_of("slow", &args);
    let mut first = proxy(dir.path(), config);
    kill_server_mid_call(&mut first, "slow", &args);
    let listed = wait_until_unknown(dir.path(), &key);
    // The entry says what it is: the scope, the tool, the server.
    assert_eq!(listed["scope"], SCOPE);
    assert_eq!(listed["tool"], "slow");
    assert_eq!(listed["detail"], SERVER_ID);
    assert_eq!(listed["attempts"], 1);

    let mut second = proxy(dir.path(), config);
    for _ in 0..2 {
        let held = second.call("slow", args.clone());
        assert!(is_error(&held), "{held}");
        assert_eq!(held["result"]["_meta"]["toolonce/outcome"], "unknown");
        assert_eq!(held["result"]["_meta"]["toolonce/key"], key.as_str());
        let words = text(&held);
        assert!(words.contains("may already have taken effect"), "{words}");
        assert!(words.contains("must not retry"), "{words}");
        assert!(words.contains("A person must check"), "{words}");
    }
    assert_eq!(second.count("slow"), 0, "a held call reached the server");
    // Another operation of the same tool is not held.
    let other = second.call("slow", json!({"to": "bob@example.com", "ms": 1}));
    assert!(!is_error(&other), "{other}");
    assert_eq!(second.count("slow"), 1);
}

#[test]
fn a_server_killed_mid_call_is_run_again_with_the_same_key_under_rerun() {
    let dir = tempfile::tempdir().unwrap();
    // Per tool, over a [defaults] that holds.
    let config = "[defaults]\nlease = \"1s\"\non_expired = \"hold\"\n\
                  [tools.slow]\non_expired = \"rerun\"";
    let args = json!({"amount": 4200, "ms": 60000});
    let key = key_of("slow", &args);
    let mut first = proxy(dir.path(), config);
    kill_server_mid_call(&mut first, "slow", &args);
    wait_until_unknown(dir.path(), &key);

    let mut second = proxy(dir.path(), config);
    second.call_async("slow", args.clone());
    second.eventually("the rerun to reach the server", |p| p.count("slow") == 1);
    let (_, _, sent_key) = second.executions().remove(0);
    assert_eq!(sent_key, key, "the rerun carries the first attempt's key");
    // The first attempt reached its server with the same key.
    assert_eq!(first.executions()[0].2, key);
}

#[test]
fn a_server_killed_mid_call_is_held_by_default_without_any_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let args = json!({"x": 1, "ms": 60000});
    let key = key_of("slow", &args);
    // The default lease (60 s) is too long for a test; only the lease is configured.
    let config = "[tools.slow]\nlease = \"1s\"";
    let mut first = proxy(dir.path(), config);
    kill_server_mid_call(&mut first, "slow", &args);
    wait_until_unknown(dir.path(), &key);
    let mut second = proxy(dir.path(), config);
    let held = second.call("slow", args);
    assert_eq!(
        held["result"]["_meta"]["toolonce/outcome"], "unknown",
        "{held}"
    );
    assert_eq!(second.count("slow"), 0);
}

#[test]
fn a_call_the_server_never_answers_is_held_after_the_lease_until_an_operator_releases_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[defaults]\nlease = \"1s\"\ncall_timeout = \"300ms\"";
    let args = json!({"deploy": "v42"});
    let key = key_of("hang", &args);
    let mut peer = proxy(dir.path(), config);
    let timed_out = peer.call("hang", args.clone());
    assert_eq!(
        timed_out["result"]["_meta"]["toolonce/outcome"],
        "timed_out"
    );
    // The model is told the truth about what comes next under `hold`.
    let words = text(&timed_out);
    assert!(words.contains("Do not retry"), "{words}");
    assert!(words.contains("toolonce resolve"), "{words}");
    wait_until_unknown(dir.path(), &key);
    let held = peer.call("hang", args.clone());
    assert_eq!(
        held["result"]["_meta"]["toolonce/outcome"], "unknown",
        "{held}"
    );
    assert_eq!(peer.count("hang"), 1);

    let store = format!("sqlite://{}", dir.path().join("store.db").display());
    let released = Command::new(mcp_peer::toolonce())
        .args(["resolve", &key, "--release", "--store", &store])
        .env_remove("TOOLONCE_STORE")
        .output()
        .unwrap();
    assert!(released.status.success(), "{released:?}");
    let again = peer.call("hang", args);
    assert_eq!(again["result"]["_meta"]["toolonce/outcome"], "timed_out");
    assert_eq!(
        peer.count("hang"),
        2,
        "released, the call was forwarded again"
    );
    let keys: Vec<String> = peer.executions().into_iter().map(|(.., k)| k).collect();
    assert_eq!(keys, [key.clone(), key]);
}

/// After a call timed out, its entry stays `running` until the lease ends; a duplicate within
/// the lease is told the truth (it may or may not have taken effect), never that it "is
/// running right now" and "will take effect once".
#[test]
fn a_duplicate_of_a_timed_out_call_within_its_lease_is_told_its_outcome_is_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[defaults]\nlease = \"60s\"\ncall_timeout = \"300ms\"";
    let args = json!({"deploy": "v43"});
    let mut peer = proxy(dir.path(), config);
    let timed_out = peer.call("hang", args.clone());
    assert_eq!(
        timed_out["result"]["_meta"]["toolonce/outcome"],
        "timed_out"
    );
    let again = peer.call("hang", args);
    assert!(is_error(&again), "{again}");
    assert_eq!(
        again["result"]["_meta"]["toolonce/outcome"], "unknown",
        "{again}"
    );
    let words = text(&again);
    assert!(
        words.contains("may or may not have taken effect"),
        "{words}"
    );
    assert!(words.contains("Do not retry"), "{words}");
    assert!(!words.contains("running right now"), "{words}");
    assert!(!words.contains("will take effect once"), "{words}");
    assert_eq!(peer.count("hang"), 1, "the duplicate was not forwarded");
}
