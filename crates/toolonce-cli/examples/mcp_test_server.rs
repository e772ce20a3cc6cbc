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
//! | `late` | none | counts, sleeps `ms`, answers even if the request was cancelled |
//! | `hang` | none | counts, never answers |
//! | `tell` | none | counts, sleeps `ms`, sends a `notifications/message` with `text` (and a `notifications/progress` if the request has a progress token), then answers |
//! | `fail` | none | counts, answers `isError: true` |
//! | `crash` | none | counts, answers a JSON-RPC error `-32603` (an exception after the effect) |
//! | `garbled` | none | counts, answers a result serde_json cannot read: `how` = `surrogate` (a text cut inside an emoji, `\ud83d`, as `JSON.stringify` writes it) or `deep` (`structuredContent` nested 150 levels) |
//!
//! Every result echoes the request's `params._meta` (so tests see the operation key) and
//! carries fields no client knows (`x-extra`). Other methods: `initialize`, `tools/list`,
//! `ping`, and for tests `test/echo` (answers with its params), `test/garbage` (writes a line
//! that is not JSON), `test/server_request` (sends a request to the client), `test/exit`
//! (exits with `params.code`), `test/lookup_writes` (from now on `lookup` is listed without
//! `readOnlyHint`, and `notifications/tools/list_changed` is sent). Batches are answered as
//! batches.
//!
//! Like the JavaScript and Python servers it stands in for, it accepts what a strict parser
//! refuses (lone surrogate escapes, numbers beyond f64, deep nesting, invalid UTF-8): a line
//! serde_json cannot read is read leniently (see [`lenient`]) and its tool call still runs.
//! Command-line arguments are ignored, so tests can tell servers apart by their command line.
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
    lookup_writes: std::sync::atomic::AtomicBool,
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
            // One write per line: `writeln!` on a file issues a write per piece, so a reader (or
            // a SIGKILL) between them would see half a line.
            let _ = counter.write_all(format!("{tool}\t{args}\t{key}\n").as_bytes());
            let _ = counter.flush();
        }
        *n
    }
}

fn tools(lookup_writes: bool) -> Value {
    let lookup_annotations = if lookup_writes {
        json!({})
    } else {
        json!({"readOnlyHint": true})
    };
    json!([
        {"name": "charge", "description": "Charge a card (counts executions).",
         "inputSchema": {"type": "object", "properties": {"amount": {"type": "number"}}},
         "annotations": {"destructiveHint": true, "readOnlyHint": false}},
        {"name": "lookup", "description": "Read something.",
         "inputSchema": {"type": "object"}, "annotations": lookup_annotations},
        {"name": "idem_tool", "description": "Idempotent but not read-only.",
         "inputSchema": {"type": "object"}, "annotations": {"idempotentHint": true}},
        {"name": "plain", "description": "No annotations.", "inputSchema": {"type": "object"}},
        {"name": "tally", "description": "Counts; has a `repeat` argument of its own.",
         "inputSchema": {"type": "object", "properties": {"repeat": {"type": "integer"}}}},
        {"name": "slow", "description": "Sleeps `ms` milliseconds.",
         "inputSchema": {"type": "object", "properties": {"ms": {"type": "integer"}}}},
        {"name": "late", "description": "Answers after `ms` milliseconds, cancelled or not.",
         "inputSchema": {"type": "object", "properties": {"ms": {"type": "integer"}}}},
        {"name": "hang", "description": "Never answers.", "inputSchema": {"type": "object"}},
        {"name": "tell", "description": "Logs `text` (and reports progress) after `ms`, then answers.",
         "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}, "ms": {"type": "integer"}}}},
        {"name": "fail", "description": "Answers isError.", "inputSchema": {"type": "object"}},
        {"name": "crash", "description": "Answers a JSON-RPC internal error after counting.",
         "inputSchema": {"type": "object"}},
        {"name": "garbled", "description": "Answers a result a strict parser refuses.",
         "inputSchema": {"type": "object", "properties": {"how": {"type": "string"}}}},
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
        "tools/list" => {
            let lookup_writes = server
                .lookup_writes
                .load(std::sync::atomic::Ordering::SeqCst);
            reply(json!({"tools": tools(lookup_writes), "x-extra": 1}))
        }
        "test/lookup_writes" => {
            server
                .lookup_writes
                .store(true, std::sync::atomic::Ordering::SeqCst);
            server.send(&json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
            reply(json!({}))
        }
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
        "charge" | "lookup" | "idem_tool" | "plain" | "tally" => {
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
        "crash" => {
            server.execute(&tool, &params);
            Some(json!({"jsonrpc": "2.0", "id": id,
                        "error": {"code": -32603, "message": "Internal error: upstream exploded"}}))
        }
        "hang" => {
            server.execute(&tool, &params);
            None
        }
        "garbled" => {
            let n = server.execute(&tool, &params);
            let id = serde_json::to_string(&id).unwrap();
            let structured = match params.pointer("/arguments/how").and_then(Value::as_str) {
                Some("deep") => format!("{}{n}{}", "[".repeat(150), "]".repeat(150)),
                _ => format!("{{\"execution\":{n}}}"),
            };
            // Written by hand: serde_json would neither write the lone surrogate nor (on the
            // client side) read the nesting, which is the point.
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"garbled #{n} \ud83d"}}],"structuredContent":{structured}}}}}"#
            );
            server.send_raw(line.as_bytes());
            None
        }
        "tell" => {
            let n = server.execute(&tool, &params);
            let ms = params
                .pointer("/arguments/ms")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            let server = server.clone();
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(ms));
                let text = params.pointer("/arguments/text").cloned();
                server.send(&json!({"jsonrpc": "2.0", "method": "notifications/message",
                                    "params": {"level": "info", "data": text}}));
                if let Some(token) = params.pointer("/_meta/progressToken") {
                    server.send(
                        &json!({"jsonrpc": "2.0", "method": "notifications/progress",
                                        "params": {"progressToken": token, "progress": 1,
                                                   "total": 1, "message": text}}),
                    );
                }
                server.send(
                    &json!({"jsonrpc": "2.0", "id": id, "result": tool_result(&tool, n, &params)}),
                );
            });
            None
        }
        "slow" | "late" => {
            let n = server.execute(&tool, &params);
            let ms = params
                .pointer("/arguments/ms")
                .and_then(Value::as_u64)
                .unwrap_or(100);
            let server = server.clone();
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(ms));
                if tool == "slow" && server.cancelled.lock().unwrap().contains(&id.to_string()) {
                    return;
                }
                server.send(
                    &json!({"jsonrpc": "2.0", "id": id, "result": tool_result(&tool, n, &params)}),
                );
            });
            None
        }
        _ => Some(json!({"jsonrpc": "2.0", "id": id,
                         "error": {"code": -32602, "message": format!("Unknown tool: {tool}")}})),
    }
}

/// Reads a `tools/call` (alone or the first of a batch) that serde_json refuses, as a lenient
/// parser would: the id, the tool name and the key are picked out of the text, and the
/// arguments are kept as the text itself. `None` if the line is not a `tools/call` at all.
fn lenient(text: &[u8]) -> Option<Value> {
    let text = String::from_utf8_lossy(text);
    if !text.contains("\"tools/call\"") {
        return None;
    }
    let after = |marker: &str| text.find(marker).map(|at| &text[at + marker.len()..]);
    let id = after("\"id\":").and_then(|rest| {
        let end = rest.find([',', '}'])?;
        serde_json::from_str::<Value>(rest[..end].trim()).ok()
    })?;
    let name = after("\"name\":\"").and_then(|rest| rest.split('"').next())?;
    let mut params = json!({"name": name, "arguments": {"unparsed": text}});
    if let Some(key) = after("\"toolonce/key\":\"").and_then(|rest| rest.split('"').next()) {
        params["_meta"] = json!({"toolonce/key": key});
    }
    Some(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}))
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
        lookup_writes: std::sync::atomic::AtomicBool::new(false),
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
            Err(_) => match lenient(text) {
                Some(message) => {
                    let batch = text.trim_ascii_start().first() == Some(&b'[');
                    if let Some(answer) = handle(&server, message) {
                        server.send(&if batch { json!([answer]) } else { answer });
                    }
                }
                None => server.send(&json!({"jsonrpc": "2.0", "id": null,
                                            "error": {"code": -32700, "message": "Parse error"}})),
            },
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
