// A Redis store URL taken apart, as the Rust core takes it apart (store/redis/url.rs): the same
// results and the same refusals, held together by the shared vectors
// (crates/toolonce/tests/data/store_urls.json). RFC 3986 percent-encoding (`+` is a plus),
// case-insensitive schemes, each option once, and no piece of a password in any message.

import { ConfigError } from "../errors.js";
import { unknownOption } from "../url.js";

export interface Target {
  tls: boolean;
  cluster: boolean;
  nodes: { host: string; port: number }[];
  username: string | undefined;
  password: string | undefined;
  db: number;
  prefix: string;
  allowEviction: boolean;
  nativeClaim: boolean;
}

/** The options a Redis store URL may carry here; the Rust core reads the same names. */
const OPTIONS = ["prefix", "allow_eviction", "native_claim", "replicas", "replica_timeout_ms", "protocol"] as const;

const UNSUPPORTED = "is read by the Rust core, not yet by this package";

/** What a refusal says instead of quoting a URL whose `@` may have moved past its host. */
export const MISPLACED_USERINFO =
  "it has an `@` after its host, as a password with a raw `/`, `?` or `#` puts it there; in a user name or password these are written percent-encoded (%2F, %3F, %23), and `@` as %40";

function decode(text: string, what: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    throw new ConfigError(`${what} is not valid percent-encoding`);
  }
}

function bool(name: string, value: string): boolean {
  const v = value.toLowerCase();
  if (v === "true" || v === "1" || v === "yes" || v === "on") return true;
  if (v === "false" || v === "0" || v === "no" || v === "off") return false;
  throw new ConfigError(`${name} takes true or false, not ${JSON.stringify(value)}`);
}

/** Whether the `@` ending a userinfo may come after the authority (as store/redis/url.rs decides). */
export function misplacedUserinfo(url: string): boolean {
  const i = url.indexOf("://");
  const rest = i < 0 ? url : url.slice(i + 3);
  const end = rest.search(/[/?#]/);
  const authority = end < 0 ? rest : rest.slice(0, end);
  if (authority.includes("@")) return false;
  const hash = rest.indexOf("#");
  const beforeFragment = hash < 0 ? rest : rest.slice(0, hash);
  const fragment = hash < 0 ? "" : rest.slice(hash + 1);
  const q = beforeFragment.indexOf("?");
  const path = q < 0 ? beforeFragment : beforeFragment.slice(0, q);
  const query = q < 0 ? "" : beforeFragment.slice(q + 1);
  return (
    fragment.includes("@") ||
    path.includes("@") ||
    query.split("&").some((pair) => {
      const eq = pair.indexOf("=");
      if (eq < 0) return pair.includes("@");
      const name = pair.slice(0, eq);
      return name.includes("@") || (pair.slice(eq + 1).includes("@") && !(OPTIONS as readonly string[]).includes(name));
    })
  );
}

/** Parses a Redis store URL; throws ConfigError naming what is wrong (never the password). */
export function parseRedisUrl(url: string): Target {
  try {
    return parseText(url);
  } catch (e) {
    if (e instanceof ConfigError && misplacedUserinfo(url)) throw new ConfigError(`invalid Redis URL: ${MISPLACED_USERINFO}`);
    throw e;
  }
}

function parseText(url: string): Target {
  const m = /^([a-z][a-z0-9+.-]*):\/\/(.*)$/is.exec(url);
  if (m === null) throw new ConfigError("the store URL has no scheme");
  const scheme = (m[1] as string).toLowerCase();
  const schemes: Record<string, [boolean, boolean]> = { redis: [false, false], rediss: [true, false], "redis+cluster": [false, true], "rediss+cluster": [true, true] };
  const kind = schemes[scheme];
  if (kind === undefined) {
    if (scheme === "redis+sentinel" || scheme === "rediss+sentinel") {
      throw new ConfigError(`${scheme}:// ${UNSUPPORTED}: connect an ioredis client with its \`sentinels\` option and pass it to openStore(client)`);
    }
    throw new ConfigError(`unknown store scheme ${JSON.stringify(scheme)}: expected redis, rediss, redis+cluster or rediss+cluster`);
  }
  const [tls, cluster] = kind;
  let rest = m[2] as string;
  if (rest.includes("#")) throw new ConfigError("a store URL has no fragment: a `#` in a password is written %23");
  const q = rest.indexOf("?");
  const query = q < 0 ? "" : rest.slice(q + 1);
  rest = q < 0 ? rest : rest.slice(0, q);
  const slash = rest.indexOf("/");
  const authority = slash < 0 ? rest : rest.slice(0, slash);
  const path = slash < 0 ? "" : rest.slice(slash);
  const at = authority.lastIndexOf("@");
  const target: Target = { tls, cluster, nodes: [], username: undefined, password: undefined, db: 0, prefix: "", allowEviction: false, nativeClaim: true };
  readOptions(query, target);
  if (at >= 0) login(authority.slice(0, at), target);
  const hosts = at < 0 ? authority : authority.slice(at + 1);
  const list = cluster ? hosts.split(",").filter((h) => h !== "") : [hosts];
  if (list.length === 0 || list.some((h) => h === "")) throw new ConfigError("no host");
  if (!cluster && hosts.includes(",")) throw new ConfigError("several hosts need a redis+cluster:// (or redis+sentinel://) URL");
  target.nodes = list.map(node);
  target.db = database(path, cluster);
  return target;
}

function readOptions(query: string, target: Target): void {
  const seen = new Set<string>();
  for (const pair of query.split("&").filter((p) => p !== "")) {
    const eq = pair.indexOf("=");
    const name = decode(eq < 0 ? pair : pair.slice(0, eq), "an option");
    if (!(OPTIONS as readonly string[]).includes(name)) throw new ConfigError(unknownOption("Redis", name, OPTIONS));
    if (eq < 0) throw new ConfigError(`the option \`${name}\` has no value: write ${name}=…`);
    if (seen.has(name)) throw new ConfigError(`the option \`${name}\` is given twice: give it once`);
    seen.add(name);
    const value = decode(pair.slice(eq + 1), "an option");
    if (name === "prefix") target.prefix = value;
    else if (name === "allow_eviction") target.allowEviction = bool(name, value);
    else if (name === "native_claim") target.nativeClaim = bool(name, value);
    else if (name === "replicas" || name === "replica_timeout_ms") {
      // Refused rather than ignored: a store that does not wait for replicas must not look as if it did.
      if (name === "replicas" && value === "0") continue;
      throw new ConfigError(`${name} (writes that wait for replicas) ${UNSUPPORTED}: open this store from Rust, the toolonce command or Python, or leave ${name} out`);
    } else if (value === "3" || value === "resp3") {
      throw new ConfigError(`protocol=${value} (RESP3) ${UNSUPPORTED}: this package speaks RESP2 (protocol=2)`);
    } else if (value !== "2" && value !== "resp2") {
      throw new ConfigError(`protocol takes 2 or 3 (resp2, resp3), not ${JSON.stringify(value)}`);
    }
  }
}

/** The user name and password, decoded; an empty one is none, and `user@` is a user name (RFC 3986). */
function login(userinfo: string, target: Target): void {
  const colon = userinfo.indexOf(":");
  const user = decode(colon < 0 ? userinfo : userinfo.slice(0, colon), "the user name");
  const password = decode(colon < 0 ? "" : userinfo.slice(colon + 1), "the password");
  target.username = user === "" ? undefined : user;
  target.password = password === "" ? undefined : password;
}

/** One `host[:port]` (6379 when it names none), or the refusal saying what is wrong with it. */
function node(text: string): { host: string; port: number } {
  let host: string;
  let port: string | undefined;
  if (text.startsWith("[")) {
    const close = text.indexOf("]");
    if (close < 0) throw new ConfigError(`the IPv6 address in ${JSON.stringify(text)} has no closing "]"`);
    host = text.slice(1, close);
    const after = text.slice(close + 1);
    if (after !== "" && !after.startsWith(":")) throw new ConfigError(`${JSON.stringify(text)}: after an IPv6 address in brackets comes ":PORT" or nothing`);
    port = after === "" ? undefined : after.slice(1);
  } else {
    const colon = text.indexOf(":");
    host = colon < 0 ? text : text.slice(0, colon);
    port = colon < 0 ? undefined : text.slice(colon + 1);
    if (port?.includes(":")) throw new ConfigError(`${JSON.stringify(text)}: an IPv6 address goes in brackets, as in redis://[::1]:6379`);
  }
  if (host === "") throw new ConfigError(`${JSON.stringify(text)} names no host`);
  if (port !== undefined && (!/^\d{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535)) {
    throw new ConfigError(`the port ${JSON.stringify(port)} of ${JSON.stringify(text)} is not a number from 1 to 65535`);
  }
  return { host, port: port === undefined ? 6379 : Number(port) };
}

/** The database after the host: 0 to 2147483647 (a Redis `databases` is an int), only 0 on a cluster. */
function database(path: string, cluster: boolean): number {
  const text = path.replace(/^\/+/, "").replace(/\/$/, "");
  if (text === "") return 0;
  if (!/^\d+$/.test(text) || Number(text) > 2147483647) {
    throw new ConfigError(`the database ${JSON.stringify(text)} after the host is not a number from 0 to 2147483647 (redis://host:6379/0)`);
  }
  const db = Number(text);
  // As the Rust core: /0 is every cluster's one database.
  if (cluster && db !== 0) {
    throw new ConfigError(`a Redis Cluster has only database 0, and the store URL names database ${db}: leave the number out (redis+cluster://host:port,host:port/)`);
  }
  return db;
}
