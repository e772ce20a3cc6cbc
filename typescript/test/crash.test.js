// A real crash: a child process claims an operation and is SIGKILLed in its handler, between
// the claim and the complete. A duplicate is in flight while the lease lives; after it expires
// the operation is unknown, and the duplicate does what onExpired says: hold (OutcomeUnknown,
// nothing runs), rerun (runs again with the same key), or verify (asks the probe).

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { openStore, idempotent, OutcomeUnknown, OperationInFlight } = require("..");
const { storeUrls, uniqueRunId, sleep, crashAfterClaim: crashAfter, CRASH_ARGS, errorOf } = require("./support.js");

const LEASE_MS = 600;
const ARGS = CRASH_ARGS;

/** The child claims and is SIGKILLed in its handler; resolves with the key. */
const crashAfterClaim = (url, runId) => crashAfter(url, runId, LEASE_MS);

/** @returns {import("../dist/index.js").WriteTool} */
function chargeTool(runs) {
  return {
    kind: "write",
    name: "charge_card",
    async run(_args, ctx) {
      runs.push({ key: ctx.idem, mayHaveRunBefore: ctx.mayHaveRunBefore });
      return { charged: true };
    },
  };
}

const urls = storeUrls();
for (const name of ["sqlite", "redis", "valkey", "redis cluster", "postgres"]) {
  const url = urls[name];
  test.describe(`on ${name}`, () => {
    let store;
    test.before(async () => {
      store = await openStore(url);
    });
    test.after(async () => {
      await store.close();
    });

    test("after a crash between claim and complete, a duplicate under hold gets OutcomeUnknown and runs nothing", async () => {
      const runId = uniqueRunId("crash-hold");
      const key = await crashAfterClaim(url, runId);
      const runs = [];
      const charge = idempotent(chargeTool(runs), store, { onExpired: "hold" });
      // The dead caller's lease still runs: in flight.
      await assert.rejects(charge.run(ARGS, { runId }), OperationInFlight);
      await sleep(LEASE_MS + 300);
      await assert.rejects(charge.run(ARGS, { runId }), (e) => {
        assert.ok(e instanceof OutcomeUnknown, String(e));
        assert.equal(e.key, key);
        assert.equal(e.outcome, "unknown");
        return true;
      });
      await assert.rejects(charge.run(ARGS, { runId }), OutcomeUnknown);
      assert.deepEqual(runs, []);
    });

    test("after a crash between claim and complete, a duplicate under rerun runs again with the same key, once", async () => {
      const runId = uniqueRunId("crash-rerun");
      const key = await crashAfterClaim(url, runId);
      const runs = [];
      const charge = idempotent(chargeTool(runs), store, { onExpired: "rerun" });
      await sleep(LEASE_MS + 300);
      assert.deepEqual(await charge.run(ARGS, { runId }), { charged: true });
      assert.deepEqual(runs, [{ key, mayHaveRunBefore: true }]);
      assert.equal((await charge.runDetailed(ARGS, { runId })).outcome, "replayed");
      assert.equal(runs.length, 1);
    });
  });
}

test.describe("verify on sqlite", () => {
  let store;
  const url = storeUrls().sqlite;
  test.before(async () => {
    store = await openStore(url);
  });
  test.after(async () => {
    await store.close();
  });

  test("a probe that finds the crashed attempt done records its result and runs nothing", async () => {
    const runId = uniqueRunId("crash-verify-done");
    const key = await crashAfterClaim(url, runId);
    const runs = [];
    const probed = [];
    const charge = idempotent(chargeTool(runs), store, {
      onExpired: {
        verify: async (args, ctx) => {
          probed.push({ args, key: ctx.idem });
          return { status: "done", result: { charged: true, found: ctx.idem } };
        },
      },
    });
    await sleep(LEASE_MS + 300);
    assert.deepEqual(await charge.run(ARGS, { runId }), { charged: true, found: key });
    assert.deepEqual(probed, [{ args: ARGS, key }]);
    assert.deepEqual(await charge.run(ARGS, { runId }), { charged: true, found: key });
    assert.deepEqual(runs, []);
  });

  test("a probe that finds a result too deep to store answers it, and records the failure that says so", async () => {
    const runId = uniqueRunId("crash-verify-deep");
    await crashAfterClaim(url, runId);
    /** @type {unknown} */
    let deep = { found: true };
    for (let i = 0; i < 150; i++) deep = [deep];
    const runs = [];
    const charge = idempotent(chargeTool(runs), store, { onExpired: { verify: async () => ({ status: "done", result: deep }) } });
    await sleep(LEASE_MS + 300);
    assert.deepEqual(await charge.run(ARGS, { runId }), deep);
    const again = await charge.runDetailed(ARGS, { runId });
    assert.equal(again.outcome, "replayed_failure");
    assert.match(errorOf(again).message, /cannot be stored: it is nested 151 levels deep/);
    assert.deepEqual(runs, []);
  });

  test("a probe that finds nothing lets the duplicate run; one that cannot tell holds", async () => {
    const runs = [];
    const notDone = idempotent(chargeTool(runs), store, { onExpired: { verify: async () => ({ status: "not_done" }) } });
    const runA = uniqueRunId("crash-verify-not-done");
    const keyA = await crashAfterClaim(url, runA);
    const cannotTell = idempotent(chargeTool(runs), store, {
      onExpired: {
        verify: async () => {
          throw new Error("provider down");
        },
      },
    });
    const runB = uniqueRunId("crash-verify-cannot-tell");
    await crashAfterClaim(url, runB);
    await sleep(LEASE_MS + 300);
    assert.deepEqual(await notDone.run(ARGS, { runId: runA }), { charged: true });
    assert.deepEqual(runs, [{ key: keyA, mayHaveRunBefore: true }]);
    await assert.rejects(cannotTell.run(ARGS, { runId: runB }), OutcomeUnknown);
    assert.equal(runs.length, 1);
  });
});
