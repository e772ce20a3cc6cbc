// `toolonce/ai-sdk`: wraps an AI SDK `tool({ ..., execute })` so its execute takes effect at most
// once per (scope, tool name, input). The scope is the caller's (the agent run, the
// conversation); the tool call id is deliberately not part of the identity: a model that asks
// again gets a new toolCallId, and that second call is exactly the duplicate to stop. It
// imports nothing from the AI SDK: the tool keeps every field, only `execute` is wrapped, and
// the original execute gets the operation (`options.toolonce`) beside the SDK's own options.
// Tested with AI SDK 5, 6 and 7, which hand the run's context to execute differently. The model
// sees the optional repeat ordinal in the input schema (ai-sdk-schema.ts) and a replay's note in
// the tool's message (ai-sdk-output.ts); a replayed failure's note follows its error message.

import { PendingNotes, toModelOutputWith } from "./ai-sdk-output.js";
import { schemaWithRepeat } from "./ai-sdk-schema.js";
import { repeatFor } from "./schema-json.js";
import { InvalidArguments, messageOf } from "./errors.js";
import { idempotent } from "./idempotent.js";
import { Store } from "./open.js";
import { type Operation, operationOf } from "./operation.js";
import { type IdempotentOptions, normalize } from "./options.js";
import { withNote } from "./repeat.js";

export { operation } from "./operation.js";
export type { Operation } from "./operation.js";

/** The second argument of an AI SDK tool's execute (ToolExecutionOptions), as far as it is read here. */
export interface ToolExecutionOptionsLike {
  toolCallId?: string;
  abortSignal?: AbortSignal;
  /** AI SDK 7: this tool's entry of `generateText({ toolsContext: { [name]: ... } })`. */
  context?: unknown;
  /** AI SDK 5 and 6: `generateText({ experimental_context })`. */
  experimental_context?: unknown;
  [extra: string]: unknown;
}

/** What the wrapped tool's own execute gets: the SDK's options and the operation it performs. */
export type WithOperation<O> = O & { toolonce: Operation };

/**
 * The run's context as the AI SDK hands it to execute: `options.context` (AI SDK 7, this
 * tool's entry of `toolsContext`), else `options.experimental_context` (AI SDK 5 and 6).
 * `scope: (options) => runContext(options).runId` reads the run id on every major.
 */
export function runContext(options: ToolExecutionOptionsLike): any {
  if (options === null || typeof options !== "object") return undefined;
  return options.context !== undefined ? options.context : options.experimental_context;
}

/** Options of `idempotentTool`. */
export interface AiSdkOptions {
  /** Where the operations are claimed and their results kept. */
  store: Store;
  /**
   * The scope of the keys: a string (one agent run, one conversation) or a function of the
   * execute options (say, `(options) => runContext(options).runId`). Never the tool call id.
   */
  scope: string | ((options: ToolExecutionOptionsLike) => string);
  /** The options of the wrapped write (lease, retention, inFlight, onExpired, keyFields, repeatArgument). */
  options?: IdempotentOptions;
}

const KNOWN = new Set(["store", "scope", "options"]);

/** The scope of one call; a scope function that throws is the caller's bad configuration. */
function scopeOf(name: string, scope: AiSdkOptions["scope"], options: ToolExecutionOptionsLike): string {
  if (typeof scope !== "function") return scope;
  try {
    return scope(options);
  } catch (e) {
    throw new InvalidArguments(
      `toolonce: ${name}: the scope function failed: ${messageOf(e)}. AI SDK 7 hands the run's context to execute as options.context ` +
        `(generateText({ toolsContext: { ${name}: ... } })), AI SDK 5 and 6 as options.experimental_context; runContext(options) reads either`,
      { outcome: "invalid_arguments", cause: e },
    );
  }
}

/**
 * The AI SDK tool `tool` (made by `tool({ ... })`) with its execute running at most once per
 * (scope, name, input): a duplicate gets the first call's result back. `name` is the key the
 * tool has in `tools: { name: ... }`. The original execute gets `options.toolonce` (the
 * operation: its `key`, `idempotencyHeader`, `mayHaveRunBefore`) to send downstream. Refusals
 * (in flight, unknown, store down) throw the ToolonceError, which the AI SDK hands to the
 * model as a tool error.
 */
export function idempotentTool<T extends { execute?: (input: any, options: any) => unknown; inputSchema?: unknown; toModelOutput?: unknown }>(
  name: string,
  tool: T,
  config: AiSdkOptions,
): T {
  if (tool === null || typeof tool !== "object") throw new TypeError("idempotentTool(name, tool, config): tool must be an AI SDK tool");
  const execute = tool.execute;
  if (typeof execute !== "function") throw new TypeError(`idempotentTool: the tool ${name} has no execute function (a client-side tool has nothing to deduplicate)`);
  if (config === null || typeof config !== "object") throw new TypeError("idempotentTool(name, tool, config): config must be an object");
  for (const key of Object.keys(config)) {
    if (!KNOWN.has(key)) throw new TypeError(`idempotentTool: unknown option ${JSON.stringify(key)}; expected store, scope or options`);
  }
  const { scope } = config;
  if (typeof scope !== "function" && (typeof scope !== "string" || scope === "")) {
    throw new TypeError(`idempotentTool(${name}): scope must be a non-empty string or a function of the execute options`);
  }
  if (!(config.store instanceof Store)) throw new TypeError(`idempotentTool(${name}): store must come from openStore()`);
  const { repeatArgument } = normalize({ ...config.store.defaults, ...config.options }, `idempotentTool(${name})`);
  const repeat = repeatFor(name, tool.inputSchema, repeatArgument);
  const write = idempotent(
    {
      kind: "write",
      name,
      // The AI SDK has validated the input against the tool's inputSchema before execute.
      async run(input: unknown, ctx) {
        const handed = Object.assign({}, ctx.options as ToolExecutionOptionsLike, { toolonce: operationOf(ctx) });
        return execute.call(tool, input, handed);
      },
    },
    config.store,
    { ...config.options, repeatArgument: repeat ?? false },
  );
  const notes = new PendingNotes();
  const original = typeof tool.toModelOutput === "function" ? (tool.toModelOutput as (arg: unknown) => unknown).bind(tool) : undefined;
  const wrapped: Record<string, unknown> = {
    ...tool,
    async execute(input: unknown, options: ToolExecutionOptionsLike = {}) {
      const answer = await write.runDetailed(input, { runId: scopeOf(name, scope, options), options });
      if ("error" in answer) throw withNote(answer.error);
      if (answer.note !== undefined) notes.remember(options.toolCallId, answer.result, answer.note);
      return answer.result;
    },
    toModelOutput: toModelOutputWith(notes, original),
  };
  if (repeat !== undefined) wrapped.inputSchema = schemaWithRepeat(tool.inputSchema, repeat);
  return wrapped as T;
}
