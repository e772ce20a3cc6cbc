//! `toolonce mcp --upstream URL`: a stdio client reaching a Streamable HTTP MCP server through
//! the proxy. The server is built on the official TypeScript SDK (npm
//! `@modelcontextprotocol/sdk`, installed on first use into the target directory) and runs in
//! both of its answer modes, JSON and SSE; one test drives the proxy with the SDK's own stdio
//! client. Node.js and npm must be installed: without them these tests fail (they are never
//! skipped), naming what is missing.

#[path = "../support/mcp_conformance_npm.rs"]
mod mcp_conformance_npm;
#[path = "../support/mcp_http_upstream.rs"]
mod mcp_http_upstream;
#[path = "../support/mcp_peer.rs"]
mod mcp_peer;
#[path = "../support/mcp_sdk.rs"]
mod mcp_sdk;

mod failures;
mod modern;
mod relay;
mod tls;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use mcp_http_upstream::HttpServer;
use mcp_peer::{PATIENCE, Peer, Spawn, is_error, text, without_outcome};
use serde_json::{Value, json};

const SERVER_SCRIPT: &str = include_str!("../support/mcp_http_server.mjs");
const CLIENT_SCRIPT: &str = include_str!("../support/mcp_sdk_client.mjs");
const BRIDGE_SCRIPT: &str = include_str!("../support/mcp_http_bridge.mjs");

/// The SDK's folder, with this file's scripts in it.
fn sdk_dir() -> &'static Path {
    mcp_sdk::sdk_dir(&[
        ("mcp_http_server.mjs", SERVER_SCRIPT),
        ("mcp_sdk_client.mjs", CLIENT_SCRIPT),
        ("mcp_http_bridge.mjs", BRIDGE_SCRIPT),
    ])
}

fn proxy_to(server: &HttpServer) -> Spawn {
    Spawn::proxy()
        .arg("--scope")
        .arg("http-test")
        .upstream(&server.url())
}

/// The messages received within `wait` that are not answers.
fn notifications(peer: &mut Peer, wait: Duration) -> Vec<Value> {
    let mut found = Vec::new();
    while let Some(line) = peer.try_recv_line(wait) {
        let message: Value = serde_json::from_slice(&line).unwrap();
        if message.get("method").is_some() {
            found.push(message);
        }
    }
    found
}

/// Whether a message the server sends outside any request reaches the client: `announce`
/// until a `notifications/tools/list_changed` comes (the GET stream opens just after the
/// session does, and the SDK drops what it sends before).
fn get_stream_is_open(peer: &mut Peer) -> bool {
    for _ in 0..40 {
        let answer = peer.call("announce", json!({}));
        assert_eq!(text(&answer), "announced");
        let messages = notifications(peer, Duration::from_millis(250));
        if messages
            .iter()
            .any(|m| m["method"] == "notifications/tools/list_changed")
        {
            return true;
        }
    }
    false
}
