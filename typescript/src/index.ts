// toolonce for Node.js, Bun and other JavaScript runtimes: the reference design's
// `idempotent(tool, store)` with the contract of docs/contract.md, in TypeScript with no native
// code. Keys, entries and scripts are the Rust core's, so both deduplicate each other on one
// store.

export { openStore, Store } from "./open.js";
export { idempotent } from "./idempotent.js";
export type { Schema, WriteTool, ReadTool, Detailed, IdempotentTool } from "./idempotent.js";
export type { IdempotentOptions, StoreOptions, RunContext, WriteContext } from "./options.js";
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
export type { EntryState, StoredEntry, ListOptions, EntryPage, OperatorResolution, ResolveOptions, OperatorAnswer } from "./operator.js";

import { InvalidArguments } from "./errors.js";
import { derive } from "./key.js";

/** The operation key: `idem:` + the first 32 hex digits of sha256(runId NUL tool NUL RFC 8785 args). */
export function idemKey(runId: string, toolName: string, args: unknown, options: { keyFields?: string[] } = {}): string {
  try {
    return derive(runId, toolName, args, options.keyFields).key;
  } catch (e) {
    throw new InvalidArguments(`idemKey: ${(e as Error).message}`, { outcome: "invalid_arguments", cause: e });
  }
}
