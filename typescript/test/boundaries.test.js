// The boundaries the napi package got wrong, and the rules around them: a result the handler
// returned but no reader could read back is a permanent failure (the handler ran), never a
// release; a Worker terminated mid-call, or a process that simply ends, leaves an operation that
// turns unknown when its lease runs out, never one stuck in flight; a heartbeat keeps a long
// call's claim.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const path = require("node:path");
const { Worker } = require("node:worker_threads");
const { openStore, idempotent, PermanentError, OperationInFlight, OutcomeUnknown } = require("..");
const { storeUrls, uniqueRunId, runNode, sleep } = require("./support.js");

const urls = storeUrls();

test.describe("results that cannot be stored", () => {
  let store;
  test.before(async () => {
    store = await openStore(urls.redis);
  });
  test.after(async () => {
    await store.close();
  });

  const unreadable = {
    "a string with a lone surrogate (JSON.stringify writes it, serde_json refuses it)": () => ({ name: "\ud800x" }),
    "a result nested 150 levels deep (beyond every reader's nesting limit)": () => {
      let deep = { end: true };
      for (let i = 0; i < 150; i++) deep = { d: deep };
      return deep;
    },
    "a BigInt (not JSON at all)": () => ({ n: 10n }),
  };
  for (const [what, make] of Object.entries(unreadable)) {
    test(`${what} is recorded as a permanent failure and never run again`, async () => {
      let runs = 0;
      const tool = idempotent({ kind: "write", name: "send", run: async () => (runs++, make()) }, store);
      const ctx = { runId: uniqueRunId("unstorable") };
      const first = await tool.runDetailed({}, ctx);
      assert.equal(first.outcome, "executed");
      assert.ok(first.error instanceof PermanentError, String(first.error));
      assert.match(first.error.message, /ran, but its result cannot be stored/);
      const again = await tool.runDetailed({}, ctx);
      assert.equal(again.outcome, "replayed_failure");
      assert.equal(again.error.message, first.error.message);
      assert.equal(runs, 1);
    });
  }

  test("a result nested as deep as readers allow is stored and replayed as it was", async () => {
    let deep = 1;
    for (let i = 0; i < 120; i++) deep = [deep];
    const tool = idempotent({ kind: "write", name: "send", run: async () => deep }, store);
    const ctx = { runId: uniqueRunId("deep-ok") };
    assert.deepEqual(await tool.run({}, ctx), deep);
    assert.equal((await tool.runDetailed({}, ctx)).outcome, "replayed");
  });

  test("an error detail that cannot be stored is left out, and the failure is still stored with its message", async () => {
    const tool = idempotent(
      { kind: "write", name: "charge", run: async () => { throw new PermanentError("declined \ud800", { detail: { n: 1n } }); } },
      store,
    );
    const ctx = { runId: uniqueRunId("detail") };
    await assert.rejects(tool.run({}, ctx), PermanentError);
    const again = await tool.runDetailed({}, ctx);
    assert.equal(again.outcome, "replayed_failure");
    assert.equal(again.error.message, "declined \ufffd");
    assert.equal(again.error.detail, undefined);
  });
});

for (const name of ["sqlite", "redis"]) {
  const url = urls[name];
  test.describe(`calls that end without an outcome, on ${name}`, () => {
    let store;
    test.before(async () => {
      store = await openStore(url);
    });
    test.after(async () => {
      await store.close();
    });

    test("a Worker terminated mid-call leaves an operation that turns unknown when its lease ends", async () => {
      const runId = uniqueRunId("worker");
      const worker = new Worker(path.join(__dirname, "fixtures", "worker-hang.js"), { workerData: { url, runId, leaseMs: 1000 } });
      const key = await new Promise((resolve, reject) => {
        worker.once("message", resolve);
        worker.once("error", reject);
      });
      await worker.terminate();
      let runs = 0;
      const charge = idempotent({ kind: "write", name: "charge_card", run: async () => ++runs }, store);
      await assert.rejects(charge.run({ customerId: "cus_worker" }, { runId }), OperationInFlight);
      await sleep(1400);
      await assert.rejects(charge.run({ customerId: "cus_worker" }, { runId }), (e) => e instanceof OutcomeUnknown && e.key === key);
      assert.equal(runs, 0);
    });

    // On SQLite, which holds no socket open (a Redis or PostgreSQL connection keeps a process
    // alive, as any open client does).
    test("a process whose handler never settles exits by itself (the heartbeat holds nothing open), and its operation turns unknown", { skip: name !== "sqlite" && "a Redis connection holds the process open" }, async () => {
      const runId = uniqueRunId("unref");
      const out = await runNode(path.join(__dirname, "fixtures", "hang-unref.js"), [url, runId, "600"], { timeout: 20_000 });
      assert.equal(out.signal, null, "it had to be killed");
      const key = /^claimed (idem:[0-9a-f]{32})$/m.exec(out.stdout)?.[1];
      assert.ok(key, out.stdout);
      await sleep(900);
      const charge = idempotent({ kind: "write", name: "charge_card", run: async () => 1 }, store);
      await assert.rejects(charge.run({ customerId: "cus_unref" }, { runId }), OutcomeUnknown);
    });

    test("a call that runs for several leases keeps its claim: duplicates meanwhile are in flight, then replay", async () => {
      const runId = uniqueRunId("heartbeat");
      let runs = 0;
      const slow = idempotent(
        { kind: "write", name: "slow", run: async () => (await sleep(2400), ++runs) },
        store,
        { lease: 600 },
      );
      const first = slow.run({}, { runId });
      for (let i = 0; i < 5; i++) {
        await sleep(400);
        await assert.rejects(slow.run({}, { runId }), OperationInFlight);
      }
      assert.equal(await first, 1);
      assert.equal((await slow.runDetailed({}, { runId })).outcome, "replayed");
      assert.equal(runs, 1);
    });
  });
}
