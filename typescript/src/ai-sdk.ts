// `toolonce/ai-sdk`: wraps an AI SDK `tool({ ..., execute })` so its execute takes effect at most
// once per (scope, tool name, input). The scope is the caller's (the agent run, the
// conversation); the tool call id is deliberately not part of the identity: a model that asks
// again gets a new toolCallId, and that second call is exactly the duplicate to stop. It
// imports nothing from the AI SDK: the tool keeps every field, only `execute` is wrapped.

import { idempotent } from "./idempotent.js";
import type { Store } from "./open.js";
import type { IdempotentOptions } from "./options.js";

/** The second argument of an AI SDK tool's execute (ToolExecutionOptions), as far as it is read here. */
export interface ToolExecutionOptionsLike {
  toolCallId?: string;
  abortSignal?: AbortSignal;
  experimental_context?: unknown;
  [extra: string]: unknown;
}

/** Options of `idempotentTool`. */
export interface AiSdkOptions {
  /** Where the operations are claimed and their results kept. */
  store: Store;
  /**
   * The scope of the keys: a string (one agent run, one conversation) or a function of the
   * execute options (say, of `experimental_context`). Never the tool call id.
   */
  scope: string | ((options: ToolExecutionOptionsLike) => string);
  /** The options of the wrapped write (lease, retention, inFlight, onExpired, keyFields). */
  options?: IdempotentOptions;
}

const KNOWN = new Set(["store", "scope", "options"]);

/**
 * The AI SDK tool `tool` (made by `tool({ ... })`) with its execute running at most once per
 * (scope, name, input): a duplicate gets the first call's result back. `name` is the key the
 * tool has in `tools: { name: ... }`. Refusals (in flight, unknown, store down) throw the
 * ToolonceError, which the AI SDK hands to the model as a tool error.
 */
export function idempotentTool<T extends { execute?: (input: any, options: any) => unknown }>(name: string, tool: T, config: AiSdkOptions): T {
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
  const write = idempotent(
    {
      kind: "write",
      name,
      // The AI SDK has validated the input against the tool's inputSchema before execute.
      async run(input: unknown, ctx) {
        return execute.call(tool, input, ctx.options);
      },
    },
    config.store,
    config.options,
  );
  const wrapped = {
    ...tool,
    async execute(input: unknown, options: ToolExecutionOptionsLike = {}) {
      const runId = typeof scope === "function" ? scope(options) : scope;
      return write.run(input, { runId, options });
    },
  };
  return wrapped as T;
}
