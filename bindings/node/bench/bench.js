// `npm run bench`: toolonce's `idempotent` against the reference design (TypeScript + ioredis:
// SET NX PX to claim, GET for a duplicate, SET PX to complete; the worker the interop tests
// run), on the same Redis in the same run: first-time calls and replays, one caller and 8
// concurrent callers. Prints ops/s and the ratio toolonce / reference; the targets are replay
// ≥ 1.5× and first-time ≥ 1.0×.
//
// Redis: TOOLONCE_BENCH_REDIS=redis://… or a redis-server of its own on a free port.
// Length: TOOLONCE_BENCH_SECONDS per measurement (default 1.5), best of TOOLONCE_BENCH_ROUNDS
// rounds (default 3), the two designs alternating.

"use strict";

const Redis = require("ioredis");
const { openStore, idempotent } = require("..");
const { compileReferenceWorker, startRedis } = require("../test/support.js");

const SECONDS = Number(process.env.TOOLONCE_BENCH_SECONDS ?? 1.5);
const ROUNDS = Number(process.env.TOOLONCE_BENCH_ROUNDS ?? 3);
const REPLAY_KEYS = 64;

async function main() {
  const url = process.env.TOOLONCE_BENCH_REDIS ?? (await startRedis()).url;
  const reference = require(compileReferenceWorker());
  const redis = new Redis(url);
  const store = await openStore(url);
  const handler = async (args) => ({ ok: true, n: args.n });
  const tag = `bench-${process.pid}-${Date.now()}`;

  // Each design as `call(runId, args)`, both with a 30 s lease and 24 h retention.
  const designs = {
    reference: reference.idempotent({ name: "create_ticket", run: handler }, { redis, leaseMs: 30_000, retentionMs: 86_400_000 }),
    toolonce: (() => {
      const tool = idempotent({ kind: "write", name: "create_ticket", run: handler }, store, { lease: 30_000, retention: 86_400_000 });
      return (runId, args) => tool.run(args, { runId });
    })(),
  };

  let fresh = 0;
  const scenarios = [];
  for (const callers of [1, 8]) {
    scenarios.push({
      name: `first-time, ${callers} caller${callers > 1 ? "s" : ""}`,
      target: 1.0,
      callers,
      // A new operation every call.
      args: (design) => [`${tag}-${design}`, { n: ++fresh, queue: "support" }],
    });
    scenarios.push({
      name: `replay, ${callers} caller${callers > 1 ? "s" : ""}`,
      target: 1.5,
      callers,
      // One of REPLAY_KEYS operations executed beforehand.
      args: (design) => [`${tag}-${design}-replay`, { n: fresh++ % REPLAY_KEYS, queue: "support" }],
      async setup(design, call) {
        for (let n = 0; n < REPLAY_KEYS; n++) await call(`${tag}-${design}-replay`, { n, queue: "support" });
      },
    });
  }

  async function measure(scenario, design) {
    const call = designs[design];
    const deadline = performance.now() + SECONDS * 1000;
    let ops = 0;
    async function lane() {
      while (performance.now() < deadline) {
        const [runId, args] = scenario.args(design);
        const answer = await call(runId, args);
        // The reference answers `{outcome, result}`, toolonce the result itself.
        if (answer === undefined || (answer.outcome !== undefined && answer.outcome === "in_flight")) {
          throw new Error(`${design}: unexpected answer ${JSON.stringify(answer)}`);
        }
        ops++;
      }
    }
    const start = performance.now();
    await Promise.all(Array.from({ length: scenario.callers }, lane));
    return ops / ((performance.now() - start) / 1000);
  }

  for (const design of Object.keys(designs)) {
    for (const s of scenarios) if (s.setup) await s.setup(design, designs[design]);
    await measure({ ...scenarios[0] }, design); // Warm-up: connections, JIT.
  }
  const rows = [];
  for (const s of scenarios) {
    const best = { reference: 0, toolonce: 0 };
    for (let round = 0; round < ROUNDS; round++) {
      for (const design of round % 2 ? ["toolonce", "reference"] : ["reference", "toolonce"]) {
        best[design] = Math.max(best[design], await measure(s, design));
      }
    }
    const ratio = best.toolonce / best.reference;
    rows.push([s.name, Math.round(best.reference), Math.round(best.toolonce), ratio.toFixed(2) + "×", `≥ ${s.target.toFixed(1)}×`, ratio >= s.target ? "met" : "MISSED"]);
  }

  console.log(`Redis ${url.replace(/:[^:@/]*@/, ":***@")}, node ${process.version}, ${SECONDS}s per measurement, best of ${ROUNDS}\n`);
  const header = ["scenario", "reference ops/s", "toolonce ops/s", "ratio", "target", ""];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  const line = (cells) => "| " + cells.map((c, i) => String(c).padEnd(widths[i])).join(" | ") + " |";
  console.log(line(header));
  console.log("|" + widths.map((w) => "-".repeat(w + 2)).join("|") + "|");
  for (const r of rows) console.log(line(r));

  // The binding's own cost: the same calls on memory:// (no I/O), so what is left of a Redis
  // call beyond it is the store's round trip and the thread that does it.
  const memory = await openStore("memory://");
  const onMemory = idempotent({ kind: "write", name: "create_ticket", run: handler }, memory);
  designs.memory = (runId, args) => onMemory.run(args, { runId });
  for (const s of scenarios) if (s.setup) await s.setup("memory", designs.memory);
  console.log("\ntoolonce on memory:// (binding and layer, no store I/O):\n");
  for (const s of scenarios) {
    let best = 0;
    for (let round = 0; round < ROUNDS; round++) best = Math.max(best, await measure(s, "memory"));
    console.log(`  ${s.name.padEnd(22)} ${String(Math.round(best)).padStart(7)} ops/s  (${(s.callers * 1e6 / best).toFixed(1)} µs per call)`);
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
