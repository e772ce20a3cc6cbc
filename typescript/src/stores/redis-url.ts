// Opening the Redis store: from a URL, with the driver the program has installed (ioredis, else
// node-redis), or from a client the program made itself, which it keeps owning.
//
// `redis://[[user]:password@]host[:port][/db][?prefix=NS][&allow_eviction=true]`, `rediss://…`
// (TLS), `redis+cluster://[[user]:password@]host:port,host:port,…` (or `rediss+cluster://…`): a
// few seed nodes, from which the client learns the rest (and database 0, the only one a cluster
// has). A database index the server lacks is refused (redis-checks.ts).

import { ConfigError, StoreError } from "../errors.js";
import { redactUrl } from "../url.js";
import { type Target, parseRedisUrl } from "./redis-target.js";
import { RedisBackend } from "./redis.js";
import { checkDatabase, databaseRefusal } from "./redis-checks.js";
import { type RedisLink, linkOf, storeError } from "./redis-link.js";

/** A driver, if the program has it installed. */
function optional(name: string): any {
  try {
    return require(name);
  } catch (e) {
    if ((e as { code?: string }).code === "MODULE_NOT_FOUND") return undefined;
    throw e;
  }
}

const CONNECT_TIMEOUT_MS = 1000;
const RESPONSE_TIMEOUT_MS = 2000;

/**
 * Connects with ioredis: calls fail at once while it reconnects (fail closed), and time out
 * after 2 s, timed by the link (one timer for every command in flight) rather than by
 * ioredis's `commandTimeout`, which arms and clears a timer per command.
 */
async function ioredisLink(ioredis: any, t: Target): Promise<RedisLink> {
  const Redis = ioredis.default ?? ioredis;
  const Command = ioredis.Command ?? Redis.Command;
  const common = {
    username: t.username,
    password: t.password,
    connectTimeout: CONNECT_TIMEOUT_MS,
    // Where the link cannot time commands out (no `Command` class found), ioredis does.
    commandTimeout: typeof Command === "function" ? undefined : RESPONSE_TIMEOUT_MS,
    tls: t.tls ? {} : undefined,
  };
  let client: any;
  if (t.cluster) {
    client = new Redis.Cluster(t.nodes, { lazyConnect: true, redisOptions: common, clusterRetryStrategy: (n: number) => Math.min(50 * n, 1000) });
  } else {
    const node = t.nodes[0] as { host: string; port: number };
    client = new Redis({ ...common, host: node.host, port: node.port, db: t.db, lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 1 });
  }
  // Connection errors are answered to the calls that meet them; no unhandled "error" event.
  client.on("error", () => {});
  try {
    await client.connect();
  } catch (e) {
    client.disconnect();
    throw storeError(e);
  }
  return linkOf(client, true, typeof Command === "function" ? { Command, timeoutMs: RESPONSE_TIMEOUT_MS } : undefined) as RedisLink;
}

/**
 * Connects with node-redis, with the same timeouts: the connect timeout its own, the response
 * timeout the link's (node-redis's command `timeout` stops counting once a command is written).
 */
async function nodeRedisLink(redis: any, t: Target, display: string): Promise<RedisLink> {
  let ready = false;
  const socket = {
    connectTimeout: CONNECT_TIMEOUT_MS,
    tls: t.tls,
    // Reconnects once it has been up; the first connection failing fails the open.
    reconnectStrategy: (retries: number) => (ready ? Math.min(50 * 2 ** retries, 1000) : new Error("cannot connect")),
  };
  const auth = { username: t.username, password: t.password };
  const client = t.cluster
    ? redis.createCluster({ rootNodes: t.nodes.map((n) => ({ socket: { host: n.host, port: n.port, tls: t.tls } })), defaults: { ...auth, socket } })
    : redis.createClient({ ...auth, database: t.db, socket: { ...socket, host: t.nodes[0]?.host, port: t.nodes[0]?.port }, disableOfflineQueue: true, commandOptions: undefined });
  // What it emitted while connecting: a refused SELECT fails the connect as "cannot connect".
  const emitted: unknown[] = [];
  client.on("error", (e: unknown) => {
    if (!ready) emitted.push(e);
  });
  try {
    await client.connect();
    ready = true;
  } catch (e) {
    await Promise.resolve(client.destroy?.()).catch(() => {});
    throw databaseRefusal(emitted, display) ?? storeError(e);
  }
  return linkOf(client, true, { timeoutMs: RESPONSE_TIMEOUT_MS }) as RedisLink;
}

/** Opens the Redis store of `url`; `second` for another connection of one already open (no warnings again). */
export async function openRedisUrl(url: string, second = false): Promise<RedisBackend> {
  const t = parseRedisUrl(url);
  const ioredis = optional("ioredis");
  const redis = ioredis === undefined ? optional("redis") : undefined;
  if (ioredis === undefined && redis === undefined) {
    throw new ConfigError("a redis:// store needs a Redis driver: npm install ioredis (or redis)");
  }
  const display = redactUrl(url);
  const link = ioredis !== undefined ? await ioredisLink(ioredis, t) : await nodeRedisLink(redis, t, display);
  try {
    // ioredis connects in database 0 when the server refuses the URL's: asked again, it says why.
    if (!t.cluster) await checkDatabase((args) => link.send(args), t.db, display);
    const backend = await RedisBackend.open(link, { url: display, prefix: t.prefix, allowEviction: t.allowEviction, nativeClaim: t.nativeClaim, warned: second });
    backend.renewal = { kind: "redis", url };
    return backend;
  } catch (e) {
    await link.close();
    throw e;
  }
}

/** The Redis store on a client the program made (connected, or connecting); closing the store leaves it open. */
export async function redisFromClient(client: object): Promise<RedisBackend> {
  const link = linkOf(client, false);
  if (link === undefined) {
    throw new ConfigError("openStore(client): expected an ioredis Redis or Cluster, a node-redis client or cluster, or a pg Pool or Client");
  }
  try {
    return await RedisBackend.open(link, { url: "redis (a client of the program's)", prefix: "", allowEviction: false, nativeClaim: true });
  } catch (e) {
    throw e instanceof StoreError || e instanceof ConfigError ? e : storeError(e);
  }
}
export { parseRedisUrl } from "./redis-target.js";
