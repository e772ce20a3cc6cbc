// A worker of the widely copied TypeScript reference design for idempotent agent tools, as
// its users run it: `idempotent(tool, store)` wraps a tool so that a call claims
// "idem:" + sha256(runId \0 toolName \0 JSON.stringify(args, sortedTopLevelKeys)) (first 32
// hex digits) with `SET key {"status":"running","startedAt":…} NX PX lease`; a claim that
// fails reads the entry with `GET` and replays a `done` entry's `result`, or reports a
// `running` one as in flight; a run that succeeds stores `SET key {"status":"done","result":…}
// PX retention`. It knows nothing of toolonce: the interop test (store_redis_interop.rs) runs
// it against entries toolonce writes, and toolonce against the entries it writes.
//
// Usage: node reference_worker.js REDIS_URL RUN_ID TOOL ARGS_JSON RESULT_JSON
// Prints one JSON line: {"key":…,"outcome":"executed"|"replayed"|"in_flight","ran":bool,
// "result":…}.

import { createHash } from "node:crypto";
import Redis from "ioredis";

type Args = Record<string, unknown>;

interface StoredEntry {
  status: string;
  startedAt?: number;
  result?: unknown;
}

export interface Tool<R> {
  name: string;
  run(args: Args): Promise<R>;
}

export interface IdempotencyStore {
  redis: Redis;
  leaseMs: number;
  retentionMs: number;
}

export type Answer<R> =
  | { outcome: "executed"; result: R }
  | { outcome: "replayed"; result: R }
  | { outcome: "in_flight" };

export function idempotencyKey(runId: string, toolName: string, args: Args): string {
  const canonical = JSON.stringify(args, Object.keys(args).sort());
  const digest = createHash("sha256")
    .update(runId + "\u0000" + toolName + "\u0000" + canonical)
    .digest("hex");
  return "idem:" + digest.slice(0, 32);
}

export function idempotent<R>(
  tool: Tool<R>,
  store: IdempotencyStore,
): (runId: string, args: Args) => Promise<Answer<R>> {
  return async (runId, args) => {
    const key = idempotencyKey(runId, tool.name, args);
    const running = JSON.stringify({ status: "running", startedAt: Date.now() });
    const claimed = await store.redis.set(key, running, "PX", store.leaseMs, "NX");
    if (claimed === "OK") {
      const result = await tool.run(args);
      await store.redis.set(key, JSON.stringify({ status: "done", result }), "PX", store.retentionMs);
      return { outcome: "executed", result };
    }
    const raw = await store.redis.get(key);
    if (raw === null) {
      throw new Error(`${key} expired between the claim and the read; call again`);
    }
    const entry = JSON.parse(raw) as StoredEntry;
    if (entry.status === "done") {
      return { outcome: "replayed", result: entry.result as R };
    }
    if (entry.status === "running") {
      return { outcome: "in_flight" };
    }
    throw new Error(`${key} is ${entry.status}: nothing to replay`);
  };
}

async function main(argv: string[]): Promise<void> {
  if (argv.length !== 5) {
    throw new Error("usage: reference_worker REDIS_URL RUN_ID TOOL ARGS_JSON RESULT_JSON");
  }
  const [url, runId, toolName, argsJson, resultJson] = argv;
  const args = JSON.parse(argsJson) as Args;
  const redis = new Redis(url, { maxRetriesPerRequest: 1 });
  let ran = false;
  const tool: Tool<unknown> = {
    name: toolName,
    run: async () => {
      ran = true;
      return JSON.parse(resultJson) as unknown;
    },
  };
  try {
    const call = idempotent(tool, { redis, leaseMs: 30_000, retentionMs: 86_400_000 });
    const answer = await call(runId, args);
    const key = idempotencyKey(runId, toolName, args);
    process.stdout.write(JSON.stringify({ key, ran, ...answer }) + "\n");
  } finally {
    redis.disconnect();
  }
}

// Run as a program; imported (the Node package's benchmark uses its `idempotent`), it only
// exports.
if (require.main === module) {
  main(process.argv.slice(2)).catch((e: unknown) => {
    process.stderr.write(`reference worker: ${e instanceof Error ? e.message : String(e)}\n`);
    process.exit(1);
  });
}
