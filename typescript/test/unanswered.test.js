// A Redis server that stops answering, for a store opened from a URL with ioredis (the driver
// the package picks when the program has both): the cases are in unanswered.js.

"use strict";

const assert = require("node:assert/strict");
const { defineCases } = require("./unanswered.js");

assert.ok(require.resolve("ioredis"), "the tests need ioredis (a dev dependency)");
defineCases("ioredis");
