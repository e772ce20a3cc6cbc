// One interface over the Redis clients a program may already have: ioredis (`Redis`,
// `Cluster`) and node-redis (`createClient`, `createCluster`). The store sends raw commands
// through it, routed by key on a cluster, and reaches every master for what is asked of each
// (INFO, SCRIPT LOAD). Replies come back as the clients give them: strings, numbers, null,
// arrays. Errors become `StoreError`s: retryable unless the server refused the command. A link
// over a client the store made itself (ioredis or node-redis) fails a command whose reply has
// not come within its response timeout, with one timer for all of them (`Deadlines`), not one
// per command.

import { StoreError } from "../errors.js";

/** A command sender: `args` is the command and its arguments; `key` routes it on a cluster. */
export interface RedisLink {
  send(args: string[], key?: string): Promise<unknown>;
  /** A sender per master (one, the server itself, when not a cluster). */
  masters(): Promise<{ name: string; send(args: string[]): Promise<unknown> }[]>;
  /** Ends the connections, if the store made them. */
  close(): Promise<void>;
}

/** The name `masters()` gives the one server that is not a cluster. */
export const THE_SERVER = "the server";

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

/** A command under a deadline: ioredis's `Command` (public, typed), or the record `withDeadlines` keeps of a node-redis one. */
interface Pending {
  isResolved: boolean;
  reject(e: Error): void;
  /** Set by `Deadlines` when the command is rejected: ioredis sets `isResolved` on a reply only. */
  rejected?: boolean;
}

/** Whether `command` has had its answer: a reply, an error reply, or a rejection of the client's. */
function answered(command: Pending): boolean {
  return command.isResolved || command.rejected === true;
}

/** ioredis's `Command` class: a command made by the store, sent with `sendCommand`. */
export type CommandClass = new (name: string, args: string[], options: { replyEncoding: "utf8" }) => Pending;

/**
 * Rejects each command not answered within `ms` of being sent, as ioredis's `commandTimeout`
 * does (the same error, the command left in its queue so that a late reply still finds its
 * place), but with one unref'd timer for all the commands in flight rather than a timer armed
 * and cleared per command, which cost more than the rest of a replay. Every command has the
 * same timeout, so deadlines come in the order commands are sent: a queue, whose answered head
 * is dropped as the next command is sent, and whose timer is armed for the oldest command
 * still unanswered.
 */
export class Deadlines {
  /** The commands from `head` on; those before it, answered or timed out, are cleared. */
  private commands: (Pending | undefined)[] = [];
  private dues: number[] = [];
  private head = 0;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly ms: number) {}

  track(command: Pending): void {
    this.dropAnswered();
    // An error reply (the IFEQ probe's `ERR syntax error` on Redis 7, a NOSCRIPT) or a closed
    // connection rejects a command without setting `isResolved`. Unmarked, such a command sat at
    // the head as if still in flight until its deadline passed, and every command sent after it
    // was kept until then: the first 2 s of every store, whose young collections then copied
    // them all (scavenges of 5-10 ms in 2,000-call rounds).
    const reject = command.reject;
    command.reject = (e: Error) => {
      command.rejected = true;
      reject.call(command, e);
    };
    this.commands.push(command);
    this.dues.push(performance.now() + this.ms);
    if (this.timer === undefined) this.arm(this.ms);
  }

  private dropAnswered(): void {
    // Each answered command is let go as it is passed, not when the arrays start over: with
    // several callers some command is always in flight, the arrays only start over past 1,024
    // entries, and the commands kept until then (their arguments, the values written) survived
    // every young-generation collection, which cost 8 callers more than their own calls.
    while (this.head < this.commands.length && answered(this.commands[this.head] as Pending)) this.commands[this.head++] = undefined;
    if (this.head === this.commands.length) {
      // Most of the time (a caller at a time): every command answered, and the arrays start over.
      this.commands.length = 0;
      this.dues.length = 0;
      this.head = 0;
    } else if (this.head > 1024 && this.head * 2 > this.commands.length) {
      this.commands = this.commands.slice(this.head);
      this.dues = this.dues.slice(this.head);
      this.head = 0;
    }
  }

  private arm(ms: number): void {
    this.timer = setTimeout(() => this.sweep(), Math.max(1, Math.ceil(ms)));
    this.timer.unref();
  }

  private sweep(): void {
    this.timer = undefined;
    const now = performance.now();
    while (this.head < this.commands.length) {
      const command = this.commands[this.head] as Pending;
      if (!answered(command)) {
        const due = this.dues[this.head] as number;
        if (due > now) break;
        command.reject(new Error("Command timed out"));
      }
      this.commands[this.head++] = undefined;
    }
    this.dropAnswered();
    if (this.head < this.commands.length) this.arm((this.dues[this.head] as number) - now);
  }
}

function fn(client: object, name: string): Sender | undefined {
  const f = (client as Record<string, unknown>)[name];
  return typeof f === "function" ? (f as Sender).bind(client) : undefined;
}

/**
 * How the store made its client: the response timeout the link enforces and, for ioredis, its
 * `Command` class (a node-redis client needs none).
 */
export interface Timed {
  Command?: CommandClass;
  timeoutMs: number;
}

type Send = (args: string[]) => Promise<unknown>;

/**
 * `send` (node-redis's), each command failed by `deadlines` if its answer has not come in time
 * (no deadlines: `send` as it is). node-redis's own command `timeout` stops counting once the
 * command is written, so without this a server that stops answering (the connection open, no
 * reply, no error) would hold every call for ever. The command stays in node-redis's queue, so
 * a late reply still finds its place; the promise has settled by then and it changes nothing.
 */
export function withDeadlines<A extends unknown[]>(send: (...args: A) => Promise<unknown>, deadlines: Deadlines | undefined): (...args: A) => Promise<unknown> {
  if (deadlines === undefined) return send;
  return (...args) =>
    new Promise((resolve, reject) => {
      const command: Pending = { isResolved: false, reject };
      deadlines.track(command);
      let sent: Promise<unknown>;
      try {
        sent = send(...args);
      } catch (e) {
        // Refused before anything was written: nothing to wait for. Left unanswered, it would
        // sit at the head of the queue for its whole deadline, keeping every later command.
        command.isResolved = true;
        throw e;
      }
      sent.then(
        (value) => {
          command.isResolved = true;
          resolve(value);
        },
        (e) => {
          command.isResolved = true;
          reject(e);
        },
      );
    });
}

/**
 * A sender on the ioredis client or cluster node `client`: `call`, or, when the store times
 * commands out itself, a `Command` of its own tracked by `deadlines`.
 */
function ioredisSender(client: object, deadlines: Deadlines | undefined, Command: CommandClass | undefined): Send {
  if (deadlines === undefined || Command === undefined) {
    const call = fn(client, "call") as Sender;
    return (args) => call(...args);
  }
  const sendCommand = fn(client, "sendCommand") as (command: Pending) => Promise<unknown>;
  // Each command is written as it is sent. Corking the socket until the turn's other commands
  // were sent (one write for all) cost less CPU but made the client and the server take turns:
  // at 8 callers the server sat idle while the client finished the turn, and the client while
  // the server answered the whole batch (first-time calls 0.42–0.55× the reference corked,
  // 0.77–0.88× written at once, `npm run bench`, same machine and hour).
  return (args) => {
    const command = new Command(args[0] as string, args.slice(1), { replyEncoding: "utf8" });
    deadlines.track(command);
    return sendCommand(command);
  };
}

/**
 * A link over `client`, or undefined when it is no Redis client this package knows. `owned`:
 * the store made the client, and closing the store closes it. `timed`: a client the store made
 * (an ioredis one without a `commandTimeout`), whose commands the link times out itself; a
 * program's own client keeps the timeouts the program gave it.
 */
export function linkOf(client: object, owned: boolean, timed?: Timed): RedisLink | undefined {
  const c = client as Record<string, unknown>;
  const sendCommand = fn(client, "sendCommand");
  // node-redis: one deadline queue per link, as for ioredis.
  const deadlines = timed === undefined ? undefined : new Deadlines(timed.timeoutMs);
  // ioredis: `call(command, ...args)` on a client and on a cluster (routed by the command's key).
  if (fn(client, "call") !== undefined && typeof c.isCluster === "boolean") {
    const send = ioredisSender(client, deadlines, timed?.Command);
    const nodes = fn(client, "nodes");
    return {
      send,
      masters: async () => {
        if (c.isCluster !== true || nodes === undefined) return [{ name: THE_SERVER, send }];
        const masters = (await nodes("master")) as object[];
        return masters.map((node) => {
          const options = (node as { options?: { host?: string; port?: number } }).options ?? {};
          return { name: `${options.host}:${options.port}`, send: ioredisSender(node, deadlines, timed?.Command) };
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
      send: withDeadlines((args: string[], key?: string) => sendCommand(key, false, args), deadlines),
      masters: async () =>
        Promise.all(
          (c.masters as { host?: string; port?: number }[]).map(async (master) => {
            const node = (await nodeClient(master)) as object;
            const send = fn(node, "sendCommand") as Sender;
            return { name: `${master.host}:${master.port}`, send: withDeadlines((args: string[]) => send(args), deadlines) };
          }),
        ),
      close: async () => {
        if (owned) await (fn(client, "close") ?? (fn(client, "quit") as Sender))();
      },
    };
  }
  if (sendCommand !== undefined && typeof c.isOpen === "boolean") {
    const send = withDeadlines((args: string[]) => sendCommand(args), deadlines);
    return {
      send,
      masters: async () => [{ name: THE_SERVER, send }],
      close: async () => {
        if (owned) await (fn(client, "close") ?? (fn(client, "quit") as Sender))();
      },
    };
  }
  return undefined;
}
