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
const { storeUrls, uniqueRunId, runNode, sleep, errorOf } = require("./support.js");

const urls = storeUrls();

test.describe("results that cannot be stored", () => {
  let store;
  test.before(async () => {
    store = await openStore(urls.redis);
  });
  test.after(async () => {
    await store.close();
  });

  test("a result nested deeper than 100 levels goes to the first caller, and every duplicate gets a recorded failure; it never runs again", async () => {
    /** @type {unknown} */
    let deep = { end: true };
    for (let i = 0; i < 150; i++) deep = { d: deep };
    let runs = 0;
    const tool = idempotent({ kind: "write", name: "send", run: async () => (runs++, deep) }, store);
    const ctx = { runId: uniqueRunId("too-deep") };
    assert.deepEqual(await tool.run({}, ctx), deep);
    const again = await tool.runDetailed({}, ctx);
    assert.equal(again.outcome, "replayed_failure");
    assert.match(errorOf(again).message, /ran, but its result cannot be stored: it is nested 151 levels deep, more than the 100/);
    assert.deepEqual(errorOf(again).detail, { unstorable: "it is nested 151 levels deep, more than the 100 levels a stored result may have" });
    assert.equal(runs, 1);
  });

  test("the shortest results at the limit are judged by their nesting, not their length: 100 levels in 200 characters are stored, 101 in 202 are not", async () => {
    // [[…]]: the least text a depth takes, where a short result could be waved through unscanned.
    const nested = (levels) => JSON.parse("[".repeat(levels) + "]".repeat(levels));
    let runs = 0;
    const tool = idempotent({ kind: "write", name: "send", run: async (args) => (runs++, nested(args.levels)) }, store);
    const ctx = { runId: uniqueRunId("depth-limit") };
    assert.equal(JSON.stringify(nested(100)).length, 200);
    assert.deepEqual(await tool.run({ levels: 100 }, ctx), nested(100));
    const kept = await tool.runDetailed({ levels: 100 }, ctx);
    assert.equal(kept.outcome, "replayed");
    assert.deepEqual(kept.result, nested(100));
    assert.deepEqual(await tool.run({ levels: 101 }, ctx), nested(101));
    const refused = await tool.runDetailed({ levels: 101 }, ctx);
    assert.equal(refused.outcome, "replayed_failure");
    assert.match(errorOf(refused).message, /it is nested 101 levels deep, more than the 100/);
    assert.equal(runs, 2);
  });

  test("a result that is not JSON at all (a BigInt) is a permanent failure for the first caller too, and never runs again", async () => {
    let runs = 0;
    const tool = idempotent({ kind: "write", name: "send", run: async () => (runs++, { n: 10n }) }, store);
    const ctx = { runId: uniqueRunId("bigint") };
    const first = await tool.runDetailed({}, ctx);
    assert.equal(first.outcome, "executed");
    assert.ok(first.error instanceof PermanentError, String(first.error));
    assert.match(first.error.message, /ran, but its result cannot be stored: it is not JSON/);
    const again = await tool.runDetailed({}, ctx);
    assert.equal(again.outcome, "replayed_failure");
    assert.equal(errorOf(again).message, errorOf(first).message);
    assert.equal(runs, 1);
  });

  test("a result with a lone surrogate (a string cut inside an emoji) is stored, and read as U+FFFD by the first caller and every duplicate", async () => {
    let runs = 0;
    const tool = idempotent({ kind: "write", name: "send", run: async () => (runs++, { text: "cut \ud83d", "\ud83d": 1 }) }, store);
    const ctx = { runId: uniqueRunId("surrogate") };
    assert.deepEqual(await tool.run({}, ctx), { text: "cut \ufffd", "\ufffd": 1 });
    const again = await tool.runDetailed({}, ctx);
    assert.equal(again.outcome, "replayed");
    assert.deepEqual(again.result, { text: "cut \ufffd", "\ufffd": 1 });
    assert.equal(runs, 1);
  });

  test("a result nested exactly 100 levels is stored and replayed as it was", async () => {
    /** @type {unknown} */
    let deep = 1;
    for (let i = 0; i < 100; i++) deep = [deep];
    const tool = idempotent({ kind: "write", name: "send", run: async () => deep }, store);
    const ctx = { runId: uniqueRunId("deep-ok") };
    assert.deepEqual(await tool.run({}, ctx), deep);
    const again = await tool.runDetailed({}, ctx);
    assert.equal(again.outcome, "replayed");
    assert.deepEqual(again.result, deep);
  });

  test("an entry that cannot be decoded is held as unknown, never run over", async () => {
    const { Redis } = require("ioredis");
    const redis = new Redis(urls.redis);
    try {
      for (const garbage of ["not json", '{"status":"exploded"}', '{"status":"done"}', "[1,2]"]) {
        let runs = 0;
        const tool = idempotent({ kind: "write", name: "send", run: async () => ++runs }, store);
        const runId = uniqueRunId("corrupt");
        await redis.set(require("..").idemKey(runId, "send", {}), garbage);
        const answer = await tool.runDetailed({}, { runId });
        assert.equal(answer.outcome, "unknown", garbage);
        assert.ok(answer.error instanceof OutcomeUnknown, String(answer.error));
        assert.match(answer.error.message, /record cannot be read here/);
        assert.equal(runs, 0, garbage);
      }
    } finally {
      redis.disconnect();
    }
  });

  test("an error detail that cannot be stored is left out, the message saying so, and the failure is stored", async () => {
    /** @type {unknown} */
    let deep = 0;
    for (let i = 0; i < 120; i++) deep = [deep];
    for (const [detail, why] of /** @type {[unknown, RegExp][]} */ ([[{ n: 1n }, /\(its detail was not stored: it is not JSON/], [deep, /\(its detail was not stored: it is nested 120 levels deep, more than the 100/]])) {
      const tool = idempotent(
        { kind: "write", name: "charge", run: async () => { throw new PermanentError("declined \ud800", { detail }); } },
        store,
      );
      const ctx = { runId: uniqueRunId("detail") };
      await assert.rejects(tool.run({}, ctx), PermanentError);
      const again = await tool.runDetailed({}, ctx);
      assert.equal(again.outcome, "replayed_failure");
      assert.ok(errorOf(again).message.startsWith("declined \ufffd "), errorOf(again).message);
      assert.match(errorOf(again).message, why);
    }
  });
});

for (const name of ["sqlite", "redis", "valkey"]) {
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

test("a result the store refuses to keep is recorded as a failure naming the refusal, never released", async () => {
  const { Store } = require("..");
  const { MemoryBackend } = require("../dist/stores/memory.js");
  const { StoreError } = require("../dist/errors.js");
  // A store that cannot hold this result (as a database refuses a value it cannot store).
  const backend = new MemoryBackend();
  backend.complete = async () => {
    throw new StoreError("value too large to store", false);
  };
  const store = new Store(backend, {});
  let runs = 0;
  const tool = idempotent({ kind: "write", name: "upload", run: async () => (runs++, { big: true }) }, store);
  const ctx = { runId: uniqueRunId("refused") };
  assert.deepEqual(await tool.run({}, ctx), { big: true });
  const again = await tool.runDetailed({}, ctx);
  assert.equal(again.outcome, "replayed_failure");
  assert.match(errorOf(again).message, /ran, but its result cannot be stored: the store refused it \(value too large to store\)/);
  assert.equal(runs, 1);
});
