//! The official Python MCP SDK (PyPI `mcp`, pinned in `python-requirements.txt`) in a virtual
//! environment under the target directory, made on first use by `scripts/install-python-mcp`
//! (which `scripts/install-test-deps` runs too), and the tests' Python server on it. Without
//! python3 and its venv module, or without PyPI, the tests that use it fail saying so; they
//! are never skipped.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

use super::mcp_peer::port_line;

const SERVER_SCRIPT: &str = include_str!("mcp_python_server.py");

/// The virtual environment's python, with the SDK installed.
pub(crate) fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-mcp");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-python-mcp");
        let status = Command::new("bash")
            .arg(&script)
            .arg(&venv)
            .status()
            .expect("run scripts/install-python-mcp");
        assert!(
            status.success(),
            "scripts/install-python-mcp {} failed: the Python MCP SDK is required by this test \
             (python3 with its venv module, and PyPI or a mirror pip can reach)",
            venv.display()
        );
        venv.join("bin/python")
    })
}

/// The tests' Python server on a free loopback port.
pub(crate) struct PythonServer {
    child: Child,
    pub(crate) port: u16,
    dir: tempfile::TempDir,
}

impl PythonServer {
    /// `json`: JSON answers instead of event streams.
    pub(crate) fn start(json: bool) -> PythonServer {
        let python = python();
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("mcp_python_server.py");
        std::fs::write(&script, SERVER_SCRIPT).unwrap();
        let mut child = Command::new(python)
            .arg(&script)
            .env("COUNT_FILE", dir.path().join("executions"))
            .env("JSON", if json { "1" } else { "0" })
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the Python MCP server");
        let port = port_line(&mut child, "the Python server");
        PythonServer { child, port, dir }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// One `{item, key}` per execution of `write`.
    pub(crate) fn executions(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("executions"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
