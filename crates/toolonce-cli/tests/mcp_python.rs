//! `toolonce mcp` in front of a Python MCP server we did not write: the official Python SDK
//! (PyPI `mcp`, pinned in `support/python-requirements.txt`) serving Streamable HTTP, with a
//! counting write tool. Through `--upstream` (a stdio client: the tests' own) and through
//! `--listen --upstream` (the official TypeScript SDK's HTTP client), duplicates run once.
//! python3 with its venv module, PyPI, Node.js and npm are required: without them these tests
//! fail (they are never skipped), naming what is missing.

#[path = "support/mcp_gateway.rs"]
mod mcp_gateway;
#[path = "support/mcp_peer.rs"]
mod mcp_peer;
#[path = "support/mcp_python.rs"]
mod mcp_python;
#[path = "support/mcp_sdk.rs"]
mod mcp_sdk;

use std::path::Path;
use std::process::{Command, Stdio};

use mcp_gateway::Gateway;
use mcp_peer::{Spawn, is_error, text, toolonce, without_outcome};
use mcp_python::PythonServer;
use serde_json::{Value, json};

const CLIENT_SCRIPT: &str = include_str!("support/mcp_sdk_gateway_client.mjs");

fn sdk_dir() -> &'static Path {
    mcp_sdk::sdk_dir(&[("mcp_sdk_gateway_client.mjs", CLIENT_SCRIPT)])
}

fn a_stdio_client_reaches_the_python_server_and_a_duplicate_write_runs_once(json_answers: bool) {
    let server = PythonServer::start(json_answers);
    let mut peer = Spawn::proxy()
        .arg("--scope")
        .arg("python-test")
        .upstream(&server.url())
        .start();
    let init = peer.initialize();
    assert_eq!(init["serverInfo"]["name"], "toolonce-python-test", "{init}");
    let tools = peer.list_tools();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(
        names.contains(&"write") && names.contains(&"read"),
        "{tools:?}"
    );

    let first = peer.call("write", json!({"item": "py"}));
    assert!(!is_error(&first), "{first}");
    assert_eq!(text(&first), "wrote py (execution 1)", "{first}");
    let again = peer.call("write", json!({"item": "py"}));
    assert_eq!(
        again["result"]["_meta"]["toolonce/outcome"], "replayed",
        "{again}"
    );
    assert_eq!(without_outcome(&again), without_outcome(&first));
    for _ in 0..2 {
        let read = peer.call("read", json!({}));
        assert_eq!(text(&read), "1", "reads pass through: {read}");
    }
    let other = peer.call("write", json!({"item": "other"}));
    assert_eq!(text(&other), "wrote other (execution 2)", "{other}");
    let executions = server.executions();
    assert_eq!(executions.len(), 2, "{executions:?}");
    assert!(
        executions[0]["key"].as_str().unwrap().starts_with("idem:"),
        "the key reached the server in _meta: {executions:?}"
    );
}

#[test]
fn a_stdio_client_reaches_the_python_server_with_sse_answers_and_a_duplicate_write_runs_once() {
    a_stdio_client_reaches_the_python_server_and_a_duplicate_write_runs_once(false);
}

#[test]
fn a_stdio_client_reaches_the_python_server_with_json_answers_and_a_duplicate_write_runs_once() {
    a_stdio_client_reaches_the_python_server_and_a_duplicate_write_runs_once(true);
}

fn sdk_client(url: &str, steps: &Value) -> Value {
    let output = Command::new("node")
        .arg(sdk_dir().join("mcp_sdk_gateway_client.mjs"))
        .arg(url)
        .env_remove("TOKEN")
        .env("STEPS", steps.to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run the SDK client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "the SDK client failed: {stdout}");
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("the SDK client printed {stdout:?}: {e}"))
}

#[test]
fn the_sdk_http_client_reaches_the_python_server_through_the_gateway_and_a_duplicate_runs_once() {
    let server = PythonServer::start(false);
    let mut command = Command::new(toolonce());
    command
        .args(["mcp", "--store", "memory://", "--scope", "python-gateway"])
        .args(["--listen", "127.0.0.1:0", "--upstream", &server.url()]);
    let mut gateway = Gateway::spawn(command);
    let steps = json!([
        {"tool": "write", "args": {"item": "g"}},
        {"tool": "write", "args": {"item": "g"}},
        {"tool": "read"},
    ]);
    let got = sdk_client(&gateway.url(), &steps);
    assert!(got.get("error").is_none(), "{got}");
    assert_eq!(got["server"]["name"], "toolonce-python-test", "{got}");
    let result = |i: usize| json!({"result": got["results"][i]});
    assert_eq!(text(&result(0)), "wrote g (execution 1)", "{got}");
    assert_eq!(
        got["results"][1]["_meta"]["toolonce/outcome"], "replayed",
        "{got}"
    );
    assert_eq!(text(&result(2)), "1", "{got}");
    // The progress the server reported while running the write reached the client, on the
    // call's own event stream through both legs; the replay has none.
    let progress = got["progress"][0].as_array().unwrap();
    let messages: Vec<&str> = progress
        .iter()
        .filter_map(|p| p["message"].as_str())
        .collect();
    assert_eq!(messages, ["writing", "written"], "{got}");
    assert_eq!(got["progress"][1], json!([]), "{got}");

    // Another client session: the replay again.
    let got = sdk_client(
        &gateway.url(),
        &json!([{"tool": "write", "args": {"item": "g"}}]),
    );
    assert_eq!(
        got["results"][0]["_meta"]["toolonce/outcome"], "replayed",
        "{got}"
    );
    assert_eq!(server.executions().len(), 1, "{:?}", server.executions());
    gateway.stop();
}

/// The Python SDK answers a call of a tool it does not have as an `isError` result ("Unknown
/// tool: NAME") instead of the JSON-RPC error -32602: the tool never began, so the proxy does
/// not record it, and the same call sent again reaches the server again (a replayed failure
/// would say `replayed_failure` in its `_meta`).
#[test]
fn an_unknown_tool_the_python_sdk_server_refuses_is_not_recorded_and_reaches_it_again() {
    let server = PythonServer::start(true);
    let mut peer = Spawn::proxy()
        .arg("--scope")
        .arg("python-refusal")
        .upstream(&server.url())
        .start();
    peer.initialize();
    for attempt in 0..2 {
        let refused = peer.call("nope", json!({"x": 1}));
        assert!(is_error(&refused), "{refused}");
        assert_eq!(text(&refused), "Unknown tool: nope", "{refused}");
        assert_eq!(
            refused["result"]["_meta"].get("toolonce/outcome"),
            None,
            "attempt {attempt}: the server's own answer, never a replay: {refused}"
        );
    }
    assert!(server.executions().is_empty());
}
