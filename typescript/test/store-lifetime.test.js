// How long an entry and a store live, on every store: an entry is replayed until its retention
// passes and is gone after it (the same call then runs again); a closed store refuses every
// call with StoreUnavailable, running nothing and writing nothing.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { openStore, idempotent, idemKey, StoreUnavailable } = require("..");
const { backendOf } = require("../dist/open.js");
const { storeUrls, uniqueRunId, sleep, defined } = require("./support.js");

const RETENTION_MS = 300;

/** A write tool that counts its runs. @returns {import("../dist/index.js").WriteTool} */
function countingTool(runs, name = "send_email") {
  return { kind: "write", name, run: async (_args, ctx) => (runs.push(ctx.idem), { sent: runs.length }) };
}

for (const [name, url] of Object.entries(storeUrls())) {
  test.describe(`on ${name}`, () => {
    test(`an entry is replayed just before its retention of ${RETENTION_MS} ms passes, and gone after it: the same call runs again`, async () => {
      const store = await openStore(url);
      try {
        const runs = [];
        const send = idempotent(countingTool(runs), store, { retention: RETENTION_MS });
        const ctx = { runId: uniqueRunId("retention") };
        // The entry is kept from its completion, which comes after `started`: until at least
        // started + RETENTION_MS, and at most until the first call returned + RETENTION_MS.
        const started = Date.now();
        const first = await send.runDetailed({ to: "a@x" }, ctx);
        const settled = Date.now();
        assert.equal(first.outcome, "executed");
        await sleep(started + RETENTION_MS - 100 - Date.now());
        const before = await send.runDetailed({ to: "a@x" }, ctx);
        assert.equal(before.outcome, "replayed", `${Date.now() - started} ms after the first call started`);
        assert.deepEqual(before.result, { sent: 1 });
        await sleep(settled + RETENTION_MS + 200 - Date.now());
        assert.equal(await backendOf(store).get(defined(first.key)), undefined, "the entry is still there after its retention");
        const after = await send.runDetailed({ to: "a@x" }, ctx);
        assert.equal(after.outcome, "executed");
        assert.deepEqual(after.result, { sent: 2 });
        assert.deepEqual(runs, [first.key, first.key]);
      } finally {
        await store.close();
      }
    });

    test("a closed store refuses calls with StoreUnavailable, without running the handler or writing anything", async () => {
      const store = await openStore(url);
      const runs = [];
      const send = idempotent(countingTool(runs, "closed_store"), store);
      await store.close();
      const runId = uniqueRunId("closed");
      const answer = await send.runDetailed({ n: 1 }, { runId });
      assert.equal(answer.outcome, "store_unavailable");
      assert.ok(answer.error instanceof StoreUnavailable, String(answer.error));
      assert.match(answer.error.message, /the store is closed/);
      await assert.rejects(send.run({ n: 1 }, { runId }), StoreUnavailable);
      assert.deepEqual(runs, []);
      // Nothing was claimed: another store on the same URL finds no entry. (A memory store
      // is its own process's map, gone with it.)
      if (name !== "memory") {
        const other = await openStore(url);
        try {
          assert.equal(await backendOf(other).get(idemKey(runId, "closed_store", { n: 1 })), undefined);
        } finally {
          await other.close();
        }
      }
    });
  });
}
