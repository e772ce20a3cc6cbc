// The reference design's own two tests, on every store: a sequential duplicate executes once
// and gets an equal result; of two concurrent duplicates exactly one is fulfilled.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { z } = require("zod");
const { openStore, idempotent, OperationInFlight } = require("..");
const { storeUrls, uniqueRunId } = require("./support.js");

/** @returns {import("../dist/index.js").WriteTool} */
function chargeTool(calls, delayMs = 0) {
  return {
    kind: "write",
    name: "charge_card",
    schema: z.object({ customerId: z.string(), amountCents: z.number().int() }),
    async run(args, ctx) {
      calls.push({ args, key: ctx.idem });
      if (delayMs) await new Promise((r) => setTimeout(r, delayMs));
      return { chargeId: `ch_${calls.length}`, amountCents: args.amountCents, idempotencyKey: ctx.idempotencyHeader[1] };
    },
  };
}

for (const [name, url] of Object.entries(storeUrls())) {
  test.describe(`on ${name}`, () => {
    let store;
    test.before(async () => {
      store = await openStore(url);
    });
    test.after(async () => {
      await store.close();
    });

    test("a sequential duplicate executes once and gets an equal result", async () => {
      const calls = [];
      const charge = idempotent(chargeTool(calls), store);
      const ctx = { runId: uniqueRunId() };
      const args = { customerId: "cus_1", amountCents: 500 };
      const first = await charge.run(args, ctx);
      const second = await charge.run({ ...args }, ctx);
      assert.equal(calls.length, 1);
      assert.deepEqual(second, first);
      assert.equal(first.idempotencyKey, calls[0].key);
      const detailed = await charge.runDetailed(args, ctx);
      assert.equal(detailed.outcome, "replayed");
      assert.equal(detailed.key, calls[0].key);
      assert.deepEqual(detailed.result, first);
    });

    test("of two concurrent duplicates exactly one is fulfilled", async () => {
      const calls = [];
      const charge = idempotent(chargeTool(calls, 200), store);
      const ctx = { runId: uniqueRunId() };
      const args = { customerId: "cus_2", amountCents: 700 };
      const settled = await Promise.allSettled([charge.run(args, ctx), charge.run(args, ctx)]);
      const fulfilled = settled.filter((s) => s.status === "fulfilled");
      const rejected = settled.filter((s) => s.status === "rejected");
      assert.equal(fulfilled.length, 1);
      assert.equal(rejected.length, 1);
      assert.ok(rejected[0].reason instanceof OperationInFlight, String(rejected[0].reason));
      assert.equal(rejected[0].reason.outcome, "in_flight");
      assert.equal(calls.length, 1);
    });
  });
}
