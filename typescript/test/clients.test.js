// The Redis store's wire form and the ways to open a store: a first-time call is one native
// `SET … NX GET PX` and the complete script, a replay one `SET`; the running entry has the
// exact shape the core's scripts fence on, with the owner as a digest; a key prefix; a server
// that may evict entries is refused; and stores opened on the program's own clients (ioredis,
// node-redis, their clusters, a pg Pool and Client) work like stores opened by URL.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { Redis } = require("ioredis");
const { createClient, createCluster } = require("redis");
const pg = require("pg");
const { openStore, idempotent, idemKey, InvalidArguments } = require("..");
const { storeUrls, uniqueRunId, startRedis, sleep } = require("./support.js");
const { startRedis: startRedisWith } = require("./servers.js");

const urls = storeUrls();

/** Runs one operation twice on `store`: [first outcome, second outcome, handler runs]. */
async function twice(store, runId = uniqueRunId("client")) {
  let runs = 0;
  const tool = idempotent({ kind: "write", name: "send_email", run: async () => (runs++, { sent: true }) }, store);
  const a = await tool.runDetailed({ to: "a@x" }, { runId });
  const b = await tool.runDetailed({ to: "a@x" }, { runId });
  return [a.outcome, b.outcome, runs];
}

test.describe("on Redis 7", () => {
  let server;
  let redis;
  test.before(async () => {
    server = await startRedis();
    redis = new Redis(server.url);
  });
  test.after(async () => {
    redis.disconnect();
    server.child.kill("SIGKILL");
  });

  async function commands() {
    const info = await redis.info("commandstats");
    const counts = {};
    for (const m of info.matchAll(/^cmdstat_([a-z|]+):calls=(\d+)/gm)) if (!m[1].startsWith("config") && m[1] !== "info") counts[m[1]] = Number(m[2]);
    return counts;
  }

  test("a first-time call is one SET … NX GET and the complete script on its fast path; a replay is one SET", async () => {
    const store = await openStore(server.url);
    await redis.config("RESETSTAT");
    const tool = idempotent({ kind: "write", name: "t", run: async () => 1 }, store);
    const ctx = { runId: uniqueRunId() };
    await tool.run({}, ctx);
    // Inside the script: the GET that compares the whole running value and the settled
    // entry's SET, built here; no TIME and no parsing (the digest fence is not reached).
    assert.deepEqual(await commands(), { set: 2, evalsha: 1, get: 1 });
    await redis.config("RESETSTAT");
    assert.equal((await tool.runDetailed({}, ctx)).outcome, "replayed");
    assert.deepEqual(await commands(), { set: 1 });
    await store.close();
  });

  test("the running entry has the shape the core's scripts fence on, with the owner's digest and not its token", async () => {
    const store = await openStore(`${server.url}?prefix=app:`);
    /** @type {((value: unknown) => void) | undefined} */
    let release;
    const tool = idempotent({ kind: "write", name: "charge", run: () => new Promise((r) => (release = r)) }, store, { lease: 5000, retention: 60_000 });
    const runId = uniqueRunId();
    const running = tool.run({ amount: 5 }, { runId });
    while (release === undefined) await sleep(5);
    const key = idemKey(runId, "charge", { amount: 5 });
    assert.equal(await redis.exists(key), 0, "the prefix is not applied");
    const value = await redis.get(`app:${key}`);
    const shape = new RegExp(
      '^\\{"status":"running","startedAt":(\\d+),"owner":"[0-9a-f]{40}","retention":60000,"fingerprint":"[0-9a-f]{64}",' +
        `"firstStartedAt":(\\d+),"attempts":1,"scope":${JSON.stringify(JSON.stringify(runId)).slice(1, -1)},"tool":"charge"\\}$`,
    );
    assert.match(value, shape);
    const pttl = await redis.pttl(`app:${key}`);
    assert.ok(pttl > 60_000 && pttl <= 65_000, `PTTL ${pttl}: the lease plus the retention`);
    release({ ok: true });
    await running;
    const done = JSON.parse(await redis.get(`app:${key}`));
    assert.equal(done.status, "done");
    assert.deepEqual(done.result, { ok: true });
    // The settled entry keeps the digest of the owner that settled it (a removal is fenced
    // on it), never the owner's token.
    assert.equal(done.owner, JSON.parse(value).owner);
    await store.close();
  });

  test("a server that may evict entries is refused, unless the URL accepts the risk", async () => {
    const evicting = await startRedisWith(require("./support.js").tempDir(), ["--maxmemory-policy", "allkeys-lru"]);
    try {
      await assert.rejects(openStore(evicting.url), (e) => e instanceof InvalidArguments && /maxmemory-policy allkeys-lru/.test(e.message));
      const store = await openStore(`${evicting.url}?allow_eviction=true`);
      assert.deepEqual(await twice(store), ["executed", "replayed", 1]);
      await store.close();
    } finally {
      evicting.child.kill("SIGKILL");
    }
  });
});

test("a store on the program's own ioredis client, and on its node-redis client, share entries with one opened by URL", async () => {
  const runId = uniqueRunId("clients");
  const byUrl = await openStore(urls.redis);
  assert.deepEqual((await twice(byUrl, runId)).slice(0, 1), ["executed"]);
  const io = new Redis(urls.redis);
  const nodeRedis = createClient({ url: urls.redis });
  await nodeRedis.connect();
  try {
    for (const client of [io, nodeRedis]) {
      const store = await openStore(client);
      assert.deepEqual(await twice(store, runId), ["replayed", "replayed", 0]);
      await store.close();
    }
    // Closing the store leaves the program's client open.
    assert.equal(await io.ping(), "PONG");
    assert.equal(await nodeRedis.ping(), "PONG");
  } finally {
    io.disconnect();
    await nodeRedis.quit();
    await byUrl.close();
  }
});

test("a store on the program's own ioredis Cluster and node-redis cluster works", async () => {
  const nodes = urls["redis cluster"].replace("redis+cluster://", "").split(",").map((h) => ({ host: h.split(":")[0], port: Number(h.split(":")[1]) }));
  const io = new Redis.Cluster(nodes);
  const nodeRedis = createCluster({ rootNodes: nodes.map((n) => ({ url: `redis://${n.host}:${n.port}` })) });
  await nodeRedis.connect();
  try {
    for (const client of [io, nodeRedis]) {
      const store = await openStore(client);
      // Several operations, so that they land on different masters.
      for (let i = 0; i < 5; i++) assert.deepEqual(await twice(store), ["executed", "replayed", 1]);
      await store.close();
    }
  } finally {
    io.disconnect();
    await nodeRedis.close();
  }
});

test("a store on the program's own pg Pool and pg Client works, and leaves them open", async () => {
  const pool = new pg.Pool({ connectionString: urls.postgres });
  const client = new pg.Client({ connectionString: urls.postgres });
  await client.connect();
  try {
    for (const c of [pool, client]) {
      const store = await openStore(c);
      assert.deepEqual(await twice(store), ["executed", "replayed", 1]);
      await store.close();
      assert.equal((await c.query("select 1 as one")).rows[0].one, 1);
    }
  } finally {
    await client.end();
    await pool.end();
  }
});

test("something that is no client is refused, naming what is expected", async () => {
  await assert.rejects(openStore({ hello: "world" }), (e) => e instanceof InvalidArguments && /ioredis/.test(e.message));
  await assert.rejects(openStore("redis://h:99999"), (e) => e instanceof InvalidArguments && /port/.test(e.message));
  await assert.rejects(openStore("redis://u:s3cret@h:6379/?nope=1"), (e) => e instanceof InvalidArguments && !/s3cret/.test(e.message) && /nope/.test(e.message));
});

test("with node-redis installed and not ioredis, redis:// and redis+cluster:// URLs open through node-redis", async () => {
  const { runProgram } = require("./support.js");
  const path = require("node:path");
  const targets = [urls.redis, urls["redis cluster"]];
  const out = await runProgram(process.execPath, ["-r", path.join(__dirname, "fixtures", "no-ioredis.js"), path.join(__dirname, "fixtures", "every-store.js"), ...targets]);
  assert.equal(out.code, 0, out.stderr);
  const answers = JSON.parse(out.stdout);
  for (const url of targets) assert.deepEqual(answers[url], ["executed", "replayed", 1, true], url);
});
