// Concurrent calls on a store opened from a redis:// URL: the commands of many calls are in
// flight on one connection at once (pipelined by the client). Each must still get its own
// reply, in order, whatever else was sent around it: first-time calls, their duplicates racing
// them, replays and lease renewals, all at once.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { openStore, idempotent, OperationInFlight } = require("..");
const { uniqueRunId, sleep, defined } = require("./support.js");

const REDIS = process.env.TOOLONCE_TEST_REDIS;

test("calls sent together each get their own answer, and each operation runs once", { skip: REDIS === undefined && "needs npm test's Redis" }, async () => {
  const store = await openStore(defined(REDIS));
  const runs = new Map();
  const tool = idempotent(
    {
      kind: "write",
      name: "create_ticket",
      async run(args) {
        runs.set(args.n, (runs.get(args.n) ?? 0) + 1);
        // Some finish at once, some after a lease renewal or two was sent among the others.
        if (args.n % 7 === 0) await sleep(450);
        return { n: args.n, twice: args.n * 2 };
      },
    },
    store,
    { lease: 1000 },
  );
  try {
    const runId = uniqueRunId("batching");
    const N = 300;
    // Every operation twice in the same turn: one runs it, the other finds it running.
    const first = await Promise.all(
      Array.from({ length: 2 * N }, (_, i) => tool.run({ n: i % N }, { runId }).then((r) => ({ r, e: undefined }), (e) => ({ r: undefined, e }))),
    );
    for (let i = 0; i < 2 * N; i++) {
      const { r, e } = first[i];
      if (e !== undefined) {
        assert.ok(e instanceof OperationInFlight, `call ${i}: ${e}`);
      } else {
        assert.deepEqual(r, { n: i % N, twice: (i % N) * 2 }, `call ${i}`);
      }
    }
    for (let n = 0; n < N; n++) assert.equal(runs.get(n), 1, `operation ${n} ran ${runs.get(n)} times`);
    // All replays at once, in a shuffled order: each gets its own operation's result.
    const order = Array.from({ length: N }, (_, n) => (n * 97) % N);
    const replays = await Promise.all(order.map((n) => tool.runDetailed({ n }, { runId })));
    replays.forEach((answer, i) => {
      assert.equal(answer.outcome, "replayed");
      assert.deepEqual(answer.result, { n: order[i], twice: order[i] * 2 });
    });
    assert.equal([...runs.values()].reduce((a, b) => a + b, 0), N);
  } finally {
    await store.close();
  }
});
