// What the tests share: the servers' URLs (started by run.js), unique run ids, the compiled
// reference worker, a Redis server of a test's own (to kill), and child processes.

"use strict";

const { spawn, spawnSync } = require("node:child_process");
const fs = require("node:fs");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");

const repo = path.resolve(__dirname, "..", "..", "..");

function env(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run the tests with \`npm test\`, which starts the servers`);
  return value;
}

let tmp;
/** A directory of this test process, removed at exit. */
function tempDir() {
  if (tmp === undefined) {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), "toolonce-node-"));
    process.on("exit", () => fs.rmSync(tmp, { recursive: true, force: true }));
  }
  return tmp;
}

let sqliteN = 0;
/** Every store, by name, as a URL (a fresh SQLite file each call). */
function storeUrls() {
  return {
    memory: "memory://",
    sqlite: `sqlite://${path.join(tempDir(), `store-${++sqliteN}.db`)}`,
    redis: env("TOOLONCE_TEST_REDIS"),
    "redis cluster": env("TOOLONCE_TEST_REDIS_CLUSTER"),
    postgres: env("TOOLONCE_TEST_POSTGRES"),
  };
}

let runN = 0;
/** A run id no other test or process uses (the stores are shared by the test files). */
function uniqueRunId(label = "run") {
  return `${label}-${process.pid}-${Date.now()}-${++runN}`;
}

const WORKER_SOURCE = path.join(repo, "crates", "toolonce", "tests", "interop", "reference_worker.ts");
const WORKER_DIR = path.join(__dirname, "..", "build", "interop");

/**
 * Compiles the reference design's worker (the one the Rust interop test runs) with tsc, from a
 * copy inside this package so that `ioredis` resolves from its node_modules.
 */
function compileReferenceWorker() {
  fs.mkdirSync(WORKER_DIR, { recursive: true });
  const source = path.join(WORKER_DIR, "reference_worker.ts");
  fs.copyFileSync(WORKER_SOURCE, source);
  const tsc = require.resolve("typescript/bin/tsc");
  const out = spawnSync(
    process.execPath,
    [
      tsc,
      "--strict",
      "--target",
      "es2022",
      "--module",
      "commonjs",
      "--esModuleInterop",
      "--types",
      "node",
      "reference_worker.ts",
    ],
    { cwd: WORKER_DIR, encoding: "utf8" },
  );
  if (out.status !== 0) throw new Error(`tsc refused reference_worker.ts:\n${out.stdout}${out.stderr}`);
  return path.join(WORKER_DIR, "reference_worker.js");
}

function referenceWorker() {
  const script = path.join(WORKER_DIR, "reference_worker.js");
  if (!fs.existsSync(script)) throw new Error(`${script} is missing: run the tests with \`npm test\``);
  return script;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** A redis-server of the test's own on a free port, to kill; resolves once it answers. */
async function startRedis() {
  const port = await freePort();
  const dir = fs.mkdtempSync(path.join(tempDir(), "redis-"));
  const child = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir], {
    stdio: "ignore",
  });
  child.once("error", (e) => {
    throw new Error(`cannot start redis-server (run scripts/install-test-deps): ${e.message}`);
  });
  process.on("exit", () => child.kill("SIGKILL"));
  const deadline = Date.now() + 10_000;
  for (;;) {
    const up = await new Promise((resolve) => {
      const socket = net.connect(port, "127.0.0.1", () => {
        socket.write("PING\r\n");
      });
      socket.once("data", (d) => {
        socket.destroy();
        resolve(d.toString().startsWith("+PONG"));
      });
      socket.once("error", () => resolve(false));
    });
    if (up) break;
    if (Date.now() > deadline) throw new Error(`redis-server on ${port} did not answer within 10 s`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return { url: `redis://127.0.0.1:${port}/`, port, child };
}

/** Runs `node script ...args`; resolves with its exit code, signal and stdout. */
function runNode(script, args, options = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, ...args], { stdio: ["ignore", "pipe", "inherit"], ...options });
    let stdout = "";
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (d) => (stdout += d));
    child.once("error", reject);
    child.once("exit", (code, signal) => resolve({ code, signal, stdout }));
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

module.exports = {
  repo,
  storeUrls,
  uniqueRunId,
  tempDir,
  compileReferenceWorker,
  referenceWorker,
  startRedis,
  runNode,
  sleep,
};
