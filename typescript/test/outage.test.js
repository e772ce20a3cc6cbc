// A store outage: the Redis server is killed after the store was opened. A write call rejects
// with StoreUnavailable and never runs the handler (fail closed); once Redis is back, calls run.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { spawn } = require("node:child_process");
const { openStore, idempotent, StoreUnavailable } = require("..");
const { startRedis, uniqueRunId } = require("./support.js");

test("a store outage rejects with StoreUnavailable without running the handler", async () => {
  const redis = await startRedis();
  const store = await openStore(redis.url);
  let runs = 0;
  const tool = idempotent({ kind: "write", name: "charge_card", run: async () => ++runs }, store);
  assert.equal(await tool.run({ n: 1 }, { runId: uniqueRunId() }), 1);

  const exited = new Promise((resolve) => redis.child.once("exit", resolve));
  redis.child.kill("SIGKILL");
  await exited;
  const answer = await tool.runDetailed({ n: 2 }, { runId: uniqueRunId() });
  assert.equal(answer.outcome, "store_unavailable");
  assert.ok(answer.error instanceof StoreUnavailable, String(answer.error));
  assert.match(answer.error.message, /store/i);
  await assert.rejects(tool.run({ n: 3 }, { runId: uniqueRunId() }), StoreUnavailable);
  assert.equal(runs, 1);

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
    assert.equal(answer2.outcome, "executed");
    assert.equal(runs, 2);
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
