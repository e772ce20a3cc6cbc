// `toolonce/langchain`: a LangChain.js v1 agent middleware (`createAgent({ middleware })`) whose
// `wrapToolCall` runs every write tool through `idempotent`, scoped by the run's thread id, and
// hands read tools straight to the next handler. It imports nothing from LangChain: it reads
// the request's fields and, to answer a replayed call, hands the next handler a stand-in tool
// that returns the stored content, so the ToolMessage is built by the caller's own LangChain
// (one copy of its classes, whatever the install layout). A write that runs gets the operation
// in its tool runtime (`runtime.toolonce`), through a view of the tool that adds it to the
// config LangChain invokes it with. The model sees the optional repeat ordinal (issue 43) in a
// write tool's parameters (`wrapModelCall` hands the model the tool's JSON Schema with it, in
// the function format every chat model binds), and a replay's note after the replayed content.

import { InvalidArguments } from "./errors.js";
import { idempotent } from "./idempotent.js";
import { Store } from "./open.js";
import { type Operation, operationOf } from "./operation.js";
import { type IdempotentOptions, normalize } from "./options.js";
import { text } from "./texts.js";
import { takeOrdinal, withNote } from "./repeat.js";
import { type DeclaredTool, boundView } from "./langchain-bound.js";
import { repeatFor } from "./schema-json.js";

export { operation } from "./operation.js";
export type { Operation } from "./operation.js";

/** The fields of LangChain's `ToolCallRequest` this middleware reads. */
export interface ToolCallRequestLike {
  toolCall: { name: string; args: unknown; id?: string; [extra: string]: unknown };
  tool?: { name?: string; tags?: string[]; metadata?: Record<string, unknown>; [extra: string]: unknown } | undefined;
  runtime?: { configurable?: Record<string, unknown>; [extra: string]: unknown } | undefined;
  [extra: string]: unknown;
}

/** The fields of LangChain's `ModelRequest` this middleware reads: the tools bound to the model. */
export interface ModelRequestLike {
  tools?: unknown[];
  [extra: string]: unknown;
}


/** What a LangChain tool call handler answers: a ToolMessage or a Command. */
export type ToolCallResult = unknown;

/** Options of `idempotentMiddleware`. */
export interface LangChainOptions {
  /** Where the operations are claimed and their results kept. */
  store: Store;
  /**
   * The tools that are writes, by name. When given, every other tool is a read. Without it,
   * every tool of the agent is a write except those named in `reads`, tagged `toolonce:read`,
   * or with `metadata.toolonce === "read"`: a tool nobody marked is deduplicated, never run
   * twice. A call naming no tool of the agent is passed on (LangChain answers it with an error).
   */
  writes?: string[];
  /** Read tools by name: passed to the next handler untouched. */
  reads?: string[];
  /**
   * The scope of the operation keys. Default: the run's thread id
   * (`config.configurable.thread_id`); a call without one is refused with InvalidArguments.
   */
  scope?: (request: ToolCallRequestLike) => string;
  /** The options of every wrapped write (lease, retention, inFlight, onExpired, keyFields). */
  options?: IdempotentOptions;
  /** The middleware's name in the agent. Default "toolonce". */
  name?: string;
}

/** A middleware object for `createAgent({ middleware: [...] })`. */
export interface IdempotentMiddleware {
  name: string;
  /** Shows each write tool to the model with the repeat ordinal among its parameters. */
  wrapModelCall(request: ModelRequestLike, handler: (request: ModelRequestLike) => unknown): unknown;
  wrapToolCall(request: ToolCallRequestLike, handler: (request: ToolCallRequestLike) => Promise<ToolCallResult> | ToolCallResult): Promise<ToolCallResult>;
}

/** What one call hands its run through the context: the request, the next handler, and a slot for its answer. */
interface Call {
  request: ToolCallRequestLike;
  handler: (request: ToolCallRequestLike) => unknown;
  seen: { result?: unknown };
}

/** What a replay's ToolMessage carries for program code in its artifact, beside the recorded content. */
interface Replayed {
  outcome: string;
  key: string | undefined;
  note: string | undefined;
}

/** What is stored for a call: the ToolMessage's content, or the mark of a Command. */
type Stored = { content: unknown } | { command: true };

const KNOWN = new Set(["store", "writes", "reads", "scope", "options", "name"]);

function names(value: unknown, option: string): Set<string> | undefined {
  if (value === undefined) return undefined;
  if (!Array.isArray(value) || value.some((n) => typeof n !== "string")) {
    throw new TypeError(`idempotentMiddleware: ${option} must be an array of tool names`);
  }
  return new Set(value as string[]);
}

function threadId(request: ToolCallRequestLike): string {
  const id = request.runtime?.configurable?.thread_id;
  if (typeof id !== "string" || id === "") {
    throw new InvalidArguments(
      `toolonce: the tool call ${request.toolCall.name} has no thread id to scope it (invoke the agent with { configurable: { thread_id } } or give idempotentMiddleware a scope function)`,
      { outcome: "invalid_arguments" },
    );
  }
  return id;
}

/**
 * A `createAgent` middleware: write tools run at most once per (thread, tool, arguments); a
 * duplicate (a model asking again, a retried or resumed run on the same thread) is answered
 * with the first call's content. The write tool's function gets `runtime.toolonce` (the
 * operation: `key`, `idempotencyHeader`, `mayHaveRunBefore`; `operation(runtime)` types it) to
 * send downstream. Refusals (in flight, unknown, store down) throw the ToolonceError, as
 * `idempotent` does.
 */
export function idempotentMiddleware(config: LangChainOptions): IdempotentMiddleware {
  if (config === null || typeof config !== "object") throw new TypeError("idempotentMiddleware(config): config must be an object");
  for (const key of Object.keys(config)) {
    if (!KNOWN.has(key)) throw new TypeError(`idempotentMiddleware: unknown option ${JSON.stringify(key)}; expected store, writes, reads, scope, options or name`);
  }
  const { store, options = {} } = config;
  const writes = names(config.writes, "writes");
  const reads = names(config.reads, "reads") ?? new Set<string>();
  const scope = config.scope ?? threadId;
  if (typeof scope !== "function") throw new TypeError("idempotentMiddleware: scope must be a function of the tool call request");
  const name = config.name ?? "toolonce";

  const isWriteTool = (tool: string, declared: DeclaredTool | undefined): boolean => {
    if (writes !== undefined) return writes.has(tool);
    if (reads.has(tool)) return false;
    // A name the agent has no tool for (a model's invention) runs nothing: LangChain answers
    // it with an error. Passing it on keeps the wrapped tools to the agent's own.
    if (declared === undefined) return false;
    if (declared.tags?.includes("toolonce:read")) return false;
    return declared.metadata?.toolonce !== "read";
  };
  const isWrite = (request: ToolCallRequestLike): boolean => isWriteTool(request.toolCall.name, request.tool);
  // The store and options are checked now, not at the first tool call.
  if (!(store instanceof Store)) throw new TypeError("idempotentMiddleware: store must come from openStore()");
  const { repeatArgument } = normalize({ ...store.defaults, ...options }, "idempotentMiddleware");
  /** Each write tool's repeat argument (undefined: none), decided once from its schema. */
  const repeats = new Map<string, string | undefined>();
  const repeatOf = (tool: string, declared: DeclaredTool | undefined): string | undefined => {
    if (!repeats.has(tool)) repeats.set(tool, declared === undefined ? repeatArgument : repeatFor(tool, declared.schema, repeatArgument));
    return repeats.get(tool);
  };
  const shown = boundView(isWriteTool, repeatOf);

  // One wrapped tool per name, made on first use; the names are the agent's tools or `writes`.
  const wrapped = new Map<string, ReturnType<typeof wrap>>();
  function wrap(tool: string, declared: DeclaredTool | undefined) {
    return idempotent<unknown, Stored>(
      {
        kind: "write",
        name: tool,
        // The key is on the model's arguments alone; the request and handler travel in ctx. The
        // tool is called with the arguments the key is on: without the ordinal.
        async run(args, ctx) {
          const call = ctx.call as Call;
          const request = { ...call.request, toolCall: { ...call.request.toolCall, args } };
          const result = await call.handler(keyed(request, operationOf(ctx)));
          call.seen.result = result;
          return storable(result);
        },
      },
      store,
      { ...options, repeatArgument: repeatOf(tool, declared) ?? false } as IdempotentOptions<unknown, Stored>,
    );
  }

  return {
    name,
    wrapModelCall(request, handler) {
      if (!Array.isArray(request.tools)) return handler(request);
      return handler({ ...request, tools: request.tools.map(shown) });
    },
    async wrapToolCall(request, handler) {
      if (!isWrite(request)) return handler(request);
      const tool = request.toolCall.name;
      let write = wrapped.get(tool);
      if (write === undefined) {
        write = wrap(tool, request.tool);
        wrapped.set(tool, write);
      }
      const runId = scope(request);
      const seen: { result?: unknown } = {};
      const call: Call = { request, handler, seen };
      const answer = await write.runDetailed(request.toolCall.args, { runId, call });
      if ("error" in answer) {
        // A bad ordinal is the model's mistake: it reads the refusal, as other adapters tell it.
        const taken = takeOrdinal(tool, request.toolCall.args, repeats.get(tool));
        if ("refused" in taken) return refuse(request, handler, taken.refused);
        throw withNote(answer.error);
      }
      if (answer.outcome === "executed" && "result" in seen) return seen.result;
      return replay(request, handler, answer.result, { outcome: answer.outcome, key: answer.key, note: answer.note });
    },
  };
}

/**
 * The request with a view of its tool whose invoke adds `toolonce` (the operation) to the
 * config; LangChain hands the config to the tool function as its runtime. The tool itself is
 * not changed. A request without an invokable tool is passed on as it is.
 */
function keyed(request: ToolCallRequestLike, op: Operation): ToolCallRequestLike {
  const tool = request.tool as { invoke?: (input: unknown, config?: Record<string, unknown>) => unknown } | undefined;
  const invoke = tool?.invoke;
  if (tool === undefined || typeof invoke !== "function") return request;
  const view = Object.create(tool) as typeof tool;
  view.invoke = (input, config) => invoke.call(tool, input, { ...config, toolonce: op });
  return { ...request, tool: view as ToolCallRequestLike["tool"] };
}

/**
 * Answers a call refused before anything was claimed or run with a ToolMessage the model reads
 * (status "error"), made by LangChain's tool node from a stand-in tool that returns `refusal`.
 */
async function refuse(request: ToolCallRequestLike, handler: (r: ToolCallRequestLike) => unknown, refusal: string): Promise<unknown> {
  const standIn = { name: request.toolCall.name, description: request.tool?.description, invoke: async () => refusal };
  const message = (await handler({ ...request, tool: standIn })) as { status?: unknown } | null;
  if (message !== null && typeof message === "object") message.status = "error";
  return message;
}

/** The JSON kept for a handler's answer: a ToolMessage's content; a Command only as a mark. */
function storable(result: unknown): Stored {
  const message = result as { content?: unknown } | null;
  if (message !== null && typeof message === "object" && "content" in message) return { content: message.content };
  // A Command (a state update, a jump) cannot be replayed; its having run is what is kept.
  return { command: true };
}

/** The content the model reads for a replay: the recorded content, then the note (a text block after blocks). */
function noted(content: unknown, note: string): unknown {
  if (Array.isArray(content)) return [...content, { type: "text", text: note }];
  return `${typeof content === "string" ? content : JSON.stringify(content)}\n\n${note}`;
}

/**
 * Answers a duplicate: the next handler runs a stand-in tool that returns the stored content,
 * and LangChain's tool node makes the ToolMessage (this call's id, the tool's name). String
 * content comes back as it was, followed by the replay's note (what the model reads); content
 * blocks come back as their JSON text, and a status or artifact of the first message is not
 * kept. The message's artifact is `{ toolonce: { outcome, key, note, content } }`, `content`
 * the recorded content as it was.
 */
async function replay(request: ToolCallRequestLike, handler: (r: ToolCallRequestLike) => unknown, stored: Stored, about: Replayed): Promise<unknown> {
  const note = about.note;
  const tool = request.toolCall.name;
  const recorded =
    "content" in stored
      ? stored.content
      : text("command_replayed", { tool });
  const content = note === undefined ? recorded : noted(recorded, note);
  const standIn = {
    name: tool,
    description: request.tool?.description,
    async invoke() {
      return content;
    },
  };
  const message = (await handler({ ...request, tool: standIn })) as { content?: unknown; artifact?: unknown } | null;
  // The model reads the content; program code finds the recorded content, unchanged, in the artifact.
  if (note !== undefined && message !== null && typeof message === "object" && "content" in message && message.artifact === undefined) {
    message.artifact = { toolonce: { ...about, content: recorded } };
  }
  return message;
}
