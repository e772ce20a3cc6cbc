// Two checks a Redis store makes when it opens, as the Rust core's (store/redis/error.rs and
// persistence.rs), in its words. A database index the server does not have is refused: ioredis
// only emits its failed `SELECT` as an "error" event and goes on in database 0 (where another
// store's entries may be), node-redis gives up with "cannot connect". A server that keeps
// nothing on disk (`save ""` and `appendonly no`) forgets every entry when it restarts, and a
// duplicate then runs the tool again: a legitimate choice (a cache, a test), so a warning, once
// per master at open, never a refusal; a server that will not say (`CONFIG` refused, as on
// managed services) gets none rather than a wrong one.

import { ConfigError } from "../errors.js";
import { warn } from "../log.js";
import { THE_SERVER, isReply, storeError } from "./redis-link.js";

/** The server's refusals of a `SELECT`: Redis's and Valkey's words, and a cluster node's. */
const NO_SUCH_DATABASE = /DB index is out of range|invalid DB index|SELECT is not allowed in cluster mode/i;

/**
 * The refusal of `e` when it is the server's answer to a `SELECT` of a database it does not
 * have, as a ConfigError saying what to change; `display` is the URL without its password.
 */
export function noSuchDatabase(e: unknown, display: string): ConfigError | undefined {
  if (!isReply(e)) return undefined;
  const message = e instanceof Error ? e.message : String(e);
  if (!NO_SUCH_DATABASE.test(message)) return undefined;
  const detail = message.replace(/^ERR\s+/, "");
  return new ConfigError(
    `Redis at ${display} has no such database index (${detail}): the number at the end of the store URL (redis://host/N) must be below the server's \`databases\` setting (16 by default)`,
  );
}

/** The first of the errors a client emitted while connecting that refused its database, if any. */
export function databaseRefusal(emitted: readonly unknown[], display: string): ConfigError | undefined {
  for (const e of emitted) {
    const refusal = noSuchDatabase(e, display);
    if (refusal !== undefined) return refusal;
  }
  return undefined;
}

/**
 * Selects database `db` on the connection `send` writes to, again: the one the client selected
 * as it connected, which ioredis does not fail the connect over. Refused: the index is wrong.
 */
export async function checkDatabase(send: (args: string[]) => Promise<unknown>, db: number, display: string): Promise<void> {
  if (db === 0) return;
  try {
    await send(["SELECT", String(db)]);
  } catch (e) {
    throw noSuchDatabase(e, display) ?? storeError(e);
  }
}

/** A master as the link gives it: its name (`THE_SERVER` when not a cluster) and its sender. */
interface Master {
  name: string;
  send(args: string[]): Promise<unknown>;
}

/**
 * Warns when `master` keeps nothing on disk: `aof_enabled:0` in `INFO persistence` and `save`
 * empty. Never fails: a question the server will not answer leaves it unwarned.
 */
export async function warnIfNothingOnDisk(master: Master, display: string): Promise<void> {
  const info = await master.send(["INFO", "persistence"]).catch(() => undefined);
  if (typeof info !== "string" || aofEnabled(info) !== false) return;
  const save = await master.send(["CONFIG", "GET", "save"]).catch(() => undefined);
  if (!saveIsOff(save)) return;
  const place = master.name === THE_SERVER ? `Redis at ${display}` : `the Redis node ${master.name} of ${display}`;
  warn(`${place} keeps nothing on disk (save "" and appendonly no): a restart forgets every entry, and duplicates of those calls would run again`);
}

/** `aof_enabled` of an `INFO persistence` reply; undefined when it does not say. */
export function aofEnabled(info: string): boolean | undefined {
  const value = /^aof_enabled:(\S*)/m.exec(info)?.[1];
  return value === undefined ? undefined : value === "1";
}

/** Whether a `CONFIG GET save` reply (an array, or a map under RESP3) says no snapshots are taken. */
export function saveIsOff(reply: unknown): boolean {
  let pairs: unknown[];
  if (Array.isArray(reply)) pairs = reply;
  else if (reply instanceof Map) pairs = [...reply].flat();
  else if (reply !== null && typeof reply === "object") pairs = Object.entries(reply).flat();
  else return false;
  return pairs.length === 2 && pairs[0] === "save" && typeof pairs[1] === "string" && pairs[1].trim() === "";
}
