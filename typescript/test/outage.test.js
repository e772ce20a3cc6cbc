// A store outage: the Redis server is killed after the store was opened. A write call rejects
// with StoreUnavailable and never runs the handler (fail closed); once Redis is back, calls run.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { spawn } = require("node:child_process");
const { openStore, idempotent, StoreUnavailable } = require("..");
const { startRedis, uniqueRunId, sleep, tempDir, defined } = require("./support.js");
const servers = require("./servers.js");
const { OutcomeUnknown } = require("..");

test("a store outage rejects with StoreUnavailable without running the handler", async () => {
  const redis = await startRedis();
  const store = await openStore(redis.url);
  let runs = 0;
  const tool = idempotent({ kind: "write", name: "charge_card", run: async () => ++runs }, store);
  assert.equal(await tool.run({ n: 1 }, { runId: uniqueRunId() }), 1);
  // Recorded: no notice.
  const recorded = await tool.runDetailed({ n: 0 }, { runId: uniqueRunId() });
  assert.deepEqual([recorded.outcome, recorded.result, recorded.notice], ["executed", 2, undefined]);

  const exited = new Promise((resolve) => redis.child.once("exit", resolve));
  redis.child.kill("SIGKILL");
  await exited;
  const answer = defined(await tool.runDetailed({ n: 2 }, { runId: uniqueRunId() }));
  assert.equal(answer.outcome, "store_unavailable");
  assert.ok(answer.error instanceof StoreUnavailable, String(answer.error));
  assert.match(answer.error.message, /store/i);
  await assert.rejects(tool.run({ n: 3 }, { runId: uniqueRunId() }), StoreUnavailable);
  assert.equal(runs, 2);

  // Back on the same port: the store reconnects and calls run again.
  const again = spawn("redis-server", ["--port", String(redis.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], {
    stdio: "ignore",
  });
  try {
    let answer2;
    for (let i = 0; i < 100; i++) {
      answer2 = await tool.runDetailed({ n: 4 }, { runId: uniqueRunId() });
      if (answer2.outcome !== "store_unavailable") break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(defined(answer2).outcome, "executed");
    assert.equal(runs, 3);
  } finally {
    again.kill("SIGKILL");
    await store.close();
  }
});

test("a store that cannot be reached at open rejects with StoreUnavailable", async () => {
  const redis = await startRedis();
  redis.child.kill("SIGKILL");
  await new Promise((resolve) => redis.child.once("exit", resolve));
  await assert.rejects(openStore(redis.url), StoreUnavailable);
});

test("an outcome that cannot be recorded is never released: the operation turns unknown, and a duplicate holds it", async () => {
  // A server that persists every write, so that the running entry outlives its restart.
  const aof = ["--appendonly", "yes", "--appendfsync", "always"];
  const redis = await servers.startRedis(tempDir(), aof);
  const store = await openStore(redis.url);
  let runs = 0;
  const tool = idempotent(
    {
      kind: "write",
      name: "charge_card",
      async run() {
        runs++;
        // The side effect happens, then the store goes away before the outcome is recorded.
        const exited = new Promise((resolve) => redis.child.once("exit", resolve));
        redis.child.kill("SIGKILL");
        await exited;
        return { charged: true };
      },
    },
    store,
    { lease: 1000 },
  );
  const runId = uniqueRunId("unrecorded");
  const first = await tool.runDetailed({ n: 1 }, { runId });
  assert.deepEqual(first.result, { charged: true });
  // The caller hears that it was not recorded.
  assert.match(first.notice ?? "", /could not be recorded.*never gets this outcome/);
  const again = spawn("redis-server", ["--port", String(redis.port), "--bind", "127.0.0.1", "--save", "", "--dir", redis.dir, ...aof], { stdio: "ignore" });
  try {
    let answer;
    for (let i = 0; i < 100; i++) {
      answer = await tool.runDetailed({ n: 1 }, { runId });
      if (answer.outcome !== "store_unavailable") break;
      await sleep(100);
    }
    // Back: the entry is still running (never released), then unknown once its lease is over.
    assert.equal(defined(answer).outcome, "in_flight");
    await sleep(1300);
    await assert.rejects(tool.run({ n: 1 }, { runId }), OutcomeUnknown);
    assert.equal(runs, 1);
  } finally {
    again.kill("SIGKILL");
    await store.close();
  }
});
