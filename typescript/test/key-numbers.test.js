// The shared number vectors (crates/toolonce/tests/data/key_numbers.json), as JavaScript holds
// numbers: an integer literal beyond 2^53 in a model's call is read as a BigInt (from the
// parser's source text) and keyed by its digits as the core keys it; a number beyond 2^53 has
// lost its digits and is refused; what JSON cannot write is refused. Never two keys for one
// call across languages, never one key for two calls.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const crypto = require("node:crypto");
const fs = require("node:fs");
const path = require("node:path");
const { idemKey, InvalidArguments } = require("..");
const { repo } = require("./support.js");

const vectors = JSON.parse(fs.readFileSync(path.join(repo, "crates", "toolonce", "tests", "data", "key_numbers.json"), "utf8"));
const { run_id: runId, tool } = vectors;

/** `text` parsed as a model's call is: integer literals beyond 2^53 as BigInts, from their source. */
function parseCall(text) {
  return JSON.parse(text, (_name, value, context) => {
    if (typeof value !== "number" || Number.isSafeInteger(value) || !/^-?\d+$/.test(context.source)) return value;
    return BigInt(context.source);
  });
}

function keyOf(canonical) {
  return "idem:" + crypto.createHash("sha256").update(`${runId}\0${tool}\0${canonical}`).digest("hex").slice(0, 32);
}

const refused = (e) => e instanceof InvalidArguments && e.outcome === "invalid_arguments";

test("integer texts keep their exact digits up to 64 bits, as in every implementation", () => {
  assert.ok(vectors.exact.length >= 8);
  for (const v of vectors.exact) {
    const args = parseCall(v.args_json);
    if (v.javascript === "refused") {
      assert.throws(() => idemKey(runId, tool, args), (/** @type {any} */ e) => refused(e) && /beyond ±\(2\^53 − 1\)/.test(e.message), v.args_json);
      continue;
    }
    assert.equal(idemKey(runId, tool, args), v.key, v.args_json);
  }
});

test("integer texts beyond 64 bits are refused naming the number", () => {
  for (const v of vectors.refused) {
    assert.throws(
      () => idemKey(runId, tool, parseCall(v.args_json)),
      (/** @type {any} */ e) => refused(e) && e.message.includes(v.names) && e.message.includes("64 bits"),
      v.args_json,
    );
  }
});

/** The vector's value as JavaScript holds it. */
function held(value) {
  if ("number" in value) return Number(value.number);
  if ("double" in value) return Number(value.double);
  if ("integer" in value) return BigInt(value.integer);
  if ("map" in value) return new Map(value.map);
  if ("set" in value) return new Set(value.set);
  throw new Error(`no JavaScript value for ${JSON.stringify(value)}`);
}

test("JavaScript values key, or are refused, as the shared vectors say", () => {
  assert.ok(vectors.values.length >= 10);
  for (const v of vectors.values) {
    const args = { v: held(v.value) };
    const what = JSON.stringify(v.value);
    if (v.refused || v.javascript === "refused") {
      assert.throws(() => idemKey(runId, tool, args), refused, what);
    } else {
      assert.equal(idemKey(runId, tool, args), keyOf(`{"v":${v.canonical}}`), what);
    }
  }
});
