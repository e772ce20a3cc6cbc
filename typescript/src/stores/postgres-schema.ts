// The PostgreSQL schema: the Rust core's migration steps (crates/toolonce/src/store/postgres/
// migrations/NNN_*.sql, carried in this package), rendered for the entries table and applied
// in one transaction under the core's advisory lock, the version recorded in the version table
// the core keeps. A table either side created or migrated works with the other.

import { LIMITS, POSTGRES_MIGRATIONS } from "../artifacts.generated.js";
import { ConfigError, StoreError } from "../errors.js";
import { postgresStatement } from "../sql.js";

export const SCHEMA_VERSION = 3;
export const VERSION_TABLE: string = LIMITS.tables.postgres_version;
/** The advisory lock of migrations: the bytes of "toolonce" as a big-endian bigint, as in the core. */
const MIGRATION_LOCK = BigInt.asIntN(64, BigInt("0x" + Buffer.from("toolonce").toString("hex"))).toString();
const MAX_TABLE_NAME: number = LIMITS.tables.postgres_max_name;

/** Something that runs a query: a pg Client, or a client checked out of a Pool. */
export interface Queryable {
  query(
    text: string | { text: string; values: unknown[]; rowMode: "array" },
    values?: unknown[],
  ): Promise<{ rows: Record<string, unknown>[]; rowCount: number | null }>;
}

export function quote(identifier: string): string {
  return `"${identifier.replaceAll('"', '""')}"`;
}

/** Checks a table name as the core does: ASCII letters, digits and underscores, not the version table's. */
export function checkTableName(name: string): void {
  const bad = (why: string) => new ConfigError(`invalid table name ${JSON.stringify(name)}: ${why}`);
  if (name.length === 0 || name.length > MAX_TABLE_NAME) throw bad(`use 1 to ${MAX_TABLE_NAME} characters`);
  if (!/^[A-Za-z0-9_]+$/.test(name)) throw bad("use only ASCII letters, digits and underscores");
  if (/^[0-9]/.test(name)) throw bad("it must not start with a digit");
  if (name.toLowerCase() === VERSION_TABLE) throw bad("that name is taken by the schema version table");
}

/** The statements of migration step `version` for `table`, placeholders filled in. */
export function migration(version: number, table: string): string {
  const prefix = String(version).padStart(3, "0") + "_";
  const step = POSTGRES_MIGRATIONS.find((m) => m.name.startsWith(prefix));
  if (step === undefined) throw new Error(`the PostgreSQL migration ${prefix}*.sql is missing from this package (run npm run build)`);
  const values: Record<string, string> = {
    table: quote(table),
    expires_at_index: quote(`${table}_expires_at`),
    claim: quote(`${table}_claim`),
    lease_check: quote(`${table}_lease`),
    table_literal: `'${table.replaceAll("'", "''")}'`,
    version_table: VERSION_TABLE,
  };
  return step.sql.replace(/\{\{([a-z_]+)\}\}/g, (all, name: string) => values[name] ?? all);
}

/** Applies the missing steps in one transaction on `client` (a connection of its own). */
export async function migrate(client: Queryable, table: string): Promise<void> {
  const sql = (name: string) => postgresStatement(name, { version_table: VERSION_TABLE });
  await client.query(sql("begin"));
  try {
    await client.query(sql("migration_lock"), [MIGRATION_LOCK]);
    await client.query(sql("create_version_table"));
    const found = await client.query(sql("read_version"), [table]);
    const from = found.rows.length === 0 ? 0 : Number(found.rows[0]?.version);
    if (!Number.isInteger(from) || from < 0) throw new StoreError(`unreadable ${VERSION_TABLE}.version of ${table}`, false);
    if (from > SCHEMA_VERSION) {
      throw new StoreError(
        `table ${JSON.stringify(table)} has schema version ${from}, newer than version ${SCHEMA_VERSION} that this build of toolonce knows: upgrade toolonce, or use another table`,
        false,
      );
    }
    for (let v = from + 1; v <= SCHEMA_VERSION; v++) await client.query(migration(v, table));
    if (from < SCHEMA_VERSION) {
      await client.query(sql("write_version"), [table, SCHEMA_VERSION]);
    }
    await client.query(sql("commit"));
  } catch (e) {
    await client.query(sql("rollback")).catch(() => {});
    throw e;
  }
}
