// What a write call does (docs/contract.md, "The layer"): claim the key with a fresh owner
// token, run the handler once under a heartbeat, record its outcome with a fenced complete or
// fail, and answer every duplicate from the store. This is the one place that decides an
// outcome: once the handler may have begun, an outcome that cannot be stored is recorded as a
// sticky failure saying so, or left to turn `unknown`; the operation is released for a rerun
// only on the handler's own transient error, or when the claim itself may not have applied,
// and never when the claim took over an earlier attempt (release.ts gives that one back).

import { CorruptEntry, StoreError, messageOf, type Outcome } from "./errors.js";
import { canonicalize } from "./canonical.js";
import { ownerToken } from "./digest.js";
import type { Derived } from "./key.js";
import type { Lifetime } from "./lifetime.js";
import { warn } from "./log.js";
import { errorJson, readJson, unstorable, unstorableResult } from "./outcome.js";
import { type Written, giveBack, giveUpClaim } from "./release.js";
import type { About, Backend, Claim, Entry, Seen, StoredError } from "./store.js";
import { text } from "./texts.js";

/** What a verify probe learned about an interrupted attempt; a probe that throws cannot tell. */
export type Verified<Result = unknown> = { status: "done"; result: Result } | { status: "not_done" } | { status: "cannot_tell" };

/** The options of a call as the layer runs them (checked when the tool was wrapped). */
export interface Effective {
  leaseMs: number;
  retentionMs: number;
  /** Undefined: a duplicate of a running call is rejected at once. */
  waitMs: number | undefined;
  onExpired: "hold" | "rerun" | "verify";
}

/** One write call. `run` and `verify` get whether an earlier attempt may have taken effect. */
export interface WriteCall {
  store: Backend;
  /** The store handle's running calls and heartbeats. */
  lifetime: Lifetime;
  tool: string;
  derived: Derived;
  about: About;
  options: Effective;
  /** The handler's value or promise; it may also throw. */
  run(mayHaveRunBefore: boolean): unknown;
  verify: (() => Promise<Verified>) | undefined;
}

/**
 * How the call ended. `thrown` is the handler's own exception (executed); `stored` a failure
 * recorded or replayed; `refused` the layer's explanation for the other outcomes.
 */
export type Answer = (
  | { outcome: Outcome; key: string; result: unknown; settledAt?: number | undefined }
  | { outcome: Outcome; key: string; thrown: unknown; permanent: boolean }
  | { outcome: Outcome; key: string; stored: StoredError; settledAt?: number | undefined }
  | { outcome: Outcome; key: string; refused: string; detail?: unknown }
) & {
  /** Set when the handler ran but its outcome was not simply recorded (see `noted`). */
  notice?: string;
};

/** How often a complete or fail is tried while the store is unreachable: the handler already ran. */
const SETTLE_TRIES = 3;

// A caller awaits these pauses, so they hold the process open as any pending I/O would; only
// the heartbeat's timers are unref'd.
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function isPermanent(e: unknown): boolean {
  return e !== null && typeof e === "object" && (e as { permanent?: unknown }).permanent === true;
}

/** Runs `call` at most once for its key; never rejects. A call started once the store's close() began is refused. */
export async function runWrite(call: WriteCall): Promise<Answer> {
  const running = call.lifetime.enter(call.tool, call.derived.key);
  if (running === undefined) return unavailable(call.tool, call.derived.key, call.lifetime.refusal());
  try {
    return await claimAndRun(call);
  } finally {
    call.lifetime.leave(running);
  }
}

async function claimAndRun(call: WriteCall): Promise<Answer> {
  const { store, tool, options } = call;
  const key = call.derived.key;
  const deadline = options.waitMs === undefined ? undefined : Date.now() + options.waitMs;
  let takeover = options.onExpired === "rerun";
  let verify = options.onExpired === "verify" ? call.verify : undefined;
  let reclaimed = false;
  // Made before the claim, so a claim whose reply is lost is still ours to retry or release.
  const owner = ownerToken();
  for (;;) {
    // In-thread heartbeats a blocked loop held up are renewed first: their leases were late, not lost.
    const late = call.lifetime.catchUp();
    if (late !== undefined) await late;
    let claim: Claim;
    try {
      claim = await store.claim({
        key,
        fingerprint: call.derived.fingerprint,
        owner,
        leaseMs: options.leaseMs,
        retentionMs: options.retentionMs,
        takeover,
        about: call.about,
      });
    } catch (e) {
      // The store may have applied the claim before its reply was lost: release it, or give it
      // back if it may have taken over an earlier attempt, whose record it must not delete.
      if (e instanceof StoreError && e.retryable) await giveUpClaim(store, tool, key, owner, takeover);
      return storeFailed(tool, key, e);
    }
    // Outside the try: nothing the run does may reach the release above. `return await`: an
    // async function returning a promise unawaited takes two more turns of the microtask queue.
    if (claim.kind === "won") return await execute(call, owner, claim, reclaimed);
    if (claim.kind === "took_over") {
      warn(`took over ${tool} (${key}), whose earlier attempt was interrupted; running it again with the same key`);
      return await execute(call, owner, claim, true);
    }
    const entry = claim.entry;
    if (entry.fingerprint !== undefined && entry.fingerprint !== call.derived.fingerprint) {
      return { outcome: "conflict", key, refused: conflictText(tool, key) };
    }
    switch (entry.state) {
      case "done":
        return { outcome: "replayed", key, result: entry.result, settledAt: entry.settledAt };
      case "failed":
        return { outcome: "replayed_failure", key, stored: entry.error, settledAt: entry.settledAt };
      case "unknown": {
        // Under `rerun` the claim asked to take over and the store refused: hold rather than loop.
        const probe = takeover ? undefined : verify;
        verify = undefined;
        if (probe === undefined) return hold(tool, key);
        let verified: Verified;
        try {
          verified = await probe();
        } catch {
          verified = { status: "cannot_tell" };
        }
        // What the probe found is recorded on the attempt it probed only.
        if (verified?.status === "done") return await recordVerified(call, { owner: entry.owner, attempts: entry.attempts }, verified.result);
        if (verified?.status === "not_done") {
          takeover = true;
          continue;
        }
        return hold(tool, key);
      }
      case "running":
        break;
    }
    if (deadline === undefined) return { outcome: "in_flight", key, refused: inFlightText(tool, key) };
    // Poll until it settles, vanishes or turns unknown, with a growing pause.
    let pause = 5;
    for (;;) {
      const left = deadline - Date.now();
      if (left <= 0) return { outcome: "in_flight", key, refused: inFlightText(tool, key) };
      await sleep(Math.min(pause, left));
      pause = Math.min(pause * 2, 200);
      let found: Entry | undefined;
      try {
        found = await store.get(key);
      } catch (e) {
        return storeFailed(tool, key, e);
      }
      if (found?.state === "running") continue;
      if (found === undefined) reclaimed = true;
      break;
    }
  }
}

async function execute(call: WriteCall, owner: string, claim: Claim, mayHaveRunBefore: boolean): Promise<Answer> {
  const { store, tool, options } = call;
  const key = call.derived.key;
  const heartbeat = call.lifetime.beat(tool, key, owner, options.leaseMs, Date.now());
  let value: unknown;
  let thrown: { error: unknown } | undefined;
  try {
    value = await call.run(mayHaveRunBefore);
  } catch (e) {
    thrown = { error: e };
  }
  const renewing = heartbeat.stop();
  if (renewing !== undefined) await renewing;
  if (thrown !== undefined) {
    const permanent = isPermanent(thrown.error);
    // A transient error says this attempt did not take effect; after a takeover the earlier one
    // may have, so its record is kept: given back, `unknown`, never released.
    const written =
      !permanent && claim.kind === "took_over"
        ? await giveBack(store, tool, key, owner)
        : await settle(call, owner, permanent ? { failed: errorJson(thrown.error, "permanent") } : { released: true });
    if (written === "not_owner") lostClaim(tool, key);
    return noted({ outcome: "executed", key, thrown: thrown.error, permanent }, written);
  }
  // The handler ran: from here nothing releases the operation. What cannot be stored as it is
  // is stored as what stands for it: a failure that says why.
  let resultJson: string | undefined;
  let notJson: string | undefined;
  try {
    resultJson = JSON.stringify(value) ?? "null";
  } catch (e) {
    notJson = text("result_not_json", { error: messageOf(e) });
  }
  if (resultJson === undefined) {
    // Nothing to hand the first caller either: it gets the failure every duplicate gets.
    const error = unstorable(tool, notJson as string);
    warn(`${tool} (${key}) ran, but its result cannot be stored (${notJson}); recorded as a failure instead`);
    const written = await settle(call, owner, { failed: JSON.stringify(error) });
    if (written === "not_owner") lostClaim(tool, key);
    return noted({ outcome: "executed", key, stored: error }, written);
  }
  const why = unstorableResult(resultJson);
  if (why !== undefined) warn(`${tool} (${key}) ran, but its result cannot be stored (${why}); recorded as a failure instead`);
  const written = await settle(call, owner, why === undefined ? { done: resultJson } : { failed: JSON.stringify(unstorable(tool, why)) });
  if (written === "not_owner") lostClaim(tool, key);
  // The first caller gets what a reader of the stored JSON gets.
  return noted({ outcome: "executed", key, result: readJson(resultJson) }, written);
}

/**
 * `answer` with what the caller of an executed call is told when its outcome was not simply
 * recorded, in the words of the Rust layer (`WriteAnswer::notice`); as it is when it was. Set
 * in place rather than spread in: a spread copies the answer on every first-time call.
 */
function noted(answer: Answer, written: Written): Answer {
  switch (written) {
    case "applied":
      break;
    case "not_owner":
      answer.notice = text("notice_not_owner");
      break;
    case "unwritten":
      answer.notice = text("notice_unrecorded");
      break;
  }
  return answer;
}

function lostClaim(tool: string, key: string): void {
  warn(`the claim of ${tool} (${key}) was lost while it ran (its lease expired and somebody else holds it); the outcome was not recorded`);
}

type Settlement = { done: string } | { failed: string } | { released: true };

/** Records the outcome, trying again while the store is unreachable; "unwritten" leaves it to turn unknown. */
async function settle(call: WriteCall, owner: string, what: Settlement): Promise<Written> {
  const { store, options } = call;
  const key = call.derived.key;
  let pause = 50;
  for (let attempt = 1; ; attempt++) {
    try {
      const applied =
        "done" in what
          ? await store.complete(key, owner, what.done, options.retentionMs)
          : await store.fail(key, owner, "failed" in what ? what.failed : undefined, options.retentionMs);
      if (applied) return "applied";
      return (await appliedBefore(store, key, what)) ? "applied" : "not_owner";
    } catch (e) {
      if (e instanceof StoreError && e.retryable && attempt < SETTLE_TRIES) {
        await sleep(pause);
        pause *= 2;
        continue;
      }
      // The store refused the outcome itself (a value its database cannot hold): the handler
      // ran, so a failure that says so is recorded instead, rather than leaving it to turn unknown.
      if (!(e instanceof StoreError && e.retryable) && !("released" in what)) {
        const refused = await recordRefusal(call, owner, e);
        if (refused !== undefined) return refused;
      }
      warn(`could not record the outcome of ${call.tool} (${key}): ${messageOf(e)}; the entry becomes unknown when its lease expires`);
      return "unwritten";
    }
  }
}

/** Records, in place of an outcome the store refused, a failure naming the refusal; undefined if that fails too. */
async function recordRefusal(call: WriteCall, owner: string, refusal: unknown): Promise<"applied" | "not_owner" | undefined> {
  const instead = unstorable(call.tool, text("store_refused", { report: messageOf(refusal) }));
  try {
    const applied = await call.store.fail(call.derived.key, owner, JSON.stringify(instead), call.options.retentionMs);
    if (applied) warn(`the store refused the outcome of ${call.tool} (${call.derived.key}); recorded as a failure that says so`);
    return applied ? "applied" : "not_owner";
  } catch {
    return undefined;
  }
}

/** Whether a write that answered "not the owner" had been applied by an earlier sending whose reply was lost. */
async function appliedBefore(store: Backend, key: string, what: Settlement): Promise<boolean> {
  let entry: Entry | undefined;
  try {
    entry = await store.get(key);
  } catch {
    return false;
  }
  if ("released" in what) return entry === undefined;
  if (entry === undefined) return false;
  if ("done" in what) return entry.state === "done" && canonicalize(entry.result) === canonicalize(readJson(what.done));
  return entry.state === "failed" && canonicalize(entry.error) === canonicalize(readJson(what.failed));
}

/** Records what a verify probe found, fenced against an entry that settled meanwhile. */
async function recordVerified(call: WriteCall, seen: Seen, result: unknown): Promise<Answer> {
  const key = call.derived.key;
  let json: string;
  try {
    json = JSON.stringify(result) ?? "null";
  } catch (e) {
    warn(`the verify probe of ${call.tool} (${key}) answered a result that is not JSON (${messageOf(e)}); held`);
    return hold(call.tool, key);
  }
  // Beyond the stored-depth limit, what is recorded is the failure that says so (rule 5).
  const why = unstorableResult(json);
  const resolution = why === undefined ? { done: json } : { failed: unstorable(call.tool, why) };
  try {
    // Refused as another attempt (taken over or renewed meanwhile) or released: left alone, and
    // answered with what the downstream system said, as for an outage below.
    const resolved = await call.store.resolve(key, seen, resolution, call.options.retentionMs);
    if (resolved.kind === "settled") {
      const entry = resolved.entry;
      if (entry.state === "done") return { outcome: "replayed", key, result: entry.result, settledAt: entry.settledAt };
      if (entry.state === "failed") return { outcome: "replayed_failure", key, stored: entry.error, settledAt: entry.settledAt };
      return hold(call.tool, key);
    }
  } catch (e) {
    warn(`could not record what the verify probe of ${call.tool} (${key}) found: ${messageOf(e)}; answering with it anyway`);
  }
  return { outcome: "replayed", key, result: readJson(json), settledAt: Date.now() };
}

function hold(tool: string, key: string): Answer {
  warn(`${tool} (${key}): an earlier attempt was interrupted and may have taken effect; held for a person to check: settle it with \`toolonce resolve ${key}\``);
  return {
    outcome: "unknown",
    key,
    refused: text("held", { tool, key }),
  };
}

/**
 * The answer when a claim or a read failed. An entry that is there but cannot be decoded is not
 * "nothing happened": the operation was begun, perhaps done, by a writer this reader cannot
 * follow, so it is held as unknown for a person. Anything else is the store being unavailable.
 */
function storeFailed(tool: string, key: string, e: unknown): Answer {
  if (!(e instanceof CorruptEntry)) return unavailable(tool, key, e);
  warn(`${tool} (${key}): its entry cannot be read (${e.message}); held as unknown for a person to check`);
  return {
    outcome: "unknown",
    key,
    refused: text("unreadable", { tool, key, report: e.message }),
    detail: { store_error: e.message },
  };
}

function unavailable(tool: string, key: string, e: unknown): Answer {
  const report = messageOf(e);
  return {
    outcome: "store_unavailable",
    key,
    refused: text("store_unavailable", { tool, report }),
    detail: { store_error: report },
  };
}

function inFlightText(tool: string, key: string): string {
  return text("in_flight", { tool, key });
}

function conflictText(tool: string, key: string): string {
  return text("conflict", { tool, key });
}
