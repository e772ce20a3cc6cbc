// The SQLite store on node:sqlite (Node 22.5 or later): one file shared by every process on the
// machine, in the Rust core's schema (sqlite-schema.ts), so a file either side created works
// with the other. Each write is one `BEGIN IMMEDIATE` transaction (the database's write lock,
// with the clock read once the lock is held), in the same statements the core runs. Times are
// this machine's clock, shared by every process on it.
//
// node:sqlite is synchronous. A statement that must wait for another process's lock would block
// the JavaScript thread, heartbeats included, so the busy timeout is short and the wait for the
// lock is a retry on a timer instead, for as long as the store's busy timeout allows.

import type { DatabaseSync, StatementSync } from "node:sqlite";
import { ConfigError, CorruptEntry, StoreError } from "../errors.js";
import { readJson } from "../outcome.js";
import {
  type Backend,
  type RenewalSpec,
  type Claim,
  type ClaimRequest,
  type Entry,
  type Inspected,
  type ListQuery,
  type Page,
  readEach,
  type Removed,
  type Resolution,
  type Resolved,
  type Seen,
  type SeenSettled,
  admits,
  decodeError,
  refusal,
} from "../store.js";
import { sqliteStatement } from "../sql.js";
import { migrate } from "./sqlite-schema.js";

/** The core's statements (crates/toolonce/src/store/sqlite/statements), parameters by number. */
const SQL = {
  selectLive: sqliteStatement("select_live"),
  claim: sqliteStatement("claim"),
  reclaimOwn: sqliteStatement("reclaim_own"),
  takeover: sqliteStatement("takeover"),
  renew: sqliteStatement("renew"),
  complete: sqliteStatement("complete"),
  failSticky: sqliteStatement("fail_sticky"),
  failDelete: sqliteStatement("fail_delete"),
  resolveSettle: sqliteStatement("resolve_settle"),
  resolveRelease: sqliteStatement("resolve_release"),
  removeSettled: sqliteStatement("remove_settled"),
  list: sqliteStatement("list"),
  begin: sqliteStatement("begin"),
  commit: sqliteStatement("commit"),
  rollback: sqliteStatement("rollback"),
} as const;

interface Row {
  key: string;
  state: string;
  owner: string | null;
  fingerprint: string | null;
  lease_until: number | null;
  payload: string | null;
  attempts: number;
  started_at: number | null;
  kept_until: number;
  settled_at: number | null;
  scope: string | null;
  tool: string | null;
  detail: string | null;
  first_started_at: number | null;
}

/** The row whole, for an operator (the times are the row's own: this machine's clock). */
function inspectedOf(row: Row, entry: Entry): Inspected {
  const about: Inspected["about"] = {};
  if (row.scope !== null) about.scope = row.scope;
  if (row.tool !== null) about.tool = row.tool;
  if (row.detail !== null) about.detail = row.detail;
  const settledAt = row.settled_at === null ? undefined : Number(row.settled_at);
  return {
    key: row.key,
    entry,
    about,
    attempts: Number(row.attempts),
    startedAt: Number(row.started_at),
    firstStartedAt: row.first_started_at === null ? undefined : Number(row.first_started_at),
    settledAt,
    expiresAt: Number(row.state === "running" ? (row.lease_until ?? row.kept_until) : row.kept_until),
    mark: { startedAt: String(row.started_at), settledAt: settledAt === undefined ? undefined : String(settledAt), settledBy: row.state === "running" ? undefined : (row.owner ?? undefined) },
  };
}

const MAX_I64_MS = 9223372036854775807;
/** `a + b` in milliseconds, saturating (JavaScript numbers are exact to 2^53; times are far below). */
const after = (a: number, b: number) => Math.min(a + b, MAX_I64_MS);

/** How long one statement may block the thread waiting for the lock, and how long a write waits in all. */
const BUSY_SLICE_MS = 20;
const BUSY_TIMEOUT_MS = 5000;

function isBusy(e: unknown): boolean {
  const text = e instanceof Error ? e.message : String(e);
  return /database is locked|SQLITE_BUSY|database table is locked/i.test(text);
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export class SqliteBackend implements Backend {
  readonly url: string;
  /** A file's: the worker opens the same file. `:memory:` is this connection's alone: none. */
  readonly renewal: RenewalSpec | undefined;
  private readonly statements = new Map<string, StatementSync>();
  private closed = false;

  private constructor(
    private readonly db: DatabaseSync,
    private readonly path: string,
  ) {
    this.url = `sqlite://${path}`;
    this.renewal = path === ":memory:" ? undefined : { kind: "sqlite", path };
  }

  static open(path: string): SqliteBackend {
    let sqlite: typeof import("node:sqlite");
    try {
      sqlite = require("node:sqlite");
    } catch {
      throw new ConfigError(`a sqlite:// store needs node:sqlite, which this runtime lacks (Node ${process.versions.node}; it needs Node 22.5 or later)`);
    }
    let db: DatabaseSync;
    try {
      db = new sqlite.DatabaseSync(path);
    } catch (e) {
      throw new StoreError(`cannot open SQLite database ${path}: ${(e as Error).message}`, false, e);
    }
    try {
      db.exec(sqliteStatement("set_busy_timeout", { ms: BUSY_TIMEOUT_MS }));
      // WAL: readers and the writer do not block each other. NORMAL does not flush at commit.
      if (path !== ":memory:") db.exec(sqliteStatement("set_wal"));
      db.exec(sqliteStatement("set_synchronous_normal"));
      migrate(db, path);
      db.exec(sqliteStatement("set_busy_timeout", { ms: BUSY_SLICE_MS }));
    } catch (e) {
      db.close();
      if (e instanceof ConfigError) throw e;
      throw new StoreError(`cannot open SQLite database ${path}: ${(e as Error).message}`, false, e);
    }
    return new SqliteBackend(db, path);
  }

  private statement(sql: string): StatementSync {
    let s = this.statements.get(sql);
    if (s === undefined) {
      s = this.db.prepare(sql);
      this.statements.set(sql, s);
    }
    return s;
  }

  /** Runs `work` in one write transaction, with `now` read under the lock; waits for the lock on a timer. */
  private async write<T>(doing: string, work: (now: number) => T): Promise<T> {
    if (this.closed) throw new StoreError("the store is closed", false);
    const deadline = Date.now() + BUSY_TIMEOUT_MS;
    let pause = 1;
    for (;;) {
      try {
        this.db.exec(SQL.begin);
      } catch (e) {
        if (isBusy(e) && Date.now() < deadline) {
          await sleep(pause);
          pause = Math.min(pause * 2, 50);
          if (this.closed) throw new StoreError("the store is closed", false);
          continue;
        }
        throw this.error(doing, e);
      }
      try {
        const result = work(Date.now());
        this.db.exec(SQL.commit);
        return result;
      } catch (e) {
        try {
          this.db.exec(SQL.rollback);
        } catch {
          // Already rolled back by SQLite.
        }
        throw this.error(doing, e);
      }
    }
  }

  private error(doing: string, e: unknown): StoreError {
    if (e instanceof StoreError) return e;
    // A lock held past the busy timeout may clear; anything else is the database refusing.
    if (e instanceof CorruptEntry) return e;
    return new StoreError(`SQLite database ${this.path}: cannot ${doing}: ${(e as Error).message}`, isBusy(e), e);
  }

  private entryOf(row: Row, now: number): Entry {
    const fingerprint = row.fingerprint ?? undefined;
    const payload = (): unknown => {
      try {
        return row.payload === null ? undefined : readJson(row.payload);
      } catch (e) {
        throw new CorruptEntry(`the entry of ${row.key} cannot be read: its payload is not JSON (${(e as Error).message})`, e);
      }
    };
    const settledAt = row.settled_at === null || row.settled_at === undefined ? undefined : Number(row.settled_at);
    switch (row.state) {
      case "running":
        return {
          state: row.lease_until !== null && row.lease_until > now ? "running" : "unknown",
          fingerprint,
          owner: row.owner ?? undefined,
          attempts: Number(row.attempts),
          startedAt: row.started_at ?? undefined,
          firstStartedAt: row.first_started_at ?? undefined,
        };
      case "done":
        return { state: "done", fingerprint, result: payload() ?? null, settledAt };
      case "failed": {
        const error = decodeError(payload());
        if (error === undefined) throw new CorruptEntry(`the entry of ${row.key} cannot be read: its error is unreadable`);
        return { state: "failed", fingerprint, error, settledAt };
      }
      default:
        throw new CorruptEntry(`the entry of ${row.key} cannot be read: unknown state ${JSON.stringify(row.state)}`);
    }
  }

  private live(key: string, now: number): Row | undefined {
    return this.statement(SQL.selectLive).get(key, now) as Row | undefined;
  }

  async claim(req: ClaimRequest): Promise<Claim> {
    return this.write("claim", (now) => {
      const leaseUntil = after(now, req.leaseMs);
      const keptUntil = after(leaseUntil, req.retentionMs);
      const about = req.about;
      const wrote = this.statement(SQL.claim).run(req.key, req.owner, req.fingerprint, now, leaseUntil, keptUntil, about.scope ?? null, about.tool ?? null, about.detail ?? null);
      if (Number(wrote.changes) === 1) return { kind: "won" } as Claim;
      // The read runs under the same lock: it sees exactly the row that stopped the claim.
      const row = this.live(req.key, now);
      if (row === undefined) throw new StoreError("a claimed row vanished under the write lock", false);
      if (row.state === "running" && row.owner === req.owner) {
        this.statement(SQL.reclaimOwn).run(req.key, req.owner, leaseUntil, keptUntil);
        return { kind: "won" } as Claim;
      }
      const entry = this.entryOf(row, now);
      if (entry.state === "unknown" && req.takeover && (row.fingerprint === null || row.fingerprint === req.fingerprint)) {
        this.statement(SQL.takeover).run(req.key, req.owner, now, leaseUntil, keptUntil);
        return { kind: "took_over" } as Claim;
      }
      return { kind: "existing", entry } as Claim;
    });
  }

  async renew(key: string, owner: string, leaseMs: number): Promise<boolean> {
    return this.write("renew", (now) => Number(this.statement(SQL.renew).run(key, owner, after(now, leaseMs), now).changes) === 1);
  }

  async complete(key: string, owner: string, resultJson: string, retentionMs: number): Promise<boolean> {
    return this.write("complete", (now) => Number(this.statement(SQL.complete).run(key, owner, resultJson, now, after(now, retentionMs)).changes) === 1);
  }

  async fail(key: string, owner: string, errorJson: string | undefined, retentionMs: number): Promise<boolean> {
    return this.write("fail", (now) => {
      const changed =
        errorJson === undefined
          ? this.statement(SQL.failDelete).run(key, owner, now).changes
          : this.statement(SQL.failSticky).run(key, owner, errorJson, now, after(now, retentionMs)).changes;
      return Number(changed) === 1;
    });
  }

  async resolve(key: string, seen: Seen, resolution: Resolution, retentionMs: number): Promise<Resolved> {
    // Read, judged and written in one transaction under the write lock (as the core does).
    return this.write("resolve", (now) => {
      const row = this.live(key, now);
      if (row === undefined) return { kind: "absent" } as Resolved;
      const entry = this.entryOf(row, now);
      if (!admits(seen, entry)) return refusal(seen, entry, inspectedOf(row, entry));
      const owner = seen.owner ?? null;
      const changed =
        resolution === "release"
          ? this.statement(SQL.resolveRelease).run(key, now, owner, seen.attempts).changes
          : "done" in resolution
            ? this.statement(SQL.resolveSettle).run(key, "done", resolution.done, now, after(now, retentionMs), owner, seen.attempts).changes
            : this.statement(SQL.resolveSettle)
                .run(key, "failed", JSON.stringify(resolution.failed), now, after(now, retentionMs), owner, seen.attempts).changes;
      // Judged admissible and yet not matched: refused, never applied by guess.
      return (Number(changed) === 1 ? { kind: "applied" } : { kind: "changed", entry }) as Resolved;
    });
  }

  async get(key: string): Promise<Entry | undefined> {
    if (this.closed) throw new StoreError("the store is closed", false);
    const now = Date.now();
    try {
      const row = this.live(key, now);
      return row === undefined ? undefined : this.entryOf(row, now);
    } catch (e) {
      throw this.error("read an entry", e);
    }
  }

  async inspect(key: string): Promise<Inspected | undefined> {
    if (this.closed) throw new StoreError("the store is closed", false);
    const now = Date.now();
    try {
      const row = this.live(key, now);
      return row === undefined ? undefined : inspectedOf(row, this.entryOf(row, now));
    } catch (e) {
      throw this.error("read an entry", e);
    }
  }

  async list(query: ListQuery): Promise<Page> {
    if (this.closed) throw new StoreError("the store is closed", false);
    const now = Date.now();
    let rows: Row[];
    try {
      // One more than asked: whether there is a next page.
      rows = this.statement(SQL.list).all(query.cursor ?? "", now, query.state ?? null, query.limit + 1, query.scope ?? null, query.tool ?? null) as unknown as Row[];
    } catch (e) {
      throw this.error("list entries", e);
    }
    const page = rows.slice(0, query.limit);
    const { entries, unreadable } = readEach(page, (row) => String(row.key), (row) => inspectedOf(row, this.entryOf(row, now)));
    // The next page starts after the last row of this one, read or not.
    const next = rows.length > query.limit ? String(page[page.length - 1]?.key) : undefined;
    return { entries, next, unreadable };
  }

  async remove(key: string, seen: SeenSettled): Promise<Removed> {
    // The delete matches only the settled row seen; when it matches nothing, the row read under
    // the same lock says why (as the core does).
    return this.write("remove an entry", (now) => {
      const settled = seen.settledAt === undefined ? null : Number(seen.settledAt);
      const deleted = this.statement(SQL.removeSettled).run(key, now, seen.state, seen.attempts, Number(seen.startedAt), settled, seen.settledBy ?? null).changes;
      if (Number(deleted) === 1) return { kind: "applied" } as Removed;
      const row = this.live(key, now);
      return (row === undefined ? { kind: "absent" } : { kind: "changed", found: inspectedOf(row, this.entryOf(row, now)) }) as Removed;
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.db.close();
  }
}

/** Opens `sqlite://PATH` (`sqlite://toolonce.db`, `sqlite:///abs/path.db`, `sqlite://:memory:`). */
export async function openSqlite(url: string): Promise<Backend> {
  const path = url.replace(/^sqlite:\/\//i, "");
  if (path === "") throw new ConfigError("a sqlite:// URL needs a path: sqlite://toolonce.db or sqlite:///abs/path.db");
  // A `?` would become part of the file name: an option that looks set and is not.
  if (path.includes("?")) throw new ConfigError("the SQLite store reads no options from its URL (sqlite://PATH)");
  return SqliteBackend.open(path);
}
