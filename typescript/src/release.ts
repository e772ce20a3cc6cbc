// How the layer gives a claim up without an outcome to record (docs/contract.md, layer steps 3
// and 7; crates/toolonce/src/layer/release.rs): a claim whose reply was lost (it may have
// applied unseen), and a takeover whose tool failed transiently. A claim that created its entry
// is released (deleted: nothing began). One that may have taken over an earlier attempt is
// **given back** instead: a fenced renewal with a zero lease ends the lease now, so the entry is
// `unknown` at once and keeps the earlier attempt's record (its attempts, first start,
// fingerprint, what it is). Deleting it would let the next caller under `hold` run an operation
// that may already have taken effect.

import { StoreError } from "./errors.js";
import { warn } from "./log.js";
import type { Backend, Entry } from "./store.js";

/** How long a release or give-back is retried: a dropped connection or a quick restart, no more. */
const RELEASE_FOR_MS = 3000;

// A caller awaits these pauses, so they hold the process open as any pending I/O would.
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** What a fenced write of the owner's did: as `settle` in layer.ts reports it. */
export type Written = "applied" | "not_owner" | "unwritten";

/**
 * Gives up a claim whose answer was a retryable error, after which it may have applied. One that
 * asked for no takeover can only have created the entry: it is released. One that asked for a
 * takeover reads the entry first and releases it only when the entry shows it created it; a
 * settled or absent entry is left alone; otherwise, or when the read fails, it is given back.
 */
export async function giveUpClaim(store: Backend, tool: string, key: string, owner: string, takeover: boolean): Promise<void> {
  const what = takeover ? await judge(store, key) : "release";
  if (what === "release") await release(store, tool, key, owner);
  else if (what === "give back") await giveBack(store, tool, key, owner);
}

async function judge(store: Backend, key: string): Promise<"release" | "give back" | "nothing"> {
  let entry: Entry | undefined;
  try {
    entry = await store.get(key);
  } catch {
    return "give back";
  }
  if (entry === undefined || entry.state === "done" || entry.state === "failed") return "nothing";
  return createdByItsClaim(entry) ? "release" : "give back";
}

/**
 * Whether an unsettled entry shows that the claim holding it created it: one attempt, whose start
 * is the first start (a takeover counts another attempt and keeps the earlier first start). An
 * entry that records neither (an older writer's) does not show it.
 */
export function createdByItsClaim(entry: Entry): boolean {
  if (entry.state !== "running" && entry.state !== "unknown") return false;
  return entry.attempts === 1 && entry.startedAt !== undefined && entry.firstStartedAt === entry.startedAt;
}

/**
 * Releases a claim that created its entry: a fenced transient fail deletes the entry if, and only
 * if, this claim wrote it. Without it the entry would stay `running` for its lease, and every
 * retry would be told the operation is in flight although it never ran.
 */
async function release(store: Backend, tool: string, key: string, owner: string): Promise<void> {
  const released = await retried(() => store.fail(key, owner, undefined, 1));
  if (released === true) warn(`released the claim of ${tool} (${key}) whose reply was lost; the tool was not run`);
  if (released === undefined) {
    warn(`could not release the claim of ${tool} (${key}) whose reply was lost; if it was written, it stays running until its lease expires`);
  }
}

/**
 * Gives back a claim that may hold an earlier attempt's record: a fenced renewal with a zero
 * lease, so the entry is `unknown` at once and keeps everything it recorded. If it cannot be
 * written the lease runs out by itself, with the same result later.
 */
export async function giveBack(store: Backend, tool: string, key: string, owner: string): Promise<Written> {
  const renewed = await retried(() => store.renew(key, owner, 0));
  if (renewed === true) {
    warn(`gave back ${tool} (${key}), taken over from an interrupted attempt, without an outcome of its own; it stays unknown, with the earlier attempt's record`);
    return "applied";
  }
  if (renewed === false) return "not_owner";
  warn(`could not give back ${tool} (${key}), taken over from an interrupted attempt; it becomes unknown again when its lease expires`);
  return "unwritten";
}

/** Runs a fenced write until the store answers, for at most RELEASE_FOR_MS: undefined when it never did, or refused it. */
async function retried<T>(write: () => Promise<T>): Promise<T | undefined> {
  const end = Date.now() + RELEASE_FOR_MS;
  let pause = 20;
  while (Date.now() < end) {
    try {
      return await write();
    } catch (e) {
      if (!(e instanceof StoreError && e.retryable)) return undefined;
    }
    await sleep(Math.min(pause, Math.max(0, end - Date.now())));
    pause = Math.min(pause * 2, 500);
  }
  return undefined;
}
