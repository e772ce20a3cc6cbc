// A removal or a resolve whose reply never comes (a Redis server stopped between the read and
// the write) is reported as an effect unknown: the API throws EffectUnknown and the command
// exits 73, saying it may or may not have been applied, never "nothing was done". Resumed, the
// server applies the write it was sent: the entry is gone, which "nothing was done" would deny.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const crypto = require("node:crypto");
const { openStore, idempotent, idemKey, EffectUnknown, Store } = require("..");
const { backendOf } = require("../dist/open.js");
const { main } = require("../bin/operate.js");
const { startRedis, uniqueRunId, sleep, defined } = require("./support.js");

/** A settled entry of a fresh operation on `store`; resolves with its key. */
async function settled(store) {
  const runId = uniqueRunId("unanswered-rm");
  await idempotent({ kind: "write", name: "send_email", run: async () => ({ sent: true }) }, store).run({}, { runId });
  return idemKey(runId, "send_email", {});
}

/** Runs `body` with every `Store.get` stopping `redis` once it has read: the next command is never answered. */
async function stoppingAfterRead(redis, body) {
  const get = Store.prototype.get;
  Store.prototype.get = async function (key) {
    const entry = await get.call(this, key);
    redis.child.kill("SIGSTOP");
    return entry;
  };
  try {
    return await body();
  } finally {
    Store.prototype.get = get;
    redis.child.kill("SIGCONT");
  }
}

async function untilGone(store, key) {
  const deadline = Date.now() + 10_000;
  while ((await store.get(key)) !== undefined) {
    assert.ok(Date.now() < deadline, "the removal sent was never applied");
    await sleep(20);
  }
}

test("a removal whose reply was lost throws EffectUnknown, and it did apply", { timeout: 60_000 }, async (t) => {
  const redis = await startRedis();
  t.after(() => redis.child.kill("SIGKILL"));
  const store = await openStore(redis.url);
  t.after(() => store.close());
  const key = await settled(store);
  const seen = await stoppingAfterRead(redis, async () => {
    const seen = defined(await store.get(key));
    const lost = await store.remove(key, seen).then(
      () => undefined,
      (e) => e,
    );
    assert.ok(lost instanceof EffectUnknown, `expected EffectUnknown, got ${lost}`);
    assert.equal(lost.outcome, "unknown");
    assert.match(lost.message, /may or may not have been applied/);
    return seen;
  });
  await untilGone(store, key);
  assert.equal((await store.remove(key, seen)).kind, "absent");
});

test("`toolonce rm` and `toolonce resolve` whose reply was lost exit 73, saying the write may have applied", { timeout: 60_000 }, async (t) => {
  const redis = await startRedis();
  t.after(() => redis.child.kill("SIGKILL"));
  const store = await openStore(redis.url);
  t.after(() => store.close());
  const errors = [];
  const write = process.stderr.write;
  process.stderr.write = (text) => (errors.push(String(text)), true);
  let codes;
  try {
    const key = await settled(store);
    // An unknown entry for resolve: claimed with a short lease by a caller that went away.
    const unknownKey = idemKey(uniqueRunId("unanswered-resolve"), "charge", {});
    const owner = crypto.randomBytes(16).toString("hex");
    const fingerprint = crypto.createHash("sha256").update(unknownKey).digest("hex");
    await backendOf(store).claim({ key: unknownKey, fingerprint, owner, leaseMs: 100, retentionMs: 60_000, takeover: false, about: {} });
    while (defined(await store.get(unknownKey)).state !== "unknown") await sleep(20);
    codes = [
      await stoppingAfterRead(redis, () => main("rm", ["--store", redis.url, key])),
      await stoppingAfterRead(redis, () => main("resolve", ["--store", redis.url, unknownKey, "--release"])),
    ];
    await untilGone(store, key);
    await untilGone(store, unknownKey);
  } finally {
    process.stderr.write = write;
  }
  assert.deepEqual(codes, [73, 73], errors.join(""));
  const said = errors.join("");
  assert.match(said, /the removal of idem:[0-9a-f]{32} may or may not have been applied/);
  assert.match(said, /the resolution of idem:[0-9a-f]{32} may or may not have been applied/);
  assert.match(said, /toolonce show/);
  assert.doesNotMatch(said, /nothing was (done|changed)/);
});
