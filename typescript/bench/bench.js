// `npm run bench [-- --json] [-- --store redis://… | --server valkey] [-- --package PATH [--label NAME]]`: the reference design
// (its TypeScript worker with ioredis: SET NX PX to claim, GET for a duplicate, SET PX to
// complete; crates/toolonce/tests/interop/reference_worker.ts) against toolonce's `idempotent`
// on one Redis, in the same run: first-time calls and replays, 1 and 8 concurrent callers,
// OPERATIONS calls per measurement, ROUNDS rounds with the two designs alternating, the best
// round of each kept (`ratio`: best over best), and beside it the median of the rounds' own
// ratios (`median_round_ratio`: each round runs the two back to back, so drift in the
// machine's load, which moves whole rounds on a shared machine, cancels out; the Rust bench's
// ratio is taken the same way). Then toolonce alone on memory:// (no store I/O): microseconds
// per call.
//
// Redis: --store URL, else a server of its own on a free port: redis-server, or with --server
// valkey the valkey-server 8.1 of scripts/install-valkey (it has `SET … IFEQ`, so toolonce's
// settles are native commands there); the output names the server and its version. --package
// PATH measures another build of the `toolonce` API (an earlier one, for the table
// before/after), named NAME in the output with --label (else its path relative to this
// package). A benchmark, not a test: nothing here fails on a slow machine.

"use strict";

const path = require("node:path");
const { Redis } = require("ioredis");
const { compileReferenceWorker } = require("../test/support.js");
const { idleNote } = require("./idle.js");
const { option, redisUrl } = require("./options.js");

const OPERATIONS = Number(process.env.TOOLONCE_BENCH_OPERATIONS ?? 2000);
const ROUNDS = Number(process.env.TOOLONCE_BENCH_ROUNDS ?? 5);
const REPLAY_KEYS = 64;


async function main() {
  const json = process.argv.includes("--json");
  const pkg = option("--package") ?? path.join(__dirname, "..");
  const { openStore, idempotent } = require(path.resolve(pkg));
  const url = await redisUrl();
  const reference = require(compileReferenceWorker());
  const redis = new Redis(url);
  const info = await redis.info("server");
  const field = (name) => new RegExp(`^${name}:(\\S+)`, "m").exec(info)?.[1];
  const server = `${field("server_name") ?? "redis"} ${field("valkey_version") ?? field("redis_version") ?? "?"}`;
  const label = option("--label") ?? (path.relative(path.join(__dirname, ".."), path.resolve(pkg)) || ".");
  const store = await openStore(url);
  const handler = async (args) => ({ ok: true, n: args.n });
  const tag = `bench-${process.pid}-${Date.now()}`;
  const toolOn = (s) => {
    const tool = idempotent({ kind: "write", name: "create_ticket", run: handler }, s, { lease: 30_000, retention: 86_400_000 });
    return (runId, args) => tool.run(args, { runId });
  };
  // Each design as `call(runId, args)`, both with a 30 s lease and 24 h retention.
  const designs = {
    reference: reference.idempotent({ name: "create_ticket", run: handler }, { redis, leaseMs: 30_000, retentionMs: 86_400_000 }),
    toolonce: toolOn(store),
  };

  let fresh = 0;
  const workloads = [];
  for (const concurrency of [1, 8]) {
    // A new operation every call.
    workloads.push({ workload: "first_time", concurrency, args: (d) => [`${tag}-${d}`, { n: ++fresh, queue: "support" }] });
    workloads.push({
      workload: "replay",
      concurrency,
      // One of REPLAY_KEYS operations, each executed beforehand.
      args: (d) => [`${tag}-${d}-replay`, { n: fresh++ % REPLAY_KEYS, queue: "support" }],
      async setup(d, call) {
        for (let n = 0; n < REPLAY_KEYS; n++) await call(`${tag}-${d}-replay`, { n, queue: "support" });
      },
    });
  }

  /** OPERATIONS calls of `w` on design `d` by `w.concurrency` callers: ops/s. */
  async function measure(w, d) {
    const call = designs[d];
    let left = OPERATIONS;
    async function lane() {
      while (left > 0) {
        left--;
        const [runId, args] = w.args(d);
        const answer = await call(runId, args);
        // The reference answers `{outcome, result}`, toolonce the result itself.
        if (answer === undefined || answer.outcome === "in_flight") throw new Error(`${d}: unexpected answer ${JSON.stringify(answer)}`);
      }
    }
    const start = performance.now();
    await Promise.all(Array.from({ length: w.concurrency }, lane));
    return OPERATIONS / ((performance.now() - start) / 1000);
  }

  for (const d of Object.keys(designs)) {
    for (const w of workloads) if (w.setup) await w.setup(d, designs[d]);
    await measure(workloads[0], d); // Warm-up: connections, JIT.
  }
  const results = [];
  for (const w of workloads) {
    // A round of each, not counted, before this workload's rounds: its own code paths (the
    // replay's, or 8 callers' interleaving) are compiled and its first collections done for
    // both designs alike. Without it, 2,000-call rounds at 8 callers measured the warm-up as
    // much as the design (toolonce 0.5× in them, 1.5× in rounds of 20,000 calls, same run).
    for (const d of ["reference", "toolonce"]) await measure(w, d);
    const best = { reference: 0, toolonce: 0 };
    const ratios = [];
    for (let round = 0; round < ROUNDS; round++) {
      const got = {};
      for (const d of round % 2 ? ["toolonce", "reference"] : ["reference", "toolonce"]) {
        got[d] = await measure(w, d);
        best[d] = Math.max(best[d], got[d]);
      }
      ratios.push(got.toolonce / got.reference);
    }
    ratios.sort((a, b) => a - b);
    const mid = ratios.length >> 1;
    const median = ratios.length % 2 ? ratios[mid] : (ratios[mid - 1] + ratios[mid]) / 2;
    results.push({
      workload: w.workload,
      concurrency: w.concurrency,
      reference_ops_s: Math.round(best.reference),
      toolonce_ops_s: Math.round(best.toolonce),
      ratio: Number((best.toolonce / best.reference).toFixed(2)),
      median_round_ratio: Number(median.toFixed(2)),
    });
  }

  // toolonce's own cost: the same calls on memory://, no store I/O.
  const memory = await openStore("memory://");
  designs.memory = toolOn(memory);
  const perCall = {};
  for (const w of workloads.filter((w) => w.concurrency === 1)) {
    if (w.setup) await w.setup("memory", designs.memory);
    let best = 0;
    for (let round = 0; round < ROUNDS; round++) best = Math.max(best, await measure(w, "memory"));
    perCall[w.workload] = Number((1e6 / best).toFixed(2));
  }

  const shown = url.replace(/:[^:@/]*@/, ":***@");
  const idle = idleNote();
  if (json) {
    process.stdout.write(JSON.stringify({ store: shown, server, package: label, node: process.version, operations: OPERATIONS, rounds: ROUNDS, results, memory_us_per_call: perCall, idle_cpus: idle }) + "\n");
  } else {
    console.log(`${server} at ${shown}, node ${process.version}, ${OPERATIONS} operations per measurement, best of ${ROUNDS} rounds, package ${label}\n`);
    const header = ["workload", "callers", "reference ops/s", "toolonce ops/s", "ratio", "median round ratio"];
    const rows = results.map((r) => [r.workload, r.concurrency, r.reference_ops_s, r.toolonce_ops_s, r.ratio.toFixed(2) + "×", r.median_round_ratio.toFixed(2) + "×"]);
    const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
    const line = (cells) => "| " + cells.map((c, i) => String(c).padEnd(widths[i])).join(" | ") + " |";
    console.log(line(header));
    console.log("|" + widths.map((w) => "-".repeat(w + 2)).join("|") + "|");
    for (const r of rows) console.log(line(r));
    console.log(`\ntoolonce on memory:// (1 caller, no store I/O): first-time ${perCall.first_time} µs per call, replay ${perCall.replay} µs per call`);
    if (idle) console.log(`note: ${idle}`);
  }
  redis.disconnect();
  await store.close();
  await memory.close();
  process.exit(0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
