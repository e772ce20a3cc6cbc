// The life of one store handle: the calls running on it, their heartbeats, and its close().
// Heartbeats run in the renewal worker where the store can be reached from a thread of its own
// (renewer.ts), else in the caller's thread (heartbeat.ts). close() drains: it refuses calls
// from the moment it is called, waits for the calls already running (up to its `drain` bound,
// 10 s by default) so their outcomes are recorded, then ends the worker and the connection. A
// call still running at the bound is abandoned, and said to be: its outcome cannot be recorded
// any more, so its entry turns unknown when its lease runs out, never released.

import { StoreError } from "./errors.js";
import { LocalBeats } from "./heartbeat.js";
import { warn } from "./log.js";
import { type Beat, Renewer } from "./renewer.js";
import type { Backend } from "./store.js";

/** The options of `store.close()`. */
export interface CloseOptions {
  /** How long to wait for the calls running to finish, in ms, before closing anyway. Default 10 000. */
  drain?: number;
}

/** What `store.close()` did not wait for: the calls still running at its drain bound. */
export interface CloseReport {
  abandoned: { tool: string; key: string }[];
}

export const DEFAULT_DRAIN_MS = 10_000;

interface Running {
  tool: string;
  key: string;
}

export class Lifetime {
  private readonly running = new Set<Running>();
  private closing: Promise<CloseReport> | undefined;
  private drained: (() => void) | undefined;
  private renewer: Renewer | undefined;
  private local: LocalBeats | undefined;

  constructor(private readonly backend: Backend) {}

  /** Counts a call in; undefined once close() has begun (the call must not run). */
  enter(tool: string, key: string): Running | undefined {
    if (this.closing !== undefined) return undefined;
    const call = { tool, key };
    this.running.add(call);
    return call;
  }

  leave(call: Running): void {
    this.running.delete(call);
    if (this.running.size === 0) this.drained?.();
  }

  /** Why a call was refused: the store closed, or closing. */
  refusal(): StoreError {
    return new StoreError("the store is closed (its close() began before this call started)", false);
  }

  /** Starts the heartbeat of a call whose claim was taken at `startedMs`. */
  beat(tool: string, key: string, owner: string, leaseMs: number, startedMs: number): Beat {
    const spec = this.backend.renewal;
    const local = () => (this.local ??= new LocalBeats()).start(this.backend, tool, key, owner, leaseMs);
    if (spec === undefined) return local();
    const renewer = (this.renewer ??= new Renewer(spec));
    const ready = renewer.ready;
    const beat = renewer.start(tool, key, owner, leaseMs, startedMs);
    if (ready) return beat;
    // The worker is starting (or down): the caller's thread beats too, as it did without one.
    const inThread = local();
    return { stop: () => both(beat.stop(), inThread.stop()) };
  }

  /** Renewals of in-thread heartbeats held up by a blocked loop, to await before a claim; almost always undefined. */
  catchUp(): Promise<unknown> | undefined {
    return this.local?.catchUp();
  }

  close(options: CloseOptions = {}): Promise<CloseReport> {
    const drain = drainMs(options);
    this.closing ??= this.shutdown(drain);
    return this.closing;
  }

  private async shutdown(drain: number): Promise<CloseReport> {
    if (this.running.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      await new Promise<void>((resolve) => {
        this.drained = resolve;
        timer = setTimeout(resolve, drain);
      });
      clearTimeout(timer);
    }
    const abandoned = [...this.running].map(({ tool, key }) => ({ tool, key }));
    if (abandoned.length > 0) {
      const named = abandoned.map((c) => `${c.tool} (${c.key})`).join(", ");
      warn(`close() did not wait longer than its drain of ${drain} ms for ${abandoned.length} call(s) still running: ${named}. Their outcomes cannot be recorded: their entries turn unknown when their leases run out`);
    }
    try {
      await this.renewer?.close();
    } finally {
      await this.backend.close();
    }
    return { abandoned };
  }
}

function both(a: Promise<void> | undefined, b: Promise<void> | undefined): Promise<void> | undefined {
  if (a === undefined) return b;
  if (b === undefined) return a;
  return Promise.all([a, b]).then(() => undefined);
}

function drainMs(options: CloseOptions): number {
  if (options === null || typeof options !== "object") throw new TypeError("store.close(options): options must be an object");
  const drain = options.drain;
  if (drain === undefined) return DEFAULT_DRAIN_MS;
  if (typeof drain !== "number" || !Number.isFinite(drain) || drain < 0 || drain > 2 ** 31 - 1) {
    throw new TypeError(`store.close(options): drain must be a number of milliseconds from 0 to 2^31 - 1, not ${String(drain)}`);
  }
  return drain;
}
