// The operator's side of a store (docs/contract.md, "Store operations": get, list, resolve,
// remove), for a program that settles what nobody recorded without the Rust command:
// `store.get(key)`, `store.list(query)`, `store.resolve(key, seen, resolution)`,
// `store.remove(key, seen)`. Each write acts only on the entry its caller read (`seen`, an entry
// `get` or `list` returned), compared by the store in the same atomic step as the write, as
// `toolonce resolve` and `toolonce rm` do; a write whose answer was lost throws `EffectUnknown`
// (it may have applied), never an answer that says nothing was done.

import { hexDigest } from "./digest.js";
import { ConfigError, CorruptEntry, InvalidArguments, StoreError, StoreUnavailable, ToolonceError, messageOf } from "./errors.js";
import { backendOf, type Store } from "./open.js";
import { unstorableResult } from "./outcome.js";
import { type Backend, type Inspected, MAX_MS, type Resolution, type Resolved, type Seen, type StoredError, seenSettledOf } from "./store.js";

/** The state of an entry: `unknown` is a run whose lease ended before it recorded an outcome. */
export type EntryState = "running" | "unknown" | "done" | "failed";

/** One live entry, as an operator reads it. The owner is shown only as a digest: the token is its holder's secret. */
export interface StoredEntry {
  readonly key: string;
  readonly state: EntryState;
  readonly scope: string | undefined;
  readonly tool: string | undefined;
  readonly detail: string | undefined;
  readonly fingerprint: string | undefined;
  /** How many attempts started it (1, plus one per takeover); undefined when its writer did not record it. */
  readonly attempts: number | undefined;
  /** When its latest attempt started. */
  readonly startedAt: Date;
  readonly firstStartedAt: Date | undefined;
  readonly settledAt: Date | undefined;
  /** Running: when its lease ends; unknown: when it ended. */
  readonly leaseEndsAt: Date | undefined;
  /** Done or failed: when the store forgets it. */
  readonly expiresAt: Date | undefined;
  /** 12 hex digits of the SHA-256 of the owner as the store keeps it (running or unknown). */
  readonly ownerDigest: string | undefined;
  /** Done: the recorded result. */
  readonly result?: unknown;
  /** Failed: the recorded error. */
  readonly error?: StoredError;
}

/** Which entries `list` returns: a page of at most `limit` (1 to 1000, default 100), after `cursor`. */
export interface ListOptions {
  state?: EntryState;
  scope?: string;
  tool?: string;
  limit?: number;
  /** The `next` of the previous page. */
  cursor?: string;
}

export interface EntryPage {
  entries: StoredEntry[];
  /** Where the next page starts; undefined on the last page. A page may be short with more to come. */
  next: string | undefined;
  /**
   * The entries of this page's stretch of the store that cannot be decoded (another writer, or a
   * bug, left them in a form this version does not read), unless the store can tell from what
   * it reads apart (the SQL stores' columns) that the filters exclude them: reported rather than
   * failing the page. A call of such an operation is answered that its outcome cannot be
   * read, never run again, until the entry's retention ends.
   */
  unreadable: UnreadableEntry[];
}

/** An entry a listing could not decode: its key as the store holds it, and why. */
export interface UnreadableEntry {
  readonly key: string;
  readonly reason: string;
}

/** How an operator settles an entry: it took effect (`done`, with the result duplicates replay), it failed, or it did not take effect (`"release"`). */
export type OperatorResolution = { done: unknown } | { failed: string } | "release";

export interface ResolveOptions {
  /** Also settle a live claim (its owner is stuck but renewing): still only the attempt seen. */
  force?: boolean;
  /** How long a recorded outcome is kept and replayed, in ms (default one day). */
  retentionMs?: number;
}

/**
 * What a resolve or a removal did. Only `applied` changed anything. `settled`: done or failed
 * already; `live`: the attempt seen, its owner alive (its lease not over); `changed`: another
 * entry than the one read (taken over, or released or removed and claimed again); each with the
 * entry found in the same step as the refused write.
 */
export type OperatorAnswer = { kind: "applied" } | { kind: "absent" } | { kind: "settled" | "live" | "changed"; entry: StoredEntry };

/**
 * A resolve or a removal whose write the store did not answer (unreachable, or its reply lost):
 * it may or may not have been applied. Read the entry again with `store.get(key)`.
 */
export class EffectUnknown extends ToolonceError {}

/** What each entry handed out was read as: the store's own view, which a write compares. */
const READ = new WeakMap<StoredEntry, Inspected>();

const KEY = /^idem:[0-9a-f]{32}$/;
const STATES: readonly string[] = ["running", "unknown", "done", "failed"];
const DAY_MS = 86_400_000;

function checkKey(key: unknown, doing: string): string {
  if (typeof key !== "string" || !KEY.test(key)) {
    throw new InvalidArguments(`${doing}: invalid operation key ${JSON.stringify(key)}: expected "idem:" followed by 32 lowercase hex digits`, { outcome: "invalid_arguments" });
  }
  return key;
}

/** The backend's failure before any write: nothing was done. */
function unavailable(e: unknown, doing: string, key?: string): never {
  // An entry that cannot be read is not an outage: it is thrown as it is.
  if (e instanceof ToolonceError || e instanceof CorruptEntry) throw e;
  if (e instanceof ConfigError) throw new InvalidArguments(`${doing}: ${e.message}`, { outcome: "invalid_arguments", key, cause: e });
  throw new StoreUnavailable(`${doing}: ${messageOf(e)}`, { outcome: "store_unavailable", key, cause: e });
}

const date = (ms: number | undefined) => (ms === undefined ? undefined : new Date(ms));

/** The entry as a person (or a program) reads it. */
export function readable(found: Inspected): StoredEntry {
  const e = found.entry;
  const unsettled = e.state === "running" || e.state === "unknown";
  const entry: StoredEntry = {
    key: found.key,
    state: e.state,
    scope: found.about.scope,
    tool: found.about.tool,
    detail: found.about.detail,
    fingerprint: e.fingerprint,
    attempts: found.attempts > 0 ? found.attempts : undefined,
    startedAt: new Date(found.startedAt),
    firstStartedAt: date(found.firstStartedAt),
    settledAt: date(found.settledAt),
    leaseEndsAt: unsettled ? date(found.expiresAt) : undefined,
    expiresAt: unsettled ? undefined : date(found.expiresAt),
    ownerDigest: unsettled && e.owner !== undefined ? ownerDigest(e.owner) : undefined,
    ...(e.state === "done" ? { result: e.result } : {}),
    ...(e.state === "failed" ? { error: e.error } : {}),
  };
  READ.set(entry, found);
  return Object.freeze(entry);
}

/** 12 hex digits of the SHA-256 of `owner`: tells owners apart without giving the token away (the core's `owner_digest`). */
export function ownerDigest(owner: string): string {
  return hexDigest("sha256", owner).slice(0, 12);
}

/** The live entry of `key`, or undefined. */
export async function getEntry(store: Store, key: string): Promise<StoredEntry | undefined> {
  checkKey(key, "get");
  let found: Inspected | undefined;
  try {
    found = await backendOf(store).inspect(key);
  } catch (e) {
    unavailable(e, `get(${key})`, key);
  }
  return found === undefined ? undefined : readable(found);
}

/** One page of live entries, filtered by state, scope and tool. */
export async function listEntries(store: Store, options: ListOptions = {}): Promise<EntryPage> {
  const { state, scope, tool, cursor } = options;
  const limit = options.limit ?? 100;
  const bad = (why: string) => new InvalidArguments(`list: ${why}`, { outcome: "invalid_arguments" });
  if (state !== undefined && !STATES.includes(state)) throw bad(`unknown state ${JSON.stringify(state)}: expected running, done, failed or unknown`);
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw bad(`limit must be an integer between 1 and 1000, not ${String(limit)}`);
  for (const [name, value] of Object.entries({ scope, tool, cursor })) {
    if (value !== undefined && typeof value !== "string") throw bad(`${name} must be a string`);
  }
  let page;
  try {
    page = await backendOf(store).list({ state, scope, tool, cursor, limit });
  } catch (e) {
    unavailable(e, "list");
  }
  return { entries: page.entries.map(readable), next: page.next, unreadable: (page.unreadable ?? []).map(({ key, reason }) => ({ key, reason })) };
}

/** What `seen` was read as; refuses anything not read by `get` or `list`, or of another key. */
function readOf(key: string, seen: StoredEntry, doing: string): Inspected {
  const found = typeof seen === "object" && seen !== null ? READ.get(seen) : undefined;
  if (found === undefined) throw new InvalidArguments(`${doing}: seen must be an entry store.get() or store.list() returned`, { outcome: "invalid_arguments", key });
  if (found.key !== key) throw new InvalidArguments(`${doing}: the entry seen is of ${found.key}, not ${key}`, { outcome: "invalid_arguments", key });
  return found;
}

function resolutionOf(resolution: OperatorResolution, doing: string, key: string): Resolution {
  const bad = (why: string) => new InvalidArguments(`${doing}: ${why}`, { outcome: "invalid_arguments", key });
  if (resolution === "release") return "release";
  if (typeof resolution === "object" && resolution !== null && "done" in resolution) {
    let json: string | undefined;
    try {
      json = JSON.stringify(resolution.done);
    } catch (e) {
      throw bad(`the result is not JSON: ${messageOf(e)}`);
    }
    if (json === undefined) throw bad("the result is not JSON (undefined, a function or a symbol)");
    const why = unstorableResult(json);
    if (why !== undefined) throw bad(`the result cannot be stored: ${why}`);
    return { done: json };
  }
  if (typeof resolution === "object" && resolution !== null && "failed" in resolution) {
    if (typeof resolution.failed !== "string" || resolution.failed.trim() === "") throw bad("failed needs a message saying what happened");
    return { failed: { message: resolution.failed, class: "permanent" } };
  }
  throw bad('resolution must be { done: RESULT }, { failed: MESSAGE } or "release"');
}

/** The answer of a fenced write, or `EffectUnknown` when the store failed before it answered. */
async function fenced<T>(write: () => Promise<T>, what: string, key: string): Promise<T> {
  try {
    return await write();
  } catch (e) {
    // An entry found that cannot be read is the store's answer: nothing was written.
    if (e instanceof CorruptEntry || !(e instanceof StoreError)) throw e;
    throw new EffectUnknown(
      `the ${what} of ${key} may or may not have been applied: the store failed before it answered (${e.message}). Read the entry again with store.get("${key}") (\`toolonce show ${key}\`).`,
      { outcome: "unknown", key, cause: e },
    );
  }
}

function answerOf(resolved: Resolved, seen: Inspected): OperatorAnswer {
  if (resolved.kind === "applied" || resolved.kind === "absent") return { kind: resolved.kind };
  // Every backend returns the entry whole with a refusal; the short one is only a fallback.
  const found = resolved.found ?? { ...seen, entry: resolved.entry };
  return { kind: resolved.kind, entry: readable(found) };
}

/**
 * Settles the entry `seen` (read by `get` or `list`) of `key`: an unknown one, or a live one
 * with `force`. Refused with nothing written when it is settled, live, or another attempt.
 */
export async function resolveEntry(store: Store, key: string, seen: StoredEntry, resolution: OperatorResolution, options: ResolveOptions = {}): Promise<OperatorAnswer> {
  const doing = `resolve(${key})`;
  checkKey(key, "resolve");
  const read = readOf(key, seen, doing);
  const wanted = resolutionOf(resolution, doing, key);
  const retention = options.retentionMs ?? DAY_MS;
  if (typeof retention !== "number" || !(retention >= 1 && retention <= MAX_MS)) {
    throw new InvalidArguments(`${doing}: retentionMs must be from 1 ms to 100 years`, { outcome: "invalid_arguments", key });
  }
  const entry = read.entry;
  if (entry.state === "done" || entry.state === "failed") return { kind: "settled", entry: seen };
  if (entry.state === "running" && options.force !== true) return { kind: "live", entry: seen };
  const fence: Seen = { owner: entry.owner, attempts: entry.attempts, evenIfLive: options.force === true };
  const backend: Backend = backendOf(store);
  const resolved = await fenced(() => backend.resolve(key, fence, wanted, retention), "resolution", key);
  return answerOf(resolved, read);
}

/**
 * Deletes the settled entry `seen` (done or failed, read by `get` or `list`) of `key`, and no
 * other: one deleted and claimed again since it was read is `changed`, left alone. An unsettled
 * entry is deleted by `resolve(key, seen, "release")` instead.
 */
export async function removeEntry(store: Store, key: string, seen: StoredEntry): Promise<OperatorAnswer> {
  const doing = `remove(${key})`;
  checkKey(key, "remove");
  const read = readOf(key, seen, doing);
  const settled = seenSettledOf(read);
  if (settled === undefined) {
    throw new InvalidArguments(`${doing}: the entry seen is ${read.entry.state}: a claim is deleted only as the attempt read, with resolve(key, seen, "release")`, {
      outcome: "invalid_arguments",
      key,
    });
  }
  const backend = backendOf(store);
  const removed = await fenced(() => backend.remove(key, settled), "removal", key);
  if (removed.kind === "changed") return { kind: "changed", entry: readable(removed.found) };
  return { kind: removed.kind };
}
