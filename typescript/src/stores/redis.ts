// The Redis store, in the wire format the Rust core writes and reads (docs/contract.md, "Wire
// format shared with TypeScript workers"): one JSON value per key, the lease as the key's TTL,
// the owner as the SHA-1 of its token, and the core's own Lua scripts (artifacts/redis, copied
// from crates/toolonce/src/store/redis at build time), assembled from the same helpers in the
// same order. On Redis 7 or later a claim is the native `SET … NX GET PX`: one round trip for
// every first-time call and every replay; a key found running goes on to the claim script.
// The owner's complete, sticky fail and renew are one native `SET … IFEQ` where every master
// has it, else the scripts with the whole running value to compare first (redis-native.ts).

import { createHash } from "node:crypto";
import { LUA } from "../artifacts.generated.js";
import { hexDigest } from "../digest.js";
import { StoreError } from "../errors.js";
import {
  type Backend,
  type RenewalSpec,
  type Claim,
  type ClaimRequest,
  type Entry,
  type Inspected,
  type ListQuery,
  MAX_MS,
  type Page,
  type Removed,
  type Resolution,
  type Resolved,
  type Seen,
  type SeenSettled,
  clampMs,
  refusal,
} from "../store.js";
import { decodeReply, entryOf, inspectReply, parseWire } from "./redis-entry.js";
import { listPage } from "./redis-list.js";
import { warnIfNothingOnDisk } from "./redis-checks.js";
import { type RedisLink, storeError } from "./redis-link.js";
import { type Held, HeldValues, type Native, held, isErrRefusal, nativeReply, probeSetIfeq, settled } from "./redis-native.js";

/** A script: its text and its SHA-1, which EVALSHA names it by. */
interface Script {
  text: string;
  sha: string;
}

function script(name: string, ...helpers: string[]): Script {
  // As the core's `script!` macro: the helpers, then the body, concatenated as they are.
  const text = [...helpers, name].map((part) => LUA[part] ?? missing(part)).join("");
  return { text, sha: createHash("sha1").update(text).digest("hex") };
}

function missing(part: string): never {
  throw new Error(`the Redis script ${part}.lua is missing from this package (run npm run build)`);
}

let scripts: Record<"claim" | "read" | "renew" | "complete" | "fail" | "resolve" | "remove", Script> | undefined;

function theScripts() {
  scripts ??= {
    claim: script("claim", "now", "entry"),
    read: script("read", "now", "entry"),
    renew: script("renew", "owned"),
    complete: script("complete", "now", "owned"),
    fail: script("fail", "now", "owned"),
    resolve: script("resolve", "now", "entry"),
    remove: script("remove", "now", "entry"),
  };
  return scripts;
}

/** How the store was opened: its key prefix and whether Redis may evict its entries. */
export interface RedisSettings {
  url: string;
  prefix: string;
  allowEviction: boolean;
  /** Whether claims may use `SET … NX GET` where every master has it. */
  nativeClaim: boolean;
  /** A second connection of a store already opened (the renewal worker's): its warnings were given. */
  warned?: boolean;
}

const ABOUT = ["scope", "tool", "detail"] as const;

/** The running entry a claim writes (the shape entry.lua's `ours` and owned.lua's fence read). */
function runningValue(req: ClaimRequest, startedMs: number, retentionMs: number): string {
  const digest = hexDigest("sha1", req.owner);
  let out = `{"status":"running","startedAt":${startedMs},"owner":"${digest}","retention":${retentionMs},"fingerprint":"${req.fingerprint}","firstStartedAt":${startedMs},"attempts":1`;
  for (const name of ABOUT) {
    const value = req.about[name];
    if (value !== undefined) out += `,"${name}":${JSON.stringify(value)}`;
  }
  return out + "}";
}

function rejectAsStoreError(e: unknown): never {
  throw storeError(e);
}

/** A store on Redis or Redis Cluster, through `link`. */
export class RedisBackend implements Backend {
  readonly url: string;
  renewal: RenewalSpec | undefined;
  private readonly prefix: string;
  private native = false;
  /** Whether the owner's settles and renewals start with `SET … IFEQ` (every master took it). */
  private fence = false;
  /** The running value each native claim wrote, by owner: what `SET … IFEQ` compares. */
  readonly held = new HeldValues();
  private closed = false;

  private constructor(
    private readonly link: RedisLink,
    settings: RedisSettings,
  ) {
    this.url = settings.url;
    this.prefix = settings.prefix;
  }

  /**
   * Checks the eviction policy, whether anything is kept on disk (redis-checks.ts) and the
   * version of every master, and loads the scripts.
   */
  static async open(link: RedisLink, settings: RedisSettings): Promise<RedisBackend> {
    const store = new RedisBackend(link, settings);
    let masters;
    try {
      masters = await link.masters();
    } catch (e) {
      throw storeError(e);
    }
    let native = settings.nativeClaim;
    // On only if every master that serves our keys has it: a cluster mid-upgrade settles by
    // the scripts, which fence the same, rather than paying a refused command per settle.
    let fence: boolean | undefined;
    for (const master of masters) {
      const memory = await master.send(["INFO", "memory"]).catch((e: unknown) => {
        const error = storeError(e);
        if (error.retryable) throw error;
        return undefined;
      });
      const policy = typeof memory === "string" ? /^maxmemory_policy:(\S+)/m.exec(memory)?.[1] : undefined;
      if (policy !== "noeviction" && !settings.allowEviction) {
        throw new StoreError(
          policy === undefined
            ? `cannot read the maxmemory-policy of ${master.name} of ${settings.url}, so toolonce cannot tell whether Redis may evict its entries (only noeviction never does). Grant the user INFO, or accept the risk with allow_eviction=true in the store URL`
            : `${master.name} of ${settings.url} has maxmemory-policy ${policy}: when its memory is full it evicts keys before they expire, toolonce's entries among them, and a duplicate call then runs the tool again. Set maxmemory-policy to noeviction, or accept the risk with allow_eviction=true in the store URL`,
          false,
        );
      }
      if (settings.warned !== true) await warnIfNothingOnDisk(master, settings.url);
      const server = await master.send(["INFO", "server"]).catch((e: unknown) => {
        const error = storeError(e);
        if (error.retryable) throw error;
        return undefined;
      });
      const major = typeof server === "string" ? Number(/^redis_version:(\d+)/m.exec(server)?.[1]) : NaN;
      if (!(major >= 7)) native = false;
      const ifeq = await probeSetIfeq((args) => master.send(args), settings.prefix).catch((e: unknown) => Promise.reject(storeError(e)));
      if (ifeq !== "none") fence = (fence ?? true) && ifeq === "yes";
      // Loaded up front, on every master, so the first calls cost one round trip too.
      for (const s of Object.values(theScripts())) await master.send(["SCRIPT", "LOAD", s.text]).catch((e: unknown) => Promise.reject(storeError(e)));
    }
    store.native = native;
    store.fence = fence === true;
    return store;
  }

  private redisKey(key: string): string {
    return this.prefix + key;
  }

  /**
   * The client's own promise for `args`, the client's errors as they come: the one place that
   * refuses a closed store and turns a synchronous throw into a rejection. Callers that read
   * the raw error (`setIfeq`: an `ERR` refusal) or await it in place (the native claim, with no
   * `then` of its own) use it directly; everything else goes through `send`.
   */
  private request(args: string[], key: string): Promise<unknown> {
    if (this.closed) return Promise.reject(new StoreError("the store is closed", false));
    try {
      return this.link.send(args, key);
    } catch (e) {
      return Promise.reject(storeError(e));
    }
  }

  // Not an async function: every call of every operation comes through here, and a `then` on
  // the client's promise is one promise where an async wrapper and its await are two.
  private send(args: string[], key: string): Promise<unknown> {
    return this.request(args, key).then(undefined, rejectAsStoreError);
  }

  /** Runs a script by its hash, loading it again if the server lost it (a restart, SCRIPT FLUSH). */
  private async evalScript(s: Script, key: string, args: string[]): Promise<unknown> {
    const redisKey = this.redisKey(key);
    try {
      return await this.send(["EVALSHA", s.sha, "1", redisKey, ...args], redisKey);
    } catch (e) {
      if (!(e instanceof StoreError) || !/NOSCRIPT/.test(e.message)) throw e;
      return this.send(["EVAL", s.text, "1", redisKey, ...args], redisKey);
    }
  }

  async claim(req: ClaimRequest): Promise<Claim> {
    const lease = clampMs(req.leaseMs);
    const retention = clampMs(req.retentionMs);
    // Informational, from this machine's clock: the lease is the key's TTL, on the server's.
    const started = Date.now();
    const value = runningValue(req, started, retention);
    if (this.native) {
      const redisKey = this.redisKey(req.key);
      // Awaited here rather than through `send`: its `then` is one more promise on every call.
      let reply: unknown;
      try {
        reply = await this.request(["SET", redisKey, value, "NX", "GET", "PX", String(lease + retention)], redisKey);
      } catch (e) {
        throw storeError(e);
      }
      if (reply === null || reply === undefined) {
        // Exactly what the key now holds: the owner's settles compare it whole.
        this.held.remember(req.owner, held(value, started, retention));
        return { kind: "won" };
      }
      if (typeof reply !== "string") throw new StoreError("unexpected reply to SET … NX GET", false);
      // A settled entry is the answer (every replay: one round trip); a running one needs its
      // key's PTTL, and may be our own lost claim or an unknown one to take over: the script.
      const wire = parseWire(req.key, reply);
      if (wire.status !== "running") return { kind: "existing", entry: entryOf(req.key, wire, undefined, undefined) };
    }
    // The script may write `value` or rewrite an entry of ours (a lost claim's retry, a
    // takeover): the exact bytes are not known, so the owner's settles go by its digest.
    this.held.forget(req.owner);
    const reply = await this.evalScript(theScripts().claim, req.key, [
      String(lease),
      String(retention),
      req.owner,
      req.fingerprint,
      value,
      req.takeover ? "1" : "0",
      String(started),
    ]);
    if (reply === 1) return { kind: "won" };
    if (reply === 2) return { kind: "took_over" };
    return { kind: "existing", entry: decodeReply(req.key, reply) };
  }

  async renew(key: string, owner: string, leaseMs: number): Promise<boolean> {
    const lease = clampMs(leaseMs);
    const h = this.held.get(owner);
    if (h !== undefined && this.fence) {
      // The same value again under a new expiry: the lease plus the retention.
      const redisKey = this.redisKey(key);
      if ((await this.setIfeq(redisKey, h.value, h.value, Math.min(lease + h.retention, MAX_MS))) === "applied") return true;
    }
    const args = [owner, String(lease)];
    if (h !== undefined) args.push(h.value, String(h.retention));
    const renewed = (await this.evalScript(theScripts().renew, key, args)) === 1;
    // Refused by the digest too: the claim is lost, and so is the point of keeping its value.
    if (!renewed) this.held.forget(owner);
    return renewed;
  }

  // Not async functions: an async function returning a promise takes two more turns of the
  // microtask queue to adopt it, on every first-time call.
  complete(key: string, owner: string, resultJson: string, retentionMs: number): Promise<boolean> {
    return this.settle(key, owner, '{"status":"done","result":' + resultJson, "completedAt", clampMs(retentionMs), theScripts().complete);
  }

  fail(key: string, owner: string, errorJson: string | undefined, retentionMs: number): Promise<boolean> {
    if (errorJson === undefined) return this.settle(key, owner, "", "failedAt", undefined, theScripts().fail);
    return this.settle(key, owner, '{"status":"failed","error":' + errorJson, "failedAt", clampMs(retentionMs), theScripts().fail);
  }

  /**
   * Settles `key` for `owner` (as the core's `settle`): with one native `SET … IFEQ` where the
   * servers have it and this store holds the value the owner's claim wrote, else with `s`
   * (complete.lua or fail.lua), given that value and the settled one to compare first, then
   * falling back to the owner's digest. `retention` undefined releases the entry, always by
   * the script: `SET` cannot delete (`DELEX`, Redis 8.4's, is not in Valkey 8.1).
   */
  private async settle(key: string, owner: string, head: string, atField: string, retention: number | undefined, s: Script): Promise<boolean> {
    // Taken out whatever happens next: settled, refused, or failed (a retry goes by the digest).
    const h: Held | undefined = this.held.take(owner);
    const value = h !== undefined && retention !== undefined ? settled(h, head, atField, Date.now()) : "";
    if (h !== undefined && retention !== undefined && this.fence) {
      if ((await this.setIfeq(this.redisKey(key), value, h.value, retention)) === "applied") return true;
    }
    const args = [owner, retention === undefined ? "" : String(retention), head];
    if (h !== undefined) args.push(h.value, value);
    return (await this.evalScript(s, key, args)) === 1;
  }

  /** `SET redisKey value IFEQ expected PX px`: one atomic compare-and-set on the server. */
  private setIfeq(redisKey: string, value: string, expected: string, px: number): Promise<Native> {
    return this.request(["SET", redisKey, value, "IFEQ", expected, "PX", String(px)], redisKey).then(nativeReply, (e: unknown) => {
      // `ERR` refuses the command itself (`syntax error`): nothing was written. Anything
      // else (a lost connection, a timeout) may have been written, and fails closed.
      if (isErrRefusal(e)) return "refused";
      throw storeError(e);
    });
  }

  async resolve(key: string, seen: Seen, resolution: Resolution, retentionMs: number): Promise<Resolved> {
    let head = "";
    let at = "";
    if (resolution !== "release") {
      if ("done" in resolution) {
        head = '{"status":"done","result":' + resolution.done;
        at = "completedAt";
      } else {
        head = '{"status":"failed","error":' + JSON.stringify(resolution.failed);
        at = "failedAt";
      }
    }
    // The attempt seen, as resolve.lua compares it: the owner after a '=' ('' for none), the
    // attempts, and '0': never while the lease is live.
    const owner = seen.owner === undefined ? "" : "=" + seen.owner;
    const forced = seen.evenIfLive === true ? "1" : "0";
    const reply = await this.evalScript(theScripts().resolve, key, [String(clampMs(retentionMs)), head, at, owner, String(seen.attempts), forced]);
    if (reply === 1) return { kind: "applied" };
    if (reply === 0) return { kind: "absent" };
    // Refused: the entry the script found, judged again to say why.
    const found = inspectReply(key, reply);
    return refusal(seen, found.entry, found);
  }

  async inspect(key: string): Promise<Inspected | undefined> {
    const reply = await this.evalScript(theScripts().read, key, []);
    return reply === null || reply === undefined ? undefined : inspectReply(key, reply);
  }

  async list(query: ListQuery): Promise<Page> {
    let masters;
    try {
      masters = await this.link.masters();
    } catch (e) {
      throw storeError(e);
    }
    const nodes = masters.map((m) => ({ name: m.name, send: (args: string[]) => m.send(args).then(undefined, rejectAsStoreError) }));
    return listPage(nodes, this.prefix, query, (key) => this.inspect(key));
  }

  async remove(key: string, seen: SeenSettled): Promise<Removed> {
    // remove.lua compares the settled entry seen and deletes it in one script (the core's).
    const reply = await this.evalScript(theScripts().remove, key, [seen.state, String(seen.attempts), seen.settledAt ?? "", seen.startedAt, seen.settledBy ?? ""]);
    if (reply === 1) return { kind: "applied" };
    if (reply === 0) return { kind: "absent" };
    return { kind: "changed", found: inspectReply(key, reply) };
  }

  async get(key: string): Promise<Entry | undefined> {
    const reply = await this.evalScript(theScripts().read, key, []);
    return reply === null || reply === undefined ? undefined : decodeReply(key, reply);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.link.close();
  }
}
