// `idempotent(tool, store, options)`: the reference design's API. A write tool's `run(args,
// ctx)` validates with the tool's schema, keys the call (scope `ctx.runId`, the tool's name,
// the canonical arguments), and hands it to the layer, then turns the layer's answer into the
// result or a typed error. A read tool is returned untouched.

import { LIMITS } from "./artifacts.generated.js";
import {
  InvalidArguments,
  OperationConflict,
  OperationInFlight,
  type Outcome,
  OutcomeUnknown,
  PermanentError,
  StoreUnavailable,
  ToolonceError,
  messageOf,
} from "./errors.js";
import { derive } from "./key.js";
import { type Answer, type Verified, runWrite } from "./layer.js";
import { type IdempotentOptions, type RunContext, type WriteContext, normalize } from "./options.js";
import { Store, backendOf, lifetimeOf } from "./open.js";

/** Anything with `parse`, such as a zod schema. It runs before anything is claimed. */
export interface Schema<Args> {
  parse(input: unknown): Args | Promise<Args>;
}

/** A write tool of the reference design. */
export interface WriteTool<Args = any, Result = any> {
  kind: "write";
  name: string;
  schema?: Schema<Args>;
  description?: string;
  run(args: Args, ctx: WriteContext): Promise<Result> | Result;
  [extra: string]: unknown;
}

/** A read tool: no side effects, passed through untouched. */
export interface ReadTool {
  kind: "read";
  name: string;
  [extra: string]: unknown;
}

/** The answer of `runDetailed`. `key` is undefined when the call failed before keying. */
export type Detailed<Result> = (
  | { outcome: Outcome; key: string; result: Result; error?: undefined }
  | { outcome: Outcome; key: string | undefined; error: unknown; result?: undefined }
) & {
  /**
   * Set when the handler ran but its outcome was not simply recorded: it could not be recorded
   * (a duplicate will not get it), or the claim was lost while it ran. Written for a person.
   */
  notice?: string;
};

/** A wrapped write tool: the original's fields, with `run` taking effect at most once. */
export type IdempotentTool<Args, Result> = Omit<WriteTool<Args, Result>, "run"> & {
  /**
   * Resolves with the result (executed or replayed; a JSON value, the same for both). Rejects
   * with the handler's own exception when it ran and threw, a `PermanentError` with
   * `replayed = true` for a replayed failure, or `OperationInFlight`, `OperationConflict`,
   * `OutcomeUnknown`, `StoreUnavailable`, `InvalidArguments`.
   */
  run(args: unknown, ctx: RunContext): Promise<Result>;
  /** Never rejects: `{ outcome, key, result }` or `{ outcome, key, error }`. */
  runDetailed(args: unknown, ctx: RunContext): Promise<Detailed<Result>>;
};

const REFUSALS: Partial<Record<Outcome, new (message: string, fields: { outcome: Outcome; key?: string; detail?: unknown }) => ToolonceError>> = {
  in_flight: OperationInFlight,
  conflict: OperationConflict,
  unknown: OutcomeUnknown,
  store_unavailable: StoreUnavailable,
  invalid_arguments: InvalidArguments,
};

function invalid(message: string, cause?: unknown): Detailed<never> {
  return { outcome: "invalid_arguments", key: undefined, error: new InvalidArguments(message, { outcome: "invalid_arguments", cause }) };
}

/** The layer's answer as `runDetailed` gives it. */
function detailed<Result>(answer: Answer): Detailed<Result> {
  const { outcome, key } = answer;
  const notice = answer.notice === undefined ? {} : { notice: answer.notice };
  if ("result" in answer) return { outcome, key, result: answer.result as Result, ...notice };
  if ("thrown" in answer) return { outcome, key, error: answer.thrown, ...notice };
  if ("stored" in answer) {
    const error = new PermanentError(answer.stored.message, { detail: answer.stored.detail });
    error.replayed = outcome === "replayed_failure";
    error.key = key;
    error.outcome = outcome;
    return { outcome, key, error, ...notice };
  }
  const Kind = REFUSALS[outcome] ?? ToolonceError;
  return { outcome, key, error: new Kind(answer.refused, { outcome, key, detail: answer.detail }) };
}

/**
 * Wraps a tool of the reference design's shape. A `write` tool's `run(args, ctx)` runs the
 * original at most once per operation; its handler gets `ctx.idem` and `ctx.idempotencyHeader`.
 * A `read` tool is returned untouched.
 */
export function idempotent<Args, Result>(
  tool: WriteTool<Args, Result>,
  store: Store,
  options?: IdempotentOptions<Args, Awaited<Result>>,
): IdempotentTool<Args, Awaited<Result>>;
export function idempotent<T extends ReadTool>(tool: T, store: Store, options?: IdempotentOptions): T;
export function idempotent(tool: WriteTool | ReadTool, store: Store, options: IdempotentOptions<any, any> = {}): unknown {
  if (tool === null || typeof tool !== "object") throw new TypeError("idempotent(tool, store): tool must be an object");
  if (tool.kind === "read") return tool;
  if (tool.kind !== "write") throw new TypeError(`idempotent: tool.kind must be "write" or "read", not ${JSON.stringify((tool as { kind?: unknown }).kind)}`);
  const write = tool as WriteTool;
  const name = write.name;
  if (typeof name !== "string" || name === "") throw new TypeError("idempotent: tool.name must be a non-empty string");
  if (name.includes("\u0000")) throw new TypeError(`idempotent: tool.name must not contain NUL`);
  if (typeof write.run !== "function") throw new TypeError(`idempotent: tool ${name} has no run(args, ctx) function`);
  const schema = write.schema;
  if (schema !== undefined && (schema === null || typeof schema.parse !== "function")) {
    throw new TypeError(`idempotent: the schema of ${name} has no parse(args) method`);
  }
  if (!(store instanceof Store)) throw new TypeError("idempotent(tool, store): store must come from openStore()");
  const backend = backendOf(store);
  const lifetime = lifetimeOf(backend);
  const { effective, verify, keyFields } = normalize({ ...store.defaults, ...options }, `idempotent(${name})`);

  /** The layer's answer, or the refusal of arguments that cannot be keyed. */
  async function answer(args: unknown, ctx: RunContext): Promise<Answer | Detailed<never>> {
    const runId = ctx === null || ctx === undefined ? undefined : ctx.runId;
    if (typeof runId !== "string" || runId === "" || runId.includes("\u0000")) {
      return invalid(`${name}: ctx.runId must be a non-empty string without NUL (it is the scope of the key)`);
    }
    let parsed = args;
    if (schema !== undefined) {
      try {
        parsed = await schema.parse(args);
      } catch (e) {
        return invalid(`${name}: the arguments do not fit the schema: ${messageOf(e)}`, e);
      }
    }
    let derived;
    try {
      derived = derive(runId, name, parsed, keyFields);
    } catch (e) {
      return invalid(`${name}: the arguments cannot be keyed: ${messageOf(e)}`, e);
    }
    const context = (mayHaveRunBefore: boolean): WriteContext => {
      // Object.assign rather than spread: V8 spreads an object of unknown shape on a slow path
      // that costs more than the rest of a replay.
      const handed = Object.assign({}, ctx) as WriteContext;
      handed.idem = derived.key;
      handed.idempotencyHeader = [LIMITS.idempotency_key_header, derived.key];
      handed.mayHaveRunBefore = mayHaveRunBefore;
      return handed;
    };
    // `return await`: an async function returning a promise unawaited takes two more turns.
    return await runWrite({
      store: backend,
      lifetime,
      tool: name,
      derived,
      about: { scope: runId, tool: name },
      options: effective,
      // Not an async function: the layer awaits the handler's promise inside its own try, which
      // catches a synchronous throw as well, so a wrapper promise would only cost a turn.
      run: (mayHaveRunBefore) => write.run(parsed, context(mayHaveRunBefore)),
      verify: verify === undefined ? undefined : () => verify(parsed, context(true)) as Promise<Verified>,
    });
  }

  async function runDetailed(args: unknown, ctx: RunContext): Promise<Detailed<unknown>> {
    const a = await answer(args, ctx);
    return "error" in a ? a : detailed(a);
  }

  async function run(args: unknown, ctx: RunContext): Promise<unknown> {
    const a = await answer(args, ctx);
    // A result is handed over as it is, without the `Detailed` object made around it.
    if ("result" in a) return a.result;
    throw ("error" in a ? a : detailed(a)).error;
  }

  return Object.freeze({ ...write, run, runDetailed });
}
