// The renewal worker: a thread of its own (node:worker_threads) with a connection of its own to
// the store, which renews the lease of every running call of one store handle, so that a
// handler that blocks its event loop (execSync, a CPU loop) does not stop its heartbeat. The
// calls are slots in shared memory (renewer-slots.ts), written by the caller's thread; this
// thread looks at them on a timer while any may be running (a twelfth of the shortest lease
// seen, at most 100 ms) and sleeps, timer stopped, once none has run for a second, until the
// caller wakes it.
// A beat that starts more than a third of the lease after it was due is reported (the worker
// was held up, or the store was slow); a renewal that finds the entry no longer ours frees the
// slot and is reported, as the in-thread heartbeat does. If this thread dies, nothing renews:
// the leases run out and the entries turn unknown, never stuck running.

import { parentPort, workerData } from "node:worker_threads";
import type { Backend, RenewalSpec } from "./store.js";
import {
  ACTIVE,
  AWAKE,
  FREE,
  H_FLAG,
  H_HIGH,
  H_MIN_LEASE,
  PAGE_SLOTS,
  Page,
  RENEWING,
  SLEEPING,
  STOPPING,
  generationOf,
  phaseOf,
  wordOf,
} from "./renewer-slots.js";

/** What the worker tells the caller's thread. */
export type Report =
  | { kind: "ready" }
  | { kind: "failed"; message: string }
  | { kind: "warn"; message: string }
  | { kind: "stopped"; slot: number; generation: number };

/** What the caller's thread tells the worker. */
export type Order = { kind: "page"; buffer: SharedArrayBuffer } | { kind: "wake" } | { kind: "close" };

/** One call as this thread knows it. */
interface Known {
  generation: number;
  key: string;
  owner: string;
  tool: string;
  leaseMs: number;
  /** When the next beat is due. */
  due: number;
  renewing: boolean;
}

const port = parentPort;
const data = workerData as { spec: RenewalSpec; header: SharedArrayBuffer; pages: SharedArrayBuffer[] };
const header = new Int32Array(data.header);
const pages = data.pages.map((b) => new Page(b));
const known = new Map<number, Known>();
let store: Backend | undefined;
let timer: NodeJS.Timeout | undefined;
let closing = false;
/** Since when no call has been running; asleep after IDLE_MS of it. */
let idleSince: number | undefined;
const IDLE_MS = 1000;

function report(r: Report): void {
  port?.postMessage(r);
}

async function open(spec: RenewalSpec): Promise<Backend> {
  switch (spec.kind) {
    case "sqlite":
      return (await import("./stores/sqlite.js")).SqliteBackend.open(spec.path);
    case "redis":
      // A second connection of a store the program opened: what it warned of is said once.
      return (await import("./stores/redis-url.js")).openRedisUrl(spec.url, true);
    case "postgres":
      return (await import("./stores/postgres.js")).openPostgres(spec.url, 2);
  }
}

function tickMs(): number {
  return Math.min(100, Math.max(2, Math.floor(Atomics.load(header, H_MIN_LEASE) / 12)));
}

/** Looks at every slot in use: beats what is due; sleeps when no call is running. */
function scan(): void {
  timer = undefined;
  if (closing || store === undefined) return;
  const now = Date.now();
  let running = look(now);
  if (running > 0) idleSince = undefined;
  // Awake for a while after the last call: calls that come and go faster than a tick would
  // otherwise wake this thread, with a message, one by one.
  else if (now - (idleSince ??= now) >= IDLE_MS) {
    // Asleep, then one more look: a call registered meanwhile either is seen here or finds the
    // flag set and wakes this thread.
    Atomics.store(header, H_FLAG, SLEEPING);
    running = look(now);
    if (running === 0) return;
    idleSince = undefined;
    Atomics.store(header, H_FLAG, AWAKE);
  }
  timer = setTimeout(scan, tickMs());
}

/** Beats the due slots; the number of slots running. */
function look(now: number): number {
  const high = Math.min(Atomics.load(header, H_HIGH), pages.length * PAGE_SLOTS);
  let running = 0;
  for (let slot = 0; slot < high; slot++) {
    const page = pages[Math.floor(slot / PAGE_SLOTS)] as Page;
    const i = slot % PAGE_SLOTS;
    const word = Atomics.load(page.state, i);
    const phase = phaseOf(word);
    let k = known.get(slot);
    if (phase !== ACTIVE) {
      if (k !== undefined && !k.renewing) known.delete(slot);
      if (phase !== FREE) running++;
      continue;
    }
    running++;
    if (k === undefined || k.generation !== generationOf(word)) {
      const fields = page.read(i);
      // Read between two looks at the word: the fields are the call's only if it did not change.
      if (Atomics.load(page.state, i) !== word) continue;
      k = { generation: generationOf(word), key: fields.key, owner: fields.owner, tool: fields.tool, leaseMs: fields.leaseMs, due: fields.startedMs + beatMs(fields.leaseMs), renewing: false };
      known.set(slot, k);
    }
    if (!k.renewing && now >= k.due) beat(slot, page, i, k, now);
  }
  return running;
}

const beatMs = (leaseMs: number) => Math.max(1, Math.floor(leaseMs / 3));

function beat(slot: number, page: Page, i: number, k: Known, now: number): void {
  const word = wordOf(k.generation, ACTIVE);
  if (Atomics.compareExchange(page.state, i, word, wordOf(k.generation, RENEWING)) !== word) return;
  const late = now - k.due;
  if (late > k.leaseMs / 3) {
    report({
      kind: "warn",
      message: `the heartbeat of ${k.tool} (${k.key}) renewed its lease ${late} ms after it was due (lease ${k.leaseMs} ms): the renewal worker was held up (an overloaded machine, or a slow store), and the lease may have run out meanwhile`,
    });
  }
  k.renewing = true;
  (store as Backend).renew(k.key, k.owner, k.leaseMs).then(
    (held) => renewed(slot, page, i, k, held),
    // The store is unreachable for now: again at the next beat, while the lease lasts.
    () => renewed(slot, page, i, k, true),
  );
}

function renewed(slot: number, page: Page, i: number, k: Known, held: boolean): void {
  k.renewing = false;
  k.due = Math.max(k.due + beatMs(k.leaseMs), Date.now());
  const mid = wordOf(k.generation, RENEWING);
  const next = wordOf(k.generation, held ? ACTIVE : FREE);
  if (!held) {
    known.delete(slot);
    report({
      kind: "warn",
      message: `the claim of ${k.tool} (${k.key}) was lost while it ran (taken over, resolved or deleted); its outcome will not be recorded`,
    });
  }
  if (Atomics.compareExchange(page.state, i, mid, next) === mid) return;
  // Stopped by the caller meanwhile (STOPPING): freed here, and the caller told.
  if (Atomics.compareExchange(page.state, i, wordOf(k.generation, STOPPING), wordOf(k.generation, FREE)) === wordOf(k.generation, STOPPING)) {
    known.delete(slot);
    report({ kind: "stopped", slot, generation: k.generation });
  }
}

function wake(): void {
  if (timer === undefined && !closing) timer = setTimeout(scan, 0);
}

async function close(): Promise<void> {
  closing = true;
  if (timer !== undefined) clearTimeout(timer);
  await store?.close().catch(() => {});
  port?.close();
}

port?.on("message", (order: Order) => {
  if (order.kind === "page") pages.push(new Page(order.buffer));
  else if (order.kind === "wake") wake();
  else void close();
});

open(data.spec).then(
  (opened) => {
    store = opened;
    if (closing) return void opened.close().catch(() => {});
    report({ kind: "ready" });
    scan();
  },
  (e: unknown) => {
    report({ kind: "failed", message: e instanceof Error ? e.message : String(e) });
    port?.close();
  },
);
