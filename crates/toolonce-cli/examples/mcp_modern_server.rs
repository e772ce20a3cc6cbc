//! A strict MCP server of protocol version 2026-07-28 for the tests of `toolonce mcp`:
//! newline-delimited JSON-RPC on stdio, with no `initialize` handshake and no session.
//!
//! Every request must carry `params._meta["io.modelcontextprotocol/protocolVersion"]`
//! (`2026-07-28`) and `params._meta["io.modelcontextprotocol/clientCapabilities"]`; one that
//! does not is refused with `-32602`, an unknown version with `-32022`. `initialize` is refused
//! (`-32601`, naming the supported version), as a modern-only server does.
//!
//! | method | answer |
//! |---|---|
//! | `server/discover` | the supported versions, capabilities and server info |
//! | `tools/list` | two pages (`nextCursor`): `send_mail` and `charge` first, `inbox` after; `ttlMs` from `MCP_TEST_TTL_MS` (default 60000) |
//! | `tools/call` | see the tools below |
//! | `subscriptions/listen` | acknowledges (`notifications/subscriptions/acknowledged`), never answers |
//! | `test/retool` | from now on `inbox` is listed without `readOnlyHint`; subscribers to `toolsListChanged` get `notifications/tools/list_changed` |
//! | anything else | `-32601` |
//!
//! | tool | annotations | does |
//! |---|---|---|
//! | `send_mail` | `destructiveHint` | first answers `resultType: "input_required"` (an elicitation asking to confirm, and a `requestState` bound to the arguments); a retry with that `requestState` and an accepting `inputResponses.confirm` counts an execution and answers with its number |
//! | `charge` | `destructiveHint` | counts an execution, answers with its number |
//! | `inbox` | `readOnlyHint: true` | counts an execution |
//!
//! Results echo the request's `params._meta` (so tests see the operation key). Environment,
//! as for `mcp_test_server`: `MCP_TEST_COUNTER` (one line per execution:
//! `tool<TAB>arguments<TAB>key`) and `MCP_TEST_LOG` (every line received, `<`, and sent, `>`).

use std::fs::OpenOptions;
use std::io::{BufRead, Write};
use std::sync::Mutex;

use serde_json::{Value, json};

const VERSION: &str = "2026-07-28";

struct Server {
    log: Option<Mutex<std::fs::File>>,
    counter: Option<Mutex<std::fs::File>>,
    executions: u64,
    /// Whether `inbox` has lost its `readOnlyHint` (`test/retool`).
    inbox_writes: bool,
    /// The ids of the `subscriptions/listen` requests that asked for `toolsListChanged`.
    tool_subscriptions: Vec<Value>,
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

    fn send(&self, message: &Value) {
        let line = serde_json::to_vec(message).unwrap();
        self.log(">", &line);
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(&line);
        let _ = out.write_all(b"\n");
        let _ = out.flush();
    }

    fn execute(&mut self, tool: &str, params: &Value) -> u64 {
        self.executions += 1;
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
        self.executions
    }
}

fn error(id: &Value, code: i64, message: &str, data: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message, "data": data}})
}

fn result(id: &Value, mut result: Value) -> Value {
    result["resultType"] = json!("complete");
    result["_meta"]["io.modelcontextprotocol/serverInfo"] =
        json!({"name": "mcp_modern_server", "version": "1.0.0"});
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn tool(name: &str, annotations: Value) -> Value {
    json!({"name": name, "description": format!("The test tool {name}."),
           "inputSchema": {"type": "object"}, "annotations": annotations})
}

/// The state `send_mail` hands out with its question: bound to the arguments, so a retry with
/// other arguments (or a forged state) is refused, as the specification asks servers to do.
fn request_state(arguments: &Value) -> String {
    format!("confirm-v1:{arguments}")
}

fn handle(server: &mut Server, message: &Value) -> Option<Value> {
    let method = message.get("method").and_then(Value::as_str)?;
    let id = message.get("id")?.clone();
    let params = message.get("params").cloned().unwrap_or(json!({}));
    if method == "initialize" {
        return Some(error(
            &id,
            -32601,
            &format!("initialize is not supported: this server speaks protocol {VERSION} only"),
            json!({"supported": [VERSION]}),
        ));
    }
    let meta = params.get("_meta");
    let version = meta
        .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
        .and_then(Value::as_str);
    let capabilities = meta.and_then(|m| m.get("io.modelcontextprotocol/clientCapabilities"));
    let (Some(version), Some(_)) = (version, capabilities) else {
        return Some(error(
            &id,
            -32602,
            "missing _meta io.modelcontextprotocol/protocolVersion or clientCapabilities",
            Value::Null,
        ));
    };
    if version != VERSION {
        return Some(error(
            &id,
            -32022,
            "Unsupported protocol version",
            json!({"supported": [VERSION], "requested": version}),
        ));
    }
    match method {
        "server/discover" => Some(result(
            &id,
            json!({"supportedVersions": [VERSION], "capabilities": {"tools": {}},
                   "instructions": "A test server.", "ttlMs": 60000, "cacheScope": "public"}),
        )),
        "tools/list" => {
            let page = match params.get("cursor").and_then(Value::as_str) {
                None => json!({
                    "tools": [
                        tool("send_mail", json!({"destructiveHint": true})),
                        tool("charge", json!({"destructiveHint": true})),
                    ],
                    "nextCursor": "page-2",
                }),
                Some("page-2") => {
                    let hint = if server.inbox_writes {
                        json!({})
                    } else {
                        json!({"readOnlyHint": true})
                    };
                    json!({"tools": [tool("inbox", hint)]})
                }
                Some(_) => return Some(error(&id, -32602, "unknown cursor", Value::Null)),
            };
            let mut page = page;
            let ttl: u64 = std::env::var("MCP_TEST_TTL_MS")
                .ok()
                .and_then(|ttl| ttl.parse().ok())
                .unwrap_or(60000);
            page["ttlMs"] = json!(ttl);
            page["cacheScope"] = json!("public");
            Some(result(&id, page))
        }
        "tools/call" => Some(call_tool(server, &id, &params)),
        "subscriptions/listen" => {
            let tools = params.pointer("/notifications/toolsListChanged") == Some(&json!(true));
            if tools {
                server.tool_subscriptions.push(id.clone());
            }
            server.send(
                &json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                                "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": id},
                                           "notifications": {"toolsListChanged": tools}}}),
            );
            None
        }
        "test/retool" => {
            server.inbox_writes = true;
            for subscription in &server.tool_subscriptions {
                server.send(&json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
                                    "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": subscription}}}));
            }
            Some(result(&id, json!({})))
        }
        _ => Some(error(
            &id,
            -32601,
            &format!("Method not found: {method}"),
            Value::Null,
        )),
    }
}

fn call_tool(server: &mut Server, id: &Value, params: &Value) -> Value {
    let name = params.get("name").and_then(Value::as_str).unwrap_or("");
    let arguments = params.get("arguments").cloned().unwrap_or(json!({}));
    let done = |n: u64| {
        json!({
            "content": [{"type": "text", "text": format!("{name} done, execution #{n}")}],
            "structuredContent": {"execution": n},
            "_meta": {"received": params.get("_meta")},
        })
    };
    match name {
        "charge" | "inbox" => {
            let n = server.execute(name, params);
            result(id, done(n))
        }
        "send_mail" => {
            let Some(state) = params.get("requestState") else {
                return json!({"jsonrpc": "2.0", "id": id, "result": {
                    "resultType": "input_required",
                    "inputRequests": {"confirm": {
                        "method": "elicitation/create",
                        "params": {"mode": "form", "message": "Send this mail?",
                                   "requestedSchema": {"type": "object", "properties": {}}},
                    }},
                    "requestState": request_state(&arguments),
                    "_meta": {"received": params.get("_meta")},
                }});
            };
            if state.as_str() != Some(request_state(&arguments).as_str()) {
                return error(id, -32602, "requestState does not match", Value::Null);
            }
            match params.pointer("/inputResponses/confirm/action") {
                Some(action) if action == "accept" => {
                    let n = server.execute(name, params);
                    result(id, done(n))
                }
                _ => result(
                    id,
                    json!({"content": [{"type": "text", "text": "not sent: not confirmed"}],
                           "isError": true}),
                ),
            }
        }
        _ => error(id, -32602, &format!("Unknown tool: {name}"), Value::Null),
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
    let mut server = Server {
        log: open("MCP_TEST_LOG"),
        counter: open("MCP_TEST_COUNTER"),
        executions: 0,
        inbox_writes: false,
        tool_subscriptions: Vec::new(),
    };
    let mut input = std::io::stdin().lock();
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
            Ok(message) => {
                if let Some(answer) = handle(&mut server, &message) {
                    server.send(&answer);
                }
            }
            Err(_) => server.send(&json!({"jsonrpc": "2.0", "id": null,
                                          "error": {"code": -32700, "message": "Parse error"}})),
        }
    }
}
