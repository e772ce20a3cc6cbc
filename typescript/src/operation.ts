// What a framework adapter hands the tool it wraps about the operation the call performs: the
// key (the same for every duplicate) and the header to send it downstream with, so the service
// the tool calls can drop a second attempt the store cannot see (a takeover after a crash).

import type { WriteContext } from "./options.js";

/** The operation a wrapped tool's call performs; adapters hand it as a `toolonce` field. */
export interface Operation {
  /** The operation key, `idem:` + 32 hex digits: what `idemKey(scope, tool, args)` gives. */
  readonly key: string;
  /** `["Idempotency-Key", key]`, to send downstream. */
  readonly idempotencyHeader: readonly ["Idempotency-Key", string];
  /** Whether an earlier attempt may have taken effect (a takeover after a crash). */
  readonly mayHaveRunBefore: boolean;
}

/** The operation of the write running with `ctx`. */
export function operationOf(ctx: WriteContext): Operation {
  return Object.freeze({ key: ctx.idem, idempotencyHeader: ctx.idempotencyHeader, mayHaveRunBefore: ctx.mayHaveRunBefore });
}

/**
 * The operation handed in `handed.toolonce` (the framework's second argument to the tool: the
 * AI SDK's execute options, Mastra's execute context, LangChain's tool runtime), typed; throws
 * when there is none (the tool was not called through a toolonce adapter).
 */
export function operation(handed: unknown): Operation {
  const found = handed !== null && typeof handed === "object" ? (handed as { toolonce?: unknown }).toolonce : undefined;
  if (found === null || typeof found !== "object" || typeof (found as Operation).key !== "string") {
    throw new TypeError("toolonce: operation(...) found no operation: the tool was not called through a toolonce adapter (idempotentTool, idempotentMiddleware)");
  }
  return found as Operation;
}
