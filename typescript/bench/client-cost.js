// `node bench/client-cost.js [memory|redis|client|reference] [--server valkey] [--package PATH] [--callers N] [--only first_time|replay]`: what one
// `idempotent(...).run` costs this process, in microseconds per call at N callers (wall time, and this process's CPU time)
// (1 unless given), first-time calls and replays, best of ROUNDS rounds. A small driver to run
// under `node --cpu-prof --cpu-prof-interval 50`, apart from bench/bench.js, which compares
// designs: `memory` is memory:// (no store I/O), `redis` a redis:// URL (the store's own
// ioredis client), `client` an ioredis client of the program's own, given to openStore (no
// command timeout of the store's: the difference is what that timeout costs), `reference` the
// reference design's worker (its own ioredis client) on the same calls, for what toolonce's
// client costs above it. Redis: --store URL, else a server of its own (redis-server, or with
// --server valkey the valkey-server 8.1 of scripts/install-valkey). A benchmark, not a test:
// nothing here fails.

"use strict";

const path = require("node:path");
const { Redis } = require("ioredis");
const { compileReferenceWorker } = require("../test/support.js");
const { option, redisUrl } = require("./options.js");

const OPERATIONS = Number(process.env.TOOLONCE_BENCH_OPERATIONS ?? 20000);
const ROUNDS = Number(process.env.TOOLONCE_BENCH_ROUNDS ?? 5);
const REPLAY_KEYS = 64;


async function main() {
  const mode = process.argv[2] ?? "memory";
  const pkg = path.resolve(option("--package") ?? path.join(__dirname, ".."));
  const callers = Number(option("--callers") ?? 1);
  const { openStore, idempotent } = require(pkg);
  let url = "memory://";
  let client;
  if (mode !== "memory") url = await redisUrl();
  if (mode === "client" || mode === "reference") client = new Redis(url);
  const store = mode === "reference" ? undefined : await openStore(client ?? url);
  const handler = async (args) => ({ ok: true, n: args.n });
  const options = { lease: 30_000, retention: 86_400_000 };
  let tool = store === undefined ? undefined : idempotent({ kind: "write", name: "create_ticket", run: handler }, store, options);
  if (mode === "reference") {
    const call = require(compileReferenceWorker()).idempotent(
      { name: "create_ticket", run: handler },
      { redis: client, leaseMs: options.lease, retentionMs: options.retention },
    );
    tool = { run: (args, ctx) => call(ctx.runId, args) };
  }
  const tag = `cost-${process.pid}-${Date.now()}`;
  let fresh = 0;
  const workloads = {
    first_time: () => tool.run({ n: ++fresh, queue: "support" }, { runId: tag }),
    replay: () => tool.run({ n: fresh++ % REPLAY_KEYS, queue: "support" }, { runId: `${tag}-replay` }),
  };
  for (let n = 0; n < REPLAY_KEYS; n++) await tool.run({ n, queue: "support" }, { runId: `${tag}-replay` });

  async function measure(call) {
    let left = OPERATIONS;
    async function lane() {
      while (left > 0) {
        left--;
        await call();
      }
    }
    const cpu = process.cpuUsage();
    const start = performance.now();
    await Promise.all(Array.from({ length: callers }, lane));
    const used = process.cpuUsage(cpu);
    return { wall: ((performance.now() - start) * 1000) / OPERATIONS, cpu: (used.user + used.system) / OPERATIONS, system: used.system / OPERATIONS };
  }

  const out = { mode, package: path.relative(process.cwd(), pkg) || ".", node: process.version, callers, operations: OPERATIONS };
  const only = option("--only");
  for (const [name, call] of Object.entries(workloads)) {
    if (only !== undefined && only !== name) continue;
    await measure(call); // Warm-up: JIT, connections.
    let wall = Infinity;
    let cpu = Infinity;
    let system = Infinity;
    for (let round = 0; round < ROUNDS; round++) {
      const m = await measure(call);
      wall = Math.min(wall, m.wall);
      cpu = Math.min(cpu, m.cpu);
      system = Math.min(system, m.system);
    }
    out[`${name}_us_per_call`] = Number(wall.toFixed(2));
    out[`${name}_cpu_us_per_call`] = Number(cpu.toFixed(2));
    // Of which the kernel's (system calls: the socket's writes and reads, the event loop's polls).
    out[`${name}_system_us_per_call`] = Number(system.toFixed(2));
  }
  process.stdout.write(JSON.stringify(out) + "\n");
  if (store !== undefined) await store.close();
  if (client !== undefined) client.disconnect();
  process.exit(0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
