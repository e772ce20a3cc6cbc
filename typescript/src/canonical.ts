// The canonical text of arguments (docs/contract.md, "Canonical arguments"): RFC 8785 (JCS)
// with members sorted at every depth by UTF-16 code units, no whitespace, the shortest string
// escaping and ECMAScript number text. A value is read the way JSON.stringify reads it
// (toJSON, dropped undefined members, non-finite numbers as null), so the text is what the
// core makes of the JSON the caller would send. The key and the fingerprint hash this text,
// here, in the Rust core and in every other implementation: the shared vectors pin it.
//
// The core's one exception to RFC 8785, integers beyond 2^53 − 1 written with their exact
// digits, cannot arise here: a JavaScript number is a double, and its shortest text is the
// very digits the core writes for the integer it reads back (a BigInt is refused).

/** The deepest nesting accepted, in levels of arrays and objects, as in the core. */
export const MAX_DEPTH = 128;

/** Arguments that have no canonical text (too deep, a BigInt, a lone surrogate). */
export class NotCanonical extends Error {
  constructor(message: string) {
    super(message);
    this.name = "NotCanonical";
  }
}

type WellFormed = { isWellFormed(): boolean; toWellFormed(): string };

/** Whether `s` has no lone surrogate: text that UTF-8, and so every other language, can carry. */
export function isWellFormed(s: string): boolean {
  return (s as unknown as WellFormed).isWellFormed();
}

/** `s` with every lone surrogate replaced by U+FFFD. */
export function toWellFormed(s: string): string {
  return (s as unknown as WellFormed).toWellFormed();
}

/** The canonical text of `value`, nesting at most `maxDepth` levels. */
export function canonicalize(value: unknown, maxDepth: number = MAX_DEPTH): string {
  const out = write(value, "", 0, maxDepth);
  // Nothing to write at the top (undefined, a function): the core gets `null`.
  return out === undefined ? "null" : out;
}

/** What JSON.stringify serializes in place of `value` (toJSON, boxed primitives). */
function toJsonValue(value: unknown, key: string): unknown {
  if (value !== null && typeof value === "object") {
    const toJSON = (value as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === "function") value = toJSON.call(value, key);
  } else if (typeof value === "bigint") {
    const toJSON = (BigInt.prototype as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === "function") value = toJSON.call(value, key);
  }
  if (value instanceof Number || value instanceof String || value instanceof Boolean) return value.valueOf();
  return value;
}

function writeString(s: string): string {
  if (!isWellFormed(s)) throw new NotCanonical("a string holds a lone UTF-16 surrogate, which JSON text elsewhere cannot carry");
  return JSON.stringify(s);
}

/** The text of `value` at `depth`, or undefined where JSON.stringify would leave it out. */
function write(raw: unknown, key: string, depth: number, maxDepth: number): string | undefined {
  // Strings and finite numbers, most of every argument, have no toJSON to consult: written
  // here without the lookups of toJsonValue.
  if (typeof raw === "string") return writeString(raw);
  if (typeof raw === "number") return JSON.stringify(raw);
  const value = toJsonValue(raw, key);
  switch (typeof value) {
    case "string":
      return writeString(value);
    case "number":
      // JSON.stringify writes the ECMAScript shortest text, `0` for -0, `null` for NaN and ±Infinity.
      return JSON.stringify(value);
    case "boolean":
      return value ? "true" : "false";
    case "bigint":
      throw new NotCanonical("a BigInt is not JSON (give it as a string or a number)");
    case "undefined":
    case "function":
    case "symbol":
      return undefined;
  }
  if (value === null) return "null";
  if (depth >= maxDepth) throw new NotCanonical(`the arguments nest deeper than ${maxDepth} levels (or refer to themselves)`);
  if (Array.isArray(value)) {
    let out = "[";
    for (let i = 0; i < value.length; i++) {
      if (i > 0) out += ",";
      out += write(value[i], String(i), depth + 1, maxDepth) ?? "null";
    }
    return out + "]";
  }
  const object = value as Record<string, unknown>;
  const names = Object.keys(object);
  // The default sort compares UTF-16 code units, which is RFC 8785's order; names written in
  // that order already (most objects: few members, written in order) skip the sort.
  if (!sorted(names)) names.sort();
  let out = "{";
  let first = true;
  for (let i = 0; i < names.length; i++) {
    const name = names[i] as string;
    const member = write(object[name], name, depth + 1, maxDepth);
    if (member === undefined) continue;
    if (!first) out += ",";
    first = false;
    out += writeString(name) + ":" + member;
  }
  return out + "}";
}

/** Whether `names` are in ascending UTF-16 code unit order (`<` on strings compares so). */
function sorted(names: string[]): boolean {
  for (let i = 1; i < names.length; i++) if ((names[i - 1] as string) > (names[i] as string)) return false;
  return true;
}
