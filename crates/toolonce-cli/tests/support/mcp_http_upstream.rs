//! The official TypeScript SDK's Streamable HTTP server (`mcp_http_server.mjs`) and the
//! 2026-07-28 bridge (`mcp_http_bridge.mjs`) and event-stream server (`mcp_http_stream_server.mjs`) on free loopback ports, with what they record
//! (executions, HTTP requests). The test file defines `sdk_dir()`, which writes its scripts
//! beside the SDK.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::mcp_peer::port_line;
use crate::sdk_dir;

/// The SDK's Streamable HTTP server, running on a free loopback port.
pub(crate) struct HttpServer {
    child: Child,
    pub(crate) port: u16,
    pub(crate) dir: tempfile::TempDir,
}

impl HttpServer {
    /// `mode` is `json` or `sse`; `env` adds REQUIRE_TOKEN and the like.
    pub(crate) fn start(mode: &str, env: &[(&str, &str)]) -> HttpServer {
        Self::node("mcp_http_server.mjs", &[], mode, env)
    }

    /// The stdio server `command` behind the 2026-07-28 bridge (`mcp_http_bridge.mjs`).
    pub(crate) fn bridge(command: &Path) -> HttpServer {
        Self::node("mcp_http_bridge.mjs", &[command], "json", &[])
    }

    /// The 2026-07-28 server that answers on event streams (`mcp_http_stream_server.mjs`).
    pub(crate) fn streaming() -> HttpServer {
        Self::node("mcp_http_stream_server.mjs", &[], "sse", &[])
    }

    fn node(script: &str, args: &[&Path], mode: &str, env: &[(&str, &str)]) -> HttpServer {
        let sdk = sdk_dir();
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new("node")
            .arg(sdk.join(script))
            .args(args)
            .env("MCP_TEST_COUNTER", dir.path().join("counter"))
            .env_remove("MCP_TEST_LOG")
            .env("MODE", mode)
            .env("COUNT_FILE", dir.path().join("executions"))
            .env("REQUEST_LOG", dir.path().join("requests"))
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start node");
        let port = port_line(&mut child, "the HTTP server");
        HttpServer { child, port, dir }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    pub(crate) fn lines(&self, file: &str) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join(file))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// One `{item, key}` per execution of `write`.
    pub(crate) fn executions(&self) -> Vec<Value> {
        let all = self.lines("executions");
        all.into_iter()
            .filter(|e| e.get("item").is_some())
            .collect()
    }

    /// What `slow` noted: `started`, then `cancelled` or `done`.
    pub(crate) fn slow(&self) -> Vec<String> {
        let all = self.lines("executions");
        all.iter()
            .filter_map(|e| e["slow"].as_str().map(str::to_owned))
            .collect()
    }

    /// Every HTTP request the server received: method, X-Test-Tag, MCP-Protocol-Version,
    /// Mcp-Method, Mcp-Name, and whether it carried a session id.
    pub(crate) fn requests(&self) -> Vec<Value> {
        let all = self.lines("requests");
        all.into_iter()
            .filter(|r| r.get("aborted").is_none())
            .collect()
    }

    /// The Mcp-Name (or null) of every request the client closed before its answer was
    /// complete.
    pub(crate) fn aborted(&self) -> Vec<Value> {
        let all = self.lines("requests");
        all.into_iter()
            .filter_map(|r| r.get("aborted").cloned())
            .collect()
    }

    pub(crate) fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop();
    }
}
