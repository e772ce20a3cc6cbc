// One interface over the Redis clients a program may already have: ioredis (`Redis`,
// `Cluster`) and node-redis (`createClient`, `createCluster`). The store sends raw commands
// through it, routed by key on a cluster, and reaches every master for what is asked of each
// (INFO, SCRIPT LOAD). Replies come back as the clients give them: strings, numbers, null,
// arrays. Errors become `StoreError`s: retryable unless the server refused the command.

import { StoreError } from "../errors.js";

/** A command sender: `args` is the command and its arguments; `key` routes it on a cluster. */
export interface RedisLink {
  send(args: string[], key?: string): Promise<unknown>;
  /** A sender per master (one, the server itself, when not a cluster). */
  masters(): Promise<{ name: string; send(args: string[]): Promise<unknown> }[]>;
  /** Ends the connections, if the store made them. */
  close(): Promise<void>;
}

/** Server errors after which trying again may help (it is loading, failing over, busy). */
const RETRYABLE_REPLIES = /^(BUSY|LOADING|TRYAGAIN|CLUSTERDOWN|MASTERDOWN|READONLY)\b/;

/** Whether `e` is an error reply of the server (not a connection failure). */
export function isReply(e: unknown): boolean {
  for (let p = e; p !== null && typeof p === "object"; p = Object.getPrototypeOf(p)) {
    const name = (p as { constructor?: { name?: string } }).constructor?.name;
    if (name === "ReplyError" || name === "ErrorReply") return true;
    if (name === "Error" || name === "Object") return false;
  }
  return false;
}

/** `e` as a `StoreError`: refused (not retryable) only when the server answered with an error. */
export function storeError(e: unknown): StoreError {
  if (e instanceof StoreError) return e;
  const message = e instanceof Error ? e.message : String(e);
  const refused = isReply(e) && !RETRYABLE_REPLIES.test(message);
  return new StoreError(`Redis ${refused ? "refused the request" : "is unavailable"}: ${message}`, !refused, e);
}

type Sender = (...args: unknown[]) => Promise<unknown>;

function fn(client: object, name: string): Sender | undefined {
  const f = (client as Record<string, unknown>)[name];
  return typeof f === "function" ? (f as Sender).bind(client) : undefined;
}

/**
 * A link over `client`, or undefined when it is no Redis client this package knows. `owned`:
 * the store made the client, and closing the store closes it.
 */
export function linkOf(client: object, owned: boolean): RedisLink | undefined {
  const c = client as Record<string, unknown>;
  const call = fn(client, "call");
  const sendCommand = fn(client, "sendCommand");
  // ioredis: `call(command, ...args)` on a client and on a cluster (routed by the command's key).
  if (call !== undefined && typeof c.isCluster === "boolean") {
    const nodes = fn(client, "nodes");
    return {
      send: (args) => call(...args),
      masters: async () => {
        if (c.isCluster !== true || nodes === undefined) return [{ name: "the server", send: (args) => call(...args) }];
        const masters = (await nodes("master")) as object[];
        return masters.map((node) => {
          const options = (node as { options?: { host?: string; port?: number } }).options ?? {};
          const nodeCall = fn(node, "call") as Sender;
          return { name: `${options.host}:${options.port}`, send: (args: string[]) => nodeCall(...args) };
        });
      },
      close: async () => {
        if (owned) (fn(client, "disconnect") as Sender)();
      },
    };
  }
  // node-redis: a cluster has `masters` and `sendCommand(firstKey, isReadonly, args)`.
  if (sendCommand !== undefined && Array.isArray(c.masters)) {
    const nodeClient = fn(client, "nodeClient") as Sender;
    return {
      send: (args, key) => sendCommand(key, false, args),
      masters: async () =>
        Promise.all(
          (c.masters as { host?: string; port?: number }[]).map(async (master) => {
            const node = (await nodeClient(master)) as object;
            const send = fn(node, "sendCommand") as Sender;
            return { name: `${master.host}:${master.port}`, send: (args: string[]) => send(args) };
          }),
        ),
      close: async () => {
        if (owned) await (fn(client, "close") ?? (fn(client, "quit") as Sender))();
      },
    };
  }
  if (sendCommand !== undefined && typeof c.isOpen === "boolean") {
    return {
      send: (args) => sendCommand(args),
      masters: async () => [{ name: "the server", send: (args) => sendCommand(args) }],
      close: async () => {
        if (owned) await (fn(client, "close") ?? (fn(client, "quit") as Sender))();
      },
    };
  }
  return undefined;
}
