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
import { type CallOptions, type IdempotentOptions, type RunContext, type WriteContext, normalize } from "./options.js";
import { warn } from "./log.js";
import { ordinalValue, repeatInvalid, replayNote, takeOrdinal } from "./repeat.js";
import { ownProperties } from "./schema-json.js";
import { Store, backendOf, lifetimeOf } from "./open.js";
import { text } from "./texts.js";

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
  /**
   * Set on a replay (`replayed`, `replayed_failure`): what the model should read beside the
   * result or error, that the identical call took effect earlier, when, and how to repeat it
   * on purpose. The result itself is the recorded one, unchanged.
   */
  note?: string;
};

/** A wrapped write tool: the original's fields, with `run` taking effect at most once. */
export type IdempotentTool<Args, Result> = Omit<WriteTool<Args, Result>, "run"> & {
  /**
   * Resolves with the result (executed or replayed; a JSON value, the same for both). Rejects
   * with the handler's own exception when it ran and threw, a `PermanentError` with
   * `replayed = true` for a replayed failure, or `OperationInFlight`, `OperationConflict`,
   * `OutcomeUnknown`, `StoreUnavailable`, `InvalidArguments`.
   */
  run(args: unknown, ctx: RunContext, call?: CallOptions): Promise<Result>;
  /** Never rejects: `{ outcome, key, result }` or `{ outcome, key, error }`, with the `note` of a replay. */
  runDetailed(args: unknown, ctx: RunContext, call?: CallOptions): Promise<Detailed<Result>>;
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

/** What the note of a replay needs besides the answer: the tool, its repeat argument, this call's ordinal. */
interface Asked {
  tool: string;
  repeat: string | undefined;
  ordinal: number;
}

/** The note of `answer` when it is a replay. */
function noteOf(answer: Answer, asked: Asked): { note?: string } {
  if (answer.outcome !== "replayed" && answer.outcome !== "replayed_failure") return {};
  const settledAt = "settledAt" in answer ? answer.settledAt : undefined;
  return { note: replayNote({ ...asked, key: answer.key, failed: answer.outcome === "replayed_failure", settledAt }) };
}

/** The layer's answer as `runDetailed` gives it. */
function detailed<Result>(answer: Answer, asked: Asked): Detailed<Result> {
  const { outcome, key } = answer;
  const notice = answer.notice === undefined ? {} : { notice: answer.notice };
  if ("result" in answer) return { outcome, key, result: answer.result as Result, ...notice, ...noteOf(answer, asked) };
  if ("thrown" in answer) return { outcome, key, error: answer.thrown, ...notice };
  if ("stored" in answer) {
    const error = new PermanentError(answer.stored.message, { detail: answer.stored.detail });
    error.replayed = outcome === "replayed_failure";
    error.key = key;
    error.outcome = outcome;
    const note = noteOf(answer, asked);
    if (note.note !== undefined) error.note = note.note;
    return { outcome, key, error, ...notice, ...note };
  }
  const Kind = REFUSALS[outcome] ?? ToolonceError;
  return { outcome, key, error: new Kind(answer.refused, { outcome, key, detail: answer.detail }) };
}

/** The ordinal of a call of `tool` and its arguments without it, or the refusal of a bad one. */
function ordinalOf(tool: string, repeatArgument: string | undefined, args: unknown, call: CallOptions | undefined): { args: unknown; ordinal: number } | { refused: string } {
  const taken = takeOrdinal(tool, args, repeatArgument);
  const explicit = call?.repeat;
  if ("refused" in taken || explicit === undefined) return taken;
  const ordinal = ordinalValue(explicit);
  if (ordinal === undefined) return { refused: repeatInvalid(tool, "repeat", explicit) };
  // Program code and the model naming two different ordinals is a bug, not a choice to make.
  if (taken.ordinal !== 1 && taken.ordinal !== ordinal) {
    return { refused: `${tool}: the call option repeat ${ordinal} and the argument ${repeatArgument} ${taken.ordinal} disagree; nothing was claimed or run` };
  }
  return { args: taken.args, ordinal };
}

/**
 * The repeat argument of a tool, unless its schema declares an argument of that name, which it
 * keeps (a warning says so). A tool whose schema cannot be read here (none, or not one this
 * package reads) gets the argument only when `repeatArgument` was given: otherwise an argument
 * of its own that happens to bear the name would be taken from it and keyed as an ordinal.
 */
function ownArgument(tool: string, schema: unknown, name: string | undefined, explicit: boolean): string | undefined {
  if (name === undefined) return undefined;
  const own = ownProperties(schema);
  if (own === undefined) return explicit ? name : undefined;
  if (!own.includes(name)) return name;
  warn(`the tool ${tool} has its own argument ${JSON.stringify(name)}: it keeps it, and gets no repeat argument (set repeatArgument to another name to give it one)`);
  return undefined;
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
  const normalized = normalize({ ...store.defaults, ...options }, `idempotent(${name})`);
  const { effective, verify, keyFields } = normalized;
  const explicit = options.repeatArgument !== undefined || store.defaults.repeatArgument !== undefined;
  const repeatArgument = ownArgument(name, schema, normalized.repeatArgument, explicit);

  /** The layer's answer, or the refusal of arguments that cannot be keyed. */
  async function answer(args: unknown, ctx: RunContext, call: CallOptions | undefined): Promise<{ answered: Answer; ordinal: number } | Detailed<never>> {
    const runId = ctx === null || ctx === undefined ? undefined : ctx.runId;
    if (typeof runId !== "string" || runId === "" || runId.includes("\u0000")) {
      return invalid(`${name}: ctx.runId must be a non-empty string without NUL (it is the scope of the key)`);
    }
    const taken = ordinalOf(name, repeatArgument, args, call);
    if ("refused" in taken) return invalid(taken.refused);
    let parsed = taken.args;
    if (schema !== undefined) {
      try {
        parsed = await schema.parse(taken.args);
      } catch (e) {
        return invalid(text("invalid_arguments", { tool: name, reason: text("misfit_schema", { error: messageOf(e) }) }), e);
      }
    }
    let derived;
    try {
      derived = derive(runId, name, parsed, keyFields, taken.ordinal);
    } catch (e) {
      return invalid(text("invalid_arguments", { tool: name, reason: text("unkeyable", { error: messageOf(e) }) }), e);
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
    const answered = await runWrite({
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
    return { answered, ordinal: taken.ordinal };
  }

  const asked = (ordinal: number): Asked => ({ tool: name, repeat: repeatArgument, ordinal });

  async function runDetailed(args: unknown, ctx: RunContext, call?: CallOptions): Promise<Detailed<unknown>> {
    const a = await answer(args, ctx, call);
    return "answered" in a ? detailed(a.answered, asked(a.ordinal)) : a;
  }

  async function run(args: unknown, ctx: RunContext, call?: CallOptions): Promise<unknown> {
    const a = await answer(args, ctx, call);
    if (!("answered" in a)) throw a.error;
    // A result is handed over as it is, without the `Detailed` object made around it.
    if ("result" in a.answered) return a.answered.result;
    throw detailed(a.answered, asked(a.ordinal)).error;
  }

  return Object.freeze({ ...write, run, runDetailed });
}
