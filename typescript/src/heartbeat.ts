// The lease heartbeat in the caller's thread, for the stores no worker thread can reach: the
// memory store, SQLite `:memory:` (both this process's alone) and a client of the program's
// (which a worker cannot share). It renews every third of the lease on an unref'd timer, so it
// never keeps a process alive; when the process dies, the lease runs out (`unknown`, never stuck
// `running`). A renewal that finds the entry no longer ours stops the heartbeat and is logged.
//
// A handler that blocks the event loop stops these timers. On the memory store and `:memory:`
// no other caller can run meanwhile (they are this thread's), so nobody can take over during
// the block; after it, every claim on the store first renews the heartbeats whose beat is
// overdue (`LocalBeats.catchUp`), so a waiting `rerun` caller never finds a lease expired that
// was only late. Another process on a client-given store is not held back: open the store from
// its URL to have the worker renew.

import type { Backend } from "./store.js";
import type { Beat } from "./renewer.js";
import { warn } from "./log.js";

class Heartbeat implements Beat {
  private timer: NodeJS.Timeout | undefined;
  private renewing: Promise<void> | undefined;
  private stopped = false;
  /** When the next beat is due. */
  due = 0;

  constructor(
    private readonly beats: LocalBeats,
    private readonly store: Backend,
    private readonly tool: string,
    private readonly key: string,
    private readonly owner: string,
    private readonly leaseMs: number,
  ) {
    this.schedule();
  }

  private schedule(): void {
    if (this.stopped) return;
    const every = Math.max(1, Math.floor(this.leaseMs / 3));
    this.due = Date.now() + every;
    this.beats.expect(this.due);
    this.timer = setTimeout(() => this.beat(), every);
    this.timer.unref();
  }

  /** Renews now (unless a renewal is in flight); the renewal, to await. */
  beat(): Promise<void> | undefined {
    if (this.stopped || this.renewing !== undefined) return this.renewing;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.renewing = this.store.renew(this.key, this.owner, this.leaseMs).then(
      (held) => {
        this.renewing = undefined;
        if (held) return this.schedule();
        this.stop();
        warn(`the claim of ${this.tool} (${this.key}) was lost while it ran (taken over, resolved or deleted); its outcome will not be recorded`);
      },
      () => {
        // The store is unreachable for now: try again at the next beat, while the lease lasts.
        this.renewing = undefined;
        this.schedule();
      },
    );
    return this.renewing;
  }

  /**
   * Stops renewing; the renewal in flight, if any, is returned for the caller to await (so none
   * races the complete or fail). Nothing is returned when none is, almost always: the caller
   * then goes on at once, without a turn of the microtask queue.
   */
  stop(): Promise<void> | undefined {
    if (!this.stopped) {
      this.stopped = true;
      this.beats.forget(this);
    }
    if (this.timer !== undefined) clearTimeout(this.timer);
    return this.renewing;
  }
}

/** The in-thread heartbeats of one store handle. */
export class LocalBeats {
  private readonly running = new Set<Heartbeat>();
  /** No beat is due before this (a bound, made exact by `catchUp`). */
  private earliest = Infinity;

  start(store: Backend, tool: string, key: string, owner: string, leaseMs: number): Beat {
    const beat = new Heartbeat(this, store, tool, key, owner, leaseMs);
    this.running.add(beat);
    return beat;
  }

  expect(due: number): void {
    if (due < this.earliest) this.earliest = due;
  }

  forget(beat: Heartbeat): void {
    this.running.delete(beat);
  }

  /**
   * Renews every heartbeat whose beat is overdue (its timer was held up by a blocked loop);
   * the renewals to await, or undefined when none is overdue, almost always.
   */
  catchUp(): Promise<unknown> | undefined {
    const now = Date.now();
    if (now < this.earliest) return undefined;
    this.earliest = Infinity;
    const renewals: Promise<void>[] = [];
    for (const beat of this.running) {
      if (beat.due <= now) {
        const renewal = beat.beat();
        if (renewal !== undefined) renewals.push(renewal);
      } else this.expect(beat.due);
    }
    return renewals.length === 0 ? undefined : Promise.all(renewals);
  }
}
