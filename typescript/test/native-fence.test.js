// The owner's fenced writes (src/stores/redis-native.ts), counted with INFO commandstats on
// servers of this file's own: on Valkey 8.1, which has `SET … IFEQ`, complete, sticky fail and
// renew are one native command each and still refuse an owner whose claim was taken over or
// resolved; on Redis 7, which has not, the scripts compare the whole running value first and
// still fence by the owner's digest when it changed; a failover to a server without the option
// falls back to the script and still records the outcome.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const crypto = require("node:crypto");
const { Redis } = require("ioredis");
const { openStore, idempotent, idemKey, PermanentError } = require("..");
const { backendOf } = require("../dist/open.js");
const { seenOf } = require("../dist/store.js");
const { uniqueRunId, startRedis, startValkey, sleep, errorOf, defined } = require("./support.js");

const token = () => crypto.randomBytes(16).toString("hex");
const digest = (owner) => crypto.createHash("sha1").update(owner).digest("hex");

/** A claim request of `key` by `owner` with a `leaseMs` lease and a minute's retention. */
function request(key, owner, leaseMs, takeover = false) {
  return { key, fingerprint: "f".repeat(64), owner, leaseMs, retentionMs: 60_000, takeover, about: { tool: "t" } };
}

/** The server's command counts since the last RESETSTAT, without CONFIG and INFO. */
async function commands(redis) {
  const info = await redis.info("commandstats");
  const counts = {};
  for (const m of info.matchAll(/^cmdstat_([a-z|]+):calls=(\d+)/gm)) if (!m[1].startsWith("config") && m[1] !== "info") counts[m[1]] = Number(m[2]);
  return counts;
}

/** A server of `start`'s, a client on it, and a store on it with its backend. */
function onServer(start) {
  const it = {};
  test.before(async () => {
    it.server = await start();
    it.redis = new Redis(it.server.url);
    it.store = await openStore(it.server.url);
    it.backend = backendOf(it.store);
  });
  test.after(async () => {
    await it.store.close();
    it.redis.disconnect();
    it.server.child.kill("SIGKILL");
  });
  return it;
}

test.describe("on Valkey 8.1", () => {
  const it = onServer(startValkey);

  test("the server is Valkey 8.1 and the store found SET … IFEQ on it", async () => {
    const info = await it.redis.info("server");
    assert.match(info, /^server_name:valkey\r?$/m);
    assert.match(info, /^valkey_version:8\.1\./m);
    assert.equal(it.backend.fence, true);
  });

  test("a first-time call is two native commands, SET … NX GET and SET … IFEQ, with no script; a replay is one SET", async () => {
    const tool = idempotent({ kind: "write", name: "t", run: async () => ({ n: 1.5 }) }, it.store);
    const ctx = { runId: uniqueRunId() };
    await it.redis.config("RESETSTAT");
    assert.deepEqual(await tool.run({ a: 1 }, ctx), { n: 1.5 });
    assert.deepEqual(await commands(it.redis), { set: 2 });
    await it.redis.config("RESETSTAT");
    assert.equal((await tool.runDetailed({ a: 1 }, ctx)).outcome, "replayed");
    assert.deepEqual(await commands(it.redis), { set: 1 });
    assert.equal(it.backend.held.size, 0, "the value held for the owner is dropped once it settled");
  });

  test("a sticky failure is two native commands too, and a transient one releases by the script's whole-value compare", async () => {
    const sticky = idempotent({ kind: "write", name: "t", run: async () => Promise.reject(new PermanentError("no")) }, it.store);
    await it.redis.config("RESETSTAT");
    assert.equal((await sticky.runDetailed({}, { runId: uniqueRunId() })).outcome, "executed");
    assert.deepEqual(await commands(it.redis), { set: 2 });
    const transient = idempotent({ kind: "write", name: "t", run: async () => Promise.reject(new Error("later")) }, it.store);
    await it.redis.config("RESETSTAT");
    await assert.rejects(transient.run({}, { runId: uniqueRunId() }), /later/);
    // `SET` cannot delete: the release is fail.lua, which GETs, compares and DELs.
    assert.deepEqual(await commands(it.redis), { set: 1, evalsha: 1, get: 1, del: 1 });
    assert.equal(it.backend.held.size, 0);
  });

  test("a takeover between claim and complete makes the old owner's native complete refused, and the new owner's entry stays", async () => {
    const key = `idem:${token()}`;
    const [a, b] = [token(), token()];
    assert.deepEqual(await it.backend.claim(request(key, a, 100)), { kind: "won" });
    await sleep(250);
    assert.deepEqual(await it.backend.claim(request(key, b, 60_000, true)), { kind: "took_over" });
    await it.redis.config("RESETSTAT");
    assert.equal(await it.backend.complete(key, a, '"stale"', 60_000), false);
    // The native command was tried and found another value; the script's digest fence refused too.
    assert.deepEqual(await commands(it.redis), { set: 1, evalsha: 1, get: 2 });
    const entry = await it.backend.get(key);
    assert.equal(entry.state, "running");
    assert.equal(entry.owner, digest(b));
    assert.equal(it.backend.held.get(a), undefined);
    assert.equal(await it.backend.complete(key, b, '"fresh"', 60_000), true);
    const { settledAt, ...settled } = await it.backend.get(key);
    assert.deepEqual(settled, { state: "done", fingerprint: "f".repeat(64), result: "fresh" });
    assert.ok(Math.abs(settledAt - Date.now()) < 60_000, `settled at ${settledAt}`);
  });

  test("a resolve between claim and complete makes the old owner's native complete and sticky fail refused", async () => {
    const key = `idem:${token()}`;
    const a = token();
    await it.backend.claim(request(key, a, 100));
    await sleep(250);
    const seen = seenOf(await it.backend.get(key));
    assert.deepEqual(await it.backend.resolve(key, seen, { done: '"by hand"' }, 60_000), { kind: "applied" });
    assert.equal(await it.backend.complete(key, a, '"late"', 60_000), false);
    assert.equal(await it.backend.fail(key, a, '{"message":"late","class":"permanent"}', 60_000), false);
    assert.equal((await it.backend.get(key)).result, "by hand");
  });

  test("a renewal is one native SET that keeps the value byte for byte; after a takeover it is refused and the held value dropped", async () => {
    const key = `idem:${token()}`;
    const [a, b] = [token(), token()];
    await it.backend.claim(request(key, a, 100));
    const before = await it.redis.get(key);
    await it.redis.config("RESETSTAT");
    assert.equal(await it.backend.renew(key, a, 5000), true);
    assert.deepEqual(await commands(it.redis), { set: 1 });
    assert.equal(await it.redis.get(key), before);
    const pttl = await it.redis.pttl(key);
    assert.ok(pttl > 64_000 && pttl <= 65_000, `PTTL ${pttl}: the new lease plus the retention`);
    await it.backend.renew(key, a, 100);
    await sleep(250);
    assert.deepEqual(await it.backend.claim(request(key, b, 60_000, true)), { kind: "took_over" });
    assert.equal(await it.backend.renew(key, a, 5000), false);
    assert.equal(it.backend.held.get(a), undefined);
    assert.equal((await it.backend.get(key)).owner, digest(b));
  });

  test("a claim retried after a lost reply forgets the held value, and its complete goes by the owner's digest", async () => {
    const key = `idem:${token()}`;
    const a = token();
    assert.deepEqual(await it.backend.claim(request(key, a, 60_000)), { kind: "won" });
    assert.ok(it.backend.held.get(a));
    // The retry finds its own running entry: the script renews it, and its bytes are not known.
    assert.deepEqual(await it.backend.claim(request(key, a, 60_000)), { kind: "won" });
    assert.equal(it.backend.held.get(a), undefined);
    await it.redis.config("RESETSTAT");
    assert.equal(await it.backend.complete(key, a, "1", 60_000), true);
    assert.deepEqual(await commands(it.redis), { evalsha: 1, get: 1, set: 1, time: 1 });
  });

  test("a settled entry written natively is the one the script writes from the same running value, but for its clock", async () => {
    const [k1, k2] = [`idem:${token()}`, `idem:${token()}`];
    const [a, b] = [token(), token()];
    const about = { scope: 'run "é\u2028"', tool: "t", detail: "x\\y" };
    await it.backend.claim({ ...request(k1, a, 60_000), about });
    await it.backend.claim({ ...request(k2, b, 60_000), about });
    // k2's owner settles by the digest fence: the script's own settled entry.
    it.backend.held.forget(b);
    await it.backend.complete(k1, a, '{"z":[1,2.50,"\\u00e9"]}', 60_000);
    await it.backend.complete(k2, b, '{"z":[1,2.50,"\\u00e9"]}', 60_000);
    // Each keeps the digest of the owner whose attempt settled it (what a removal compares).
    const digest = (t) => require("node:crypto").createHash("sha1").update(t).digest("hex");
    const times = (v) => v.replace(/"(startedAt|completedAt|settledAt|firstStartedAt)":\d+/g, '"$1":T').replace(/"owner":"[0-9a-f]{40}"/, '"owner":D');
    const [v1, v2] = [await it.redis.get(k1), await it.redis.get(k2)];
    assert.equal(times(v1), times(v2));
    assert.ok(v1.includes(`"owner":"${digest(a)}"`) && v2.includes(`"owner":"${digest(b)}"`), `${v1}\n${v2}`);
    assert.match(v1, /^\{"status":"done","result":\{"z":\[1,2\.50,"\\u00e9"\]\},"startedAt":\d+,"completedAt":(\d+),"settledAt":\1,"owner":"[0-9a-f]{40}","fingerprint":/);
  });
});

test.describe("on Redis 7", () => {
  const it = onServer(startRedis);

  test("the store found no SET … IFEQ, and a complete after a takeover is refused by the digest once the whole value differs", async () => {
    assert.equal(it.backend.fence, false);
    const key = `idem:${token()}`;
    const [a, b] = [token(), token()];
    assert.deepEqual(await it.backend.claim(request(key, a, 100)), { kind: "won" });
    assert.ok(it.backend.held.get(a), "the native claim's value is held");
    await sleep(250);
    assert.deepEqual(await it.backend.claim(request(key, b, 60_000, true)), { kind: "took_over" });
    await it.redis.config("RESETSTAT");
    assert.equal(await it.backend.complete(key, a, '"stale"', 60_000), false);
    assert.deepEqual(await commands(it.redis), { evalsha: 1, get: 2 });
    assert.equal((await it.backend.get(key)).owner, digest(b));
  });

  test("a renewal is the script's whole-value compare and PEXPIRE", async () => {
    const key = `idem:${token()}`;
    const a = token();
    await it.backend.claim(request(key, a, 100));
    await it.redis.config("RESETSTAT");
    assert.equal(await it.backend.renew(key, a, 5000), true);
    assert.deepEqual(await commands(it.redis), { evalsha: 1, get: 1, pexpire: 1 });
    const pttl = await it.redis.pttl(key);
    assert.ok(pttl > 64_000 && pttl <= 65_000, `PTTL ${pttl}`);
  });
});

test("a failover from Valkey to a server without SET … IFEQ makes the native complete fall back to the script, and the outcome is recorded", async () => {
  const valkey = await startValkey();
  const store = await openStore(valkey.url);
  let redis;
  try {
    // `fence` is the Redis backend's own, not the Backend interface's.
    assert.equal(/** @type {any} */ (backendOf(store)).fence, true);
    /** @type {((value: unknown) => void) | undefined} */
    let release;
    const tool = idempotent({ kind: "write", name: "charge", run: () => new Promise((r) => (release = r)) }, store, { lease: 30_000, retention: 60_000 });
    const runId = uniqueRunId();
    const running = tool.runDetailed({ n: 1 }, { runId });
    while (release === undefined) await sleep(5);
    // The replica that takes over has the entry, as replication gave it, and no IFEQ.
    const key = idemKey(runId, "charge", { n: 1 });
    const probe = new Redis(valkey.url);
    const [value, pttl] = [await probe.get(key), await probe.pttl(key)];
    probe.disconnect();
    valkey.child.kill("SIGKILL");
    await new Promise((r) => valkey.child.once("exit", r));
    const server = await startRedis([], { port: valkey.port });
    redis = { server, client: new Redis(server.url) };
    await redis.client.set(key, defined(value), "PX", pttl);
    await redis.client.config("RESETSTAT");
    release({ charged: true });
    const answer = await running;
    assert.equal(answer.outcome, "executed");
    assert.equal(answer.notice, undefined);
    // The refused SET … IFEQ (ERR syntax error), then the script, loaded again on the new server.
    assert.deepEqual(await commands(redis.client), { set: 2, evalsha: 1, eval: 1, get: 1 });
    assert.match(await redis.client.info("commandstats"), /^cmdstat_set:.*failed_calls=1\r?$/m);
    const done = JSON.parse(defined(await redis.client.get(key)));
    assert.equal(done.status, "done");
    assert.deepEqual(done.result, { charged: true });
  } finally {
    await store.close();
    redis?.client.disconnect();
    redis?.server.child.kill("SIGKILL");
    valkey.child.kill("SIGKILL");
  }
});

test("the held values are bounded: past the limit the oldest owner's is forgotten, which only costs its settle the fast path", () => {
  const { HeldValues, held } = require("../dist/stores/redis-native.js");
  const values = new HeldValues();
  for (let i = 0; i <= HeldValues.MAX_HELD; i++) values.remember(`owner-${i}`, held(`{"n":${i},"fingerprint":""}`, i, 1));
  assert.equal(values.size, HeldValues.MAX_HELD);
  assert.equal(values.get("owner-0"), undefined);
  assert.ok(values.get(`owner-${HeldValues.MAX_HELD}`));
  assert.ok(values.take("owner-1"));
  assert.equal(values.take("owner-1"), undefined);
});

test("a call on a closed store with the native claim is refused as store_unavailable and neither runs nor writes anything", async () => {
  const server = await startValkey();
  const redis = new Redis(server.url);
  try {
    const store = await openStore(server.url);
    let ran = 0;
    const tool = idempotent({ kind: "write", name: "closed_store", run: async () => ++ran }, store);
    await store.close();
    const runId = uniqueRunId();
    const answer = await tool.runDetailed({ n: 1 }, { runId });
    assert.equal(answer.outcome, "store_unavailable");
    assert.match(errorOf(answer).message, /the store is closed/);
    assert.equal(ran, 0);
    assert.equal(await redis.exists(idemKey(runId, "closed_store", { n: 1 })), 0);
  } finally {
    redis.disconnect();
    server.child.kill("SIGKILL");
  }
});
