// The operation key and the fingerprint (docs/contract.md, "The operation key"):
// key = "idem:" + the first 32 hex digits of SHA-256(scope NUL tool NUL canonical(arguments)),
// computed over the projection on the key fields when a tool declares them; the fingerprint is
// the SHA-256 of the canonical text of all the arguments. A repeat ordinal beyond 1 (repeat.ts)
// follows the arguments' text in the key, and is never part of the fingerprint. Same text, same bytes, same key as
// the Rust core: the shared vectors (artifacts/keys.json) check it.

import { LIMITS } from "./artifacts.generated.js";
import { MAX_DEPTH, canonicalize } from "./canonical.js";
import { hexDigest } from "./digest.js";
import { ordinalSuffix } from "./repeat.js";

/** A key, a part of one, or a key field that cannot be used. */
export class InvalidKeyPart extends Error {
  constructor(message: string) {
    super(message);
    this.name = "InvalidKeyPart";
  }
}

/** The key and the fingerprint of one call. */
export interface Derived {
  key: string;
  fingerprint: string;
}

const KEY_SHAPE = /^idem:[0-9a-f]{32}$/;

/** Whether `text` has the shape of a key: `idem:` and 32 lowercase hex digits. */
export function isKey(text: string): boolean {
  return KEY_SHAPE.test(text);
}

function checkPart(what: string, part: unknown): asserts part is string {
  if (typeof part !== "string" || part === "") throw new InvalidKeyPart(`the ${what} of a key must be a non-empty string`);
  if (part.includes("\u0000")) throw new InvalidKeyPart(`the ${what} of a key must not contain NUL`);
}

function keyOf(scope: string, tool: string, canonical: string): string {
  const hex = hexDigest("sha256", scope + "\u0000" + tool + "\u0000" + canonical);
  return LIMITS.key_prefix + hex.slice(0, 32);
}

/** Checks RFC 6901 syntax: empty, or `/`-separated tokens whose only escapes are `~0` and `~1`. */
export function checkKeyFields(pointers: readonly string[]): void {
  if (pointers.length === 0) throw new InvalidKeyPart("no key fields given: at least one is needed");
  for (const p of pointers) {
    if (typeof p !== "string") throw new InvalidKeyPart("a key field is a JSON Pointer string");
    if (p !== "" && !p.startsWith("/")) throw new InvalidKeyPart(`key field ${JSON.stringify(p)}: a JSON Pointer is empty or starts with "/"`);
    if (/~(?![01])/.test(p)) throw new InvalidKeyPart(`key field ${JSON.stringify(p)}: "~" must be followed by "0" or "1"`);
  }
}

const INDEX = /^(0|[1-9][0-9]*)$/;

/** The value `pointer` finds in `args` (as JSON sees it), or undefined. */
function resolve(args: unknown, pointer: string): unknown {
  if (pointer === "") return args;
  let at: unknown = args;
  for (const raw of pointer.slice(1).split("/")) {
    const token = raw.replace(/~1/g, "/").replace(/~0/g, "~");
    if (Array.isArray(at)) {
      if (!INDEX.test(token)) return undefined;
      at = at[Number(token)];
    } else if (at !== null && typeof at === "object" && Object.prototype.hasOwnProperty.call(at, token)) {
      at = (at as Record<string, unknown>)[token];
    } else {
      return undefined;
    }
    if (at === undefined || typeof at === "function" || typeof at === "symbol") return undefined;
  }
  return at;
}

/** The object mapping each pointer to the value it finds; a pointer that finds nothing is left out. */
export function project(args: unknown, pointers: readonly string[]): Record<string, unknown> {
  const projection: Record<string, unknown> = Object.create(null) as Record<string, unknown>; // "__proto__" is a field like any other
  for (const p of pointers) {
    const found = resolve(args, p);
    if (found !== undefined) projection[p] = found;
  }
  return projection;
}

/**
 * Derives the key and the fingerprint of `tool` called in `scope` with `args` (the ordinal
 * already taken out), the `ordinal`-th time on purpose.
 */
export function derive(scope: string, tool: string, args: unknown, keyFields?: readonly string[], ordinal = 1): Derived {
  checkPart("scope", scope);
  checkPart("tool", tool);
  const full = canonicalize(args);
  const fingerprint = hexDigest("sha256", full);
  if (keyFields === undefined) return { key: keyOf(scope, tool, full + ordinalSuffix(ordinal)), fingerprint };
  // The projection wraps values one level deeper than they were, hence one more level allowed.
  return { key: keyOf(scope, tool, canonicalize(project(args, keyFields), MAX_DEPTH + 1) + ordinalSuffix(ordinal)), fingerprint };
}
