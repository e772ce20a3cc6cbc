// A Redis server that stops answering (SIGSTOP: the connection stays open, no reply comes, no
// error either): every command of a store opened from a URL fails within about 2 s with a
// retryable StoreError, so a call ends instead of waiting for ever; and the layer's rules for
// a reply that never came hold: a claim never answered does not run the handler, an outcome
// never acknowledged is not released, and the handler runs once. And the queue of deadlines
// lets a command go once it is answered, by a reply or a rejection, not keeping later ones.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { openStore, idempotent } = require("..");
const { backendOf } = require("../dist/open.js");
const { StoreError } = require("../dist/errors.js");
const { startRedis, uniqueRunId } = require("./support.js");

/** The response timeout of a store opened from a URL, and the slack a shared machine needs. */
const TIMEOUT_MS = 2000;
const SLACK_MS = 1000;

/** A Redis server of the test's own, stopped by `stop()` and resumed by `resume()`. */
async function stoppable() {
  const redis = await startRedis();
  let stopped = false;
  return {
    url: redis.url,
    stop() {
      stopped = true;
      redis.child.kill("SIGSTOP");
    },
    resume() {
      if (stopped) redis.child.kill("SIGCONT");
      stopped = false;
    },
    kill() {
      this.resume();
      redis.child.kill("SIGKILL");
    },
  };
}

test("a command a stopped Redis never answers fails within about 2 s with a retryable StoreError", async () => {
  const redis = await stoppable();
  const store = await openStore(redis.url);
  try {
    const backend = backendOf(store);
    assert.equal(await backend.get("idem:00000000000000000000000000000000"), undefined);
    redis.stop();
    const started = performance.now();
    const failures = await Promise.all(
      // Several at once: each command has its own deadline, whatever the others do.
      Array.from({ length: 5 }, (_, i) => backend.get(`idem:0000000000000000000000000000000${i}`).then(() => undefined, (e) => e)),
    );
    const elapsed = performance.now() - started;
    for (const e of failures) {
      assert.ok(e instanceof StoreError, `expected a StoreError, got ${e}`);
      assert.equal(e.retryable, true);
      assert.match(e.message, /timed out/);
    }
    assert.ok(elapsed >= TIMEOUT_MS - 100, `failed after ${elapsed} ms, before the timeout`);
    assert.ok(elapsed < TIMEOUT_MS + SLACK_MS, `failed after ${elapsed} ms`);
    // Answering again: the connection was never dropped, and commands go through.
    redis.resume();
    assert.equal(await backend.get("idem:00000000000000000000000000000000"), undefined);
  } finally {
    redis.kill();
    await store.close();
  }
});

test("a claim a stopped Redis never answers does not run the handler, and the call ends", async () => {
  const redis = await stoppable();
  const store = await openStore(redis.url);
  let runs = 0;
  const tool = idempotent({ kind: "write", name: "charge_card", run: async () => ++runs }, store);
  try {
    assert.equal(await tool.run({ n: 0 }, { runId: uniqueRunId() }), 1);
    redis.stop();
    const runId = uniqueRunId("unanswered-claim");
    const started = performance.now();
    const answer = await tool.runDetailed({ n: 1 }, { runId });
    const elapsed = performance.now() - started;
    assert.equal(answer.outcome, "store_unavailable");
    assert.equal(runs, 1);
    // The claim's timeout, then the release of a claim that may have applied unseen, which the
    // layer tries for 3 s, each try bounded by the timeout too.
    assert.ok(elapsed < TIMEOUT_MS + 3000 + TIMEOUT_MS + SLACK_MS, `ended after ${elapsed} ms`);
    // Resumed, the server applies what it was sent: the claim, then its release. The call runs.
    redis.resume();
    assert.equal(await tool.run({ n: 1 }, { runId }), 2);
    assert.equal(runs, 2);
  } finally {
    redis.kill();
    await store.close();
  }
});

test("an outcome a stopped Redis never acknowledges is not released, and the handler runs once", async () => {
  const redis = await stoppable();
  const store = await openStore(redis.url);
  let runs = 0;
  const tool = idempotent(
    {
      kind: "write",
      name: "charge_card",
      async run() {
        runs++;
        // The side effect happens; then the store stops answering before the outcome is recorded.
        redis.stop();
        return { charged: true };
      },
    },
    store,
  );
  try {
    const runId = uniqueRunId("unanswered-complete");
    const started = performance.now();
    const first = await tool.runDetailed({ n: 1 }, { runId });
    const elapsed = performance.now() - started;
    assert.equal(first.outcome, "executed");
    assert.deepEqual(first.result, { charged: true });
    assert.match(first.notice ?? "", /could not be recorded/);
    // Three tries of the complete, each ending at the timeout, with two short pauses between.
    assert.ok(elapsed < 3 * TIMEOUT_MS + 150 + SLACK_MS, `ended after ${elapsed} ms`);
    // Resumed, the server applies the completes it was sent, never a release: a duplicate gets
    // the result (or finds it running, were they lost), and the handler never runs again.
    redis.resume();
    const again = await tool.runDetailed({ n: 1 }, { runId });
    assert.ok(["replayed", "in_flight"].includes(again.outcome), `a duplicate was ${again.outcome}`);
    if (again.outcome === "replayed") assert.deepEqual(again.result, { charged: true });
    assert.equal(runs, 1);
  } finally {
    redis.kill();
    await store.close();
  }
});

/** A command as `Deadlines` sees one: answered by `reply()`, or rejected by the client (`reject`). */
function pending() {
  const command = {
    isResolved: false,
    rejections: [],
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
  const deadlines = new Deadlines(TIMEOUT_MS);
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
  assert.ok(deadlines.commands.filter((c) => c !== undefined).length <= 1, `${deadlines.commands.length} commands kept`);
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
  assert.equal(deadlines.commands.filter((c) => c !== undefined).length, 1);
  // The timer is unref'd: nothing here keeps the test's process alive.
});
