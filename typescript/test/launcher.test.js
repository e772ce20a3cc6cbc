// The package's `toolonce` command (bin/toolonce.js) runs the platform package's binary: it
// passes the arguments, the standard streams and the exit status through, passes a signal on
// to the binary and dies of the same one, and without the platform package says which one to
// install. A shell script stands in for the binary (TOOLONCE_BINARY), so that the test sees
// exactly what the launcher gave it.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { spawn, spawnSync } = require("node:child_process");
const { pkg, tempDir } = require("./support.js");

const launcher = path.join(pkg, "bin", "toolonce.js");

function fakeBinary(body) {
  const dir = fs.mkdtempSync(path.join(tempDir(), "launcher-"));
  const file = path.join(dir, "toolonce");
  fs.writeFileSync(file, `#!/bin/sh\n${body}\n`, { mode: 0o755 });
  return { dir, file };
}

test("the launcher passes arguments, standard input and output, and the exit status through", () => {
  const { file } = fakeBinary('printf "%s|" "$@"; cat; exit 7');
  const out = spawnSync(process.execPath, [launcher, "mcp", "--", "a b", "'c'"], {
    input: "from stdin",
    encoding: "utf8",
    env: { ...process.env, TOOLONCE_BINARY: file },
  });
  assert.equal(out.status, 7, out.stderr);
  assert.equal(out.stdout, "mcp|--|a b|'c'|from stdin");
});

/** Runs `body` with the fake binary's pid (it writes `$0.pid`) killed at the end, whatever happened. */
async function killingBinary(file, body) {
  try {
    return await body();
  } finally {
    try {
      process.kill(Number(fs.readFileSync(`${file}.pid`, "utf8")), "SIGKILL");
    } catch {
      // Gone already, as it should be.
    }
  }
}

/** Starts the launcher on a binary that traps SIGTERM, sends SIGTERM once it is ready, and checks the outcome. */
async function sigtermReachesTheBinary(nodeArgs) {
  const { dir, file } = fakeBinary(`echo $$ > "$0.pid"; trap 'echo got-term > "$0.log"; trap - TERM; kill -TERM $$' TERM; echo ready; while :; do sleep 0.05; done`);
  await killingBinary(file, async () => {
    const child = spawn(process.execPath, [...nodeArgs, launcher], { env: { ...process.env, TOOLONCE_BINARY: file }, stdio: ["ignore", "pipe", "inherit"] });
    await new Promise((resolve) => child.stdout.once("data", resolve));
    child.kill("SIGTERM");
    const [code, signal] = await new Promise((resolve) => child.once("exit", (c, s) => resolve([c, s])));
    child.stdout.destroy();
    assert.ok(fs.existsSync(`${file}.log`), `the binary in ${dir} saw no SIGTERM: the launcher died of it alone and left the binary running`);
    assert.equal(fs.readFileSync(`${file}.log`, "utf8").trim(), "got-term");
    assert.deepEqual([code, signal], [null, "SIGTERM"]);
  });
}

test("a SIGTERM to the launcher reaches the binary, and the launcher dies of it as the binary did", async () => {
  await sigtermReachesTheBinary([]);
});

test("a SIGTERM that arrives while the launcher is still starting the binary reaches the binary too", async () => {
  // The launcher is held busy right after its spawn returns (a loaded machine descheduling it
  // there): the signal must not find it without a handler, dying and orphaning the binary.
  await sigtermReachesTheBinary(["-r", path.join(__dirname, "fixtures", "slow-after-spawn.js")]);
});

test("a binary that cannot be run is a clear error, not a crash", () => {
  const out = spawnSync(process.execPath, [launcher, "--version"], {
    encoding: "utf8",
    env: { ...process.env, TOOLONCE_BINARY: path.join(tempDir(), "no-such-binary") },
  });
  assert.equal(out.status, 1);
  assert.match(out.stderr, /^toolonce: cannot run .*no-such-binary: spawn .*ENOENT/);
});

test("without the platform package, the launcher names the package and version to install", () => {
  const env = { ...process.env };
  delete env.TOOLONCE_BINARY;
  const out = spawnSync(process.execPath, [launcher, "--version"], { encoding: "utf8", env, cwd: tempDir() });
  const { version } = JSON.parse(fs.readFileSync(path.join(pkg, "package.json"), "utf8"));
  assert.equal(out.status, 1);
  assert.match(out.stderr, new RegExp(`the optional package @toolonce/cli-${process.platform}-${process.arch}\\S* is not installed`));
  assert.match(out.stderr, new RegExp(`npm install @toolonce/cli-\\S+@${version.replace(/\./g, "\\.")}`));
  assert.equal(out.stdout, "");
});
