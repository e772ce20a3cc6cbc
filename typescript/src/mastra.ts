// `toolonce/mastra`: wraps a Mastra tool (made by `createTool` from @mastra/core) so its execute
// takes effect at most once per (scope, tool id, input). The scope is the agent's resource and
// thread (or a workflow's run id, which a resumed run keeps), or the caller's. It imports nothing
// from Mastra: the wrapped tool is a copy of the original (same prototype and fields, Mastra's
// own marker included) whose execute goes through `idempotent` first; the original execute
// gets the operation (`context.toolonce`) beside Mastra's own context. The model sees the
// optional repeat ordinal (issue 43) in the tool's input schema (a Standard JSON Schema, which
// Mastra sends as it is) and a replay's note through the tool's toModelOutput, which Mastra
// calls with the result (the note is carried for an object result, found by its identity).

import { PendingNotes, toModelOutputWith } from "./ai-sdk-output.js";
import { InvalidArguments, messageOf } from "./errors.js";
import { idempotent } from "./idempotent.js";
import { Store } from "./open.js";
import { operationOf } from "./operation.js";
import { type IdempotentOptions, normalize } from "./options.js";
import { withNote } from "./repeat.js";
import { repeatFor } from "./schema-json.js";
import { standardWithRepeat } from "./mastra-schema.js";

export { operation } from "./operation.js";
export type { Operation } from "./operation.js";

/** The context a Mastra tool's execute gets, as far as it is read here. */
export interface MastraContextLike {
  agent?: { threadId?: string; resourceId?: string; toolCallId?: string; [extra: string]: unknown };
  workflow?: { runId?: string; [extra: string]: unknown };
  [extra: string]: unknown;
}

/** A Standard Schema (what Mastra keeps as a tool's inputSchema). */
interface StandardSchemaLike {
  "~standard": {
    validate(value: unknown): { value?: unknown; issues?: readonly { message: string }[] } | Promise<{ value?: unknown; issues?: readonly { message: string }[] }>;
  };
}

/** Options of `idempotentTool`. */
export interface MastraOptions {
  /** Where the operations are claimed and their results kept. */
  store: Store;
  /**
   * The scope of the keys: a string, or a function of the execute context. Default
   * (`mastraScope`): the agent's resource and thread (`memory: { thread, resource }`), else the
   * workflow's run id; a call with neither is refused with InvalidArguments. Never the tool
   * call id.
   */
  scope?: string | ((context: MastraContextLike) => string);
  /** The options of the wrapped write (lease, retention, inFlight, onExpired, keyFields). */
  options?: IdempotentOptions;
}

const KNOWN = new Set(["store", "scope", "options"]);

/**
 * The default scope: an agent's (resource, thread) pair, as JSON text, since the resource (the
 * user) is a principal boundary and a thread id is only unique within it; else a workflow's run.
 */
export function mastraScope(context: MastraContextLike): string {
  const thread = context.agent?.threadId;
  if (typeof thread === "string" && thread !== "") {
    const resource = context.agent?.resourceId;
    return JSON.stringify([typeof resource === "string" ? resource : null, thread]);
  }
  const id = context.workflow?.runId;
  if (typeof id !== "string" || id === "") {
    throw new InvalidArguments(
      "toolonce: this Mastra tool call has neither a thread id (agent.generate(..., { memory: { thread, resource } })) nor a workflow run id to scope it; give idempotentTool a scope",
      { outcome: "invalid_arguments" },
    );
  }
  return id;
}

function schemaOf(tool: { id: string; inputSchema?: unknown }) {
  const standard = (tool.inputSchema as StandardSchemaLike | undefined)?.["~standard"];
  if (standard === undefined || typeof standard.validate !== "function") return undefined;
  // Validated before anything is claimed, and the key is on the validated input.
  return {
    async parse(input: unknown) {
      const checked = await standard.validate(input);
      if (checked.issues !== undefined && checked.issues.length > 0) {
        throw new Error(checked.issues.map((i) => messageOf(i.message)).join("; "));
      }
      return checked.value;
    },
  };
}

/**
 * The Mastra tool `tool` with its execute running at most once per (scope, tool id, input): a
 * duplicate (the model asking again, a retried run on the same thread, a resumed workflow) gets
 * the first call's result. The original execute gets `context.toolonce` (the operation: its
 * `key`, `idempotencyHeader`, `mayHaveRunBefore`; `operation(context)` types it) to send
 * downstream. Refusals (in flight, unknown, store down) throw the ToolonceError.
 */
export function idempotentTool<T extends { id: string; execute?: (input: any, context: any) => unknown; inputSchema?: unknown; toModelOutput?: unknown }>(
  tool: T,
  config: MastraOptions,
): T {
  if (tool === null || typeof tool !== "object") throw new TypeError("idempotentTool(tool, config): tool must be a Mastra tool");
  const execute = tool.execute;
  if (typeof tool.id !== "string" || tool.id === "") throw new TypeError("idempotentTool: the tool has no id");
  if (typeof execute !== "function") throw new TypeError(`idempotentTool: the tool ${tool.id} has no execute function`);
  if (config === null || typeof config !== "object") throw new TypeError("idempotentTool(tool, config): config must be an object");
  for (const key of Object.keys(config)) {
    if (!KNOWN.has(key)) throw new TypeError(`idempotentTool: unknown option ${JSON.stringify(key)}; expected store, scope or options`);
  }
  const scope = config.scope ?? mastraScope;
  if (typeof scope !== "function" && (typeof scope !== "string" || scope === "")) {
    throw new TypeError(`idempotentTool(${tool.id}): scope must be a non-empty string or a function of the execute context`);
  }
  if (!(config.store instanceof Store)) throw new TypeError(`idempotentTool(${tool.id}): store must come from openStore()`);
  const { repeatArgument } = normalize({ ...config.store.defaults, ...config.options }, `idempotentTool(${tool.id})`);
  const repeat = repeatFor(tool.id, tool.inputSchema, repeatArgument);
  const write = idempotent(
    {
      kind: "write",
      name: tool.id,
      schema: schemaOf(tool),
      async run(input: unknown, ctx) {
        // A copy keeps the context's prototype and fields; Mastra's own object is not changed.
        const context = (ctx.context ?? {}) as object;
        const handed = Object.assign(Object.create(Object.getPrototypeOf(context)) as object, context, { toolonce: operationOf(ctx) });
        return execute.call(tool, input, handed);
      },
    },
    config.store,
    { ...config.options, repeatArgument: repeat ?? false },
  );
  const notes = new PendingNotes();
  const original = typeof tool.toModelOutput === "function" ? (tool.toModelOutput as (arg: unknown) => unknown).bind(tool) : undefined;
  const wrapped = Object.assign(Object.create(Object.getPrototypeOf(tool)) as object, tool) as Record<string, unknown>;
  wrapped.execute = async (input: unknown, context: MastraContextLike = {}) => {
    const runId = typeof scope === "function" ? scope(context) : scope;
    const answer = await write.runDetailed(input, { runId, context });
    if ("error" in answer) throw withNote(answer.error);
    if (answer.note !== undefined) notes.remember(undefined, answer.result, answer.note);
    return answer.result;
  };
  wrapped.toModelOutput = toModelOutputWith(notes, original);
  if (repeat !== undefined) wrapped.inputSchema = standardWithRepeat(tool.inputSchema, repeat);
  return wrapped as T;
}
