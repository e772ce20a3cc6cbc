// `npm test`: starts real Redis, Redis Cluster and PostgreSQL servers once (the repository's
// Rust test support, crates/toolonce-testsupport, through its `toolonce-test-servers` program),
// compiles the reference design's TypeScript worker, then runs every test file with node:test
// with the servers' URLs in the environment. A missing server program fails loudly there.

"use strict";

const { spawn, spawnSync } = require("node:child_process");
const path = require("node:path");
const fs = require("node:fs");
const readline = require("node:readline");
const { compileReferenceWorker } = require("./support.js");

const repo = path.resolve(__dirname, "..", "..", "..");

function startServers() {
  const cargo = process.env.CARGO ?? "cargo";
  const build = spawnSync(
    cargo,
    ["build", "--quiet", "-p", "toolonce-testsupport", "--bin", "toolonce-test-servers"],
    { cwd: repo, stdio: "inherit" },
  );
  if (build.status !== 0) throw new Error("cannot build toolonce-test-servers (is cargo on PATH?)");
  const target = path.resolve(repo, process.env.CARGO_TARGET_DIR ?? "target");
  const exe = path.join(target, "debug", "toolonce-test-servers");
  // stdin stays a pipe we hold: when this process ends, the servers end.
  const child = spawn(exe, [], { cwd: repo, stdio: ["pipe", "pipe", "inherit"] });
  return new Promise((resolve, reject) => {
    const lines = readline.createInterface({ input: child.stdout });
    lines.once("line", (line) => resolve({ child, urls: JSON.parse(line) }));
    child.once("exit", (code) => reject(new Error(`toolonce-test-servers exited (${code}) before printing URLs`)));
  });
}

async function main() {
  const { child, urls } = await startServers();
  compileReferenceWorker();
  const files = process.argv.slice(2).length
    ? process.argv.slice(2)
    : fs
        .readdirSync(__dirname)
        .filter((f) => f.endsWith(".test.js"))
        .sort()
        .map((f) => path.join(__dirname, f));
  const env = {
    ...process.env,
    TOOLONCE_TEST_REDIS: urls.redis,
    TOOLONCE_TEST_REDIS_CLUSTER: urls.redisCluster,
    TOOLONCE_TEST_POSTGRES: urls.postgres,
  };
  // One file at a time: the machine's cores are shared, and the crash tests time leases.
  const tests = spawn(process.execPath, ["--test", "--test-concurrency=1", ...files], {
    env,
    stdio: "inherit",
  });
  const code = await new Promise((resolve) => tests.once("exit", (c, signal) => resolve(c ?? (signal ? 1 : 0))));
  child.stdin.end();
  await new Promise((resolve) => child.once("exit", resolve));
  process.exit(code);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
