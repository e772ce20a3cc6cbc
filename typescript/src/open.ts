// `openStore(url | client, defaults)`: picks the backend for a URL (memory://, sqlite://PATH,
// redis://, rediss://, redis+cluster://, postgres://) or for a client the program already has
// (an ioredis client or cluster, a node-redis client or cluster, a pg Pool or Client), and
// wraps it in the `Store` that `idempotent` takes. Each backend loads its driver only when opened.

import { ConfigError, InvalidArguments, StoreError, StoreUnavailable, messageOf } from "./errors.js";
import { type StoreOptions, normalize } from "./options.js";
import {
  type EntryPage,
  type ListOptions,
  type OperatorAnswer,
  type OperatorResolution,
  type ResolveOptions,
  type StoredEntry,
  getEntry,
  listEntries,
  removeEntry,
  resolveEntry,
} from "./operator.js";
import { type CloseOptions, type CloseReport, Lifetime } from "./lifetime.js";
import type { Backend } from "./store.js";
import { MemoryBackend } from "./stores/memory.js";
import { openPostgres, postgresFromClient } from "./stores/postgres.js";
import { openRedisUrl, redisFromClient } from "./stores/redis-url.js";
import { openSqlite } from "./stores/sqlite.js";
import { redactUrl } from "./url.js";

const BACKENDS = new WeakMap<Store, Backend>();
const LIFETIMES = new WeakMap<Backend, Lifetime>();

/** A store of operations; `defaults` are the options of every tool wrapped on it. */
export class Store {
  /** The defaults given to `openStore`, applied to every tool wrapped on this store. */
  readonly defaults: Readonly<StoreOptions>;

  /** Made by `openStore`. */
  constructor(backend: Backend, defaults: StoreOptions) {
    BACKENDS.set(this, backend);
    LIFETIMES.set(backend, new Lifetime(backend));
    this.defaults = Object.freeze({ ...defaults });
  }

  /** The URL, without its password. */
  get url(): string {
    return backendOf(this).url;
  }

  /** The live entry of `key` (`toolonce show`), or undefined. */
  get(key: string): Promise<StoredEntry | undefined> {
    return getEntry(this, key);
  }

  /** A page of live entries (`toolonce ls`), filtered by state, scope and tool; continue with `cursor: page.next`. */
  list(options?: ListOptions): Promise<EntryPage> {
    return listEntries(this, options);
  }

  /**
   * Settles the entry `seen` of `key` (`toolonce resolve`), as `get` or `list` read it: done, failed
   * or released, only if it is still that attempt, unknown (or live, with `force`). See operator.ts.
   */
  resolve(key: string, seen: StoredEntry, resolution: OperatorResolution, options?: ResolveOptions): Promise<OperatorAnswer> {
    return resolveEntry(this, key, seen, resolution, options);
  }

  /** Deletes the settled entry `seen` of `key` (`toolonce rm`), only if it is still that entry. */
  remove(key: string, seen: StoredEntry): Promise<OperatorAnswer> {
    return removeEntry(this, key, seen);
  }

  /**
   * Closes the store: refuses calls from now on (`StoreUnavailable`), waits for the calls
   * already running to finish and record their outcomes, up to `drain` ms (default 10 000),
   * then ends the lease renewal worker and the connections the store opened itself. Resolves
   * with the calls it stopped waiting for at the bound (also logged): their outcomes cannot be
   * recorded, and their entries turn unknown when their leases run out.
   */
  async close(options?: CloseOptions): Promise<CloseReport> {
    return lifetimeOf(backendOf(this)).close(options);
  }
}

/** The lifetime (running calls, heartbeats, close) of a backend a `Store` wraps. */
export function lifetimeOf(backend: Backend): Lifetime {
  const lifetime = LIFETIMES.get(backend);
  if (lifetime === undefined) throw new TypeError("store must come from openStore()");
  return lifetime;
}

/** The backend of a store made by `openStore`. */
export function backendOf(store: Store): Backend {
  const backend = BACKENDS.get(store);
  if (backend === undefined) throw new TypeError("store must come from openStore()");
  return backend;
}

/**
 * Opens a store: `memory://` (this process only), `sqlite://PATH`, `redis://…`, `rediss://…`,
 * `redis+cluster://HOST:PORT,HOST:PORT/`, `postgres://…`, or a client of your own: an ioredis
 * `Redis` or `Cluster`, a node-redis client or cluster, a pg `Pool` or `Client`. Rejects with
 * `StoreUnavailable` when the server cannot be reached, `InvalidArguments` for a malformed URL.
 */
export async function openStore(target: string | object, options: StoreOptions = {}): Promise<Store> {
  normalize(options, "openStore"); // Bad defaults are refused here, not at the first tool.
  try {
    return new Store(await backendFor(target), options);
  } catch (e) {
    if (e instanceof InvalidArguments || e instanceof StoreUnavailable) throw e;
    const shown = typeof target === "string" ? redactUrl(target) : "the client given";
    if (e instanceof ConfigError || e instanceof TypeError) {
      throw new InvalidArguments(`openStore(${shown}): ${e.message}`, { outcome: "invalid_arguments", cause: e });
    }
    const retryable = e instanceof StoreError ? e.retryable : true;
    const Kind = retryable ? StoreUnavailable : InvalidArguments;
    throw new Kind(`openStore(${shown}): ${messageOf(e)}`, { outcome: retryable ? "store_unavailable" : "invalid_arguments", cause: e });
  }
}

async function backendFor(target: string | object): Promise<Backend> {
  if (typeof target !== "string") {
    if (target === null || typeof target !== "object") throw new TypeError("openStore(url): url must be a string or a client");
    return clientBackend(target);
  }
  const named = nameStore(target);
  switch (named.kind) {
    case "memory":
      return new MemoryBackend();
    case "sqlite":
      return openSqlite(named.url);
    case "redis":
      return openRedisUrl(named.url);
    case "postgres":
      return openPostgres(named.url);
  }
}

/** The backend a store URL names, and the URL with its scheme in lower case (RFC 3986 3.1). */
export function nameStore(url: string): { kind: "memory" | "sqlite" | "redis" | "postgres"; url: string; path?: string } {
  const m = /^([a-z][a-z0-9+.-]*):\/\/(.*)$/is.exec(url);
  if (m === null) throw new ConfigError("the store URL has no scheme: expected memory://, sqlite://PATH, redis://HOST or postgres://HOST");
  const scheme = (m[1] as string).toLowerCase();
  const rest = m[2] as string;
  const normal = `${scheme}://${rest}`;
  switch (scheme) {
    case "memory":
      if (rest !== "") throw new ConfigError("the memory store reads no options from its URL: memory://");
      return { kind: "memory", url: normal };
    case "sqlite":
      // A `?` would become part of the file name: an option that looks set and is not.
      if (rest.includes("?")) throw new ConfigError("the SQLite store reads no options from its URL (sqlite://PATH)");
      if (rest === "") throw new ConfigError("a sqlite:// URL needs a path: sqlite://toolonce.db or sqlite:///abs/path.db");
      return { kind: "sqlite", url: normal, path: rest };
    case "redis":
    case "rediss":
    case "redis+cluster":
    case "rediss+cluster":
    case "redis+sentinel":
    case "rediss+sentinel":
      return { kind: "redis", url: normal };
    case "postgres":
    case "postgresql":
      return { kind: "postgres", url: normal };
    default:
      throw new ConfigError(`unknown store scheme ${JSON.stringify(scheme)}: expected memory://, sqlite://, redis://, rediss://, redis+cluster:// or postgres://`);
  }
}

async function clientBackend(client: object): Promise<Backend> {
  const c = client as Record<string, unknown>;
  // pg: a Pool or a Client has query() and connect(), and neither Redis client has query().
  if (typeof c.query === "function" && typeof c.connect === "function") {
    return postgresFromClient(client);
  }
  return redisFromClient(client);
}
