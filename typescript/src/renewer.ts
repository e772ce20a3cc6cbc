// The caller's side of the renewal worker (renewer-worker.ts): one worker per store handle,
// started with the first call, unref'd (it never keeps a process alive) and ended by the
// store's close(). Starting a call writes it into a slot of shared memory (renewer-slots.ts):
// no message, no round trip, nothing the call waits for. Stopping it is one compare-and-swap;
// only when the worker is renewing that very call at that moment does the stop wait for the
// worker's word, so no renewal races the complete or fail that follows.
//
// Until the worker is up and connected, calls also beat in their own thread (heartbeat.ts), as
// before there was a worker: a short lease is not left unrenewed while the worker starts. A
// worker that dies (or cannot open its connection) is reported; nothing renews the calls it
// had until the next call starts another (at most one a second), so their leases run out and
// their entries turn unknown, never stuck running.

import { Worker } from "node:worker_threads";
import * as path from "node:path";
import { warn } from "./log.js";
import type { RenewalSpec } from "./store.js";
import type { Order, Report } from "./renewer-worker.js";
import {
  ACTIVE,
  AWAKE,
  FREE,
  H_FLAG,
  H_HIGH,
  H_MIN_LEASE,
  HEADER_WORDS,
  PAGE_SLOTS,
  Page,
  RENEWING,
  SLEEPING,
  STOPPING,
  generationOf,
  phaseOf,
  wordOf,
} from "./renewer-slots.js";

/** The heartbeat of one call, renewed by the worker. */
export interface Beat {
  /** Stops it; the promise, when there is one, settles once no renewal of it is in flight. */
  stop(): Promise<void> | undefined;
}

const RESTART_AFTER_MS = 1000;
const INT32_MAX = 2 ** 31 - 1;

export class Renewer {
  private readonly header = new Int32Array(new SharedArrayBuffer(HEADER_WORDS * 4));
  private readonly pages: Page[] = [];
  private readonly free: number[] = [];
  private readonly generations: number[] = [];
  private high = 0;
  private worker: Worker | undefined;
  private failedAt = -Infinity;
  /** Stops waiting for the worker's word, by slot. */
  private readonly waiting = new Map<number, () => void>();
  private closed = false;
  /** Whether a worker is up, connected and renewing (until then, calls also beat in their own thread). */
  ready = false;

  constructor(private readonly spec: RenewalSpec) {
    Atomics.store(this.header, H_MIN_LEASE, INT32_MAX);
    Atomics.store(this.header, H_FLAG, SLEEPING);
  }

  /** Starts renewing the lease of `owner`'s claim of `key`, taken at `startedMs`. */
  start(tool: string, key: string, owner: string, leaseMs: number, startedMs: number): Beat {
    if (this.worker === undefined) this.spawn();
    const slot = this.slot();
    const page = this.pages[Math.floor(slot / PAGE_SLOTS)] as Page;
    const i = slot % PAGE_SLOTS;
    const generation = ((this.generations[slot] ?? 0) + 1) & 0x1fffffff;
    this.generations[slot] = generation;
    page.write(i, key, owner, tool, startedMs, leaseMs);
    Atomics.store(page.state, i, wordOf(generation, ACTIVE));
    const lease = Math.min(Math.floor(leaseMs), INT32_MAX);
    const lowered = this.lower(lease);
    // A sleeping worker is woken; an awake one told when its timer may be too slow for this lease.
    if (Atomics.compareExchange(this.header, H_FLAG, SLEEPING, AWAKE) === SLEEPING || lowered) this.order({ kind: "wake" });
    return { stop: () => this.stop(slot, page, i, generation) };
  }

  /** Makes `lease` the shortest lease seen, if it is; whether it was. */
  private lower(lease: number): boolean {
    for (;;) {
      const seen = Atomics.load(this.header, H_MIN_LEASE);
      if (seen <= lease) return false;
      if (Atomics.compareExchange(this.header, H_MIN_LEASE, seen, lease) === seen) return true;
    }
  }

  private slot(): number {
    const reused = this.free.pop();
    if (reused !== undefined) return reused;
    const slot = this.high++;
    if (slot >= this.pages.length * PAGE_SLOTS) {
      const page = Page.create();
      this.pages.push(page);
      this.order({ kind: "page", buffer: page.buffer });
    }
    Atomics.store(this.header, H_HIGH, this.high);
    return slot;
  }

  private stop(slot: number, page: Page, i: number, generation: number): Promise<void> | undefined {
    const active = wordOf(generation, ACTIVE);
    const renewing = wordOf(generation, RENEWING);
    for (;;) {
      const was = Atomics.compareExchange(page.state, i, active, wordOf(generation, FREE));
      if (was === active || phaseOf(was) === FREE || generationOf(was) !== generation) {
        this.free.push(slot);
        return undefined;
      }
      if (was === renewing && Atomics.compareExchange(page.state, i, renewing, wordOf(generation, STOPPING)) === renewing) {
        return this.waitFor(slot);
      }
    }
  }

  /** Waits for the worker to free `slot`, holding the process open meanwhile. */
  private waitFor(slot: number): Promise<void> {
    return new Promise((resolve) => {
      this.worker?.ref();
      this.waiting.set(slot, () => {
        this.waiting.delete(slot);
        if (this.waiting.size === 0) this.worker?.unref();
        this.free.push(slot);
        resolve();
      });
      if (this.worker === undefined) this.release();
    });
  }

  private order(order: Order): void {
    this.worker?.postMessage(order);
  }

  private spawn(): void {
    if (this.closed || Date.now() - this.failedAt < RESTART_AFTER_MS) return;
    let worker: Worker;
    try {
      worker = new Worker(path.join(__dirname, "renewer-worker.js"), {
        workerData: { spec: this.spec, header: this.header.buffer, pages: this.pages.map((p) => p.buffer) },
      });
    } catch (e) {
      this.failedAt = Date.now();
      warn(`cannot start the lease renewal worker (${(e as Error).message}); leases are renewed in the caller's thread meanwhile`);
      return;
    }
    worker.on("message", (r: Report) => this.heard(r));
    worker.on("error", (e) => warn(`the lease renewal worker of this store failed (${e.message}); the leases of the calls running run out`));
    worker.on("exit", () => this.exited(worker));
    // After the listeners: adding a "message" listener refs the worker's port again.
    worker.unref();
    this.worker = worker;
  }

  private heard(r: Report): void {
    if (r.kind === "ready") this.ready = true;
    else if (r.kind === "warn") warn(r.message);
    else if (r.kind === "failed") {
      this.failedAt = Date.now();
      warn(`the lease renewal worker cannot reach the store (${r.message}): the calls running are not renewed, and their leases run out; calls started until a worker is up are renewed in their own thread`);
    } else if (r.kind === "stopped") this.waiting.get(r.slot)?.();
  }

  private exited(worker: Worker): void {
    if (this.worker !== worker) return;
    this.worker = undefined;
    this.ready = false;
    if (!this.closed) {
      this.failedAt = Math.max(this.failedAt, Date.now());
      Atomics.store(this.header, H_FLAG, SLEEPING);
    }
    this.release();
  }

  /** After the worker is gone: no renewal is in flight, so every stop waiting goes on, and the calls it was renewing are active again for the next worker. */
  private release(): void {
    for (let slot = 0; slot < this.high; slot++) {
      const page = this.pages[Math.floor(slot / PAGE_SLOTS)] as Page;
      const word = Atomics.load(page.state, slot % PAGE_SLOTS);
      const phase = phaseOf(word);
      if (phase === RENEWING || phase === STOPPING) {
        Atomics.compareExchange(page.state, slot % PAGE_SLOTS, word, wordOf(generationOf(word), phase === RENEWING ? ACTIVE : FREE));
      }
    }
    for (const done of [...this.waiting.values()]) done();
  }

  /** Ends the worker and its connection (asked to close, then terminated if it has not within a second). */
  async close(): Promise<void> {
    this.closed = true;
    const worker = this.worker;
    if (worker === undefined) return;
    const exited = new Promise<void>((resolve) => worker.once("exit", () => resolve()));
    worker.postMessage({ kind: "close" } satisfies Order);
    const timer = setTimeout(() => void worker.terminate(), 1000);
    await exited;
    clearTimeout(timer);
  }
}
