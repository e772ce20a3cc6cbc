//! A small MCP server for the tests and benches of `toolonce mcp`: newline-delimited JSON-RPC
//! on stdio, with tools of every kind the proxy tells apart.
//!
//! | tool | annotations | does |
//! |---|---|---|
//! | `charge` | `destructiveHint` | counts an execution, answers with its number |
//! | `lookup` | `readOnlyHint: true` | counts an execution (reads run every time) |
//! | `idem_tool` | `idempotentHint: true` only | counts |
//! | `plain` | none | counts |
//! | `slow` | none | counts, sleeps `ms`, answers unless the request was cancelled |
//! | `hang` | none | counts, never answers |
//! | `fail` | none | counts, answers `isError: true` |
//!
//! Every result echoes the request's `params._meta` (so tests see the operation key) and
//! carries fields no client knows (`x-extra`). Other methods: `initialize`, `tools/list`,
//! `ping`, and for tests `test/echo` (answers with its params), `test/garbage` (writes a line
//! that is not JSON), `test/server_request` (sends a request to the client), `test/exit`
//! (exits with `params.code`). Batches are answered as batches.
//!
//! Environment: `MCP_TEST_COUNTER` (a file that gets one line per tool execution:
//! `tool<TAB>arguments<TAB>key`), `MCP_TEST_LOG` (a file that gets every line received, `<`,
//! and sent, `>`), `MCP_TEST_EOF_EXIT` (the exit code at end of input, default 0),
//! `MCP_TEST_IGNORE_EOF` (set: keep running after end of input, until killed).

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};

struct Server {
    out: Mutex<std::io::Stdout>,
    log: Option<Mutex<std::fs::File>>,
    counter: Option<Mutex<std::fs::File>>,
    executions: Mutex<u64>,
    cancelled: Mutex<HashSet<String>>,
}

impl Server {
    fn log(&self, direction: &str, line: &[u8]) {
        if let Some(log) = &self.log {
            let mut log = log.lock().unwrap();
            let _ = log.write_all(direction.as_bytes());
            let _ = log.write_all(line);
            let _ = log.write_all(b"\n");
        }
    }

    fn send_raw(&self, line: &[u8]) {
        self.log(">", line);
        let mut out = self.out.lock().unwrap();
        let _ = out.write_all(line);
        let _ = out.write_all(b"\n");
        let _ = out.flush();
    }

    fn send(&self, message: &Value) {
        self.send_raw(&serde_json::to_vec(message).unwrap());
    }

    /// Counts one execution of `tool` and returns the running total over all tools.
    fn execute(&self, tool: &str, params: &Value) -> u64 {
        let mut n = self.executions.lock().unwrap();
        *n += 1;
        if let Some(counter) = &self.counter {
            let key = params
                .pointer("/_meta/toolonce~1key")
                .and_then(Value::as_str)
                .unwrap_or("-");
            let args = params.get("arguments").cloned().unwrap_or(Value::Null);
            let mut counter = counter.lock().unwrap();
            let _ = writeln!(counter, "{tool}\t{args}\t{key}");
            let _ = counter.flush();
        }
        *n
    }
}

fn tools() -> Value {
    json!([
        {"name": "charge", "description": "Charge a card (counts executions).",
         "inputSchema": {"type": "object", "properties": {"amount": {"type": "number"}}},
         "annotations": {"destructiveHint": true, "readOnlyHint": false}},
        {"name": "lookup", "description": "Read something.",
         "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
        {"name": "idem_tool", "description": "Idempotent but not read-only.",
         "inputSchema": {"type": "object"}, "annotations": {"idempotentHint": true}},
        {"name": "plain", "description": "No annotations.", "inputSchema": {"type": "object"}},
        {"name": "slow", "description": "Sleeps `ms` milliseconds.",
         "inputSchema": {"type": "object", "properties": {"ms": {"type": "integer"}}}},
        {"name": "hang", "description": "Never answers.", "inputSchema": {"type": "object"}},
        {"name": "fail", "description": "Answers isError.", "inputSchema": {"type": "object"}},
    ])
}

fn tool_result(tool: &str, n: u64, params: &Value) -> Value {
    json!({
        "content": [{"type": "text", "text": format!("{tool} done, execution #{n}")}],
        "structuredContent": {"execution": n, "arguments": params.get("arguments")},
        "_meta": {"received": params.get("_meta")},
        "x-extra": {"nested": {"z": 1, "a": [true, null]}},
    })
}

/// Handles one message; returns the answer to send, if any (`slow` answers on its own thread).
fn handle(server: &Arc<Server>, message: Value) -> Option<Value> {
    let method = message.get("method").and_then(Value::as_str)?.to_owned();
    let id = message.get("id").cloned();
    let params = message.get("params").cloned().unwrap_or(json!({}));
    let reply = |result: Value| Some(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    match method.as_str() {
        "notifications/cancelled" => {
            if let Some(request) = params.get("requestId") {
                server.cancelled.lock().unwrap().insert(request.to_string());
            }
            None
        }
        _ if id.is_none() => None,
        "initialize" => reply(json!({
            "protocolVersion": params.get("protocolVersion").cloned().unwrap_or(json!("2025-06-18")),
            "capabilities": {"tools": {"listChanged": false}, "x-extra": {"future": true}},
            "serverInfo": {"name": "mcp_test_server", "version": "1.0.0"},
        })),
        "ping" => reply(json!({})),
        "tools/list" => reply(json!({"tools": tools(), "x-extra": 1})),
        "test/echo" => reply(params),
        "test/garbage" => {
            server.send_raw(b"this is not json {");
            reply(json!({}))
        }
        "test/server_request" => {
            server.send(
                &json!({"jsonrpc": "2.0", "id": "srv-1", "method": "roots/list",
                                "params": {"x-extra": {"from": "server"}}}),
            );
            reply(json!({}))
        }
        "test/exit" => {
            let code = params.get("code").and_then(Value::as_i64).unwrap_or(0);
            std::process::exit(i32::try_from(code).unwrap_or(1));
        }
        "tools/call" => call_tool(server, id.unwrap_or(Value::Null), params),
        _ => Some(json!({"jsonrpc": "2.0", "id": id,
                         "error": {"code": -32601, "message": format!("Method not found: {method}")}})),
    }
}

fn call_tool(server: &Arc<Server>, id: Value, params: Value) -> Option<Value> {
    let tool = params
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let reply = |result: Value| Some(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    match tool.as_str() {
        "charge" | "lookup" | "idem_tool" | "plain" => {
            let n = server.execute(&tool, &params);
            reply(tool_result(&tool, n, &params))
        }
        "fail" => {
            let n = server.execute(&tool, &params);
            let mut result = tool_result(&tool, n, &params);
            result["isError"] = json!(true);
            result["content"] =
                json!([{"type": "text", "text": format!("declined, execution #{n}")}]);
            reply(result)
        }
        "hang" => {
            server.execute(&tool, &params);
            None
        }
        "slow" => {
            let n = server.execute(&tool, &params);
            let ms = params
                .pointer("/arguments/ms")
                .and_then(Value::as_u64)
                .unwrap_or(100);
            let server = server.clone();
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(ms));
                if server.cancelled.lock().unwrap().contains(&id.to_string()) {
                    return;
                }
                server.send(
                    &json!({"jsonrpc": "2.0", "id": id, "result": tool_result("slow", n, &params)}),
                );
            });
            None
        }
        _ => Some(json!({"jsonrpc": "2.0", "id": id,
                         "error": {"code": -32602, "message": format!("Unknown tool: {tool}")}})),
    }
}

fn main() {
    let open = |var: &str| {
        std::env::var_os(var).map(|path| {
            Mutex::new(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .expect("open the file named by the environment"),
            )
        })
    };
    let server = Arc::new(Server {
        out: Mutex::new(std::io::stdout()),
        log: open("MCP_TEST_LOG"),
        counter: open("MCP_TEST_COUNTER"),
        executions: Mutex::new(0),
        cancelled: Mutex::new(HashSet::new()),
    });
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        server.log("<", text);
        match serde_json::from_slice::<Value>(text) {
            Ok(Value::Array(batch)) => {
                let answers: Vec<Value> = batch
                    .into_iter()
                    .filter_map(|m| handle(&server, m))
                    .collect();
                if !answers.is_empty() {
                    server.send(&Value::Array(answers));
                }
            }
            Ok(message) => {
                if let Some(answer) = handle(&server, message) {
                    server.send(&answer);
                }
            }
            Err(_) => server.send(&json!({"jsonrpc": "2.0", "id": null,
                                         "error": {"code": -32700, "message": "Parse error"}})),
        }
    }
    if std::env::var_os("MCP_TEST_IGNORE_EOF").is_some() {
        loop {
            thread::sleep(Duration::from_secs(3600));
        }
    }
    let code = std::env::var("MCP_TEST_EOF_EXIT")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    std::process::exit(code);
}
