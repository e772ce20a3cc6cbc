// The canonical text of arguments (docs/contract.md, "Canonical arguments"): RFC 8785 (JCS)
// with members sorted at every depth by UTF-16 code units, no whitespace, the shortest string
// escaping and ECMAScript number text. The key and the fingerprint hash this text, here, in the
// Rust core and in every other implementation: the shared vectors pin it.
//
// Only what JSON represents exactly is keyed: plain objects (a null prototype too), arrays,
// strings, numbers within ±(2^53 − 1) or not integral, BigInts of 64 bits, valid Dates (as their
// ISO text, which is what Python's pydantic and every JSON encoder send), booleans and null.
// Everything JSON.stringify would write as something else (NaN as null, a Map as {}, undefined
// in an array as null) or leave out (a function, a symbol) is refused with the path to it,
// never converted: converted, distinct calls would share one key and get each other's results.
// An undefined member is left out, as JSON does: the tool reads it as absent, as it would in
// Rust or Python.
//
// Numbers (docs/contract.md, "Canonical arguments"): the core keys an integer literal by its
// exact digits up to 64 bits. A JavaScript number beyond ±(2^53 − 1) is always integral and
// has lost the digits it was read from (9007199254740993 arrives as 9007199254740992, and 1e23
// cannot say whether it was `1e23` or `100000000000000000000000`), so it is refused; a BigInt
// keeps its digits and is keyed as the core keys the integer. The shared number vectors
// (crates/toolonce/tests/data/key_numbers.json) pin both.

import { LIMITS } from "./artifacts.generated.js";
import { text } from "./texts.js";
import { unkeyable } from "./unkeyable.js";

/** The deepest nesting accepted, in levels of arrays and objects, as in the core. */
export const MAX_DEPTH: number = LIMITS.canonical.max_depth;

/** Arguments that have no canonical text (too deep, not JSON, a lone surrogate). */
export class NotCanonical extends Error {
  constructor(message: string) {
    super(message);
    this.name = "NotCanonical";
  }
}

/** A value refused where it was found: the reason, and the path to it, innermost part first. */
class Refused {
  readonly within: string[] = [];
  constructor(readonly reason: string) {}
}

/** Nesting deeper than the limit, or a cycle: canonicalize tells which. */
class TooDeep {}

const TOO_DEEP = new TooDeep();

type WellFormed = { isWellFormed(): boolean; toWellFormed(): string };

/** Whether `s` has no lone surrogate: text that UTF-8, and so every other language, can carry. */
export function isWellFormed(s: string): boolean {
  return (s as unknown as WellFormed).isWellFormed();
}

/** `s` with every lone surrogate replaced by U+FFFD. */
export function toWellFormed(s: string): string {
  return (s as unknown as WellFormed).toWellFormed();
}

/**
 * The canonical text of `value`, nesting at most `maxDepth` levels; a refusal names the path to
 * the value from `root`.
 */
export function canonicalize(value: unknown, maxDepth: number = MAX_DEPTH, root = "args"): string {
  try {
    // Nothing to write at the top (no arguments): the core gets `null`.
    return write(value, 0, maxDepth) ?? "null";
  } catch (e) {
    if (e instanceof Refused) throw new NotCanonical(`${root}${e.within.reverse().join("")}: ${e.reason}`);
    if (!(e instanceof TooDeep)) throw e;
    const cycle = findCycle(value, root, 2 * maxDepth);
    if (cycle !== undefined) throw new NotCanonical(`${cycle.at}: the arguments refer to themselves (a cycle back to ${cycle.back})`);
    throw new NotCanonical(`the arguments nest deeper than ${maxDepth} levels`);
  }
}

function writeString(s: string): string {
  if (!isWellFormed(s)) throw new Refused("a string holds a lone UTF-16 surrogate, which JSON text elsewhere cannot carry");
  return JSON.stringify(s);
}

/** Beyond this magnitude every double is integral and stands for many integer texts. */
const SAFE = Number.MAX_SAFE_INTEGER;

function writeNumber(n: number): string {
  // JSON.stringify writes the ECMAScript shortest text, `0` for -0, and `null` for NaN and ±Infinity.
  if (n <= SAFE && n >= -SAFE) return JSON.stringify(n);
  if (!Number.isFinite(n)) throw new Refused(`${n} is not a JSON number (JSON.stringify writes null); pass a number or null`);
  throw new Refused(
    `${n} is beyond ±(2^53 − 1), where a JavaScript number has lost the digits it was read from (neighbouring integers share it); ` +
      "pass an integer as a BigInt or a string, and declare such ids as strings in the tool's schema",
  );
}

/** The smallest and greatest integers the core keys by their digits (i64 and u64). */
const LEAST = -(2n ** 63n);
const GREATEST = 2n ** 64n - 1n;

function writeBigInt(n: bigint): string {
  if (n >= LEAST && n <= GREATEST) return n.toString();
  throw new Refused(text("inexact_integer", { integer: n.toString() }));
}

/** A valid Date as its ISO text (what it is sent as); an invalid one has none. */
function writeDate(date: Date): string {
  if (Number.isNaN(date.getTime())) throw new Refused("an invalid Date cannot be keyed (JSON.stringify writes null)");
  return JSON.stringify(date.toISOString());
}

/** The path part of member `name`: `.name`, or `["name"]` when it is no identifier. */
function member(name: string): string {
  return /^[A-Za-z_$][\w$]*$/.test(name) ? "." + name : "[" + JSON.stringify(name) + "]";
}

/** `e` with `part` of the path prepended, if it is a refusal. */
function within(e: unknown, part: string): unknown {
  if (e instanceof Refused) e.within.push(part);
  return e;
}

/** The text of `value` at `depth`, or undefined for an undefined member (left out, as JSON does). */
function write(value: unknown, depth: number, maxDepth: number): string | undefined {
  // Strings and numbers, most of every argument, first.
  if (typeof value === "string") return writeString(value);
  if (typeof value === "number") return writeNumber(value);
  switch (typeof value) {
    case "boolean":
      return value ? "true" : "false";
    case "undefined":
      return undefined;
    case "bigint":
      return writeBigInt(value);
    case "function":
      throw new Refused("a function is not JSON (JSON.stringify leaves it out)");
    case "symbol":
      throw new Refused("a symbol is not JSON (JSON.stringify leaves it out)");
  }
  if (value === null) return "null";
  if (value instanceof Date && Object.getPrototypeOf(value) === Date.prototype) return writeDate(value);
  const reason = unkeyable(value as object);
  if (reason !== undefined) throw new Refused(reason);
  if (depth >= maxDepth) throw TOO_DEEP;
  return Array.isArray(value) ? writeArray(value, depth, maxDepth) : writeObject(value as Record<string, unknown>, depth, maxDepth);
}

function writeArray(array: unknown[], depth: number, maxDepth: number): string {
  let out = "[";
  let i = 0;
  try {
    for (; i < array.length; i++) {
      if (i > 0) out += ",";
      const item = write(array[i], depth + 1, maxDepth);
      if (item === undefined) throw new Refused("undefined in an array is not JSON (JSON.stringify writes null); pass null");
      out += item;
    }
  } catch (e) {
    throw within(e, `[${i}]`);
  }
  return out + "]";
}

function writeObject(object: Record<string, unknown>, depth: number, maxDepth: number): string {
  const names = Object.keys(object);
  // The default sort compares UTF-16 code units, which is RFC 8785's order; names written in
  // that order already (most objects: few members, written in order) skip the sort.
  if (!sorted(names)) names.sort();
  let out = "{";
  let first = true;
  let name = "";
  try {
    for (let i = 0; i < names.length; i++) {
      name = names[i] as string;
      const text = write(object[name], depth + 1, maxDepth);
      if (text === undefined) continue;
      if (!first) out += ",";
      first = false;
      out += writeString(name) + ":" + text;
    }
  } catch (e) {
    throw within(e, member(name));
  }
  return out + "}";
}

/**
 * The first reference back to an enclosing object or array in `value`, as two paths: where it
 * is, and the value it refers back to, looked for within `limit` levels. Each value is explored
 * once, so values shared without a cycle cost once.
 */
function findCycle(value: unknown, root: string, limit: number): { at: string; back: string } | undefined {
  const open = new Map<object, string>();
  const explored = new Set<object>();
  const visit = (v: unknown, at: string, depth: number): { at: string; back: string } | undefined => {
    // Past `limit` levels the arguments are too deep whatever else they are.
    if (v === null || typeof v !== "object" || depth > limit) return undefined;
    const back = open.get(v);
    if (back !== undefined) return { at, back };
    if (explored.has(v)) return undefined;
    open.set(v, at);
    const children: [string, unknown][] = Array.isArray(v)
      ? v.map((item, i) => [`${at}[${i}]`, item])
      : Object.keys(v).map((name) => [at + member(name), (v as Record<string, unknown>)[name]]);
    for (const [path, child] of children) {
      const found = visit(child, path, depth + 1);
      if (found !== undefined) return found;
    }
    open.delete(v);
    explored.add(v);
    return undefined;
  };
  return visit(value, root, 0);
}

/** Whether `names` are in ascending UTF-16 code unit order (`<` on strings compares so). */
function sorted(names: string[]): boolean {
  for (let i = 1; i < names.length; i++) if ((names[i - 1] as string) > (names[i] as string)) return false;
  return true;
}
