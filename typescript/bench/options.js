// What the bench scripts (bench.js, client-cost.js) read from their command line the same
// way: `--name value` options, and the Redis to measure on (`--store URL`, else a server of
// their own: redis-server, or with `--server valkey` the valkey-server 8.1 of
// scripts/install-valkey).

"use strict";

const { startRedis, startValkey } = require("../test/support.js");

/** The value after `--name` on the command line, or undefined. */
function option(name) {
  const i = process.argv.indexOf(name);
  return i < 0 ? undefined : process.argv[i + 1];
}

/** The URL of the Redis to measure on: `--store`, else a server started for the run. */
async function redisUrl() {
  const kind = option("--server") ?? "redis";
  if (!["redis", "valkey"].includes(kind)) throw new Error(`--server ${kind}: redis or valkey`);
  return option("--store") ?? (await (kind === "valkey" ? startValkey() : startRedis())).url;
}

module.exports = { option, redisUrl };
