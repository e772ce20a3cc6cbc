//! An MCP server built on rmcp (the official MCP Rust SDK) whose write tool goes through
//! toolonce in-process, and a self-check that drives it with an rmcp client over an in-memory
//! duplex transport. Run it with `cargo run -p toolonce --example rmcp_server`.
//!
//! The rmcp tool handler hands the call to a [`Toolbox`] (`toolbox.call(name, args)`), which
//! keys it by (the server's scope, tool name, canonical arguments), claims it in the store, runs
//! the [`WriteTool`] once and replays its result to every duplicate. The outcome and the key
//! travel in the result's `_meta` as `toolonce/outcome` and `toolonce/key`, as `toolonce mcp`
//! puts them. The check: a client sends `issue_refund` twice at once (an MCP client that
//! dispatches every call twice; the duplicate waits for the first's result), then once more;
//! then a second server on the same store (a restarted server) gets the call again from a new
//! session; a read tool runs every time. The last line says `effects: 1 (expected 1)`, and the
//! exit status is 0 only then.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, MetaObject, ServerCapabilities,
    ServerConfig,
};
use rmcp::{ErrorData, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use serde_json::{Value, json};
use toolonce::{
    BoxError, InFlight, MemoryStore, ReadTool, Store, ToolError, ToolResult, Toolbox, WriteContext,
    WriteOptions, WriteTool,
};

/// The refund tool's arguments: rmcp shows the model their JSON Schema, toolonce keys on them.
#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Refund {
    /// The order to refund.
    order_id: String,
    /// The amount, in cents.
    cents: u64,
}

/// The order lookup's arguments.
#[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Lookup {
    /// The order to look up.
    order_id: String,
}

/// The side effect: refunds issued by the "payment API", counted.
struct IssueRefund {
    issued: Arc<AtomicUsize>,
}

impl WriteTool for IssueRefund {
    type Args = Refund;
    type Output = Value;
    fn name(&self) -> &str {
        "issue_refund"
    }
    fn description(&self) -> &str {
        "Refund an order."
    }
    async fn call(&self, ctx: WriteContext, args: Refund) -> Result<Value, ToolError> {
        // A real tool sends ctx.idempotency_header() to the payment API, which takes a while:
        // long enough for a duplicate sent at the same time to find the call in flight.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let n = self.issued.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(
            json!({"refund_id": format!("re_{n}"), "order_id": args.order_id,
                  "cents": args.cents, "key": ctx.key().as_str()}),
        )
    }
}

/// A read tool: no side effect, run every time, never keyed.
struct LookupOrder {
    lookups: Arc<AtomicUsize>,
}

impl ReadTool for LookupOrder {
    type Args = Lookup;
    type Output = Value;
    fn name(&self) -> &str {
        "lookup_order"
    }
    fn description(&self) -> &str {
        "Look an order up."
    }
    async fn call(&self, args: Lookup) -> Result<Value, ToolError> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        Ok(json!({"order_id": args.order_id, "status": "paid"}))
    }
}

/// The rmcp server: its tools forward to the toolbox, which runs writes through toolonce.
#[derive(Clone)]
struct RefundServer {
    toolbox: Arc<Toolbox>,
    #[allow(dead_code)] // read by the code #[tool_handler] generates
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl RefundServer {
    #[tool(description = "Refund an order.")]
    async fn issue_refund(
        &self,
        Parameters(args): Parameters<Refund>,
    ) -> Result<CallToolResult, ErrorData> {
        self.forward("issue_refund", &args).await
    }

    #[tool(description = "Look an order up.")]
    async fn lookup_order(
        &self,
        Parameters(args): Parameters<Lookup>,
    ) -> Result<CallToolResult, ErrorData> {
        self.forward("lookup_order", &args).await
    }
}

impl RefundServer {
    fn new(toolbox: Toolbox) -> Self {
        RefundServer {
            toolbox: Arc::new(toolbox),
            tool_router: Self::tool_router(),
        }
    }

    /// Runs the call through the toolbox: a write once per operation, a read every time.
    async fn forward(
        &self,
        name: &str,
        args: &impl serde::Serialize,
    ) -> Result<CallToolResult, ErrorData> {
        let args = serde_json::to_value(args)
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        Ok(mcp_result(self.toolbox.call(name, args).await))
    }
}

/// toolonce's answer as an MCP tool result: its text, its error flag, and for a write call the
/// outcome and key in `_meta`. Every outcome (in flight, unknown, store unavailable) is a
/// tool-level result the client shows, never a protocol error.
fn mcp_result(answer: ToolResult) -> CallToolResult {
    let content = vec![ContentBlock::text(answer.content)];
    let mut result = if answer.is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    if let Some(key) = &answer.key {
        let mut meta = serde_json::Map::new();
        meta.insert(
            toolonce::meta::OUTCOME.into(),
            json!(answer.outcome.as_str()),
        );
        meta.insert(toolonce::meta::KEY.into(), json!(key.as_str()));
        result.meta = Some(MetaObject(meta));
    }
    result
}

#[tool_handler]
impl ServerHandler for RefundServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// A tool call: the tool's name and its arguments.
type Call = (&'static str, Value);

/// What the self-check counts.
#[derive(Clone, Default)]
struct Effects {
    refunds: Arc<AtomicUsize>,
    lookups: Arc<AtomicUsize>,
}

/// A server on `store` in scope `scope`, as a process would build it at start-up.
fn server(store: Arc<dyn Store>, scope: &str, effects: &Effects) -> toolonce::Result<RefundServer> {
    let toolbox = Toolbox::builder(store)
        .scope(scope)
        // A duplicate that finds the refund running waits for its result.
        .write_with(
            IssueRefund {
                issued: effects.refunds.clone(),
            },
            WriteOptions::new().in_flight(InFlight::Wait(Duration::from_secs(10))),
        )
        .read(LookupOrder {
            lookups: effects.lookups.clone(),
        })
        .build()?;
    Ok(RefundServer::new(toolbox))
}

/// One client session against `server` over an in-memory duplex pipe. Each step's calls are
/// sent at once (a client that dispatches a call twice); the outcome of every call, in step
/// order and sorted within a step (`read` for a read tool).
async fn session(server: RefundServer, steps: &[&[Call]]) -> Result<Vec<String>, BoxError> {
    let (client_side, server_side) = tokio::io::duplex(64 * 1024);
    let serving = tokio::spawn(async move {
        let running = server.serve(server_side).await?;
        running.waiting().await?;
        Ok::<(), BoxError>(())
    });
    let client = ().serve(client_side).await?;
    let tools = client.list_all_tools().await?;
    if tools.len() != 2 {
        return Err(format!("the server lists {} tools, not 2", tools.len()).into());
    }
    let mut outcomes = Vec::new();
    for step in steps {
        let mut calls = tokio::task::JoinSet::new();
        for (name, args) in step.iter().cloned() {
            let Value::Object(args) = args else {
                return Err("arguments must be an object".into());
            };
            let peer = client.peer().clone();
            calls.spawn(async move {
                let params = CallToolRequestParams::new(name).with_arguments(args);
                (name, peer.call_tool(params).await)
            });
        }
        let mut step_outcomes = Vec::new();
        while let Some(joined) = calls.join_next().await {
            let (name, result) = joined?;
            let result = result?;
            if result.is_error == Some(true) {
                return Err(format!("{name} failed: {:?}", result.content).into());
            }
            let outcome = result
                .meta
                .as_ref()
                .and_then(|meta| meta.0.get(toolonce::meta::OUTCOME))
                .and_then(Value::as_str)
                .unwrap_or("read")
                .to_owned();
            let text = result.content.first().and_then(|c| c.as_text());
            println!(
                "{name} -> {outcome}: {}",
                text.map_or("", |t| t.text.as_str())
            );
            step_outcomes.push(outcome);
        }
        step_outcomes.sort();
        outcomes.extend(step_outcomes);
    }
    client.cancel().await?;
    serving.await??;
    Ok(outcomes)
}

async fn check() -> Result<(usize, bool), BoxError> {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let effects = Effects::default();
    let refund = ("issue_refund", json!({"order_id": "o-1042", "cents": 2500}));
    let lookup = ("lookup_order", json!({"order_id": "o-1042"}));
    // One session: the client dispatches the refund twice at once, then looks the order up
    // and sends the refund once more.
    let first = server(store.clone(), "support-agent", &effects)?;
    let twice = [refund.clone(), refund.clone()];
    let (refund, lookup) = (std::slice::from_ref(&refund), std::slice::from_ref(&lookup));
    let one = session(first, &[&twice, lookup, refund]).await?;
    // The server restarts; the agent resumes and sends the refund again in a new session.
    let restarted = server(store.clone(), "support-agent", &effects)?;
    let two = session(restarted, &[refund, lookup]).await?;
    let ok = one == ["executed", "replayed", "read", "replayed"]
        && two == ["replayed", "read"]
        && effects.lookups.load(Ordering::SeqCst) == 2;
    println!(
        "lookups: {} (expected 2)",
        effects.lookups.load(Ordering::SeqCst)
    );
    Ok((effects.refunds.load(Ordering::SeqCst), ok))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match check().await {
        Ok((refunds, ok)) => {
            println!("effects: {refunds} (expected 1)");
            if ok && refunds == 1 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("rmcp_server: {e}");
            println!("effects: ? (expected 1)");
            ExitCode::FAILURE
        }
    }
}
