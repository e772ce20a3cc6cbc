//! The official MCP TypeScript SDK (npm `@modelcontextprotocol/sdk`), installed on first use
//! into the target directory, with the tests' own Node scripts written beside it (Node
//! resolves a script's imports from where the script is). Node.js and npm must be installed:
//! without them the tests that use it fail, naming what is missing; they are never skipped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The version the tests were written against; bump it deliberately.
pub(crate) const SDK: &str = "@modelcontextprotocol/sdk@1.32.2";

fn require(program: &str) {
    let found = Command::new(program).arg("--version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "`{program}` is required by this test (it runs the MCP SDK from npm) but cannot be \
         run: install Node.js and npm (e.g. `apt-get install nodejs npm`)"
    );
}

/// The folder holding the SDK and `scripts` (file name, contents), installed once per test
/// binary. Test binaries share the folder, so each script is written aside and renamed into
/// place: another binary may be reading it.
pub(crate) fn sdk_dir(scripts: &[(&str, &str)]) -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        require("node");
        require("npm");
        let version = SDK.rsplit_once('@').unwrap().1;
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("npm-sdk-{version}"));
        let entry = dir.join("node_modules/@modelcontextprotocol/sdk/package.json");
        if !entry.exists() {
            let status = Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--prefix"])
                .arg(&dir)
                .arg(SDK)
                .status()
                .expect("run npm");
            assert!(status.success(), "npm install {SDK} failed");
        }
        assert!(
            entry.exists(),
            "{} is missing after npm install",
            entry.display()
        );
        for (name, script) in scripts {
            let aside = dir.join(format!("{name}.{}", std::process::id()));
            std::fs::write(&aside, script).unwrap();
            std::fs::rename(&aside, dir.join(name)).unwrap();
        }
        dir
    })
}
