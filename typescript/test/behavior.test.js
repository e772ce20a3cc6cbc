// What a write call does besides the happy path, on the in-memory store (the stores' own
// semantics are the core's, tested there and in reference.test.js): failure classes, the
// schema before the claim, waiting duplicates, read tools, the context, and bad options.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { z } = require("zod");
const {
  openStore,
  idempotent,
  PermanentError,
  InvalidArguments,
  OperationInFlight,
} = require("..");
const { uniqueRunId, errorOf } = require("./support.js");

let store;
test.before(async () => {
  store = await openStore("memory://");
});
test.after(async () => {
  await store.close();
});

test("a permanent error is stored and replayed to a duplicate without running again", async () => {
  let runs = 0;
  const tool = idempotent(
    {
      kind: "write",
      name: "charge",
      async run() {
        runs++;
        throw new PermanentError("card declined", { detail: { code: "card_declined" } });
      },
    },
    store,
  );
  const ctx = { runId: uniqueRunId() };
  const first = await tool.runDetailed({ card: "x" }, ctx);
  assert.equal(first.outcome, "executed");
  assert.ok(first.error instanceof PermanentError);
  await assert.rejects(tool.run({ card: "x" }, ctx), (e) => {
    assert.ok(e instanceof PermanentError);
    assert.equal(e.message, "card declined");
    assert.equal(e.replayed, true);
    assert.equal(e.outcome, "replayed_failure");
    assert.deepEqual(e.detail, { code: "card_declined" });
    return true;
  });
  assert.equal(runs, 1);
});

test("an exception with permanent = true is permanent too", async () => {
  let runs = 0;
  const tool = idempotent(
    {
      kind: "write",
      name: "charge",
      async run() {
        runs++;
        throw Object.assign(new Error("invalid account"), { permanent: true });
      },
    },
    store,
  );
  const ctx = { runId: uniqueRunId() };
  await assert.rejects(tool.run({}, ctx), /invalid account/);
  assert.equal((await tool.runDetailed({}, ctx)).outcome, "replayed_failure");
  assert.equal(runs, 1);
});

test("any other exception is transient: the handler's own error is thrown and a duplicate runs again", async () => {
  let runs = 0;
  class Timeout extends Error {}
  const tool = idempotent(
    {
      kind: "write",
      name: "send",
      async run() {
        runs++;
        if (runs === 1) throw new Timeout("provider timed out");
        return { sent: true };
      },
    },
    store,
  );
  const ctx = { runId: uniqueRunId() };
  await assert.rejects(tool.run({}, ctx), Timeout);
  assert.deepEqual(await tool.run({}, ctx), { sent: true });
  assert.equal(runs, 2);
});

test("the schema is applied before the claim: invalid arguments never claim, valid ones are parsed", async () => {
  const seen = [];
  const tool = idempotent(
    {
      kind: "write",
      name: "refund",
      schema: z.object({ amount: z.coerce.number().int().positive() }),
      async run(args) {
        seen.push(args);
        return args.amount;
      },
    },
    store,
  );
  const ctx = { runId: uniqueRunId() };
  const bad = await tool.runDetailed({ amount: -1 }, ctx);
  assert.equal(bad.outcome, "invalid_arguments");
  assert.ok(bad.error instanceof InvalidArguments);
  assert.equal(errorOf(bad).cause.name, "ZodError");
  // Coerced by the schema, so "5" and 5 are one operation.
  assert.equal(await tool.run({ amount: "5" }, ctx), 5);
  assert.equal((await tool.runDetailed({ amount: 5 }, ctx)).outcome, "replayed");
  assert.deepEqual(seen, [{ amount: 5 }]);
});

test("a duplicate with inFlight wait gets the running call's result", async () => {
  let runs = 0;
  const tool = idempotent(
    {
      kind: "write",
      name: "book",
      async run() {
        runs++;
        await new Promise((r) => setTimeout(r, 150));
        return { booking: runs };
      },
    },
    store,
    { inFlight: { wait: 5000 } },
  );
  const ctx = { runId: uniqueRunId() };
  const [a, b] = await Promise.all([tool.runDetailed({ x: 1 }, ctx), tool.runDetailed({ x: 1 }, ctx)]);
  assert.deepEqual([a.outcome, b.outcome].sort(), ["executed", "replayed"]);
  assert.deepEqual(a.result, b.result);
  assert.equal(runs, 1);
});

test("a duplicate under inFlight reject is refused with OperationInFlight while the first runs", async () => {
  /** @type {((value: unknown) => void) | undefined} */
  let release;
  const tool = idempotent(
    { kind: "write", name: "slow", run: () => new Promise((r) => (release = r)) },
    store,
  );
  const ctx = { runId: uniqueRunId() };
  const first = tool.run({}, ctx);
  while (release === undefined) await new Promise((r) => setImmediate(r));
  await assert.rejects(tool.run({}, ctx), OperationInFlight);
  release("done");
  assert.equal(await first, "done");
});

test("the handler gets the caller's context with the key and the header added", async () => {
  /** @type {any} */
  let seen;
  const tool = idempotent(
    {
      kind: "write",
      name: "ctx",
      async run(_args, ctx) {
        seen = ctx;
        return null;
      },
    },
    store,
  );
  const answer = await tool.runDetailed({}, { runId: "r-ctx-" + uniqueRunId(), userId: "u1" });
  assert.equal(seen.userId, "u1");
  assert.equal(seen.idem, answer.key);
  assert.deepEqual(seen.idempotencyHeader, ["Idempotency-Key", answer.key]);
  assert.equal(seen.mayHaveRunBefore, false);
  assert.equal(answer.result, null);
});

test("a handler resolving undefined records null", async () => {
  const tool = idempotent({ kind: "write", name: "void", async run() {} }, store);
  const ctx = { runId: uniqueRunId() };
  assert.equal(await tool.run({}, ctx), null);
  assert.equal((await tool.runDetailed({}, ctx)).outcome, "replayed");
});

test("a result that is not JSON is a permanent failure: the handler ran, so it is not run again", async () => {
  let runs = 0;
  const tool = idempotent({ kind: "write", name: "big", run: async () => (runs++, { n: 1n }) }, store);
  const ctx = { runId: uniqueRunId() };
  await assert.rejects(tool.run({}, ctx), PermanentError);
  assert.equal((await tool.runDetailed({}, ctx)).outcome, "replayed_failure");
  assert.equal(runs, 1);
});

test("a read tool is returned untouched", () => {
  /** @type {import("../dist/index.js").ReadTool} */
  const read = { kind: "read", name: "balance", run: async () => 1 };
  assert.equal(idempotent(read, store), read);
});

test("a call without ctx.runId is refused without running", async () => {
  let runs = 0;
  const tool = idempotent({ kind: "write", name: "t", run: async () => ++runs }, store);
  // @ts-expect-error: a context without runId, as JavaScript may pass
  await assert.rejects(tool.run({}, {}), InvalidArguments);
  // @ts-expect-error: no context at all
  await assert.rejects(tool.run({}), InvalidArguments);
  assert.equal(runs, 0);
});

test("invalid options are refused when the tool is wrapped, naming the option", async () => {
  /** @type {import("../dist/index.js").WriteTool} */
  const tool = { kind: "write", name: "t", run: async () => 1 };
  assert.throws(() => idempotent(tool, store, { lease: 5 }), /lease/);
  assert.throws(() => idempotent(tool, store, { retention: -1 }), /retention/);
  // @ts-expect-error: not an inFlight policy
  assert.throws(() => idempotent(tool, store, { inFlight: "wait" }), /inFlight/);
  // @ts-expect-error: not an onExpired policy
  assert.throws(() => idempotent(tool, store, { onExpired: "retry" }), /onExpired/);
  assert.throws(() => idempotent(tool, store, { keyFields: ["no-slash"] }), /key field/);
  // @ts-expect-error: a misspelt option
  assert.throws(() => idempotent(tool, store, { leese: 1000 }), /unknown option "leese"/);
  // @ts-expect-error: neither a write nor a read tool
  assert.throws(() => idempotent({ ...tool, kind: "other" }, store), /kind/);
  // @ts-expect-error: not a store from openStore
  assert.throws(() => idempotent(tool, {}), /openStore/);
  await assert.rejects(openStore("mysql://x"), /unknown store scheme/);
});

test("a store URL option that nothing reads is refused, naming it, the options and a near miss", async () => {
  for (const [url, words] of /** @type {[string, RegExp][]} */ ([
    ["redis://127.0.0.1:1/?allow_evicton=true", /`allow_evicton` that nothing reads \(did you mean `allow_eviction`\?\).*`replica_timeout_ms`/],
    ["redis://:s3cret@127.0.0.1:1/?colour=red", /`colour` that nothing reads: the options are/],
    ["redis://127.0.0.1:1/?replicas=1", /replicas \(writes that wait for replicas\) is read by the Rust core/],
    ["redis+sentinel://127.0.0.1:26379/mymaster", /redis\+sentinel:\/\/ is read by the Rust core, not yet by this package/],
    ["memory://?x=1", /memory store reads no options/],
    ["sqlite://t.db?busy_timeout=5", /SQLite store reads no options/],
  ])) {
    await assert.rejects(openStore(url), (e) => {
      assert.ok(e instanceof InvalidArguments, `${url}: ${e}`);
      assert.match(e.message, words, url);
      assert.ok(!e.message.includes("s3cret"), e.message);
      return true;
    });
  }
});