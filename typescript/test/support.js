// What the tests share: the servers' URLs (started by run.js), unique run ids, the compiled
// reference worker, a Redis server of a test's own (to kill), and child processes.

"use strict";

const { spawn, spawnSync } = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");
const servers = require("./servers.js");

const pkg = path.resolve(__dirname, "..");
const repo = path.resolve(pkg, "..");

function env(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run the tests with \`npm test\`, which starts the servers`);
  return value;
}

let tmp;
/** A directory of this test process, removed at exit. */
function tempDir() {
  tmp ??= servers.tempDir("toolonce-ts-");
  return tmp;
}

let sqliteN = 0;
/** Every store, by name, as a URL (a fresh SQLite file each call). */
function storeUrls() {
  return {
    memory: "memory://",
    sqlite: `sqlite://${path.join(tempDir(), `store-${++sqliteN}.db`)}`,
    redis: env("TOOLONCE_TEST_REDIS"),
    valkey: env("TOOLONCE_TEST_VALKEY"),
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
const WORKER_DIR = path.join(pkg, "build", "interop");

/**
 * Compiles the reference design's worker (the one the Rust interop test runs) with tsc, from a
 * copy inside this package so that `ioredis` resolves from its node_modules.
 */
function compileReferenceWorker() {
  fs.mkdirSync(WORKER_DIR, { recursive: true });
  fs.copyFileSync(WORKER_SOURCE, path.join(WORKER_DIR, "reference_worker.ts"));
  const tsc = require.resolve("typescript/bin/tsc");
  const flags = ["--strict", "--target", "es2022", "--module", "commonjs", "--esModuleInterop", "--types", "node", "--skipLibCheck"];
  const out = spawnSync(process.execPath, [tsc, ...flags, "reference_worker.ts"], { cwd: WORKER_DIR, encoding: "utf8" });
  if (out.status !== 0) throw new Error(`tsc refused reference_worker.ts:\n${out.stdout}${out.stderr}`);
  return path.join(WORKER_DIR, "reference_worker.js");
}

function referenceWorker() {
  const script = path.join(WORKER_DIR, "reference_worker.js");
  if (!fs.existsSync(script)) throw new Error(`${script} is missing: run the tests with \`npm test\``);
  return script;
}

/** A redis-server of the test's own on a free port (or `port`), to kill; resolves once it answers. */
function startRedis(extra = [], options = {}) {
  return servers.startRedis(tempDir(), extra, options);
}

/** A valkey-server 8.1 of the test's own, as `startRedis`. */
function startValkey(extra = [], options = {}) {
  return servers.startValkey(tempDir(), extra, options);
}

/** Runs `node script ...args`; resolves with its exit code, signal and stdout. */
function runNode(script, args, options = {}) {
  return runProgram(process.execPath, [script, ...args], options);
}

/** Runs `program ...args`; resolves with its exit code, signal, stdout and stderr. */
function runProgram(program, args, options = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(program, args, { stdio: ["ignore", "pipe", "pipe"], ...options });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (d) => (stderr += d));
    child.once("error", reject);
    child.once("exit", (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
}

const CLAIM_AND_HANG = path.join(__dirname, "fixtures", "claim-and-hang.js");
/** The arguments claim-and-hang.js calls `charge_card` with. */
const CRASH_ARGS = { customerId: "cus_crash", amountCents: 1200 };

/**
 * Starts claim-and-hang.js on `url`, waits until its handler runs (after the claim), SIGKILLs
 * it between the claim and the complete; resolves with the operation's key. `leaseOn`: "store"
 * gives the lease to openStore as a default rather than to the tool.
 */
async function crashAfterClaim(url, runId, leaseMs, leaseOn = "tool") {
  const child = spawn(process.execPath, [CLAIM_AND_HANG, url, runId, String(leaseMs), leaseOn], { stdio: ["ignore", "pipe", "inherit"] });
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  const line = await new Promise((resolve, reject) => {
    require("node:readline").createInterface({ input: child.stdout }).once("line", resolve);
    exited.then(({ code }) => reject(new Error(`the child exited (${code}) before claiming`)));
  });
  const key = /^claimed (idem:[0-9a-f]{32})$/.exec(line)?.[1];
  if (!key) throw new Error(`unexpected line from the child: ${line}`);
  child.kill("SIGKILL");
  const { signal } = await exited;
  if (signal !== "SIGKILL") throw new Error(`the child ended by ${signal}, not SIGKILL`);
  return key;
}

/**
 * The error of a failed `runDetailed` answer. The declarations type it `unknown`, since a handler
 * may throw anything; this fails the test unless it is an Error, and gives its fields (detail,
 * note, cause) untyped, as the test reads them.
 * @param {{ error?: unknown }} answer
 * @returns {{ message: string, name: string, [field: string]: any }}
 */
function errorOf(answer) {
  if (!(answer.error instanceof Error)) throw new Error(`the answer holds no Error: ${require("node:util").inspect(answer)}`);
  return answer.error;
}

/**
 * `value`, which the test knows is there (an entry it wrote, a regular expression's match), though
 * its type allows none: fails the test, naming `what`, when it is missing.
 * @template T
 * @param {T | undefined | null} value
 * @param {string} [what]
 * @returns {T}
 */
function defined(value, what = "the value") {
  if (value === undefined || value === null) throw new Error(`${what} is missing (${value})`);
  return value;
}

module.exports = {
  errorOf,
  defined,
  crashAfterClaim,
  CRASH_ARGS,
  pkg,
  repo,
  storeUrls,
  uniqueRunId,
  tempDir,
  compileReferenceWorker,
  referenceWorker,
  startRedis,
  startValkey,
  runNode,
  runProgram,
  sleep: servers.sleep,
};
