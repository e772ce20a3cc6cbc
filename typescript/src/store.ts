// The store operations every backend implements (docs/contract.md, "Store operations"): claim,
// renew, complete, fail (fenced by the owner token), resolve, get. Each is one atomic step on
// the store, judged by the store's clock. Results and errors travel as the JSON text the layer
// made once, so a backend splices it in and never re-encodes it.

import { LIMITS } from "./artifacts.generated.js";
import { CorruptEntry } from "./errors.js";

/** What an entry says it is, for people: the scope, the tool, a detail. */
export interface About {
  scope?: string;
  tool?: string;
  detail?: string;
}

/** A claim of `key` by the holder of `owner` (32 hex digits, made afresh for the call). */
export interface ClaimRequest {
  key: string;
  fingerprint: string;
  owner: string;
  leaseMs: number;
  retentionMs: number;
  /** Take an `unknown` entry of the same fingerprint over. */
  takeover: boolean;
  about: About;
}

/** A stored error: the tool's message, its class, its structured detail. */
export interface StoredError {
  message: string;
  class: "permanent" | "transient";
  detail?: unknown;
}

/**
 * A live entry, as a duplicate needs it. An unsettled one says which attempt it is (its owner
 * as the store keeps it, the token or, on Redis, its SHA-1; and its attempt count, 0 when not
 * recorded), so a verify probe's record acts on that attempt only. A read (`get`) also gives
 * when this attempt and the first one started (ms since the epoch, the writer's clock; absent
 * when not recorded): a claim that created its entry shows one attempt started at its first start.
 * A settled one says when it settled (ms since the epoch; absent when its writer kept no time),
 * which a replay tells the model.
 */
export type Entry =
  | {
      state: "running" | "unknown";
      fingerprint?: string | undefined;
      owner?: string | undefined;
      attempts: number;
      startedAt?: number | undefined;
      firstStartedAt?: number | undefined;
    }
  | { state: "done"; fingerprint?: string | undefined; result: unknown; settledAt?: number | undefined }
  | { state: "failed"; fingerprint?: string | undefined; error: StoredError; settledAt?: number | undefined };

export type Claim = { kind: "won" } | { kind: "took_over" } | { kind: "existing"; entry: Entry };

/** An operator's (or a verify probe's) settlement of a running or unknown entry. */
export type Resolution = { done: string } | { failed: StoredError } | "release";

/**
 * The attempt of an unsettled entry a resolve acts on, and only on: the store compares it with
 * the entry in the same atomic step as its write, and acts only once its lease has passed.
 */
export interface Seen {
  owner: string | undefined;
  attempts: number;
  /** Acts also while the lease is live (an operator's `--force` on a stuck owner): still only on this attempt. */
  evenIfLive?: boolean;
}

/** The attempt `entry` is, if it is unsettled. */
export function seenOf(entry: Entry): Seen | undefined {
  return entry.state === "running" || entry.state === "unknown" ? { owner: entry.owner, attempts: entry.attempts } : undefined;
}

/**
 * What a resolve found instead of the attempt seen, past its lease: a settled entry, the attempt
 * seen with its lease live (its owner is alive), or another attempt (taken over, or released
 * and claimed again).
 */
export type Resolved =
  | { kind: "applied" }
  | { kind: "absent" }
  | { kind: "settled" | "live" | "changed"; entry: Entry; found?: Inspected };

/**
 * Whether `entry` is the attempt `seen` in a state a resolve may act on: unsettled, the same
 * owner and attempts, and unknown unless `seen.evenIfLive`.
 */
export function admits(seen: Seen, entry: Entry): boolean {
  if (entry.state !== "unknown" && !(entry.state === "running" && seen.evenIfLive === true)) return false;
  return entry.owner === seen.owner && entry.attempts === seen.attempts;
}

/**
 * Why a resolve refused `entry`, read in the same step as the refused write (see `Resolved`);
 * `found` is the whole entry, for an operator. An entry `seen` admits (a store's read and its
 * write disagree) is answered changed: refused, never applied by guess.
 */
export function refusal(seen: Seen, entry: Entry, found?: Inspected): Resolved {
  const withFound = <T extends object>(r: T) => (found === undefined ? r : { ...r, found });
  if (entry.state === "done" || entry.state === "failed") return withFound({ kind: "settled", entry });
  if (entry.state === "running" && entry.owner === seen.owner && entry.attempts === seen.attempts && seen.evenIfLive !== true) {
    return withFound({ kind: "live", entry });
  }
  return withFound({ kind: "changed", entry });
}

/**
 * One live entry whole, for an operator (`toolonce ls | show`): the entry, what it says it is,
 * its times (ms since the epoch, on this machine's clock where the store keeps a remaining
 * time), and its start and settling time exactly as the store compares them for a removal.
 */
export interface Inspected {
  key: string;
  entry: Entry;
  about: About;
  /** How many attempts started it; 0 when its writer did not record it. */
  attempts: number;
  startedAt: number;
  firstStartedAt: number | undefined;
  settledAt: number | undefined;
  /** Running or unknown: when the lease ends (ended); settled: when the entry is forgotten. */
  expiresAt: number | undefined;
  /** The start and settling time in the store's own exact terms (whole ms; PostgreSQL: microseconds). */
  mark: { startedAt: string; settledAt: string | undefined; settledBy: string | undefined };
}

/** Which entries `list` returns: a page of at most `limit` after `cursor`, filtered. */
export interface ListQuery {
  state?: "running" | "unknown" | "done" | "failed" | undefined;
  scope?: string | undefined;
  tool?: string | undefined;
  cursor?: string | undefined;
  limit: number;
}

/** A page of live entries; `next` continues after it, undefined on the last page. */
export interface Page {
  entries: Inspected[];
  next: string | undefined;
  /** The entries of the page's stretch of the store that cannot be decoded (unless the store can tell the filters exclude them), reported rather than failing the page; they count towards its size. */
  unreadable: Unreadable[];
}

/** An entry a listing found and could not decode: its key as the store holds it, and why. */
export interface Unreadable {
  key: string;
  reason: string;
}

/**
 * Splits `rows` into the entries `read` decodes and those it refuses as corrupt (one entry
 * another writer garbled must not hide every other one from an operator); any other error is
 * thrown.
 */
export function readEach<R>(rows: R[], keyOf: (row: R) => string, read: (row: R) => Inspected): { entries: Inspected[]; unreadable: Unreadable[] } {
  const entries: Inspected[] = [];
  const unreadable: Unreadable[] = [];
  for (const row of rows) {
    try {
      entries.push(read(row));
    } catch (e) {
      if (!(e instanceof CorruptEntry)) throw e;
      unreadable.push({ key: keyOf(row), reason: e.message });
    }
  }
  return { entries, unreadable };
}

/** Whether `e` passes the state, scope and tool filters of `q`. */
export function listed(q: ListQuery, e: Inspected): boolean {
  return (q.state === undefined || q.state === e.entry.state) && (q.scope === undefined || q.scope === e.about.scope) && (q.tool === undefined || q.tool === e.about.tool);
}

/**
 * The settled entry a removal deletes, and no other: its state, attempts, start, settling
 * time and settling attempt, as the store reported them (see `Inspected.mark`).
 */
export interface SeenSettled {
  state: "done" | "failed";
  attempts: number;
  startedAt: string;
  settledAt: string | undefined;
  /** Which attempt settled it: its owner token (SQLite, PostgreSQL, memory) or digest (Redis); tells an entry settled anew within the same millisecond apart. */
  settledBy: string | undefined;
}

/** The settled entry `e` is, if it is done or failed. */
export function seenSettledOf(e: Inspected): SeenSettled | undefined {
  const state = e.entry.state;
  if (state !== "done" && state !== "failed") return undefined;
  return { state, attempts: e.attempts, startedAt: e.mark.startedAt, settledAt: e.mark.settledAt, settledBy: e.mark.settledBy };
}

/** What a removal did: deleted the entry seen, found none, or found another (returned). */
export type Removed = { kind: "applied" } | { kind: "absent" } | { kind: "changed"; found: Inspected };

/**
 * How the renewal worker (renewer-worker.ts) opens a connection of its own to the same store.
 * The URL is the one the store was opened with, password included: it stays in this process.
 */
export type RenewalSpec = { kind: "sqlite"; path: string } | { kind: "redis"; url: string } | { kind: "postgres"; url: string };

/** One store backend. Every method rejects with a `StoreError` when it fails. */
export interface Backend {
  /** The store's URL without its password. */
  readonly url: string;
  /**
   * Set where a worker thread can reach the store on a connection of its own: the leases of
   * its calls are renewed there, out of reach of the caller's event loop. Unset (the memory
   * store, SQLite `:memory:`, a client of the program's), they are renewed in the caller's thread.
   */
  readonly renewal?: RenewalSpec | undefined;
  claim(req: ClaimRequest): Promise<Claim>;
  /** Extends the lease of our running or unknown entry; false when `owner` no longer holds it. */
  renew(key: string, owner: string, leaseMs: number): Promise<boolean>;
  /** Makes our entry `done` with `resultJson`; false when `owner` no longer holds it. */
  complete(key: string, owner: string, resultJson: string, retentionMs: number): Promise<boolean>;
  /**
   * `errorJson` undefined: deletes our entry (a transient error); else makes it `failed` for
   * `retentionMs`. False when `owner` no longer holds it.
   */
  fail(key: string, owner: string, errorJson: string | undefined, retentionMs: number): Promise<boolean>;
  /** Settles the attempt `seen` only, once its lease has passed (docs/contract.md, resolve). */
  resolve(key: string, seen: Seen, resolution: Resolution, retentionMs: number): Promise<Resolved>;
  get(key: string): Promise<Entry | undefined>;
  /** The live entry of `key` whole, for an operator. */
  inspect(key: string): Promise<Inspected | undefined>;
  /** A page of live entries, ordered by key where the store can. */
  list(query: ListQuery): Promise<Page>;
  /** Deletes the settled entry `seen` only, in the same atomic step as the comparison (docs/contract.md, remove). */
  remove(key: string, seen: SeenSettled): Promise<Removed>;
  close(): Promise<void>;
}

/** Redis's `PX` range, and the range of every lease and retention: 1 ms to 100 years. */
export const MAX_MS: number = LIMITS.max_duration_ms;

export function clampMs(ms: number): number {
  return Math.min(Math.max(Math.round(ms), 1), MAX_MS);
}

const FINGERPRINT = /^[0-9a-f]{64}$/;

/** Whether `text` is a fingerprint: 64 lowercase hex digits. */
export function isFingerprint(text: unknown): text is string {
  return typeof text === "string" && FINGERPRINT.test(text);
}

/** The stored error in `value`: ours, or another writer's bare message or object with a `message`. */
export function decodeError(value: unknown): StoredError | undefined {
  if (typeof value === "string") return { message: value, class: "permanent" };
  if (value === null || typeof value !== "object") return undefined;
  const e = value as Record<string, unknown>;
  if (typeof e.message !== "string") return undefined;
  if (e.class === "permanent" || e.class === "transient") {
    const error: StoredError = { message: e.message, class: e.class };
    if (e.detail !== undefined && e.detail !== null) error.detail = e.detail;
    return error;
  }
  return { message: e.message, class: "permanent", detail: value };
}
