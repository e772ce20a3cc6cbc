// The repeat ordinal (docs/contract.md, "Intended repeats"; the vectors are
// crates/toolonce/tests/data/key_repeats.json): an optional top-level argument, `repeat` unless
// configured otherwise, by which a model says it performs the same action again on purpose.
// It is taken out of the arguments before they are keyed, fingerprinted or handed to the tool;
// 1 (or absent, or null) is the first time and keeps the key every earlier version derived,
// 2..=max is part of the key. Also what a replay tells the model, and the schema property.

import { LIMITS } from "./artifacts.generated.js";
import { text } from "./texts.js";

/** The default name of the argument, and the largest ordinal: the core's limits, not a copy. */
export const DEFAULT_REPEAT_ARGUMENT: string = LIMITS.repeat.default_name;
export const MAX_REPEAT: number = LIMITS.repeat.max;

/** The arguments without the ordinal and the ordinal, or why the ordinal is refused. */
export type Taken = { args: unknown; ordinal: number } | { refused: string };

/** The ordinal `value` stands for (absent and null: 1), or undefined when it is none. */
export function ordinalValue(value: unknown): number | undefined {
  if (value === undefined || value === null) return 1;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 1 || value > MAX_REPEAT) return undefined;
  return value;
}

/** `value` as compact JSON of at most 40 characters, then `…`: what the refusal quotes. */
function got(value: unknown): string {
  let json: string | undefined;
  try {
    json = JSON.stringify(value);
  } catch {
    json = undefined;
  }
  if (json === undefined) json = String(value);
  const chars = Array.from(json);
  return chars.length <= 40 ? json : chars.slice(0, 40).join("") + "…";
}

/** The refusal of `value` as the ordinal `name` of `tool`. */
export function repeatInvalid(tool: string, name: string, value: unknown): string {
  return text("repeat_invalid", { repeat: name, max: String(MAX_REPEAT), got: got(value), tool });
}

/**
 * Takes the ordinal `name` (undefined: none is taken) out of the top level of `args`. The
 * arguments are copied only when they hold it; nested members of that name are the tool's own.
 */
export function takeOrdinal(tool: string, args: unknown, name: string | undefined): Taken {
  if (name === undefined || args === null || typeof args !== "object" || Array.isArray(args)) return { args, ordinal: 1 };
  if (!Object.prototype.hasOwnProperty.call(args, name)) return { args, ordinal: 1 };
  const value = (args as Record<string, unknown>)[name];
  const ordinal = ordinalValue(value);
  if (ordinal === undefined) return { refused: repeatInvalid(tool, name, value) };
  // Rest properties are defined, not assigned: a member named "__proto__" stays a member.
  const { [name]: _ordinal, ...rest } = args as Record<string, unknown>;
  return { args: rest, ordinal };
}

/** What the key text gets after the arguments for an ordinal beyond 1 (NUL cannot be in canonical JSON). */
export function ordinalSuffix(ordinal: number): string {
  return ordinal > 1 ? "\u0000toolonce/repeat\u0000" + String(ordinal) : "";
}

/** The time `ms` (since the epoch) as ISO 8601 UTC to the second; unknown when the store kept none. */
function isoSecond(ms: number | undefined): string {
  if (ms === undefined || !Number.isFinite(ms)) return text("time_unrecorded");
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
}

/** What a replay is, for the note. */
export interface Replay {
  tool: string;
  key: string;
  failed: boolean;
  /** When the outcome was recorded, ms since the epoch. */
  settledAt: number | undefined;
  /** The argument's name, or undefined when the tool has none. */
  repeat: string | undefined;
  ordinal: number;
}

/** The note a model reads with a replayed result or error: what it is, when, and how to repeat on purpose. */
export function replayNote(r: Replay): string {
  const values = { tool: r.tool, when: isoSecond(r.settledAt), key: r.key };
  const head = r.failed ? text("replayed_failure", values) : text("replayed", values);
  return head + " " + repeatTail(r);
}

/** How to repeat on purpose: not at all without the argument, nor past the largest ordinal. */
function repeatTail(r: Replay): string {
  if (r.repeat === undefined) return text("repeat_off");
  if (r.ordinal >= MAX_REPEAT) return text("repeat_limit", { repeat: r.repeat, max: String(MAX_REPEAT) });
  return text("repeat_hint", { tool: r.tool, repeat: r.repeat, next: String(r.ordinal + 1) });
}

/**
 * A thrown replayed failure with its note after the message, for a framework that hands the
 * model an error's message and has no other place for it; any other error is left as it is.
 */
export function withNote(error: unknown): unknown {
  const e = error as { note?: unknown; message?: unknown } | null;
  if (e !== null && typeof e === "object" && typeof e.note === "string" && typeof e.message === "string") e.message = `${e.message}\n\n${e.note}`;
  return error;
}

/** The JSON Schema property a model sees for the ordinal. */
export function repeatProperty(): Record<string, unknown> {
  return { type: "integer", minimum: 1, maximum: MAX_REPEAT, description: text("repeat_description") };
}

/** Checks the option `repeatArgument` (`where` names the caller): a name, or false for none. */
export function repeatArgumentOf(value: unknown, where: string): string | undefined {
  if (value === undefined) return DEFAULT_REPEAT_ARGUMENT;
  if (value === false) return undefined;
  if (typeof value !== "string" || value === "" || value.includes("\u0000")) {
    throw new TypeError(`${where}: repeatArgument must be a non-empty argument name without NUL, or false for none`);
  }
  return value;
}
