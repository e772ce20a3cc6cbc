// The in-memory store: this process only, judged by the system clock (or one a test injects).
// Every operation runs to completion on the JavaScript thread, so each is atomic; entries whose
// retention passed count as absent and are swept now and then.

import { StoreError } from "../errors.js";
import { readJson } from "../outcome.js";
import {
  type Backend,
  type Claim,
  type ClaimRequest,
  type Entry,
  type Inspected,
  type ListQuery,
  type Page,
  type Removed,
  type Resolution,
  type Resolved,
  type Seen,
  type SeenSettled,
  type StoredError,
  admits,
  decodeError,
  listed,
  refusal,
  seenSettledOf,
} from "../store.js";

interface Held {
  status: "running" | "done" | "failed";
  owner: string | undefined;
  fingerprint: string;
  /** Running: when the lease ends. */
  leaseUntil: number;
  /** Running: kept this long after the lease, as unknown. */
  retentionMs: number;
  /** When the entry is gone: the lease plus the retention while running, then the retention. */
  expiresAt: number;
  resultJson?: string;
  error?: StoredError;
  startedAt: number;
  firstStartedAt: number;
  settledAt?: number | undefined;
  attempts: number;
  about: Record<string, string | undefined>;
}

/** How many entries each write checks for expiry: the sweep walks the map a little at a time. */
const SWEEP_STEP = 4;

export class MemoryBackend implements Backend {
  readonly url = "memory://";
  private readonly entries = new Map<string, Held>();
  private closed = false;
  /** Where the sweep is: an iterator over the map, which stays valid as entries come and go. */
  private sweeping: Iterator<[string, Held]> | undefined;

  constructor(private readonly now: () => number = Date.now) {}

  private live(key: string, now: number): Held | undefined {
    if (this.closed) throw new StoreError("the store is closed", false);
    const e = this.entries.get(key);
    if (e === undefined) return undefined;
    if (now >= e.expiresAt) {
      this.entries.delete(key);
      return undefined;
    }
    return e;
  }

  /** Forgets a few expired entries, so memory stays bounded by the live ones at a constant cost per write. */
  private sweep(now: number): void {
    for (let i = 0; i < SWEEP_STEP; i++) {
      this.sweeping ??= this.entries.entries();
      const next = this.sweeping.next();
      if (next.done === true) {
        this.sweeping = undefined;
        return;
      }
      const [key, e] = next.value;
      if (now >= e.expiresAt) this.entries.delete(key);
    }
  }

  private view(e: Held, now: number): Entry {
    switch (e.status) {
      case "running":
        return {
          state: now < e.leaseUntil ? "running" : "unknown",
          fingerprint: e.fingerprint,
          owner: e.owner,
          attempts: e.attempts,
          startedAt: e.startedAt,
          firstStartedAt: e.firstStartedAt,
        };
      case "done":
        // Parsed afresh for every duplicate, so none sees another's changes to its copy.
        return { state: "done", fingerprint: e.fingerprint, result: readJson(e.resultJson ?? "null"), settledAt: e.settledAt };
      case "failed":
        return { state: "failed", fingerprint: e.fingerprint, error: structuredClone(e.error as StoredError), settledAt: e.settledAt };
    }
  }

  /** Our running or unknown entry held by `owner`. */
  private owned(key: string, owner: string, now: number): Held | undefined {
    const e = this.live(key, now);
    return e !== undefined && e.status === "running" && e.owner === owner ? e : undefined;
  }

  private lease(e: Held, leaseMs: number, retentionMs: number, now: number): void {
    e.leaseUntil = now + leaseMs;
    e.retentionMs = retentionMs;
    e.expiresAt = e.leaseUntil + retentionMs;
  }

  async claim(req: ClaimRequest): Promise<Claim> {
    const now = this.now();
    const e = this.live(req.key, now);
    if (e === undefined) {
      const held: Held = {
        status: "running",
        owner: req.owner,
        fingerprint: req.fingerprint,
        leaseUntil: 0,
        retentionMs: 0,
        expiresAt: 0,
        startedAt: now,
        firstStartedAt: now,
        attempts: 1,
        about: { scope: req.about.scope, tool: req.about.tool, detail: req.about.detail },
      };
      this.lease(held, req.leaseMs, req.retentionMs, now);
      this.entries.set(req.key, held);
      this.sweep(now);
      return { kind: "won" };
    }
    if (e.status === "running" && e.owner === req.owner) {
      this.lease(e, req.leaseMs, req.retentionMs, now);
      return { kind: "won" };
    }
    if (e.status === "running" && now >= e.leaseUntil && req.takeover && e.fingerprint === req.fingerprint) {
      e.owner = req.owner;
      e.attempts += 1;
      e.startedAt = now;
      this.lease(e, req.leaseMs, req.retentionMs, now);
      return { kind: "took_over" };
    }
    return { kind: "existing", entry: this.view(e, now) };
  }

  async renew(key: string, owner: string, leaseMs: number): Promise<boolean> {
    const now = this.now();
    const e = this.owned(key, owner, now);
    if (e === undefined) return false;
    this.lease(e, leaseMs, e.retentionMs, now);
    return true;
  }

  private settle(e: Held, now: number, retentionMs: number): void {
    // The owner stays: which attempt settled it, what a removal compares (as the SQL stores).
    e.settledAt = now;
    e.expiresAt = now + retentionMs;
  }

  async complete(key: string, owner: string, resultJson: string, retentionMs: number): Promise<boolean> {
    const now = this.now();
    const e = this.owned(key, owner, now);
    if (e === undefined) return false;
    e.status = "done";
    e.resultJson = resultJson;
    this.settle(e, now, retentionMs);
    return true;
  }

  async fail(key: string, owner: string, errorJson: string | undefined, retentionMs: number): Promise<boolean> {
    const now = this.now();
    const e = this.owned(key, owner, now);
    if (e === undefined) return false;
    if (errorJson === undefined) {
      this.entries.delete(key);
      return true;
    }
    e.status = "failed";
    e.error = decodeError(JSON.parse(errorJson));
    this.settle(e, now, retentionMs);
    return true;
  }

  async resolve(key: string, seen: Seen, resolution: Resolution, retentionMs: number): Promise<Resolved> {
    const now = this.now();
    const e = this.live(key, now);
    if (e === undefined) return { kind: "absent" };
    // Judged and written in one run of the thread: the entry acted on is the one judged.
    const entry = this.view(e, now);
    if (!admits(seen, entry)) return refusal(seen, entry, this.whole(key, e, now));
    if (resolution === "release") {
      this.entries.delete(key);
    } else if ("done" in resolution) {
      e.status = "done";
      e.resultJson = resolution.done;
      this.settle(e, now, retentionMs);
    } else {
      e.status = "failed";
      e.error = resolution.failed;
      this.settle(e, now, retentionMs);
    }
    return { kind: "applied" };
  }

  async get(key: string): Promise<Entry | undefined> {
    const now = this.now();
    const e = this.live(key, now);
    return e === undefined ? undefined : this.view(e, now);
  }

  private whole(key: string, e: Held, now: number): Inspected {
    const settled = e.status !== "running";
    return {
      key,
      entry: this.view(e, now),
      about: { ...e.about },
      attempts: e.attempts,
      startedAt: e.startedAt,
      firstStartedAt: e.firstStartedAt,
      settledAt: e.settledAt,
      expiresAt: settled ? e.expiresAt : e.leaseUntil,
      mark: { startedAt: String(e.startedAt), settledAt: e.settledAt === undefined ? undefined : String(e.settledAt), settledBy: settled ? e.owner : undefined },
    };
  }

  async inspect(key: string): Promise<Inspected | undefined> {
    const now = this.now();
    const e = this.live(key, now);
    return e === undefined ? undefined : this.whole(key, e, now);
  }

  async list(query: ListQuery): Promise<Page> {
    const now = this.now();
    const after = query.cursor ?? "";
    // Sorted on each call: a listing is an operator's, and bounded by the page it returns.
    const keys = [...this.entries.keys()].filter((k) => k > after).sort();
    const entries: Inspected[] = [];
    for (const key of keys) {
      const e = this.live(key, now);
      if (e === undefined) continue;
      const whole = this.whole(key, e, now);
      if (!listed(query, whole)) continue;
      if (entries.length === query.limit) return { entries, next: entries[entries.length - 1]?.key, unreadable: [] };
      entries.push(whole);
    }
    return { entries, next: undefined, unreadable: [] };
  }

  async remove(key: string, seen: SeenSettled): Promise<Removed> {
    const now = this.now();
    const e = this.live(key, now);
    if (e === undefined) return { kind: "absent" };
    // Compared and deleted in one run of the thread.
    const found = this.whole(key, e, now);
    const is = seenSettledOf(found);
    if (is === undefined || is.state !== seen.state || is.attempts !== seen.attempts || is.startedAt !== seen.startedAt || is.settledAt !== seen.settledAt || is.settledBy !== seen.settledBy) {
      return { kind: "changed", found };
    }
    this.entries.delete(key);
    return { kind: "applied" };
  }

  async close(): Promise<void> {
    this.closed = true;
    this.entries.clear();
  }
}
