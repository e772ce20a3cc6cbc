// Whether an outcome can be stored so that every reader can read it back, and the stored form
// of a thrown error. The Rust core reads entries with serde_json, which refuses text nested
// 128 levels deep and lone surrogates (JSON.stringify writes both): a result this side could
// write but the core could not read would be a corrupt entry there, so it is refused here,
// where the layer records it as a permanent failure instead.

import { messageOf } from "./errors.js";
import { toWellFormed } from "./canonical.js";

/** The deepest JSON text the core's reader accepts: 127 levels of arrays and objects. */
const READER_DEPTH = 127;

/**
 * Why the JSON text `json`, stored `around` levels deep inside an entry, cannot be read back by
 * every reader; undefined when it can.
 */
export function storable(json: string, around: number): string | undefined {
  const limit = READER_DEPTH - around;
  let depth = 0;
  let inString = false;
  for (let i = 0; i < json.length; i++) {
    const c = json.charCodeAt(i);
    if (inString) {
      if (c === 0x5c /* \ */) {
        // JSON.stringify escapes a lone surrogate as \udXXX, and writes paired ones as themselves.
        if (json.charCodeAt(i + 1) === 0x75 /* u */ && (json[i + 2] === "d" || json[i + 2] === "D") && /[89abAB]/.test(json[i + 3] ?? "")) {
          return "it holds a string with a lone UTF-16 surrogate, which JSON readers elsewhere refuse";
        }
        i++;
      } else if (c === 0x22 /* " */) {
        inString = false;
      }
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (++depth > limit) return `it nests deeper than ${limit} levels`;
    } else if (c === 0x7d || c === 0x5d) {
      depth--;
    }
  }
  return undefined;
}

/** The stored form of the error `e` thrown by a handler: `{"message","class","detail"?}` as text. */
export function errorJson(e: unknown, errorClass: "permanent" | "transient"): string {
  const error: { message: string; class: string; detail?: unknown } = { message: toWellFormed(messageOf(e)), class: errorClass };
  const detail = e !== null && typeof e === "object" ? (e as { detail?: unknown }).detail : undefined;
  if (detail !== undefined) {
    try {
      const text = JSON.stringify(detail);
      // Detail that is not JSON, or that readers could not read back, is not kept; the message is.
      if (text !== undefined && storable(text, 2) === undefined) error.detail = JSON.parse(text);
    } catch {
      // Left out, as above.
    }
  }
  return JSON.stringify(error);
}
