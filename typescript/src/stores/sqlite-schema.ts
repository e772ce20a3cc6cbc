// The SQLite store's schema (version 2): created in a new file, migrated from version 1, checked
// in an existing one, under the write lock so that processes opening one file together create
// or migrate it once. The SQL is the Rust core's (crates/toolonce/src/store/sqlite), so a file
// either side created works with the other; PRAGMA application_id ("tool") and user_version say
// whose file and which layout it is.

import type { DatabaseSync } from "node:sqlite";
import { LIMITS, SQLITE_MIGRATIONS } from "../artifacts.generated.js";
import { ConfigError } from "../errors.js";
import { sqliteStatement } from "../sql.js";

export const SCHEMA_VERSION = 2;
const APPLICATION_ID = 0x746f6f6c; // "tool"

/** How long a running row migrated from version 1 is kept as unknown after its lease: 24 h. */
const MIGRATED_RETENTION_MS: number = LIMITS.unknown_retention_ms;

function migration(name: string): string {
  const found = SQLITE_MIGRATIONS.find((m) => m.name === name);
  if (found === undefined) throw new Error(`the SQLite migration ${name} is missing from this package (run npm run build)`);
  return found.sql;
}

/** The statements that carry a version-1 file to version 2, their placeholders filled in. */
function fromV1(): string {
  return migration("002_from_001.sql")
    .replaceAll("{{schema_v2}}", migration("002_entries.sql"))
    .replaceAll("{{migrated_retention_ms}}", String(MIGRATED_RETENTION_MS));
}

/** Creates, migrates or checks the schema of `db` (at `path`, for messages); runs in a write transaction. */
export function migrate(db: DatabaseSync, path: string): void {
  db.exec(sqliteStatement("begin"));
  try {
    const applicationId = Number((db.prepare(sqliteStatement("application_id")).get() as { application_id: number }).application_id);
    const version = Number((db.prepare(sqliteStatement("user_version")).get() as { user_version: number }).user_version);
    if (applicationId === 0 && version === 0) {
      db.exec(migration("002_entries.sql"));
      db.exec(sqliteStatement("set_application_id", { id: APPLICATION_ID }));
    } else if (applicationId === APPLICATION_ID && version === 1) {
      db.exec(fromV1());
    } else if (applicationId === APPLICATION_ID && version === SCHEMA_VERSION) {
      // Current.
    } else if (applicationId === APPLICATION_ID && version > SCHEMA_VERSION) {
      throw new ConfigError(`SQLite database ${path} has schema version ${version}, newer than this toolonce knows (${SCHEMA_VERSION}): upgrade toolonce`);
    } else if (applicationId === APPLICATION_ID) {
      throw new ConfigError(`SQLite database ${path} has schema version ${version}, which no toolonce ever wrote`);
    } else if (applicationId === 0) {
      throw new ConfigError(`SQLite database ${path} is not a toolonce database (it has user_version ${version} but no toolonce application id)`);
    } else {
      throw new ConfigError(`SQLite database ${path} belongs to another program (application_id 0x${applicationId.toString(16)})`);
    }
    if (version !== SCHEMA_VERSION) db.exec(sqliteStatement("set_user_version", { version: SCHEMA_VERSION }));
    db.exec(sqliteStatement("commit"));
  } catch (e) {
    db.exec(sqliteStatement("rollback"));
    throw e;
  }
}
