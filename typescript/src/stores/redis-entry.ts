// Reading the Redis store's entries (docs/contract.md, "Wire format shared with TypeScript
// workers"): one JSON value per key, ours or another writer's (the reference design's, the
// previous version's with a lease deadline), decoded into the entry a duplicate needs. The
// lease is the key's TTL, so a running value is judged with its PTTL.

import { CorruptEntry, StoreError } from "../errors.js";
import { readJson } from "../outcome.js";
import { type Entry, type Inspected, decodeError, isFingerprint } from "../store.js";

/** What one JSON value says, as far as a reader needs it. Every member but `status` is optional. */
export interface Wire {
  status?: unknown;
  retention?: unknown;
  leaseUntil?: unknown;
  fingerprint?: unknown;
  result?: unknown;
  error?: unknown;
  owner?: unknown;
  attempts?: unknown;
  startedAt?: unknown;
  firstStartedAt?: unknown;
  settledAt?: unknown;
  completedAt?: unknown;
  failedAt?: unknown;
  scope?: unknown;
  tool?: unknown;
  detail?: unknown;
}

function corrupt(key: string, why: string): CorruptEntry {
  return new CorruptEntry(`the entry of ${key} cannot be read: ${why}`);
}

/**
 * The entry of the value `raw`, whose key had `pttl` ms left (undefined: not read, as by the
 * native claim, which never decodes a running entry) when the server's clock said `serverNow`.
 */
function decode(key: string, raw: string, pttl: number | undefined, serverNow: number | undefined): Entry {
  return entryOf(key, parseWire(key, raw), pttl, serverNow);
}

export function parseWire(key: string, raw: string): Wire {
  let wire: Wire;
  try {
    wire = readJson(raw) as Wire;
  } catch (e) {
    throw corrupt(key, `not JSON (${(e as Error).message})`);
  }
  if (wire === null || typeof wire !== "object" || Array.isArray(wire)) throw corrupt(key, "not a JSON object");
  return wire;
}

/** The entry of a parsed value: see `decode`. */
export function entryOf(key: string, wire: Wire, pttl: number | undefined, serverNow: number | undefined): Entry {
  let fingerprint: string | undefined;
  if (wire.fingerprint !== undefined && wire.fingerprint !== null) {
    if (!isFingerprint(wire.fingerprint)) throw corrupt(key, "its fingerprint is not 64 hex digits");
    fingerprint = wire.fingerprint;
  }
  switch (wire.status) {
    case "running": {
      const owner = typeof wire.owner === "string" ? wire.owner : undefined;
      const attempts = typeof wire.attempts === "number" ? wire.attempts : 0;
      const startedAt = typeof wire.startedAt === "number" ? wire.startedAt : undefined;
      const firstStartedAt = typeof wire.firstStartedAt === "number" ? wire.firstStartedAt : undefined;
      const attempt = { fingerprint, owner, attempts, startedAt, firstStartedAt };
      if (typeof wire.retention === "number") {
        if (pttl === undefined) throw new StoreError("a running entry read without its key's expiry", false);
        // The key lives for the lease plus the retention: what is left above it is the lease.
        const left = pttl < 0 ? 0 : pttl - wire.retention;
        return { state: left > 0 ? "running" : "unknown", ...attempt };
      }
      if (typeof wire.leaseUntil === "number") {
        if (serverNow === undefined) throw new StoreError("unexpected reply from the script: a leaseUntil without TIME", false);
        return { state: wire.leaseUntil > serverNow ? "running" : "unknown", ...attempt };
      }
      // Another writer's (the reference design's): running for as long as its key lives.
      return { state: "running", ...attempt };
    }
    case "done":
      if (!("result" in wire)) throw corrupt(key, "a done entry without a result");
      return { state: "done", fingerprint, result: wire.result, settledAt: settledOf(wire) };
    case "failed": {
      const error = decodeError(wire.error);
      if (error === undefined) throw corrupt(key, "a failed entry without a readable error");
      return { state: "failed", fingerprint, error, settledAt: settledOf(wire) };
    }
    default:
      throw corrupt(key, `unknown status ${JSON.stringify(wire.status)}`);
  }
}

/** When a settled value settled, as remove.lua reads its time (undefined: its writer kept none). */
function settledOf(wire: Wire): number | undefined {
  return ms(wire.settledAt) ?? ms(wire.completedAt) ?? ms(wire.failedAt);
}

/** Which attempt settled a settled value, as remove.lua reads it: the owner's digest (undefined: its writer kept none). */
function settledByOf(wire: Wire): string | undefined {
  return wire.status !== "running" && typeof wire.owner === "string" ? wire.owner : undefined;
}

/** Decodes `{value, PTTL, now?}` from the claim, read and resolve scripts. */
export function decodeReply(key: string, reply: unknown): Entry {
  if (!Array.isArray(reply) || reply.length < 2 || reply.length > 3 || typeof reply[0] !== "string") {
    throw new StoreError(`unexpected reply from the script: ${JSON.stringify(reply)}`, false);
  }
  return decode(key, reply[0], Number(reply[1]), reply.length === 3 ? Number(reply[2]) : undefined);
}

/** A time member as whole ms, as remove.lua reads it: undefined when not a number, 0 when not positive and finite. */
function ms(v: unknown): number | undefined {
  if (typeof v !== "number") return undefined;
  return v > 0 && Number.isFinite(v) ? Math.floor(v) : 0;
}

/**
 * The entry of `{value, PTTL, now?}` whole, for an operator: its times as remove.lua compares
 * them (whole ms), the lease end or final expiry as the key's PTTL added to this machine's
 * clock (as the core reports it).
 */
export function inspectReply(key: string, reply: unknown): Inspected {
  const entry = decodeReply(key, reply);
  const [raw, pttlText, nowText] = reply as [string, unknown, unknown];
  const wire = parseWire(key, raw);
  const pttl = Number(pttlText);
  const local = Date.now();
  const keyExpiry = pttl >= 0 ? local + pttl : undefined;
  let expiresAt = keyExpiry;
  if (wire.status === "running") {
    if (typeof wire.retention === "number") expiresAt = local + (pttl < 0 ? 0 : pttl - wire.retention);
    else if (typeof wire.leaseUntil === "number" && nowText !== undefined) expiresAt = local + (wire.leaseUntil - Number(nowText));
  }
  const settledAt = settledOf(wire);
  const startedAt = ms(wire.startedAt) ?? settledAt ?? 0;
  const n = wire.attempts;
  const attempts = typeof n === "number" && n >= 0 && Number.isFinite(n) ? Math.floor(Math.min(n, 4294967295)) : 0;
  const about: Inspected["about"] = {};
  for (const name of ["scope", "tool", "detail"] as const) {
    const value = wire[name];
    if (typeof value === "string") about[name] = value;
  }
  return {
    key,
    entry,
    about,
    attempts,
    startedAt,
    firstStartedAt: ms(wire.firstStartedAt),
    settledAt,
    expiresAt,
    mark: { startedAt: String(startedAt), settledAt: settledAt === undefined ? undefined : String(settledAt), settledBy: settledByOf(wire) },
  };
}
