// toolonce for Node.js, Bun and other JavaScript runtimes: the reference design's
// `idempotent(tool, store)` with the contract of docs/contract.md, in TypeScript with no native
// code. Keys, entries and scripts are the Rust core's, so both deduplicate each other on one
// store.

export { openStore, Store } from "./open.js";
export { idempotent } from "./idempotent.js";
export type { Schema, WriteTool, ReadTool, Detailed, IdempotentTool } from "./idempotent.js";
export type { IdempotentOptions, StoreOptions, RunContext, WriteContext, CallOptions } from "./options.js";
export type { Verified } from "./layer.js";
export type { CloseOptions, CloseReport } from "./lifetime.js";
export {
  ToolonceError,
  OperationInFlight,
  OperationConflict,
  OutcomeUnknown,
  StoreUnavailable,
  InvalidArguments,
  PermanentError,
} from "./errors.js";
export type { Outcome } from "./errors.js";
export { EffectUnknown } from "./operator.js";
export type { EntryState, StoredEntry, ListOptions, EntryPage, UnreadableEntry, OperatorResolution, ResolveOptions, OperatorAnswer } from "./operator.js";

import { InvalidArguments } from "./errors.js";
import { derive } from "./key.js";
import { ordinalValue, repeatArgumentOf, repeatInvalid, takeOrdinal } from "./repeat.js";

/** Options of `idemKey`: those of the tool whose key it is, and the call's explicit ordinal. */
export interface KeyOptions {
  keyFields?: string[];
  /** The argument that carries the repeat ordinal, as the tool has it (default `repeat`; false: none). */
  repeatArgument?: string | false;
  /** The ordinal given as a call option (`run(args, ctx, { repeat })`). */
  repeat?: number;
}

/**
 * The operation key: `idem:` + the first 32 hex digits of sha256(runId NUL tool NUL RFC 8785
 * args), the args without the repeat ordinal, which follows them when beyond 1.
 */
export function idemKey(runId: string, toolName: string, args: unknown, options: KeyOptions = {}): string {
  const fail = (message: string, cause?: unknown) => new InvalidArguments(`idemKey: ${message}`, { outcome: "invalid_arguments", cause });
  let name: string | undefined;
  try {
    name = repeatArgumentOf(options.repeatArgument, "idemKey");
  } catch (e) {
    throw fail((e as Error).message, e);
  }
  const taken = takeOrdinal(toolName, args, name);
  if ("refused" in taken) throw fail(taken.refused);
  let ordinal = taken.ordinal;
  if (options.repeat !== undefined) {
    const explicit = ordinalValue(options.repeat);
    if (explicit === undefined) throw fail(repeatInvalid(toolName, "repeat", options.repeat));
    ordinal = explicit;
  }
  try {
    return derive(runId, toolName, taken.args, options.keyFields, ordinal).key;
  } catch (e) {
    throw fail((e as Error).message, e);
  }
}
