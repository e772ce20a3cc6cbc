// Interop on one Redis (and on Valkey 8.1, where our settles are native SETs) with a worker of the reference design in plain TypeScript
// (crates/toolonce/tests/interop/reference_worker.ts, the one the Rust interop test runs):
// for flat arguments the keys are the same, its entries are replayed by us and ours by it.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { openStore, idempotent, idemKey } = require("..");
const { storeUrls, uniqueRunId, referenceWorker, runNode } = require("./support.js");

const urls = storeUrls();

/** One call through the reference worker on `url`: {key, outcome, ran, result?}. */
async function referenceCall(url, runId, tool, args, result) {
  const out = await runNode(referenceWorker(), [url, runId, tool, JSON.stringify(args), JSON.stringify(result)]);
  assert.equal(out.code, 0, "the reference worker failed");
  return JSON.parse(out.stdout);
}

for (const name of ["redis", "valkey"]) {
  const url = urls[name];
  test.describe(`with the reference worker, on ${name}`, () => {
    let store;
    test.before(async () => {
      store = await openStore(url);
    });
    test.after(async () => {
      await store.close();
    });

    test("for flat arguments the reference design's key is ours", async () => {
      const runId = uniqueRunId("interop");
      const args = { to: "ada@example.com", subject: "Invoice", amount: 42 };
      const reference = await referenceCall(url, runId, "send_email", args, { id: 1 });
      assert.equal(reference.key, idemKey(runId, "send_email", args));
    });

    test("an operation the reference worker executed is replayed by idempotent without running", async () => {
      const runId = uniqueRunId("interop");
      const args = { to: "ada@example.com", subject: "Invoice", amount: 42 };
      const result = { messageId: "m-1", accepted: ["ada@example.com"] };
      const reference = await referenceCall(url, runId, "send_email", args, result);
      assert.equal(reference.outcome, "executed");
      let runs = 0;
      const send = idempotent({ kind: "write", name: "send_email", run: async () => ++runs }, store);
      const answer = await send.runDetailed(args, { runId });
      assert.equal(answer.outcome, "replayed");
      assert.equal(answer.key, reference.key);
      assert.deepEqual(answer.result, result);
      assert.equal(runs, 0);
    });

    test("an operation idempotent executed is replayed by the reference worker without running", async () => {
      const runId = uniqueRunId("interop");
      const args = { customerId: "cus_9", amountCents: 995, currency: "EUR" };
      const result = { chargeId: "ch_9", status: "succeeded" };
      const charge = idempotent({ kind: "write", name: "charge_card", run: async () => result }, store);
      const ours = await charge.runDetailed(args, { runId });
      assert.equal(ours.outcome, "executed");
      const reference = await referenceCall(url, runId, "charge_card", args, { chargeId: "ch_WRONG" });
      assert.equal(reference.outcome, "replayed");
      assert.equal(reference.ran, false);
      assert.equal(reference.key, ours.key);
      assert.deepEqual(reference.result, result);
    });
  });
}
