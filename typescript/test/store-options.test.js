// The options given to `openStore(url, options)` are the defaults of every tool wrapped on that
// store, and a tool's own options override them: checked by what calls do (a duplicate waits,
// an entry expires, a crashed claim expires and is rerun), on memory and on Redis.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { openStore, idempotent, OperationInFlight } = require("..");
const { backendOf } = require("../dist/open.js");
const { storeUrls, uniqueRunId, sleep, crashAfterClaim, CRASH_ARGS, defined } = require("./support.js");

/**
 * A write tool that counts its runs; each run takes `ms`.
 * @returns {import("../dist/index.js").WriteTool}
 */
function slowTool(runs, ms = 0) {
  return {
    kind: "write",
    name: "book",
    async run(_args, ctx) {
      runs.push({ key: ctx.idem, mayHaveRunBefore: ctx.mayHaveRunBefore });
      if (ms) await sleep(ms);
      return { booking: runs.length };
    },
  };
}

const urls = storeUrls();
for (const name of ["memory", "redis"]) {
  const url = urls[name];
  test.describe(`the store's options are the defaults of its tools, on ${name}`, () => {
    test("a store's inFlight is its tools' default: a duplicate waits for the running call, unless the tool's own option says reject", async () => {
      const store = await openStore(url, { inFlight: { wait: 5000 } });
      try {
        const runs = [];
        const waiting = idempotent(slowTool(runs, 150), store);
        const ctx = { runId: uniqueRunId("defaults-wait") };
        const both = await Promise.all([waiting.runDetailed({ n: 1 }, ctx), waiting.runDetailed({ n: 1 }, ctx)]);
        assert.deepEqual(both.map((a) => a.outcome).sort(), ["executed", "replayed"]);
        assert.deepEqual(both[0].result, both[1].result);
        assert.equal(runs.length, 1);

        const rejecting = idempotent(slowTool(runs, 150), store, { inFlight: "reject" });
        const ctx2 = { runId: uniqueRunId("defaults-wait") };
        const settled = await Promise.allSettled([rejecting.run({ n: 1 }, ctx2), rejecting.run({ n: 1 }, ctx2)]);
        const refused = settled.filter((s) => s.status === "rejected");
        assert.equal(refused.length, 1, JSON.stringify(settled));
        assert.ok(refused[0].reason instanceof OperationInFlight, String(refused[0].reason));
        assert.equal(runs.length, 2);
      } finally {
        await store.close();
      }
    });

    test("a store's retention is its tools' default: the entry is replayed before it passes and gone after, and a tool's own retention overrides it", async () => {
      const RETENTION_MS = 400;
      const store = await openStore(url, { retention: RETENTION_MS });
      try {
        const runs = [];
        const tool = idempotent(slowTool(runs), store);
        const ctx = { runId: uniqueRunId("defaults-retention") };
        const started = Date.now();
        const first = await tool.runDetailed({ n: 1 }, ctx);
        assert.equal(first.outcome, "executed");
        await sleep(RETENTION_MS / 2 - (Date.now() - started));
        assert.equal((await tool.runDetailed({ n: 1 }, ctx)).outcome, "replayed", `${Date.now() - started} ms after the first call`);
        await sleep(started + RETENTION_MS + 300 - Date.now());
        assert.equal(await backendOf(store).get(defined(first.key)), undefined);
        assert.equal((await tool.runDetailed({ n: 1 }, ctx)).outcome, "executed");
        assert.equal(runs.length, 2);

        // A tool's own retention wins over its store's: this entry outlives the store's 400 ms.
        const keeping = idempotent(slowTool(runs), store, { retention: 60_000 });
        const ctx2 = { runId: uniqueRunId("defaults-retention") };
        const kept = await keeping.runDetailed({ n: 1 }, ctx2);
        assert.equal(kept.outcome, "executed");
        await sleep(RETENTION_MS + 300);
        assert.equal((await keeping.runDetailed({ n: 1 }, ctx2)).outcome, "replayed");
        assert.equal(runs.length, 3);
      } finally {
        await store.close();
      }
    });
  });
}

test("on redis, a store's lease and onExpired are its tools' defaults: a crashed caller's claim expires after its store's lease, and a duplicate on a rerun store runs it again", async () => {
  const LEASE_MS = 600;
  const url = urls.redis;
  const runId = uniqueRunId("defaults-lease");
  // The crashed caller's lease is its store's default (60 s without it: still in flight below).
  const key = await crashAfterClaim(url, runId, LEASE_MS, "store");
  const store = await openStore(url, { onExpired: "rerun" });
  try {
    const runs = [];
    const charge = idempotent({ ...slowTool(runs), name: "charge_card" }, store);
    await assert.rejects(charge.run(CRASH_ARGS, { runId }), OperationInFlight);
    await sleep(LEASE_MS + 300);
    const answer = await charge.runDetailed(CRASH_ARGS, { runId });
    assert.equal(answer.outcome, "executed", String(answer.error));
    assert.deepEqual(runs, [{ key, mayHaveRunBefore: true }]);
  } finally {
    await store.close();
  }
});
