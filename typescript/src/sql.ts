// The stores' SQL, read from the Rust core's statement files (carried by scripts/artifacts.js into
// artifacts.generated.ts): the TypeScript sources hold no statement of their own, so the two
// implementations cannot run different SQL against one database. A file's placeholders are
// written in double braces (names of tables and functions, column lists, PRAGMA values, which no
// driver binds); `fill` replaces them and refuses to leave one behind.

import { POSTGRES_STATEMENTS, SQLITE_STATEMENTS } from "./artifacts.generated.js";

function lookup(set: Readonly<Record<string, string>>, kind: string, name: string): string {
  const text = set[name];
  if (text === undefined) throw new Error(`the ${kind} statement ${name}.sql is missing from this package (run npm run build)`);
  return text;
}

/** `text` with every `{{name}}` replaced by `values[name]`; a placeholder without a value is a bug. */
export function fill(text: string, values: Readonly<Record<string, string | number>>): string {
  return text.replace(/\{\{([a-z_]+)\}\}/g, (_all, name: string) => {
    const value = values[name];
    if (value === undefined) throw new Error(`no value for the placeholder ${name} of a statement`);
    return String(value);
  });
}

/** A fragment of a statement (a column list) without its comment lines, to fill in for a placeholder. */
export function fragment(text: string): string {
  return text
    .split("\n")
    .filter((line) => !line.startsWith("--"))
    .join(" ")
    .trim();
}

/** The SQLite statement of `statements/NAME.sql`, its placeholders filled. */
export function sqliteStatement(name: string, values: Readonly<Record<string, string | number>> = {}): string {
  return fill(lookup(SQLITE_STATEMENTS, "SQLite", name), values);
}

/** The PostgreSQL statement of `statements/NAME.sql`, its placeholders filled. */
export function postgresStatement(name: string, values: Readonly<Record<string, string | number>> = {}): string {
  return fill(lookup(POSTGRES_STATEMENTS, "PostgreSQL", name), values);
}
