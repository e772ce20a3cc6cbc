// Fenced writes without a script (as the core's crates/toolonce/src/store/redis/native.rs):
// where the server has `SET key value IFEQ expected` (Valkey 8.1 and later, Redis 8.4 and
// later), the owner's complete, sticky fail and renew are one native command each, fenced by
// comparing the whole running value its claim wrote, which the store keeps byte for byte per
// owner (`Held`). A takeover, a resolve or another claim rewrites that value (a new owner
// digest, start or attempt count), so an equal value means the entry is still exactly the one
// this owner claimed. Servers without `IFEQ` get the same value and the settled one as the
// scripts' optional last arguments, compared first with a GET (the scripts' fast path).

import { StoreError } from "../errors.js";
import { isReply, storeError } from "./redis-link.js";

/** What a settled entry keeps of the running value an owner's claim wrote. */
export interface Held {
  /** The whole running value, byte for byte. */
  value: string;
  /** `startedAt`'s digits. */
  started: string;
  /** The retention in ms, which a renewal keeps after the new lease. */
  retention: number;
  /** Where `,"fingerprint":` starts: what a settled entry keeps after its times and owner. */
  rest: number;
  /** The owner's digest (40 hex), which the settled entry keeps: which attempt settled it. */
  digest: string;
}

/** The `Held` of `value`, a running value this package built (see runningValue in redis.ts). */
export function held(value: string, startedMs: number, retentionMs: number): Held {
  const owner = value.indexOf(',"owner":"') + ',"owner":"'.length;
  return { value, started: String(startedMs), retention: retentionMs, rest: value.indexOf(',"fingerprint":"'), digest: value.slice(owner, owner + 40) };
}

/**
 * The settled entry of `h`: `head` (`{"status":"done","result":…` or `{"status":"failed","error":…`),
 * the start, the settling time `nowMs` under `atField` (`completedAt` or `failedAt`) and
 * `settledAt`, the owner's digest, then the rest: byte for byte what owned.lua's `settled` writes, except that the
 * times are this machine's clock (docs/contract.md: a native `SET` cannot read the server's).
 */
export function settled(h: Held, head: string, atField: string, nowMs: number): string {
  return head + ',"startedAt":' + h.started + ',"' + atField + '":' + nowMs + ',"settledAt":' + nowMs + ',"owner":"' + h.digest + '"' + h.value.slice(h.rest);
}

/**
 * The running values of the owners whose claims this store won natively, by owner token. Taken
 * out by the owner's complete or fail whatever its outcome (a retry after a lost reply goes by
 * the owner's digest, which fences the same), dropped when a renewal finds the claim lost, and
 * bounded: past `MAX_HELD` owners (claims never settled, say by a caller that stopped) the
 * oldest is forgotten, which only costs its settle the fast path.
 */
export class HeldValues {
  private readonly byOwner = new Map<string, Held>();

  static readonly MAX_HELD = 10_000;

  remember(owner: string, h: Held): void {
    this.byOwner.delete(owner);
    this.byOwner.set(owner, h);
    if (this.byOwner.size > HeldValues.MAX_HELD) {
      const oldest = this.byOwner.keys().next();
      if (oldest.done !== true) this.byOwner.delete(oldest.value);
    }
  }

  get(owner: string): Held | undefined {
    return this.byOwner.get(owner);
  }

  take(owner: string): Held | undefined {
    const h = this.byOwner.get(owner);
    if (h !== undefined) this.byOwner.delete(owner);
    return h;
  }

  forget(owner: string): void {
    this.byOwner.delete(owner);
  }

  get size(): number {
    return this.byOwner.size;
  }
}

/**
 * What a native fenced `SET` did: applied; "differs" (the value is not the owner's, or the key
 * is gone: nothing was written, and the script decides by the owner's digest); "refused" (an
 * `ERR` reply, a server without `IFEQ`, say after a failover to an older one: nothing was
 * written, and the script does the write instead). Anything else rejects: a lost connection or
 * a timeout may have applied it, and fails closed.
 */
export type Native = "applied" | "differs" | "refused";

/** The outcome of `SET … IFEQ` from its reply. */
export function nativeReply(reply: unknown): Native {
  if (reply === "OK") return "applied";
  if (reply === null || reply === undefined) return "differs";
  throw new StoreError(`unexpected reply to SET … IFEQ: ${JSON.stringify(reply)}`, false);
}

/** Whether `e` is the server's `ERR` refusal of the command itself (it was not applied). */
export function isErrRefusal(e: unknown): boolean {
  return isReply(e) && /^ERR\b/.test(e instanceof Error ? e.message : String(e));
}

/** Whether `e` is a cluster redirection: the probe's key is served by another master. */
function isMoved(e: unknown): boolean {
  return isReply(e) && /^(MOVED|ASK)\b/.test(e instanceof Error ? e.message : String(e));
}

/**
 * Whether the master `send` reaches takes `SET … IFEQ`: "yes", "no", or "none" when no key of
 * ours lives there (a prefix with a hash tag puts every key in one slot). The probe compares
 * against a value nobody writes, so it writes nothing; it tries keys under the store's prefix
 * (an ACL's key pattern admits them) with different hash tags until one is this master's (a
 * cluster's master answers MOVED for the others; a single server takes the first). A server
 * without the option answers `ERR syntax error`; one that refuses it otherwise (an ACL) counts
 * as without: the scripts fence the same. A connection failure rejects.
 */
export async function probeSetIfeq(send: (args: string[]) => Promise<unknown>, prefix: string): Promise<"yes" | "no" | "none"> {
  // With a hash tag in the prefix every key hashes alike: one try tells.
  const tagged = /\{[^}]+\}/.test(prefix);
  for (let n = 0; n < (tagged ? 1 : 64); n++) {
    const key = n === 0 ? `${prefix}idem:probe-set-ifeq` : `${prefix}idem:probe-set-ifeq:{${n}}`;
    try {
      return (await send(["SET", key, "toolonce probe", "IFEQ", "toolonce probe: never equal"])) === null ? "yes" : "no";
    } catch (e) {
      if (isMoved(e)) continue;
      const error = storeError(e);
      if (error.retryable) throw error;
      return "no";
    }
  }
  return "none";
}
