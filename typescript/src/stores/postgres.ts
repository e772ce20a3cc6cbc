// The PostgreSQL store through `pg`: the Rust core's table and claim function (postgres-schema.ts
// applies its migrations), and the statements the core runs, so processes of either side share
// one table. Every operation is one statement, one round trip; a claim calls the claim function,
// which decides and reads in one atomic step (a settled entry is answered without calling it).
// Leases and expiry are the database server's `now()`.

import { LIMITS } from "../artifacts.generated.js";
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
import { redactUrl } from "../url.js";
import { parsePostgresUrl } from "./postgres-url.js";
import { fragment, postgresStatement } from "../sql.js";
import { type Queryable, checkTableName, migrate, quote } from "./postgres-schema.js";

const DEFAULT_TABLE: string = LIMITS.tables.entries;

/**
 * The core's statements for `table` (crates/toolonce/src/store/postgres/statements). The claim
 * is the core's own, read by position (its row has two columns named `bool`); the reads select
 * the columns of `entry_columns_by_name.sql`, by name, with times as numbers and exact text.
 */
function statements(table: string) {
  const values = { table: quote(table), claim: quote(`${table}_claim`), entry_columns: fragment(postgresStatement("entry_columns_by_name")) };
  const sql = (name: string) => postgresStatement(name, values);
  return {
    claim: sql("claim"),
    renew: sql("renew"),
    complete: sql("complete"),
    failSticky: sql("fail_sticky"),
    failDelete: sql("fail_delete"),
    get: sql("get"),
    resolveDone: sql("resolve_done"),
    resolveFailed: sql("resolve_failed"),
    resolveRelease: sql("resolve_release"),
    list: sql("list"),
    removeSettled: sql("remove_settled"),
  };
}

/** SQLSTATEs after which trying again may help: the connection, the server starting or stopping, load. */
const RETRYABLE_STATES = /^(08|57P0[1-3]|53300|40001|40P01)/;

function storeError(e: unknown, doing: string): StoreError {
  if (e instanceof StoreError) return e;
  const code = (e as { code?: unknown }).code;
  const message = e instanceof Error ? e.message : String(e);
  // A SQLSTATE is five characters; anything else (ECONNREFUSED, a terminated connection, a timeout) is the connection.
  const refused = typeof code === "string" && /^[0-9A-Z]{5}$/.test(code) && !RETRYABLE_STATES.test(code);
  return new StoreError(`PostgreSQL ${refused ? "refused to" : "is unavailable: cannot"} ${doing}: ${message}`, !refused, e);
}

interface EntryRow {
  state: string;
  fingerprint: string | null;
  result: string | null;
  error: string | null;
  owner: string | null;
  attempts: number | null;
  /** Read by `get` only (the claim's row is not decoded for them). */
  started_ms?: number | null;
  first_started_ms?: number | null;
  /** Read by `get`, and by the claim from its Date. */
  settled_ms?: number | null;
}

/** When a settled entry settled, in whole ms. */
function settledOf(ms: number | null | undefined): number | undefined {
  return ms === null || ms === undefined ? undefined : Math.floor(Number(ms));
}

function entryOf(key: string, row: EntryRow): Entry {
  const fingerprint = row.fingerprint ?? undefined;
  const read = (text: string | null): unknown => {
    try {
      return text === null ? undefined : readJson(text);
    } catch (e) {
      throw new CorruptEntry(`the entry of ${key} cannot be read: it is not JSON (${(e as Error).message})`, e);
    }
  };
  switch (row.state) {
    case "running":
    case "unknown":
      return {
        state: row.state,
        fingerprint,
        owner: row.owner ?? undefined,
        attempts: Number(row.attempts ?? 0),
        startedAt: row.started_ms ?? undefined,
        firstStartedAt: row.first_started_ms ?? undefined,
      };
    case "done":
      return { state: "done", fingerprint, result: read(row.result) ?? null, settledAt: settledOf(row.settled_ms) };
    case "failed": {
      const error = decodeError(read(row.error));
      if (error === undefined) throw new CorruptEntry(`the entry of ${key} cannot be read: its error is unreadable`);
      return { state: "failed", fingerprint, error, settledAt: settledOf(row.settled_ms) };
    }
    default:
      throw new CorruptEntry(`the entry of ${key} cannot be read: unknown state ${JSON.stringify(row.state)}`);
  }
}

interface WholeRow extends EntryRow {
  key: string;
  scope: string | null;
  tool: string | null;
  detail: string | null;
  started_ms: number;
  first_started_ms: number | null;
  settled_ms: number | null;
  expires_ms: number | null;
  started_mark: string;
  settled_mark: string | null;
}

function inspectedOf(row: WholeRow): Inspected {
  const about: Inspected["about"] = {};
  if (row.scope !== null) about.scope = row.scope;
  if (row.tool !== null) about.tool = row.tool;
  if (row.detail !== null) about.detail = row.detail;
  const time = (v: number | null) => (v === null ? undefined : Math.floor(Number(v)));
  return {
    key: row.key,
    entry: entryOf(row.key, row),
    about,
    attempts: Number(row.attempts ?? 0),
    startedAt: time(row.started_ms) ?? 0,
    firstStartedAt: time(row.first_started_ms),
    settledAt: time(row.settled_ms),
    expiresAt: time(row.expires_ms),
    mark: { startedAt: row.started_mark, settledAt: row.settled_mark ?? undefined, settledBy: row.state === "done" || row.state === "failed" ? (row.owner ?? undefined) : undefined },
  };
}

/** What the store needs of pg: a Pool (or a Client) to query, and whether closing the store ends it. */
interface Pg extends Queryable {
  connect(): Promise<unknown>;
  end(): Promise<void>;
}

export class PostgresBackend implements Backend {
  renewal: RenewalSpec | undefined;
  private readonly sql: ReturnType<typeof statements>;
  private closed = false;

  private constructor(
    private readonly pg: Pg,
    readonly url: string,
    private readonly owned: boolean,
    table: string,
  ) {
    this.sql = statements(table);
  }

  /** Migrates `table` on a connection of its own, then serves from `pg`. */
  static async open(pg: Pg, url: string, owned: boolean, table: string): Promise<PostgresBackend> {
    checkTableName(table);
    const isPool = typeof (pg as { totalCount?: unknown }).totalCount === "number";
    try {
      if (isPool) {
        const client = (await pg.connect()) as Queryable & { release(error?: unknown): void };
        try {
          await migrate(client, table);
        } finally {
          client.release();
        }
      } else {
        await migrate(pg, table);
      }
    } catch (e) {
      throw storeError(e, `migrate table ${table}`);
    }
    return new PostgresBackend(pg, url, owned, table);
  }

  private async query(text: string, values: unknown[], doing: string, byPosition = false): Promise<{ rows: Record<string, unknown>[]; rowCount: number | null }> {
    if (this.closed) throw new StoreError("the store is closed", false);
    try {
      return byPosition ? await this.pg.query({ text, values, rowMode: "array" }) : await this.pg.query(text, values);
    } catch (e) {
      throw storeError(e, doing);
    }
  }

  async claim(req: ClaimRequest): Promise<Claim> {
    const { rows } = await this.query(
      this.sql.claim,
      [req.key, req.owner, req.fingerprint, Math.round(req.leaseMs), Math.round(req.retentionMs), req.takeover, req.about.scope ?? null, req.about.tool ?? null, req.about.detail ?? null],
      "claim",
      true,
    );
    const row = rows[0] as unknown as unknown[] | undefined;
    if (row === undefined) throw new StoreError("the claim function returned no row", false);
    // The columns of claim.sql: won, took_over, then entry_columns.sql's order.
    const [won, tookOver, state, owner, fingerprint, , , settled, result, error, , , , , attempts] = row;
    if (won === true) return tookOver === true ? { kind: "took_over" } : { kind: "won" };
    // pg reads a timestamptz into a Date: whole ms, as much as a replay's note tells.
    const settled_ms = settled instanceof Date ? settled.getTime() : null;
    return { kind: "existing", entry: entryOf(req.key, { state, owner, fingerprint, result, error, attempts, settled_ms } as EntryRow) };
  }

  async renew(key: string, owner: string, leaseMs: number): Promise<boolean> {
    return ((await this.query(this.sql.renew, [key, owner, Math.round(leaseMs)], "renew")).rowCount ?? 0) > 0;
  }

  async complete(key: string, owner: string, resultJson: string, retentionMs: number): Promise<boolean> {
    return ((await this.query(this.sql.complete, [key, owner, resultJson, Math.round(retentionMs)], "complete")).rowCount ?? 0) > 0;
  }

  async fail(key: string, owner: string, errorJson: string | undefined, retentionMs: number): Promise<boolean> {
    const result =
      errorJson === undefined
        ? await this.query(this.sql.failDelete, [key, owner], "fail")
        : await this.query(this.sql.failSticky, [key, owner, errorJson, Math.round(retentionMs)], "fail");
    return (result.rowCount ?? 0) > 0;
  }

  async resolve(key: string, seen: Seen, resolution: Resolution, retentionMs: number): Promise<Resolved> {
    const fence = [seen.owner ?? null, seen.attempts, seen.evenIfLive === true];
    // One statement fenced on the attempt seen; when it matches nothing, a read says why. A read
    // that finds the attempt seen, unknown, means the lease passed between the two: try again.
    for (let i = 0; i < 3; i++) {
      const result =
        resolution === "release"
          ? await this.query(this.sql.resolveRelease, [key, ...fence], "resolve")
          : "done" in resolution
            ? await this.query(this.sql.resolveDone, [key, resolution.done, Math.round(retentionMs), ...fence], "resolve")
            : await this.query(this.sql.resolveFailed, [key, JSON.stringify(resolution.failed), Math.round(retentionMs), ...fence], "resolve");
      if ((result.rowCount ?? 0) > 0) return { kind: "applied" };
      const found = await this.inspect(key);
      if (found === undefined) return { kind: "absent" };
      if (!admits(seen, found.entry)) return refusal(seen, found.entry, found);
    }
    throw new StoreError("PostgreSQL: the entry changed each time resolve tried to settle it", true);
  }

  async get(key: string): Promise<Entry | undefined> {
    const { rows } = await this.query(this.sql.get, [key], "read an entry");
    const row = rows[0] as unknown as EntryRow | undefined;
    return row === undefined ? undefined : entryOf(key, row);
  }

  async inspect(key: string): Promise<Inspected | undefined> {
    const { rows } = await this.query(this.sql.get, [key], "read an entry");
    const row = rows[0] as unknown as Omit<WholeRow, "key"> | undefined;
    return row === undefined ? undefined : inspectedOf({ key, ...row });
  }

  async list(query: ListQuery): Promise<Page> {
    const values = [query.cursor ?? "", query.state ?? null, query.limit + 1, query.scope ?? null, query.tool ?? null];
    const { rows } = await this.query(this.sql.list, values, "list entries");
    const page = (rows as unknown as WholeRow[]).slice(0, query.limit);
    const { entries, unreadable } = readEach(page, (row) => String(row.key), inspectedOf);
    // The next page starts after the last row of this one, read or not.
    const next = rows.length > query.limit ? String(page[page.length - 1]?.key) : undefined;
    return { entries, next, unreadable };
  }

  async remove(key: string, seen: SeenSettled): Promise<Removed> {
    // One statement fenced on the settled entry seen; when it matches nothing, a read says why.
    const values = [key, seen.state, seen.attempts, seen.startedAt, seen.settledAt ?? null, seen.settledBy ?? null];
    if (((await this.query(this.sql.removeSettled, values, "remove an entry")).rowCount ?? 0) > 0) return { kind: "applied" };
    const found = await this.inspect(key);
    return found === undefined ? { kind: "absent" } : { kind: "changed", found };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.owned) await this.pg.end();
  }
}

/**
 * Opens `postgres://…` with a pg Pool of `connections` (`pg` must be installed): 16 for the
 * program's calls, fewer for the renewal worker's.
 */
export async function openPostgres(url: string, connections = 16): Promise<Backend> {
  parsePostgresUrl(url); // A bad URL is refused before the driver is looked for.
  let pg: any;
  try {
    pg = require("pg");
  } catch {
    throw new ConfigError("a postgres:// store needs the pg driver: npm install pg");
  }
  const { connectionString } = parsePostgresUrl(url);
  // A query that gets no answer within 5 s fails (the store is unavailable), as a dropped connection does.
  const pool = new pg.Pool({ connectionString, max: connections, connectionTimeoutMillis: 2000, query_timeout: 5000, application_name: "toolonce" });
  // A connection that breaks while idle is replaced; the calls that meet the outage fail closed.
  pool.on("error", () => {});
  try {
    const backend = await PostgresBackend.open(pool, redactUrl(url), true, DEFAULT_TABLE);
    backend.renewal = { kind: "postgres", url };
    return backend;
  } catch (e) {
    await pool.end().catch(() => {});
    throw e;
  }
}

/** The PostgreSQL store on a pg Pool or Client of the program's; closing the store leaves it open. */
export async function postgresFromClient(client: object): Promise<Backend> {
  return PostgresBackend.open(client as Pg, "postgres (a client of the program's)", false, DEFAULT_TABLE);
}
