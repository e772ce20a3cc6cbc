// The fenced removal (`store.remove`, `toolonce rm`) tells apart the settled entry an operator
// read from one settled anew by another attempt even when everything else agrees: the same
// state, attempts, start and settling time (SQLite and Redis keep whole milliseconds, so an
// entry deleted, claimed again and settled within the millisecond of the one read looked the
// same). The second entry is forged to the first's times, as the same millisecond would leave
// it (crates/toolonce/tests/removal_fence.rs does the same for the core).

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { DatabaseSync } = require("node:sqlite");
const { Redis } = require("ioredis");
const { Client } = require("pg");
const { openStore, idempotent, idemKey } = require("..");
const { storeUrls, uniqueRunId, defined } = require("./support.js");

const urls = storeUrls();
const PREFIX = `fence-${process.pid}-`;

async function withPg(url, f) {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    return await f(client);
  } finally {
    await client.end();
  }
}

async function withRedis(url, f) {
  const redis = new Redis(url);
  try {
    return await f(redis);
  } finally {
    redis.disconnect();
  }
}

/** Per store: what the forgery copies from the first entry, and how it puts it on the second. */
const raw = {
  sqlite: {
    url: urls.sqlite,
    times: async (url, key) => {
      const db = new DatabaseSync(url.slice("sqlite://".length));
      try {
        return db.prepare("SELECT started_at, settled_at FROM toolonce_entries WHERE key = ?").get(key);
      } finally {
        db.close();
      }
    },
    forge: async (url, key, first) => {
      const db = new DatabaseSync(url.slice("sqlite://".length));
      try {
        const sql = "UPDATE toolonce_entries SET started_at = ?, settled_at = ?, first_started_at = ? WHERE key = ?";
        assert.equal(Number(db.prepare(sql).run(first.started_at, first.settled_at, first.started_at, key).changes), 1);
      } finally {
        db.close();
      }
    },
  },
  redis: {
    url: `${urls.redis}?prefix=${PREFIX}`,
    times: (url, key) => withRedis(urls.redis, (r) => r.get(`${PREFIX}${key}`)),
    forge: (url, key, first) =>
      withRedis(urls.redis, async (r) => {
        // The first value whole, with the second attempt's owner digest: all the second differs in.
        const second = await r.get(`${PREFIX}${key}`);
        const owner = (v) => defined(/"owner":"([0-9a-f]{40})"/.exec(v))[1];
        assert.notEqual(owner(first), owner(second));
        await r.set(`${PREFIX}${key}`, first.replace(owner(first), owner(second)), "PX", 600_000);
      }),
  },
  postgres: {
    url: urls.postgres,
    times: (url, key) => withPg(url, async (c) => (await c.query("SELECT started_at, settled_at FROM toolonce_entries WHERE key = $1", [key])).rows[0]),
    forge: (url, key, first) =>
      withPg(url, async (c) => {
        const sql = "UPDATE toolonce_entries SET started_at = $2, settled_at = $3, first_started_at = $2 WHERE key = $1";
        assert.equal((await c.query(sql, [key, first.started_at, first.settled_at])).rowCount, 1);
      }),
  },
};

for (const [name, { url, times, forge }] of Object.entries(raw)) {
  test(`${name}: a stale removal never deletes an entry settled anew with the same times`, { timeout: 60_000 }, async () => {
    const store = await openStore(url);
    try {
      const runId = uniqueRunId("fence");
      const send = idempotent({ kind: "write", name: "send", run: async () => "sent" }, store);
      const key = idemKey(runId, "send", { to: "bob" });
      await send.run({ to: "bob" }, { runId });
      const read = defined(await store.get(key));
      const first = await times(url, key);
      // Another operator removes it, and the agent's retry runs and settles it anew.
      assert.equal((await store.remove(key, read)).kind, "applied");
      await send.run({ to: "bob" }, { runId });
      await forge(url, key, first);
      const now = defined(await store.get(key));
      assert.deepEqual([now.startedAt, now.settledAt, now.attempts], [read.startedAt, read.settledAt, read.attempts]);
      const stale = await store.remove(key, read);
      assert.equal(stale.kind, "changed", JSON.stringify(stale));
      assert.ok((await store.get(key)) !== undefined, "the entry settled anew is kept");
      assert.equal((await store.remove(key, now)).kind, "applied");
    } finally {
      await store.close();
    }
  });
}
