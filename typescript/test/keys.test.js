// Keys: the package derives the core's key (RFC 8785 canonical arguments), so nested
// arguments never collide and every shared vector (crates/toolonce/tests/data/keys.json, also
// checked by the Rust tests) comes out the same.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { openStore, idempotent, idemKey, InvalidArguments } = require("..");
const { repo, uniqueRunId, errorOf } = require("./support.js");

const vectors = JSON.parse(
  fs.readFileSync(path.join(repo, "crates", "toolonce", "tests", "data", "keys.json"), "utf8"),
).vectors;

/** Whether `value` holds a number beyond ±(2^53 − 1), which JavaScript refuses to key (key-numbers.test.js). */
const unsafe = (value) =>
  typeof value === "number" ? !(Math.abs(value) <= Number.MAX_SAFE_INTEGER) : value !== null && typeof value === "object" && Object.values(value).some(unsafe);

test("idemKey matches every shared key vector, and refuses those whose numbers a JavaScript number cannot hold exactly", () => {
  assert.ok(vectors.length >= 50, `only ${vectors.length} vectors`);
  let refused = 0;
  for (const v of vectors) {
    const args = JSON.parse(v.args_json);
    if (unsafe(args)) {
      refused++;
      assert.throws(() => idemKey(v.run_id, v.tool, args), (e) => e instanceof InvalidArguments && /beyond ±\(2\^53 − 1\)/.test(e.message), v.args_json);
      continue;
    }
    assert.equal(idemKey(v.run_id, v.tool, args), v.key, `vector ${v.args_json}`);
  }
  // 1e+21, 1e+23 and the greatest double: keyed by Rust and Python as doubles.
  assert.equal(refused, 4);
});

test("the key a handler gets is the key idemKey derives, for every shared vector", async () => {
  const store = await openStore("memory://");
  try {
    const seen = new Set();
    for (const v of vectors.filter((v) => !unsafe(JSON.parse(v.args_json)))) {
      const tool = idempotent({ kind: "write", name: v.tool, run: async (_args, ctx) => ctx.idem }, store);
      const answer = await tool.runDetailed(JSON.parse(v.args_json), { runId: v.run_id });
      // Some vectors are the same operation spelled differently (key order, number forms).
      assert.equal(answer.outcome, seen.has(v.key) ? "replayed" : "executed");
      seen.add(v.key);
      assert.equal(answer.result, v.key);
      assert.equal(answer.key, v.key);
    }
  } finally {
    await store.close();
  }
});

test("nested arguments that differ never share a key, and each runs", async () => {
  const store = await openStore("memory://");
  const runs = [];
  const charge = idempotent(
    { kind: "write", name: "charge_card", run: async (args) => (runs.push(args), runs.length) },
    store,
  );
  const ctx = { runId: uniqueRunId() };
  // The reference design's JSON.stringify(args, sortedTopLevelKeys) drops every nested field,
  // so all of these would be one key there.
  const calls = [
    { payment: { card: "A", amount: 100 } },
    { payment: { card: "B", amount: 999 } },
    { payment: { card: "A", amount: 100, note: "x" } },
    { payment: [{ card: "A" }] },
    { payment: { card: { last4: "4242" } } },
    { payment: { card: { last4: "0005" } } },
  ];
  const keys = new Set(calls.map((args) => idemKey(ctx.runId, "charge_card", args)));
  assert.equal(keys.size, calls.length);
  for (const args of calls) assert.equal((await charge.runDetailed(args, ctx)).outcome, "executed");
  assert.equal(runs.length, calls.length);
  // Same nested content in another key order: the same operation.
  assert.equal((await charge.runDetailed({ payment: { amount: 100, card: "A" } }, ctx)).outcome, "replayed");
  await store.close();
});

test("keyFields key a call on the named fields only, and a differing rest is a conflict", async () => {
  const store = await openStore("memory://");
  let runs = 0;
  const tool = idempotent(
    { kind: "write", name: "send_email", run: async () => ++runs },
    store,
    { keyFields: ["/to", "/subject"] },
  );
  const ctx = { runId: uniqueRunId() };
  const first = await tool.runDetailed({ to: "a@x", subject: "Hi", body: "one" }, ctx);
  assert.equal(first.key, idemKey(ctx.runId, "send_email", { to: "a@x", subject: "Hi", body: "one" }, { keyFields: ["/to", "/subject"] }));
  const second = await tool.runDetailed({ to: "a@x", subject: "Hi", body: "two" }, ctx);
  assert.equal(second.outcome, "conflict");
  assert.equal(errorOf(second).name, "OperationConflict");
  assert.equal(runs, 1);
  await store.close();
});

test("arguments that cannot be keyed are refused before a claim", async () => {
  const store = await openStore("memory://");
  let runs = 0;
  const tool = idempotent({ kind: "write", name: "t", run: async () => ++runs }, store);
  let deep = {};
  for (let i = 0; i < 200; i++) deep = { d: deep };
  const answer = await tool.runDetailed(deep, { runId: uniqueRunId() });
  assert.equal(answer.outcome, "invalid_arguments");
  assert.ok(answer.error instanceof InvalidArguments, String(answer.error));
  await assert.rejects(tool.run({ n: 2n ** 64n }, { runId: uniqueRunId() }), InvalidArguments);
  await assert.rejects(tool.run({ n: 2 ** 53 }, { runId: uniqueRunId() }), InvalidArguments);
  assert.equal(runs, 0);
  await store.close();
});
