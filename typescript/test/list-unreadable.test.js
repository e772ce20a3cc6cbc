// A listing that meets an entry it cannot decode (another writer, or a bug, garbled it) reports
// that entry beside the page instead of failing, so one bad entry never hides every other one
// from an operator; pages stay bounded and the walk reaches every entry. On every store that can
// hold such an entry (the memory store cannot), and through `toolonce ls`, which lists the rest,
// names the unreadable ones and exits 70.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { spawnSync } = require("node:child_process");
const path = require("node:path");
const { DatabaseSync } = require("node:sqlite");
const { Redis } = require("ioredis");
const { Client } = require("pg");
const { openStore, idempotent, idemKey } = require("..");
const { storeUrls, uniqueRunId, pkg } = require("./support.js");

/** A Redis URL under a prefix of this test's own (other tests leave garbled values on the shared servers on purpose). */
function own(url) {
  return `${url}${url.includes("?") ? "&" : "?"}prefix=unreadable-${process.pid}-`;
}

const urls = storeUrls();
const PREFIX = `unreadable-${process.pid}-`;

/** How each store's entry of `key` is garbled, as another writer could leave it. */
const garblers = {
  sqlite: async (url, key) => {
    const db = new DatabaseSync(url.slice("sqlite://".length));
    try {
      assert.equal(Number(db.prepare("UPDATE toolonce_entries SET payload = '{not json' WHERE key = ?").run(key).changes), 1);
    } finally {
      db.close();
    }
  },
  redis: (url, key) => garbleRedis(new Redis(url), key),
  valkey: (url, key) => garbleRedis(new Redis(url), key),
  "redis cluster": (url, key) => {
    const nodes = url.replace("redis+cluster://", "").split(",").map((h) => ({ host: h.split(":")[0], port: Number(h.split(":")[1]) }));
    return garbleRedis(new Redis.Cluster(nodes), key);
  },
  postgres: async (url, key) => {
    const client = new Client({ connectionString: url });
    await client.connect();
    try {
      const sql = `UPDATE toolonce_entries SET state = 'failed', result = NULL, error = NULL WHERE key = $1`;
      assert.equal((await client.query(sql, [key])).rowCount, 1);
    } finally {
      await client.end();
    }
  },
};

async function garbleRedis(redis, key) {
  try {
    assert.equal(await redis.set(`${PREFIX}${key}`, '{"status":"exploded"}', "PX", 60_000), "OK");
  } finally {
    redis.disconnect();
  }
}

/** Every page of `store`'s listing two entries at a time. */
async function everyPage(store) {
  const read = [];
  const unreadable = [];
  let largest = 0;
  let cursor;
  let pages = 0;
  do {
    const page = await store.list({ limit: 2, cursor });
    largest = Math.max(largest, page.entries.length + page.unreadable.length);
    read.push(...page.entries.map((e) => e.key));
    for (const u of page.unreadable) {
      assert.match(u.reason, /cannot be read/, JSON.stringify(u));
      unreadable.push(u.key);
    }
    cursor = page.next;
    assert.ok(++pages < 10_000, "the pages end");
  } while (cursor !== undefined);
  return { read, unreadable, largest };
}

for (const [name, garble] of Object.entries(garblers)) {
  const shared = urls[name];
  const url = /^redis/.test(shared) ? own(shared) : shared;
  test(`${name}: a listing reports entries it cannot decode and still pages through every other one`, { timeout: 120_000 }, async () => {
    const store = await openStore(url);
    try {
      const scope = uniqueRunId("listed");
      const send = idempotent({ kind: "write", name: "send", run: async (a) => ({ sent: a.n }) }, store);
      const keys = [];
      for (let n = 0; n < 5; n++) {
        await send.run({ n }, { runId: scope });
        keys.push(idemKey(scope, "send", { n }));
      }
      await garble(shared, keys[1]);
      await garble(shared, keys[4]);
      const { read, unreadable, largest } = await everyPage(store);
      assert.ok(largest <= 2, `a page of ${largest} over its size of 2`);
      // The shared PostgreSQL database holds other tests' entries: ours are among them, each once.
      for (const k of [keys[0], keys[2], keys[3]]) assert.equal(read.filter((r) => r === k).length, 1, k);
      for (const k of [keys[1], keys[4]]) {
        assert.equal(unreadable.filter((r) => r === k).length, 1, k);
        assert.ok(!read.includes(k), k);
      }
      // Filters apply as far as the store can read the entry: SQLite keeps the state apart from the payload.
      const filtered = await store.list({ scope, state: "done", limit: 1000 });
      assert.deepEqual(filtered.entries.map((e) => e.key).sort(), [keys[0], keys[2], keys[3]].sort());
      if (name === "sqlite") assert.deepEqual(filtered.unreadable.map((u) => u.key).sort(), [keys[1], keys[4]].sort());
      if (name === "sqlite") {
        // `toolonce ls` lists the rest, names the unreadable ones, and exits 70 (an entry it cannot read).
        const bin = path.join(pkg, "bin", "toolonce.js");
        for (const json of [false, true]) {
          const args = [bin, "ls", "--store", url, ...(json ? ["--json"] : [])];
          const out = spawnSync(process.execPath, args, { encoding: "utf8", timeout: 60_000 });
          assert.equal(out.status, 70, out.stderr);
          assert.match(out.stderr, /2 listed entries cannot be read; the first: the entry of idem:/);
          if (json) {
            const doc = JSON.parse(out.stdout);
            assert.equal(doc.entries.length, 3);
            assert.equal(doc.unreadable.count, 2);
            assert.deepEqual(doc.unreadable.entries.map((u) => u.key).sort(), [keys[1], keys[4]].sort());
          } else {
            for (const k of [keys[0], keys[2], keys[3], keys[1], keys[4]]) assert.ok(out.stdout.includes(k), `${k} in\n${out.stdout}`);
            assert.match(out.stdout, /2 entries cannot be read/);
          }
        }
      }
    } finally {
      await store.close();
    }
  });
}
