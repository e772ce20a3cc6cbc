// A Redis server that stops answering, for a store opened from a URL with node-redis: ioredis is
// hidden from this process (as in a program that installed only `redis`), so openStore picks
// node-redis, whose own command timeout stops counting once a command is written. The cases
// are in unanswered.js.

"use strict";

// Module._resolveFilename is Node's internal resolver, which its declarations do not name.
const Module = /** @type {any} */ (require("node:module"));

const resolve = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (request === "ioredis" || request.startsWith("ioredis/")) {
    const e = new Error(`Cannot find module '${request}' (hidden by unanswered-node-redis.test.js)`);
    throw Object.assign(e, { code: "MODULE_NOT_FOUND" });
  }
  return resolve.call(this, request, ...rest);
};

const test = require("node:test");
const assert = require("node:assert/strict");
const { sep } = require("node:path");
const { openStore } = require("..");
const { defineCases } = require("./unanswered.js");
const { startRedis } = require("./support.js");

test("with ioredis hidden, a store opened from a URL connects with node-redis", async () => {
  const redis = await startRedis();
  const store = await openStore(redis.url);
  try {
    const loaded = Object.keys(require.cache);
    assert.ok(loaded.some((f) => f.includes(`${sep}@redis${sep}client${sep}`)), "node-redis was not loaded");
    assert.ok(!loaded.some((f) => f.includes(`${sep}ioredis${sep}`)), "ioredis was loaded");
  } finally {
    await store.close();
    redis.child.kill("SIGKILL");
  }
});

defineCases("node-redis");
