// The lease heartbeat of one running call: renews the lease every third of its length on an
// unref'd timer, so it never keeps a process alive by itself. When the process (or the Worker)
// dies, the timer dies with it and the lease runs out: the operation turns `unknown`, never
// stuck `running`. A renewal that finds the entry no longer ours (taken over, resolved,
// deleted) stops the heartbeat and is logged; the handler is not stopped.

import type { Backend } from "./store.js";
import { warn } from "./log.js";

export class Heartbeat {
  private timer: NodeJS.Timeout | undefined;
  private renewing: Promise<void> | undefined;
  private stopped = false;
  /** Set once a renewal found the entry held by somebody else. */
  lost = false;

  constructor(
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
    this.timer = setTimeout(() => this.beat(), Math.max(1, Math.floor(this.leaseMs / 3)));
    this.timer.unref();
  }

  private beat(): void {
    this.renewing = this.store.renew(this.key, this.owner, this.leaseMs).then(
      (held) => {
        this.renewing = undefined;
        if (held) return this.schedule();
        this.lost = true;
        warn(`the claim of ${this.tool} (${this.key}) was lost while it ran (taken over, resolved or deleted); its outcome will not be recorded`);
      },
      () => {
        // The store is unreachable for now: try again at the next beat, while the lease lasts.
        this.renewing = undefined;
        this.schedule();
      },
    );
  }

  /**
   * Stops renewing; the renewal in flight, if any, is returned for the caller to await (so none
   * races the complete or fail). Nothing is returned when none is, almost always: the caller
   * then goes on at once, without a turn of the microtask queue.
   */
  stop(): Promise<void> | undefined {
    this.stopped = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    return this.renewing;
  }
}
