// The operator API on every store (memory, SQLite, Redis, Valkey, Redis Cluster, PostgreSQL):
// `store.get` reads an entry whole without giving its owner away, `store.list` filters and pages
// as `toolonce ls` does, `store.resolve` settles only the unknown attempt it read (a live claim
// only with force), and `store.remove` deletes only the settled entry it read: one deleted and
// claimed again in between (the agent's retry) is answered `changed` and kept.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const crypto = require("node:crypto");
const { openStore, idempotent, idemKey, InvalidArguments } = require("..");
const { backendOf } = require("../dist/open.js");
const { storeUrls, uniqueRunId, sleep, defined } = require("./support.js");

const LONG = 60_000;

/** A claim of `key` by a fresh owner, through the backend (as a worker's claim), with `leaseMs`. */
async function claim(store, key, leaseMs, about = {}) {
  const owner = crypto.randomBytes(16).toString("hex");
  const fingerprint = crypto.createHash("sha256").update(key).digest("hex");
  const answer = await backendOf(store).claim({ key, fingerprint, owner, leaseMs, retentionMs: LONG, takeover: false, about });
  assert.equal(answer.kind, "won", JSON.stringify(answer));
  return owner;
}

async function untilUnknown(store, key) {
  const deadline = Date.now() + 30_000;
  while ((await store.get(key))?.state !== "unknown") {
    assert.ok(Date.now() < deadline, "never became unknown");
    await sleep(20);
  }
  return store.get(key);
}

/**
 * A Redis store under a prefix of this test's own: a listing reads every key of the store before
 * it filters, and other test files leave undecodable values on the shared servers on purpose.
 */
function own(url) {
  if (!/^redis/.test(url)) return url;
  return `${url}${url.includes("?") ? "&" : "?"}prefix=operator-${process.pid}-`;
}

for (const [name, shared] of Object.entries(storeUrls())) {
  const url = own(shared);
  test(`${name}: the operator API lists, reads, resolves and removes only what it read`, { timeout: 120_000 }, async (t) => {
    const store = await openStore(url);
    t.after(() => store.close());

    await t.test("get reads an entry whole and shows its owner only as a digest", async () => {
      const scope = uniqueRunId("get");
      const key = idemKey(scope, "send_email", { to: "a@x" });
      const owner = await claim(store, key, LONG, { scope, tool: "send_email", detail: "to a@x" });
      const entry = defined(await store.get(key));
      assert.equal(entry.state, "running");
      assert.deepEqual([entry.scope, entry.tool, entry.detail, entry.attempts], [scope, "send_email", "to a@x", 1]);
      assert.match(defined(entry.ownerDigest), /^[0-9a-f]{12}$/);
      assert.ok(!JSON.stringify(entry).includes(owner), "the owner token is never shown");
      assert.ok(defined(entry.leaseEndsAt) > new Date(), "a running entry's lease ends in the future");
      assert.ok(entry.startedAt <= new Date(Date.now() + 1000));
      assert.equal(await store.get(idemKey(scope, "other", {})), undefined);
      await assert.rejects(store.get("idem:XYZ"), InvalidArguments);
    });

    await t.test("list filters by state, scope and tool, and pages with its cursor", async () => {
      const scope = uniqueRunId("list");
      const send = idempotent({ kind: "write", name: "send_email", run: async (a) => ({ sent: a.n }) }, store);
      const pay = idempotent({ kind: "write", name: "pay", run: async () => ({ paid: true }) }, store);
      for (let n = 0; n < 5; n++) await send.run({ n }, { runId: scope });
      await pay.run({}, { runId: scope });
      const seen = [];
      let cursor;
      let pages = 0;
      do {
        const page = await store.list({ scope, tool: "send_email", state: "done", limit: 2, cursor });
        assert.ok(page.entries.length <= 2);
        seen.push(...page.entries);
        cursor = page.next;
        assert.ok(++pages < 200, "the pages end");
      } while (cursor !== undefined);
      assert.equal(seen.length, 5, JSON.stringify(seen.map((e) => e.key)));
      assert.ok(seen.every((e) => e.scope === scope && e.tool === "send_email" && e.state === "done"));
      assert.equal(new Set(seen.map((e) => e.key)).size, 5, "no entry twice");
      let all = [];
      cursor = undefined;
      do {
        const page = await store.list({ scope, cursor, limit: 1000 });
        all = all.concat(page.entries);
        cursor = page.next;
      } while (cursor !== undefined);
      assert.equal(all.length, 6);
      const none = await store.list({ scope, state: "unknown", limit: 1000 });
      assert.equal(none.entries.length, 0);
      // @ts-expect-error: no such state
      await assert.rejects(store.list({ state: "lost" }), InvalidArguments);
      await assert.rejects(store.list({ limit: 0 }), InvalidArguments);
    });

    await t.test("resolve settles the unknown attempt it read, and a live claim only with force", async () => {
      const scope = uniqueRunId("resolve");
      const key = idemKey(scope, "charge", {});
      await claim(store, key, 300);
      const unknown = await untilUnknown(store, key);
      assert.deepEqual(await store.resolve(key, unknown, { done: { charged: true } }), { kind: "applied" });
      const done = defined(await store.get(key));
      assert.equal(done.state, "done");
      assert.deepEqual(done.result, { charged: true });
      // The same read again: the entry is settled now, nothing is overwritten.
      const again = await store.resolve(key, unknown, "release");
      assert.equal(again.kind, "settled");
      assert.equal(again.entry.state, "done");

      const liveKey = idemKey(scope, "live", {});
      await claim(store, liveKey, LONG);
      const live = defined(await store.get(liveKey));
      assert.equal((await store.resolve(liveKey, live, "release")).kind, "live");
      assert.equal(defined(await store.get(liveKey)).state, "running", "the live claim is kept");
      assert.deepEqual(await store.resolve(liveKey, live, { failed: "stuck: charged by hand" }, { force: true }), { kind: "applied" });
      assert.equal(defined(defined(await store.get(liveKey)).error).message, "stuck: charged by hand");
      // @ts-expect-error: an entry made up, not one the store gave
      await assert.rejects(store.resolve(liveKey, { state: "unknown" }, "release"), InvalidArguments);
      await assert.rejects(store.resolve(key, live, "release"), /the entry seen is of/);
    });

    await t.test("a resolve of an attempt taken over since it was read answers changed", async () => {
      const scope = uniqueRunId("resolve-changed");
      const key = idemKey(scope, "charge", {});
      await claim(store, key, 300);
      const seen = await untilUnknown(store, key);
      // Another operator releases it, and the agent's retry claims it again.
      assert.equal((await store.resolve(key, seen, "release")).kind, "applied");
      await claim(store, key, 300);
      await untilUnknown(store, key);
      const answer = await store.resolve(key, seen, { done: 1 });
      assert.equal(answer.kind, "changed");
      assert.equal(answer.entry.state, "unknown");
      assert.notEqual(answer.entry.ownerDigest, seen.ownerDigest);
    });

    await t.test("remove deletes the settled entry it read, and not a claim made in between", async () => {
      const scope = uniqueRunId("remove");
      let runs = 0;
      const send = idempotent({ kind: "write", name: "send_email", run: async () => ++runs }, store);
      await send.run({}, { runId: scope });
      const key = idemKey(scope, "send_email", {});
      const seen = defined(await store.get(key));
      assert.equal(seen.state, "done");
      // Between the read and the removal: another operator removes it, the agent retries and claims it.
      assert.deepEqual(await store.remove(key, seen), { kind: "applied" });
      assert.equal(await store.get(key), undefined);
      // A later moment (times are whole milliseconds: one entry in one millisecond cannot be told from another).
      await sleep(5);
      const retry = await claim(store, key, LONG);
      const answer = await store.remove(key, seen);
      assert.equal(answer.kind, "changed", JSON.stringify(answer));
      assert.equal(answer.entry.state, "running");
      assert.equal(await backendOf(store).complete(key, retry, '"second"', LONG), true, "the retry's claim was kept");
      // Settled anew at another time: still not the entry read.
      assert.equal((await store.remove(key, seen)).kind, "changed");
      assert.equal(defined(await store.get(key)).result, "second");
      assert.equal((await store.remove(key, defined(await store.get(key)))).kind, "applied");
      assert.equal((await store.remove(key, seen)).kind, "absent");
      // @ts-expect-error: an entry made up, not one the store gave
      await assert.rejects(store.remove(key, { state: "done" }), InvalidArguments);
    });

    await t.test("remove refuses an unsettled entry: a claim is released only as the attempt read", async () => {
      const key = idemKey(uniqueRunId("remove-claim"), "x", {});
      await claim(store, key, LONG);
      await assert.rejects(store.remove(key, defined(await store.get(key))), /resolve\(key, seen, "release"\)/);
      assert.equal(defined(await store.get(key)).state, "running");
    });
  });
}
