// A handler that blocks its event loop (execSync, a CPU loop) for three times its lease does
// not lose its claim: the renewal worker renews it from a thread of its own, so a second caller
// with onExpired "rerun" waits and replays instead of running the tool beside it. On the stores
// of this process alone (memory, SQLite :memory:), nobody can run during the block, and a claim
// after it renews the late heartbeats first. A beat that comes late is reported.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { spawn } = require("node:child_process");
const { openStore, idempotent } = require("..");
const { storeUrls, uniqueRunId, tempDir, sleep } = require("./support.js");
const { blockingTool } = require("./fixtures/block-loop.js");

const LEASE_MS = 500;
const BLOCK_MS = 3 * LEASE_MS;
const BLOCK_LOOP = path.join(__dirname, "fixtures", "block-loop.js");

/** Starts block-loop.js; resolves once its handler runs, with `exited`: the child's exit (and its stdout). */
async function startBlocked(url, runId, countFile, runtime = process.execPath) {
  const child = spawn(runtime, [BLOCK_LOOP, url, runId, String(LEASE_MS), String(BLOCK_MS), countFile], { stdio: ["ignore", "pipe", "inherit"] });
  let stdout = "";
  child.stdout.setEncoding("utf8");
  const exited = new Promise((resolve) => child.once("exit", (code) => resolve({ code, stdout })));
  await new Promise((resolve, reject) => {
    child.stdout.on("data", (d) => {
      stdout += d;
      if (stdout.includes("running ")) resolve(undefined);
    });
    exited.then(({ code }) => reject(new Error(`the blocked caller exited (${code}) before its handler ran: ${stdout}`)));
  });
  return { exited };
}

const runsIn = (countFile) => fs.readFileSync(countFile, "utf8").split("\n").filter((l) => l !== "").length;

/** The blocked caller under `runtime`, a "rerun" caller here: the tool must run once. */
async function blockedAndRerun(name, url, runtime) {
  const countFile = path.join(tempDir(), `blocked-${name.replace(/\W/g, "-")}-${process.pid}-${Date.now()}.txt`);
  const runId = uniqueRunId("blocked");
  const { exited } = await startBlocked(url, runId, countFile, runtime);
  const store = await openStore(url);
  try {
    const tool = idempotent(blockingTool(countFile, 0), store, { lease: LEASE_MS, onExpired: "rerun", inFlight: { wait: BLOCK_MS + 5000 } });
    const answer = await tool.runDetailed({ order: 1 }, { runId });
    assert.equal(answer.outcome, "replayed", `the second caller ${answer.outcome}: ${answer.error ?? ""}`);
    const { code, stdout } = await exited;
    assert.equal(code, 0);
    assert.match(stdout, /^executed$/m);
    assert.equal(runsIn(countFile), 1, "the tool ran in both processes");
  } finally {
    await store.close();
  }
}

const { memory: _, ...shared } = storeUrls();
for (const [name, url] of Object.entries(shared)) {
  test(`on ${name}, a handler that blocks its loop for 3× its lease keeps its claim: a "rerun" caller in another process waits and replays, and the tool runs once`, () =>
    blockedAndRerun(name, url));
}

// The renewal worker (worker_threads, SharedArrayBuffer, Atomics) under the other runtimes the package supports.
const BUN = process.env.TOOLONCE_BUN;
for (const name of ["sqlite", "redis", "postgres"]) {
  test(`under Bun, on ${name}, a handler that blocks its loop for 3× its lease keeps its claim and the tool runs once`, { skip: BUN ? false : "no Bun: set TOOLONCE_BUN or run scripts/install-bun" }, () =>
    blockedAndRerun(`bun-${name}`, storeUrls()[name], BUN));
}
for (const name of ["redis", "postgres"]) {
  test(`under Node 20, on ${name}, a handler that blocks its loop for 3× its lease keeps its claim and the tool runs once`, () => {
    const node20 = process.env.TOOLONCE_NODE20;
    if (!node20 || !fs.existsSync(node20)) throw new Error(`no Node 20 at ${node20 ?? "(TOOLONCE_NODE20 unset)"}: run scripts/install-node20`);
    return blockedAndRerun(`node20-${name}`, storeUrls()[name], node20);
  });
}

/** Blocks this thread for `ms`, timers and all. */
const blockThread = (ms) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

for (const url of ["memory://", "sqlite://:memory:"]) {
  test(`on ${url}, after a handler blocked the loop for 3× its lease, a waiting "rerun" caller finds the lease renewed, not expired, and the tool runs once`, async () => {
    const store = await openStore(url);
    try {
      let runs = 0;
      const tool = idempotent(
        {
          kind: "write",
          name: "block_loop",
          async run() {
            runs++;
            if (runs === 1) {
              await sleep(20); // The second caller is waiting by now.
              blockThread(BLOCK_MS);
              await sleep(50); // Its poll timer, overdue, fires before this one.
            }
            return { runs };
          },
        },
        store,
        { lease: LEASE_MS, onExpired: "rerun", inFlight: { wait: BLOCK_MS + 5000 } },
      );
      const runId = uniqueRunId("blocked-local");
      const first = tool.runDetailed({ order: 1 }, { runId });
      await sleep(5);
      const second = await tool.runDetailed({ order: 1 }, { runId });
      assert.equal((await first).outcome, "executed");
      assert.equal(second.outcome, "replayed", `the second caller ${second.outcome}`);
      assert.equal(runs, 1, "the tool ran twice");
    } finally {
      await store.close();
    }
  });
}

test("a beat that comes more than a third of the lease late is reported (a SQLite write lock held by another process delays the worker's renewals)", async () => {
  const file = path.join(tempDir(), `late-beat-${process.pid}.db`);
  const store = await openStore(`sqlite://${file}`);
  const quiet = process.env.TOOLONCE_QUIET;
  delete process.env.TOOLONCE_QUIET;
  const warnings = [];
  const listen = (w) => w.name === "toolonce" && warnings.push(w.message);
  process.on("warning", listen);
  try {
    const tool = idempotent(
      {
        kind: "write",
        name: "late_beat",
        async run() {
          // Another process holds the write lock from now for 2× the lease.
          const holder = spawn(process.execPath, [
            "-e",
            `const db = new (require("node:sqlite").DatabaseSync)(${JSON.stringify(file)}); db.exec("BEGIN IMMEDIATE"); process.stdout.write("locked\\n"); Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ${2 * LEASE_MS}); db.exec("COMMIT");`,
          ]);
          await new Promise((resolve) => holder.stdout.once("data", resolve));
          await new Promise((resolve) => holder.once("exit", resolve));
          await sleep(LEASE_MS);
          return "ok";
        },
      },
      store,
      { lease: LEASE_MS },
    );
    const answer = await tool.runDetailed({}, { runId: uniqueRunId("late") });
    assert.equal(answer.outcome, "executed", String(answer.error));
    await sleep(50); // The worker's report crosses to this thread.
    assert.ok(
      warnings.some((w) => /heartbeat of late_beat \(idem:[0-9a-f]{32}\) renewed its lease \d+ ms after it was due \(lease 500 ms\)/.test(w)),
      `no late-beat warning among: ${JSON.stringify(warnings)}`,
    );
  } finally {
    process.off("warning", listen);
    if (quiet !== undefined) process.env.TOOLONCE_QUIET = quiet;
    await store.close();
  }
});
