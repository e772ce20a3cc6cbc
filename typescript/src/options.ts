// The options of a wrapped tool and of a store's defaults, checked once when the tool is
// wrapped (a bad one throws a TypeError naming it), and turned into what the layer runs.

import { LIMITS } from "./artifacts.generated.js";
import type { Effective, Verified } from "./layer.js";
import { InvalidKeyPart, checkKeyFields } from "./key.js";
import { repeatArgumentOf } from "./repeat.js";
import { MAX_MS } from "./store.js";

/** The context a caller passes: `runId` is the scope of the key (the agent run). */
export interface RunContext {
  runId: string;
  [extra: string]: unknown;
}

/** What the handler of a write tool gets: the caller's context plus the operation's key. */
export interface WriteContext extends RunContext {
  /** The operation key, `idem:` + 32 hex digits: the same for every duplicate. */
  idem: string;
  /** `["Idempotency-Key", idem]`, to send downstream. */
  idempotencyHeader: readonly ["Idempotency-Key", string];
  /** Whether an earlier attempt may have taken effect (a takeover after a crash). */
  mayHaveRunBefore: boolean;
}

/** Options of a wrapped write tool. Durations are in milliseconds. */
export interface IdempotentOptions<Args = unknown, Result = unknown> {
  /**
   * How long a claim lives without a heartbeat, renewed every third of it while the handler
   * runs: from the store's renewal worker (SQLite files, Redis, PostgreSQL opened from a URL),
   * which a handler blocking the event loop does not stop, else in the caller's thread.
   * Default 60 000, min 30.
   */
  lease?: number;
  /** How long a result or a permanent error is kept and replayed. Default 24 h. */
  retention?: number;
  /** What a duplicate does while the operation runs: `"reject"` (default) or wait up to `wait` ms. */
  inFlight?: "reject" | { wait: number };
  /**
   * JSON Pointers (RFC 6901) of the argument fields that identify the operation, when not all of
   * them do. A duplicate whose key fields match but whose other arguments differ is a conflict.
   */
  keyFields?: string[];
  /**
   * What a duplicate does when an earlier attempt's lease expired without a result (the caller
   * crashed mid-run): `"hold"` (default: `OutcomeUnknown`, nothing runs until a person settles
   * it with `toolonce resolve`), `"rerun"` (run again with the same key: right when the
   * downstream system honours the key), or ask a `verify` probe.
   */
  onExpired?: "hold" | "rerun" | { verify: (args: Args, ctx: WriteContext) => Promise<Verified<Result>> };
  /**
   * The top-level argument by which a model repeats the same action on purpose (2, 3, …): taken
   * out of the arguments before keying and before the handler, and part of the key when beyond
   * 1. Default `repeat` (the core's limits); false for none. A replay tells the model about it.
   */
  repeatArgument?: string | false;
}

/** Options of one call of a wrapped tool, for program code. */
export interface CallOptions {
  /** This call performs the action for the `repeat`-th time on purpose (1 to 1000; default 1). */
  repeat?: number;
}

/** Defaults for every tool wrapped on a store. */
export type StoreOptions = Omit<IdempotentOptions, "keyFields">;

const KNOWN = new Set(["lease", "retention", "inFlight", "onExpired", "keyFields", "repeatArgument"]);
const MIN_LEASE_MS: number = LIMITS.lease_ms.min;
const DEFAULT_LEASE_MS: number = LIMITS.lease_ms.default;
const DEFAULT_RETENTION_MS: number = LIMITS.retention_ms.default;

/** The options as the layer runs them, the verify probe and the key fields. */
export interface Normalized {
  effective: Effective;
  verify: ((args: unknown, ctx: WriteContext) => Promise<Verified>) | undefined;
  keyFields: string[] | undefined;
  /** The name of the repeat argument, or undefined when the tool has none. */
  repeatArgument: string | undefined;
}

/** Checks `options` (`where` names the caller in messages); throws TypeError naming a bad one. */
export function normalize(options: unknown, where: string): Normalized {
  if (options === null || typeof options !== "object") throw new TypeError(`${where}: options must be an object`);
  const o = options as Record<string, unknown>;
  for (const name of Object.keys(o)) {
    if (!KNOWN.has(name)) {
      throw new TypeError(`${where}: unknown option ${JSON.stringify(name)}; expected lease, retention, inFlight, onExpired, keyFields or repeatArgument`);
    }
  }
  const ms = (name: string, min: number, fallback: number): number => {
    const v = o[name];
    if (v === undefined) return fallback;
    if (typeof v !== "number" || !Number.isFinite(v) || v < min || v > MAX_MS) {
      throw new TypeError(`${where}: ${name} must be a number of milliseconds between ${min} and 100 years, not ${String(v)}`);
    }
    return v;
  };
  const leaseMs = ms("lease", MIN_LEASE_MS, DEFAULT_LEASE_MS);
  const retentionMs = ms("retention", LIMITS.retention_ms.min, DEFAULT_RETENTION_MS);
  let waitMs: number | undefined;
  const inFlight = o.inFlight;
  if (inFlight !== undefined && inFlight !== "reject") {
    const wait = inFlight !== null && typeof inFlight === "object" ? (inFlight as { wait?: unknown }).wait : undefined;
    if (typeof wait !== "number" || Number.isNaN(wait) || wait < 0) {
      throw new TypeError(`${where}: inFlight must be "reject" or { wait: milliseconds }`);
    }
    waitMs = Math.min(wait, MAX_MS);
  }
  let onExpired: Effective["onExpired"] = "hold";
  let verify: Normalized["verify"];
  const policy = o.onExpired;
  if (policy === "hold" || policy === "rerun") {
    onExpired = policy;
  } else if (policy !== null && typeof policy === "object" && typeof (policy as { verify?: unknown }).verify === "function") {
    onExpired = "verify";
    verify = (policy as { verify: Normalized["verify"] }).verify;
  } else if (policy !== undefined) {
    throw new TypeError(`${where}: onExpired must be "hold", "rerun" or { verify: async (args, ctx) => … }`);
  }
  let keyFields: string[] | undefined;
  if (o.keyFields !== undefined) {
    if (!Array.isArray(o.keyFields) || o.keyFields.some((p) => typeof p !== "string")) {
      throw new TypeError(`${where}: keyFields must be an array of JSON Pointers ("/customer")`);
    }
    try {
      checkKeyFields(o.keyFields as string[]);
    } catch (e) {
      throw new TypeError(`${where}: invalid key field: ${(e as InvalidKeyPart).message}`);
    }
    keyFields = [...(o.keyFields as string[])];
  }
  const repeatArgument = repeatArgumentOf(o.repeatArgument, where);
  return { effective: { leaseMs, retentionMs, waitMs, onExpired }, verify, keyFields, repeatArgument };
}
