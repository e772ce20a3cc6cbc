// A claim that took over an earlier attempt never deletes that attempt's record (docs/contract.md,
// layer steps 3 and 7), on every store: a takeover whose reply was lost, or whose tool failed
// transiently, is given back (a fenced renewal with a zero lease: `unknown` at once, attempts
// kept), so a `hold` caller never runs an operation that may already have taken effect; a fresh
// claim whose reply was lost is still released. The store is real; the faults are injected
// between the layer and it: a claim applied whose reply is then lost, a complete never sent (an
// attempt that ran and died before recording), a read that fails.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const crypto = require("node:crypto");
const { openStore, idempotent } = require("..");
const { Store, backendOf } = require("../dist/open.js");
const { StoreError } = require("../dist/errors.js");
const { storeUrls, uniqueRunId, sleep, errorOf } = require("./support.js");

/** How long the first attempt's lease is: it dies before recording, and is unknown after it. */
const LEASE_MS = 30;
const ARGS = { customerId: "cus_takeover", amountCents: 700 };

/** Redis keeps expiries in whole milliseconds: a zero lease reads unknown within one. */
const isRedis = (name) => /redis|valkey/.test(name);
const atOnce = (name) => sleep(isRedis(name) ? 3 : 0);

/** `store`'s backend behind a switchboard of faults (`faults.add("claim reply")`, …), as a Store. */
function faulty(store) {
  const backend = backendOf(store);
  const faults = new Set();
  const lost = (what) => new StoreError(`injected: ${what}`, true);
  /** @type {import("../dist/store.js").Backend} */
  const wrapped = {
    url: backend.url,
    async claim(req) {
      const answer = await backend.claim(req);
      if (faults.has("claim reply")) throw lost("the reply to the claim was lost");
      return answer;
    },
    async complete(...args) {
      if (faults.has("complete")) throw lost("the complete was never sent");
      return backend.complete(...args);
    },
    async get(key) {
      if (faults.has("get")) throw lost("the read was never answered");
      return backend.get(key);
    },
    renew: (...args) => backend.renew(...args),
    fail: (...args) => backend.fail(...args),
    resolve: (...args) => backend.resolve(...args),
    // The operator's calls pass through, so that the wrapper is a whole Backend.
    inspect: (key) => backend.inspect(key),
    list: (query) => backend.list(query),
    remove: (key, seen) => backend.remove(key, seen),
    close: () => backend.close(),
  };
  return { store: new Store(wrapped, {}), faults };
}

/**
 * A charge tool counting its effects; `behave(n)` may throw on the n-th run.
 * @param {(n: number) => void} [behave]
 */
function chargeTool(store, onExpired, effects, behave = () => {}) {
  return idempotent(
    {
      kind: "write",
      name: "charge_card",
      async run() {
        effects.n++;
        behave(effects.n);
        return { charged: effects.n };
      },
    },
    store,
    { lease: LEASE_MS, onExpired },
  );
}

/** Runs the first attempt, which takes effect and dies before recording it; resolves once it is unknown. */
async function interruptedAttempt(it, runId) {
  it.faults.add("complete");
  const first = await chargeTool(it.store, "hold", it.effects).runDetailed(ARGS, { runId });
  it.faults.delete("complete");
  assert.equal(first.outcome, "executed");
  assert.equal(it.effects.n, 1);
  await sleep(LEASE_MS * 3);
  const entry = await it.backend.get(first.key);
  assert.equal(entry?.state, "unknown", `the interrupted attempt reads ${JSON.stringify(entry)}`);
  assert.equal(entry.attempts, 1);
  return first.key;
}

/** Asserts that `key` is unknown with at least `attempts` attempts, and that a `hold` caller does not run it. */
async function assertGivenBack(it, name, runId, key, attempts) {
  await atOnce(name);
  const ran = it.effects.n;
  const held = await chargeTool(it.store, "hold", it.effects).runDetailed(ARGS, { runId });
  assert.equal(it.effects.n, ran, "a hold caller ran the tool again");
  assert.equal(held.outcome, "unknown");
  const entry = await it.backend.get(key);
  assert.equal(entry?.state, "unknown", `the entry reads ${JSON.stringify(entry)}`);
  assert.ok(entry.attempts >= attempts, `attempts ${entry.attempts}, expected at least ${attempts}`);
}

async function withStore(url, body) {
  const real = await openStore(url);
  const { store, faults } = faulty(real);
  try {
    await body({ store, faults, backend: backendOf(real), effects: { n: 0 } });
  } finally {
    await real.close();
  }
}

const randomKey = () => `idem:${crypto.randomBytes(16).toString("hex")}`;
const fingerprint = "ab".repeat(32);
const claimOf = (key, owner, takeover) => ({ key, fingerprint, owner, leaseMs: 60_000, retentionMs: 60_000, takeover, about: { tool: "t" } });
const token = () => crypto.randomBytes(16).toString("hex");

for (const [name, url] of Object.entries(storeUrls())) {
  test(`${name}: a renewal with a zero lease makes the entry unknown at once and keeps its attempts`, async () => {
    await withStore(url, async ({ backend }) => {
      const key = randomKey();
      const first = token();
      assert.deepEqual(await backend.claim(claimOf(key, first, false)), { kind: "won" });
      assert.equal(await backend.renew(key, first, 0), true);
      await atOnce(name);
      const fresh = await backend.get(key);
      assert.equal(fresh?.state, "unknown", `a 60 s lease renewed to zero reads ${JSON.stringify(fresh)}`);
      assert.equal(fresh.attempts, 1);
      // Taken over (the script's path on Redis), and given back again: two attempts kept.
      const second = token();
      assert.deepEqual(await backend.claim(claimOf(key, second, true)), { kind: "took_over" });
      assert.equal((await backend.get(key))?.state, "running");
      assert.equal(await backend.renew(key, second, 0), true);
      await atOnce(name);
      const taken = await backend.get(key);
      assert.equal(taken?.state, "unknown", `the takeover renewed to zero reads ${JSON.stringify(taken)}`);
      assert.equal(taken.attempts, 2);
      // The earlier owner no longer holds it.
      assert.equal(await backend.renew(key, first, 0), false);
    });
  });

  test(`${name}: a read tells a claim that created its entry from a takeover by its start and first start`, async () => {
    await withStore(url, async ({ backend }) => {
      const key = randomKey();
      assert.deepEqual(await backend.claim({ ...claimOf(key, token(), false), leaseMs: LEASE_MS }), { kind: "won" });
      const fresh = await backend.get(key);
      assert.equal(typeof fresh.startedAt, "number", `a fresh entry reads ${JSON.stringify(fresh)}`);
      assert.equal(fresh.firstStartedAt, fresh.startedAt);
      await sleep(LEASE_MS * 3);
      assert.deepEqual(await backend.claim(claimOf(key, token(), true)), { kind: "took_over" });
      const taken = await backend.get(key);
      assert.equal(taken.attempts, 2);
      assert.equal(taken.firstStartedAt, fresh.firstStartedAt, "a takeover keeps the first start");
      assert.ok(taken.startedAt > taken.firstStartedAt, `started ${taken.startedAt}, first ${taken.firstStartedAt}`);
    });
  });

  test(`${name}: a takeover whose reply is lost leaves the entry unknown with its attempts, and a hold caller does not run it`, async () => {
    await withStore(url, async (it) => {
      const runId = uniqueRunId("takeover-lost");
      const key = await interruptedAttempt(it, runId);
      it.faults.add("claim reply");
      const taken = await chargeTool(it.store, "rerun", it.effects).runDetailed(ARGS, { runId });
      it.faults.delete("claim reply");
      assert.equal(taken.outcome, "store_unavailable");
      assert.equal(it.effects.n, 1, "the tool ran although the claim's reply was lost");
      await assertGivenBack(it, name, runId, key, 2);
    });
  });

  test(`${name}: a takeover whose reply is lost and whose entry cannot be read is given back, not released`, async () => {
    await withStore(url, async (it) => {
      const runId = uniqueRunId("takeover-unread");
      const key = await interruptedAttempt(it, runId);
      it.faults.add("claim reply");
      it.faults.add("get");
      const taken = await chargeTool(it.store, "rerun", it.effects).runDetailed(ARGS, { runId });
      it.faults.clear();
      assert.equal(taken.outcome, "store_unavailable");
      await assertGivenBack(it, name, runId, key, 2);
    });
  });

  test(`${name}: a takeover whose tool fails transiently leaves the entry unknown with the earlier attempt's record`, async () => {
    await withStore(url, async (it) => {
      const runId = uniqueRunId("takeover-transient");
      const key = await interruptedAttempt(it, runId);
      const flaky = chargeTool(it.store, "rerun", it.effects, (n) => {
        if (n === 2) throw new Error("the payment gateway timed out");
      });
      const taken = await flaky.runDetailed(ARGS, { runId });
      assert.equal(taken.outcome, "executed");
      assert.match(errorOf(taken).message, /timed out/);
      assert.equal(taken.notice, undefined);
      assert.equal(it.effects.n, 2);
      await assertGivenBack(it, name, runId, key, 2);
    });
  });

  test(`${name}: a fresh claim whose reply is lost is still released, and the next caller runs the tool`, async () => {
    await withStore(url, async (it) => {
      for (const onExpired of ["hold", "rerun"]) {
        // Under rerun the claim asked for a takeover, but found the key absent: its read shows it created the entry.
        const runId = uniqueRunId(`fresh-lost-${onExpired}`);
        it.faults.add("claim reply");
        const lost = await chargeTool(it.store, onExpired, it.effects).runDetailed(ARGS, { runId });
        it.faults.delete("claim reply");
        assert.equal(lost.outcome, "store_unavailable");
        assert.equal(await it.backend.get(lost.key), undefined, `${onExpired}: the lost claim was not released`);
        const ran = it.effects.n;
        const next = await chargeTool(it.store, "hold", it.effects).runDetailed(ARGS, { runId });
        assert.equal(next.outcome, "executed");
        assert.equal(it.effects.n, ran + 1);
      }
    });
  });
}
