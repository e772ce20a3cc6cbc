// A Redis server that stops answering, for a store opened from a URL with ioredis (the driver
// the package picks when the program has both): the cases are in unanswered.js. And the queue
// of deadlines lets a command go once it is answered, by a reply or a rejection, not keeping
// later ones.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { defineCases } = require("./unanswered.js");

assert.ok(require.resolve("ioredis"), "the tests need ioredis (a dev dependency)");
defineCases("ioredis");

/** A command as `Deadlines` sees one: answered by `reply()`, or rejected by the client (`reject`). */
function pending() {
  const command = {
    isResolved: false,
    rejections: /** @type {unknown[]} */ ([]),
    promise: Promise.resolve(),
    reply() {
      command.isResolved = true;
    },
    reject(e) {
      command.rejections.push(e);
    },
  };
  return command;
}

test("a command rejected without a reply is let go at once, not kept with every later one until its deadline", () => {
  const { Deadlines } = require("../dist/stores/redis-link.js");
  const deadlines = new Deadlines(2000);
  // An error reply (Redis 7's to the IFEQ probe) rejects a command; ioredis sets isResolved on replies only.
  const refused = pending();
  deadlines.track(refused);
  refused.reject(new Error("ERR syntax error"));
  assert.equal(refused.rejections.length, 1, "the client's own rejection still goes through");
  const sent = [];
  for (let i = 0; i < 100; i++) {
    const command = pending();
    deadlines.track(command);
    command.reply();
    sent.push(command);
  }
  // Before, all 101 were kept (for 2 s) behind the refused one; now none but the last.
  assert.ok(deadlines["commands"].filter((c) => c !== undefined).length <= 1, `${deadlines["commands"].length} commands kept`);
  const slow = pending();
  deadlines.track(slow);
  for (let i = 0; i < 100; i++) {
    const command = pending();
    deadlines.track(command);
    command.reply();
  }
  // Behind a command in flight, those answered after it are kept only until it is answered:
  // the next command sent lets them all go.
  slow.reply();
  deadlines.track(pending());
  assert.equal(deadlines["commands"].filter((c) => c !== undefined).length, 1);
  // The timer is unref'd: nothing here keeps the test's process alive.
});

test("a node-redis command that throws instead of rejecting fails its call and is let go at once", async () => {
  const { Deadlines, withDeadlines } = require("../dist/stores/redis-link.js");
  const deadlines = new Deadlines(2000);
  const refused = withDeadlines(() => {
    throw new Error("the client is closed");
  }, deadlines);
  await assert.rejects(refused(), /the client is closed/);
  const answered = withDeadlines(async () => "OK", deadlines);
  for (let i = 0; i < 100; i++) assert.equal(await answered(), "OK");
  // Before, the refused command stayed at the head for its 2 s, and all 100 behind it.
  assert.ok(deadlines["commands"].filter((c) => c !== undefined).length <= 1, `${deadlines["commands"].length} commands kept`);
});
