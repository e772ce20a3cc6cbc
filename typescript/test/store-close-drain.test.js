// store.close() drains, on every store: it refuses calls from the moment it is called, waits for
// the calls running so that their outcomes are recorded (a duplicate afterwards replays), and
// stops waiting at its drain bound, naming the calls it abandoned, whose entries are left to
// turn unknown (never released).

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { openStore, idempotent, StoreUnavailable } = require("..");
const { backendOf } = require("../dist/open.js");
const { storeUrls, uniqueRunId, sleep } = require("./support.js");

/** A tool whose handler runs for `ms`; `started` resolves once a run began. */
function slowTool(ms, runs) {
  let begun;
  const started = new Promise((resolve) => (begun = resolve));
  /** @type {import("../dist/index.js").WriteTool} */
  const tool = {
    kind: "write",
    name: "slow_send",
    async run(args) {
      runs.push(args);
      begun();
      await sleep(ms);
      return { sent: args.n };
    },
  };
  return { tool, started };
}

for (const [name, url] of Object.entries(storeUrls())) {
  test.describe(`on ${name}`, () => {
    test("close() while a call runs waits for it: its outcome is recorded, a call started meanwhile is refused, and a duplicate afterwards replays", async () => {
      const store = await openStore(url);
      const runs = [];
      const { tool, started } = slowTool(300, runs);
      const send = idempotent(tool, store);
      const runId = uniqueRunId("drain");
      const first = send.runDetailed({ n: 1 }, { runId });
      await started;
      const closing = store.close();
      const refused = await send.runDetailed({ n: 2 }, { runId });
      assert.equal(refused.outcome, "store_unavailable");
      assert.ok(refused.error instanceof StoreUnavailable);
      assert.match(refused.error.message, /the store is closed \(its close\(\) began before this call started\)/);
      const report = await closing;
      assert.deepEqual(report, { abandoned: [] });
      const answer = await first;
      assert.equal(answer.outcome, "executed");
      assert.equal(answer.notice, undefined, answer.notice);
      assert.deepEqual(runs, [{ n: 1 }]);
      if (name === "memory") return; // Its entries are gone with the store.
      const again = await openStore(url);
      try {
        const replay = await idempotent(slowTool(0, runs).tool, again).runDetailed({ n: 1 }, { runId });
        assert.equal(replay.outcome, "replayed");
        assert.deepEqual(replay.result, { sent: 1 });
        assert.deepEqual(runs, [{ n: 1 }]);
      } finally {
        await again.close();
      }
    });

    test("close({ drain }) stops waiting at its bound, names the calls it abandoned, and leaves their entries to turn unknown", async () => {
      const store = await openStore(url);
      const runs = [];
      const { tool, started } = slowTool(1500, runs);
      const send = idempotent(tool, store, { lease: 1000 });
      const runId = uniqueRunId("drain-bound");
      const first = send.runDetailed({ n: 1 }, { runId });
      await started;
      const began = Date.now();
      const report = await store.close({ drain: 200 });
      const waited = Date.now() - began;
      assert.ok(waited >= 190 && waited < 1200, `close() waited ${waited} ms`);
      assert.equal(report.abandoned.length, 1);
      assert.equal(report.abandoned[0].tool, "slow_send");
      assert.match(report.abandoned[0].key, /^idem:[0-9a-f]{32}$/);
      const answer = await first;
      assert.equal(answer.outcome, "executed");
      assert.match(answer.notice ?? "", /could not be recorded/);
      if (name === "memory") return;
      const other = await openStore(url);
      try {
        const entry = await backendOf(other).get(report.abandoned[0].key);
        assert.ok(entry?.state === "running" || entry?.state === "unknown", JSON.stringify(entry));
      } finally {
        await other.close();
      }
    });
  });
}

test("close() with a drain that is not a number of milliseconds is refused, naming it, and the store stays open", async () => {
  const store = await openStore("memory://");
  await assert.rejects(store.close({ drain: -1 }), { name: "TypeError", message: /drain must be a number of milliseconds/ });
  // @ts-expect-error: a duration as text, not milliseconds
  await assert.rejects(store.close({ drain: "5s" }), TypeError);
  const runs = [];
  const answer = await idempotent(slowTool(0, runs).tool, store).runDetailed({ n: 1 }, { runId: uniqueRunId("still-open") });
  assert.equal(answer.outcome, "executed");
  assert.deepEqual(await store.close({ drain: 0 }), { abandoned: [] });
});
