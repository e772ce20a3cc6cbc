// What a store may hold (docs/contract.md, "The layer", rule 5): every writer checks the same
// nesting limit before it stores a result or an error's detail, so that every reader, in any
// language, reads back what was stored (the Rust core's readers stop at 127 levels, and an
// entry wraps a result one level deep and an error's detail two). A result beyond the limit is
// recorded as a failure that says so; a detail beyond it is left out, the message saying so.
// Readers read a lone UTF-16 surrogate (JSON.stringify writes one for a string cut inside an
// emoji) as U+FFFD, as every other reader does.

import { LIMITS } from "./artifacts.generated.js";
import { messageOf } from "./errors.js";
import { toWellFormed } from "./canonical.js";
import type { StoredError } from "./store.js";
import { text } from "./texts.js";

/** The deepest a stored result, or a stored error's detail, may nest (a scalar is 0). */
export const MAX_STORED_DEPTH: number = LIMITS.max_stored_depth;

/** How deep the JSON text `json` nests: 0 for a scalar, 1 for `[]` or `{}`, one more per level. */
export function nestingDepth(json: string): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < json.length; i++) {
    const c = json.charCodeAt(i);
    if (inString) {
      if (c === 0x5c /* \ */) i++;
      else if (c === 0x22 /* " */) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (++depth > deepest) deepest = depth;
    } else if (c === 0x7d || c === 0x5d) {
      depth--;
    }
  }
  return deepest;
}

/** Why the result `json` cannot be stored, or undefined when it can. */
export function unstorableResult(json: string): string | undefined {
  // Nesting past the limit takes an opening and a closing bracket per level: shorter text
  // cannot, and most results are, so they skip the scan.
  if (json.length <= 2 * MAX_STORED_DEPTH) return undefined;
  const depth = nestingDepth(json);
  if (depth <= MAX_STORED_DEPTH) return undefined;
  return text("result_too_deep", { depth: String(depth), max: String(MAX_STORED_DEPTH) });
}

/** The failure recorded for a handler that ran but whose result cannot be stored, as the core words it. */
export function unstorable(tool: string, why: string): StoredError {
  return {
    message: text("unstorable", { tool, why }),
    class: "permanent",
    detail: { unstorable: why },
  };
}

/** The stored form of the error `e` thrown by a handler, as text: `{"message","class","detail"?}`. */
export function errorJson(e: unknown, errorClass: "permanent" | "transient"): string {
  let message = toWellFormed(messageOf(e));
  const error: { message: string; class: string; detail?: unknown } = { message, class: errorClass };
  const detail = e !== null && typeof e === "object" ? (e as { detail?: unknown }).detail : undefined;
  if (detail !== undefined) {
    let json: string | undefined;
    try {
      json = JSON.stringify(detail);
    } catch (err) {
      message = text("detail_not_json", { message, error: messageOf(err) });
    }
    if (json !== undefined) {
      const depth = nestingDepth(json);
      if (depth <= MAX_STORED_DEPTH) {
        error.detail = JSON.parse(json);
      } else {
        message = text("detail_too_deep", { message, depth: String(depth), max: String(MAX_STORED_DEPTH) });
        error.detail = { unstorable: "detail too deep", depth };
      }
    }
    error.message = message;
  }
  return JSON.stringify(error);
}

const LONE_SURROGATE_ESCAPE = /\\u[dD][89abAB]/;

/** `value` with every lone surrogate in its strings (keys too) replaced by U+FFFD. */
function wellFormed(value: unknown): unknown {
  if (typeof value === "string") return toWellFormed(value);
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map(wellFormed);
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    // Defined, not assigned: a member named "__proto__" stays a member.
    Object.defineProperty(out, toWellFormed(k), { value: wellFormed(v), enumerable: true, writable: true, configurable: true });
  }
  return out;
}

/** Parses stored JSON text as every reader does: lone surrogates are read as U+FFFD. */
export function readJson(json: string): unknown {
  const value: unknown = JSON.parse(json);
  return LONE_SURROGATE_ESCAPE.test(json) ? wellFormed(value) : value;
}
