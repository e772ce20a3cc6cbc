// Arguments that JSON cannot represent are refused, never keyed as something else: JSON.stringify
// writes NaN and ±Infinity as null, a Map, a Set or a RegExp as {}, undefined in an array as
// null, a Date as its toJSON string, and drops functions, so distinct calls shared one key and
// got another call's result. Each refusal names the problem and the path to the value; nothing
// runs and nothing is stored. What JSON carries exactly still keys as before: a null-prototype
// object is a plain object, an undefined member is an absent one (what the tool would receive
// through JSON, and what Rust and Python have), one object reached twice is two equal values.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const path = require("node:path");
const { DatabaseSync } = require("node:sqlite");
const { openStore, idempotent, idemKey, InvalidArguments } = require("..");
const { tempDir, uniqueRunId, errorOf, defined } = require("./support.js");

class Point {
  constructor(x, y) {
    this.x = x;
    this.y = y;
  }
}

const cyclic = { name: "a" };
cyclic.self = cyclic;
/** @type {unknown[]} */
const cyclicList = [1];
cyclicList.push({ back: cyclicList });
const sparse = [1, , 3]; // eslint-disable-line no-sparse-arrays

/** [arguments, the refusal's text after "idemKey: "]. */
/** @type {[unknown, string][]} */
const REFUSED = [
  [{ amount: NaN }, "args.amount: NaN is not a JSON number (JSON.stringify writes null); pass a number or null"],
  [{ amount: Infinity }, "args.amount: Infinity is not a JSON number (JSON.stringify writes null); pass a number or null"],
  [{ items: [{ amount: -Infinity }] }, "args.items[0].amount: -Infinity is not a JSON number (JSON.stringify writes null); pass a number or null"],
  [{ tags: new Map([["a", 1]]) }, "args.tags: a Map cannot be keyed exactly (JSON.stringify writes {}); pass a plain object or an array of pairs"],
  [{ tags: new Set(["a"]) }, "args.tags: a Set cannot be keyed exactly (JSON.stringify writes {}); pass an array"],
  [{ items: [1, 2, { when: new Date("not a date") }] }, "args.items[2].when: an invalid Date cannot be keyed (JSON.stringify writes null)"],
  [{ id: 9007199254740993 }, "args.id: 9007199254740992 is beyond ±(2^53 − 1), where a JavaScript number has lost the digits it was read from (neighbouring integers share it); pass an integer as a BigInt or a string, and declare such ids as strings in the tool's schema"],
  [{ amount: -1e23 }, "args.amount: -1e+23 is beyond ±(2^53 − 1), where a JavaScript number has lost the digits it was read from (neighbouring integers share it); pass an integer as a BigInt or a string, and declare such ids as strings in the tool's schema"],
  [{ pattern: /a+/g }, "args.pattern: a RegExp cannot be keyed exactly (JSON.stringify writes {}); pass its source as a string"],
  [{ bytes: new Uint8Array([1, 2]) }, "args.bytes: a Uint8Array cannot be keyed exactly; pass a string (base64 or hex) or an array of numbers"],
  [{ bytes: Buffer.from("hi") }, "args.bytes: a Buffer cannot be keyed exactly; pass a string (base64 or hex) or an array of numbers"],
  [{ at: new Point(1, 2) }, "args.at: an instance of Point cannot be keyed exactly; pass a plain object of its fields"],
  [{ n: new Number(1) }, "args.n: a Number object cannot be keyed exactly; pass the primitive value"],
  [{ v: { toJSON: () => "x" } }, "args.v: an object with a toJSON method cannot be keyed exactly; pass what toJSON returns"],
  [{ callback: () => 1 }, "args.callback: a function is not JSON (JSON.stringify leaves it out)"],
  [{ tag: Symbol("t") }, "args.tag: a symbol is not JSON (JSON.stringify leaves it out)"],
  [{ list: [1, undefined] }, "args.list[1]: undefined in an array is not JSON (JSON.stringify writes null); pass null"],
  [{ list: sparse }, "args.list[1]: undefined in an array is not JSON (JSON.stringify writes null); pass null"],
  [{ "first name": { n: 2n ** 64n } }, 'args["first name"].n: the integer 18446744073709551616 does not fit in 64 bits, so it cannot be keyed exactly (it would share a key with other integers); pass it as a string'],
  [cyclic, "args.self: the arguments refer to themselves (a cycle back to args)"],
  [{ list: cyclicList }, "args.list[1].back: the arguments refer to themselves (a cycle back to args.list)"],
  [() => 1, "args: a function is not JSON (JSON.stringify leaves it out)"],
  [NaN, "args: NaN is not a JSON number (JSON.stringify writes null); pass a number or null"],
];

test("every value JSON cannot represent exactly is refused, naming the problem and the path to it", () => {
  for (const [args, message] of REFUSED) {
    assert.throws(
      () => idemKey("run", "t", args),
      (e) => e instanceof InvalidArguments && e.outcome === "invalid_arguments" && e.message === `idemKey: ${message}`,
      message,
    );
  }
});

test("a BigInt is never keyed as what a toJSON the program gave BigInt returns", () => {
  /** @type {any} */ (BigInt.prototype).toJSON = function () {
    return this.toString();
  };
  try {
    // Keyed by its digits, as the core keys the integer 10: never as the string "10".
    const key = idemKey("run", "t", { n: 10n });
    assert.equal(key, idemKey("run", "t", { n: 10 }));
    assert.notEqual(key, idemKey("run", "t", { n: "10" }));
  } finally {
    delete /** @type {any} */ (BigInt.prototype).toJSON;
  }
});

test("a refused call never runs the tool and stores nothing, through run and runDetailed", async () => {
  const file = path.join(tempDir(), "unkeyable.db");
  const store = await openStore(`sqlite://${file}`);
  let runs = 0;
  const tool = idempotent({ kind: "write", name: "charge", run: async () => ++runs }, store);
  try {
    for (const [args, message] of REFUSED) {
      const answer = await tool.runDetailed(args, { runId: uniqueRunId("unkeyable") });
      assert.equal(answer.outcome, "invalid_arguments", message);
      assert.equal(answer.key, undefined);
      assert.ok(answer.error instanceof InvalidArguments, String(answer.error));
      assert.equal(answer.error.message, `Invalid arguments for \`charge\`: the arguments cannot be keyed: ${message}. Nothing was executed.`);
      await assert.rejects(tool.run(args, { runId: uniqueRunId("unkeyable") }), (e) => e instanceof InvalidArguments && e.message.includes(message));
    }
    assert.equal(runs, 0);
  } finally {
    await store.close();
  }
  const db = new DatabaseSync(file);
  try {
    assert.equal(defined(db.prepare("SELECT count(*) AS n FROM toolonce_entries").get()).n, 0);
  } finally {
    db.close();
  }
});

test("arguments that a schema turns into a Set are refused before the claim, the tool never run", async () => {
  const store = await openStore("memory://");
  let runs = 0;
  const schema = { parse: (args) => ({ ...args, when: new Set([args.when]) }) };
  const tool = idempotent({ kind: "write", name: "book", schema, run: async () => ++runs }, store);
  const answer = await tool.runDetailed({ when: "2025-01-01T00:00:00Z" }, { runId: uniqueRunId("unkeyable") });
  assert.equal(answer.outcome, "invalid_arguments");
  assert.match(errorOf(answer).message, /args\.when: a Set cannot be keyed exactly/);
  assert.equal(runs, 0);
  await store.close();
});

test("a valid Date keys as its ISO text, what every JSON encoder sends for it: a schema's Date replays, another instant runs", async () => {
  assert.equal(idemKey("run", "t", { when: new Date(0) }), idemKey("run", "t", { when: "1970-01-01T00:00:00.000Z" }));
  const store = await openStore("memory://");
  let runs = 0;
  const schema = { parse: (args) => ({ ...args, when: new Date(args.when) }) };
  const tool = idempotent({ kind: "write", name: "book", schema, run: async () => ++runs }, store);
  const ctx = { runId: uniqueRunId("dates") };
  assert.equal((await tool.runDetailed({ when: "2025-01-01T00:00:00Z" }, ctx)).outcome, "executed");
  assert.equal((await tool.runDetailed({ when: "2025-01-01T00:00:00.000Z" }, ctx)).outcome, "replayed");
  assert.equal((await tool.runDetailed({ when: "2025-01-01T00:00:01Z" }, ctx)).outcome, "executed");
  assert.equal(runs, 2);
  await store.close();
});

test("what JSON carries exactly still keys: null-prototype objects, undefined members as absent ones, a value reached twice, -0 as 0, no arguments as null", () => {
  const key = (args) => idemKey("run", "t", args);
  const bare = Object.assign(Object.create(null), { b: 1, a: [1, { c: "x" }] });
  assert.equal(key(bare), key({ a: [1, { c: "x" }], b: 1 }));
  assert.equal(key({ a: 1, b: undefined }), key({ a: 1 }));
  const shared = { card: "A" };
  assert.equal(key({ from: shared, to: shared }), key({ from: { card: "A" }, to: { card: "A" } }));
  assert.equal(key({ n: -0 }), key({ n: 0 }));
  assert.equal(key(undefined), key(null));
  // An object nested deeply without a cycle is refused for its depth, not as a cycle.
  let deep = {};
  for (let i = 0; i < 200; i++) deep = { d: deep };
  assert.throws(() => key(deep), (e) => e instanceof InvalidArguments && /nest deeper than 128 levels/.test(e.message) && !/cycle/.test(e.message));
});
