// The checks a Redis store makes when it opens, as the Rust core's (store/redis/error.rs and
// persistence.rs), through both drivers (ioredis, and node-redis with ioredis hidden): a
// database index the server lacks is refused (ioredis used to write into database 0 instead,
// node-redis to say "cannot connect"), a cluster is refused any database but 0, and a server
// that keeps nothing on disk (`save ""` and `appendonly no`) opens with a one-line warning,
// which a server with snapshots or an append-only file does not get. Each store is opened in a
// child process (fixtures/every-store.js), so that its warnings are its stderr.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const path = require("node:path");
const { Redis } = require("ioredis");
const { startRedis, runProgram, storeUrls } = require("./support.js");

const FIXTURES = path.join(__dirname, "fixtures");
const DRIVERS = {
  ioredis: [],
  "node-redis": ["-r", path.join(FIXTURES, "no-ioredis.js")],
};

/** Opens each of `urls` with `driver` in a child, a write tool called twice on each: its answers and its warnings. */
async function openWith(driver, ...urls) {
  const env = { ...process.env, TOOLONCE_QUIET: "0" };
  const out = await runProgram(process.execPath, [...DRIVERS[driver], path.join(FIXTURES, "every-store.js"), ...urls], { env });
  assert.equal(out.code, 0, out.stderr);
  const warnings = out.stderr.split("\n").filter((line) => line.includes("toolonce:"));
  return { answers: JSON.parse(out.stdout), warnings };
}

/** The number of keys in each database of the server on `port` that has any. */
async function keyspace(port) {
  const redis = new Redis({ port, host: "127.0.0.1" });
  try {
    const info = await redis.info("keyspace");
    return Object.fromEntries([...info.matchAll(/^db(\d+):keys=(\d+)/gm)].map((m) => [m[1], Number(m[2])]));
  } finally {
    redis.disconnect();
  }
}

const NOTHING_ON_DISK = 'keeps nothing on disk (save "" and appendonly no): a restart forgets every entry, and duplicates of those calls would run again';

for (const driver of Object.keys(DRIVERS)) {
  test.describe(`through ${driver}`, () => {
    let server;
    test.before(async () => {
      server = await startRedis(["--databases", "4"]);
    });
    test.after(() => server.child.kill("SIGKILL"));

    test("a database index the server lacks is refused, naming it and the server's databases setting, and nothing is written anywhere", async () => {
      const url = `redis://127.0.0.1:${server.port}/4`;
      const { answers } = await openWith(driver, url);
      const answer = answers[url];
      assert.equal(answer.runs, 0, JSON.stringify(answer));
      assert.match(answer.error, /^InvalidArguments: /, answer.error);
      assert.ok(answer.error.includes(`Redis at ${url} has no such database index (DB index is out of range): the number at the end of the store URL (redis://host/N) must be below the server's \`databases\` setting (16 by default)`), answer.error);
      assert.deepEqual(await keyspace(server.port), {});
    });

    test("a database index the server has holds the entries, and database 0 none", async () => {
      const url = `redis://127.0.0.1:${server.port}/3`;
      const { answers } = await openWith(driver, url);
      assert.deepEqual(answers[url], ["executed", "replayed", 1, true]);
      const keys = await keyspace(server.port);
      assert.equal(keys[0], undefined, JSON.stringify(keys));
      assert.ok(keys[3] >= 1, JSON.stringify(keys));
    });

    test("a server that keeps nothing on disk opens with one warning saying so, naming the server", async () => {
      const url = `redis://127.0.0.1:${server.port}/`;
      const { answers, warnings } = await openWith(driver, url);
      assert.deepEqual(answers[url], ["executed", "replayed", 1, true]);
      assert.equal(warnings.length, 1, warnings.join("\n"));
      assert.ok(warnings[0].includes(`Redis at ${url} ${NOTHING_ON_DISK}`), warnings[0]);
    });

    test("a server with an append-only file, or with snapshots, opens without that warning", async () => {
      const aof = await startRedis(["--appendonly", "yes"]);
      const rdb = await startRedis(["--save", "3600 1"]);
      try {
        const { answers, warnings } = await openWith(driver, aof.url, rdb.url);
        assert.deepEqual(answers[aof.url], ["executed", "replayed", 1, true]);
        assert.deepEqual(answers[rdb.url], ["executed", "replayed", 1, true]);
        assert.deepEqual(warnings, []);
      } finally {
        aof.child.kill("SIGKILL");
        rdb.child.kill("SIGKILL");
      }
    });

    test("a cluster URL with a database other than 0 is refused, since a cluster has only database 0; /0 opens, and each master keeping nothing on disk is named", async () => {
      const cluster = storeUrls()["redis cluster"];
      const one = `${cluster}/1`;
      const zero = `${cluster}/0`;
      const { answers, warnings } = await openWith(driver, one, zero);
      assert.equal(answers[one].runs, 0, JSON.stringify(answers[one]));
      assert.match(answers[one].error, /^InvalidArguments: .*a Redis Cluster has only database 0/, answers[one].error);
      assert.deepEqual(answers[zero], ["executed", "replayed", 1, true]);
      // The test cluster's three masters run with `save ""` and `appendonly no`.
      const named = cluster.replace("redis+cluster://", "").split(",").map((node) => `the Redis node ${node} of ${zero} ${NOTHING_ON_DISK}`);
      for (const line of named) assert.ok(warnings.some((w) => w.includes(line)), `${line} not in\n${warnings.join("\n")}`);
      assert.equal(warnings.length, 3, warnings.join("\n"));
    });
  });
}
