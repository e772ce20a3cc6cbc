// toolonce for Node.js: the reference design's `idempotent(tool, store)` on toolonce's Rust core.
//
// This file only gives the native module (native.js, written by `npm run build`) the shape
// TypeScript agents know: it validates with the tool's schema, turns values into JSON text and
// back, calls the handler when the core says so, and turns the core's outcome words into typed
// errors. Whether to run, replay, wait or hold is decided in Rust, once for every language.

"use strict";

const native = require("./native.js");

const NATIVE = Symbol("toolonce.native");

/** Every error toolonce itself raises: `outcome` is the core's word, `key` the operation key. */
class ToolonceError extends Error {
  constructor(message, { outcome, key, cause, detail } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.outcome = outcome;
    this.key = key;
    if (detail !== undefined) this.detail = detail;
  }
}
/** The same operation is running elsewhere now; nothing ran here. */
class OperationInFlight extends ToolonceError {}
/** The key fields match an earlier operation whose other arguments differ; nothing ran. */
class OperationConflict extends ToolonceError {}
/** An earlier attempt was interrupted (its lease expired) and the policy held: nothing ran. */
class OutcomeUnknown extends ToolonceError {}
/** The store could not be used, so the handler was not run (fail closed). */
class StoreUnavailable extends ToolonceError {}
/** The arguments failed the schema, cannot be keyed, or the call is malformed; nothing claimed. */
class InvalidArguments extends ToolonceError {}

/**
 * A failure that will not go away on another try (a declined card, bad input): stored and
 * replayed to every duplicate. A replayed one has `replayed = true`. Any other exception, or one
 * without `permanent = true`, is transient: the claim is released and a duplicate runs again.
 */
class PermanentError extends Error {
  constructor(message, options = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "PermanentError";
    this.permanent = true;
    if (options.detail !== undefined) this.detail = options.detail;
  }
}

const OUTCOME_ERRORS = {
  in_flight: OperationInFlight,
  conflict: OperationConflict,
  unknown: OutcomeUnknown,
  store_unavailable: StoreUnavailable,
  invalid_arguments: InvalidArguments,
};

/** A store opened by URL; `defaults` are options for every tool wrapped on it. */
class Store {
  constructor(nativeStore, defaults) {
    this[NATIVE] = nativeStore;
    this.defaults = Object.freeze({ ...defaults });
  }
  /** The URL, without its password. */
  get url() {
    return this[NATIVE].url;
  }
  /** Closes the store; calls made after it reject with StoreUnavailable. */
  async close() {
    this[NATIVE].close();
  }
}

/**
 * Opens a store: `memory://`, `sqlite://PATH`, `redis://…`, `rediss://…`, `redis+cluster://…`,
 * `postgres://…`. `options` (lease, retention, inFlight, onExpired) are the defaults of every
 * tool wrapped on this store.
 */
async function openStore(url, options = {}) {
  if (typeof url !== "string") throw new TypeError("openStore(url): url must be a string");
  normalizeOptions(options, "openStore"); // Reject bad defaults here, not at the first tool.
  try {
    return new Store(await native.openStore(url), options);
  } catch (e) {
    throw nativeError(e, undefined);
  }
}

/** Maps a rejection of the native module (before any claim) to a typed error. */
function nativeError(e, key) {
  if (e instanceof ToolonceError) return e;
  const Kind = e && e.code === "InvalidArg" ? InvalidArguments : StoreUnavailable;
  return new Kind(e && e.message ? e.message : String(e), {
    outcome: Kind === InvalidArguments ? "invalid_arguments" : "store_unavailable",
    key,
    cause: e,
  });
}

const KNOWN_OPTIONS = new Set(["lease", "retention", "inFlight", "onExpired", "keyFields"]);

/** The options as the native module takes them; throws TypeError naming a bad one. */
function normalizeOptions(options, where) {
  if (options === null || typeof options !== "object") {
    throw new TypeError(`${where}: options must be an object`);
  }
  for (const name of Object.keys(options)) {
    if (!KNOWN_OPTIONS.has(name)) {
      throw new TypeError(
        `${where}: unknown option ${JSON.stringify(name)}; expected lease, retention, inFlight, onExpired or keyFields`,
      );
    }
  }
  const ms = (name) => {
    const v = options[name];
    if (v === undefined) return undefined;
    if (typeof v !== "number" || !Number.isFinite(v) || v < 0) {
      throw new TypeError(`${where}: ${name} must be a number of milliseconds, not ${String(v)}`);
    }
    return v;
  };
  const out = { leaseMs: ms("lease"), retentionMs: ms("retention") };
  const inFlight = options.inFlight;
  if (inFlight !== undefined && inFlight !== "reject") {
    const wait = inFlight && typeof inFlight === "object" ? inFlight.wait : undefined;
    if (typeof wait !== "number" || !Number.isFinite(wait) || wait < 0) {
      throw new TypeError(`${where}: inFlight must be "reject" or { wait: milliseconds }`);
    }
    out.inFlightWaitMs = wait;
  }
  const onExpired = options.onExpired;
  let verify;
  if (onExpired === "hold" || onExpired === "rerun") {
    out.onExpired = onExpired;
  } else if (onExpired && typeof onExpired === "object" && typeof onExpired.verify === "function") {
    out.onExpired = "verify";
    verify = onExpired.verify;
  } else if (onExpired !== undefined) {
    throw new TypeError(`${where}: onExpired must be "hold", "rerun" or { verify: async (args, ctx) => … }`);
  }
  if (options.keyFields !== undefined) {
    if (!Array.isArray(options.keyFields) || options.keyFields.some((p) => typeof p !== "string")) {
      throw new TypeError(`${where}: keyFields must be an array of JSON Pointers ("/customer")`);
    }
    out.keyFields = options.keyFields;
  }
  return { native: out, verify };
}

// Calls in progress, by id: what the dispatcher needs when the core decides to run the handler.
const pending = new Map();
let lastCallId = 0;

function nextCallId() {
  do {
    lastCallId = (lastCallId + 1) >>> 0;
  } while (lastCallId === 0 || pending.has(lastCallId));
  return lastCallId;
}

function isPermanent(e) {
  return e instanceof PermanentError || (e !== null && typeof e === "object" && e.permanent === true);
}

function messageOf(e) {
  if (e instanceof Error) return e.message;
  try {
    return typeof e === "string" ? e : JSON.stringify(e) ?? String(e);
  } catch {
    return String(e);
  }
}

/** JSON text of a result; `undefined` is stored as null. */
function resultJson(result) {
  return JSON.stringify(result) ?? "null";
}

/** JSON text of an error envelope body. */
function errorJson(e) {
  let detail = null;
  if (e !== null && typeof e === "object" && e.detail !== undefined) {
    try {
      JSON.stringify(e.detail);
      detail = e.detail;
    } catch {
      detail = null; // Detail that is not JSON is not kept; the message is.
    }
  }
  return JSON.stringify({ message: messageOf(e), detail });
}

function handlerContext(call, key, mayHaveRunBefore) {
  return {
    ...call.ctx,
    idem: key,
    idempotencyHeader: ["Idempotency-Key", key],
    mayHaveRunBefore,
  };
}

/**
 * Called from Rust (a threadsafe function) when the core runs the handler (kind 0) or asks the
 * verify probe (kind 1); hands the outcome back with `settle` as an envelope the core parses
 * (see src/lib.rs).
 */
function dispatch(callId, kind, key, mayHaveRunBefore) {
  const call = pending.get(callId);
  if (call === undefined) return; // Cannot happen: a call is pending until answered.
  outcomeOf(call, kind, key, mayHaveRunBefore).then((envelope) => call.native.settle(callId, envelope));
}

/** Runs the handler or the probe; never rejects. */
async function outcomeOf(call, kind, key, mayHaveRunBefore) {
  const ctx = handlerContext(call, key, mayHaveRunBefore);
  if (kind === 1) {
    try {
      const v = await call.verify(call.args, ctx);
      if (v && v.status === "done") return "d" + resultJson(v.result);
      if (v && v.status === "not_done") return "n";
      return "c";
    } catch {
      return "c"; // A probe that fails cannot tell: holding is always safe.
    }
  }
  let result;
  try {
    result = await call.tool.run(call.args, ctx);
  } catch (e) {
    call.thrown = { error: e };
    return (isPermanent(e) ? "p" : "t") + errorJson(e);
  }
  try {
    return "r" + resultJson(result);
  } catch (e) {
    // The handler ran but its result cannot be stored: permanent, so it is not run again.
    const error = new PermanentError(`toolonce: the result of ${call.tool.name} is not JSON: ${e.message}`, {
      cause: e,
    });
    call.thrown = { error };
    return "p" + errorJson(error);
  }
}

/** Called from Rust (a threadsafe function) with the answer of a call. */
function onAnswer(callId, answer) {
  const call = pending.get(callId);
  if (call === undefined) return;
  pending.delete(callId);
  call.native.answered();
  call.resolve(answer);
}

function parseOrNull(json) {
  return json === undefined || json === null ? undefined : JSON.parse(json);
}

/** The answer as `{ outcome, key, result }` or `{ outcome, key, error }`. */
function detailed(answer, call) {
  const outcome = answer.outcome;
  const key = answer.key === "" ? undefined : answer.key;
  if (answer.errorMessage === undefined || answer.errorMessage === null) {
    return { outcome, key, result: parseOrNull(answer.result) };
  }
  const detail = parseOrNull(answer.errorDetail);
  let error;
  if (outcome === "executed" && call.thrown !== undefined) {
    error = call.thrown.error; // The handler's own exception, as it threw it.
  } else if (outcome === "replayed_failure" || (outcome === "executed" && answer.errorClass === "permanent")) {
    error = new PermanentError(answer.errorMessage, { detail });
    error.replayed = outcome === "replayed_failure";
    error.key = key;
    error.outcome = outcome;
  } else {
    const Kind = OUTCOME_ERRORS[outcome] ?? ToolonceError;
    error = new Kind(answer.errorMessage, { outcome, key, detail });
  }
  return { outcome, key, error };
}

function invalid(message, cause) {
  return { outcome: "invalid_arguments", key: undefined, error: new InvalidArguments(message, { outcome: "invalid_arguments", cause }) };
}

/**
 * Wraps a tool of the reference design's shape. A `write` tool's `run(args, ctx)` runs the
 * original at most once per operation (scope `ctx.runId`, the tool's name, the canonical
 * arguments); its handler gets `ctx.idem` and `ctx.idempotencyHeader`. A `read` tool is
 * returned untouched.
 */
function idempotent(tool, store, options = {}) {
  if (tool === null || typeof tool !== "object") throw new TypeError("idempotent(tool, store): tool must be an object");
  if (tool.kind === "read") return tool;
  if (tool.kind !== "write") {
    throw new TypeError(`idempotent: tool.kind must be "write" or "read", not ${JSON.stringify(tool.kind)}`);
  }
  if (typeof tool.name !== "string" || tool.name === "") throw new TypeError("idempotent: tool.name must be a non-empty string");
  if (typeof tool.run !== "function") throw new TypeError(`idempotent: tool ${tool.name} has no run(args, ctx) function`);
  if (tool.schema !== undefined && (tool.schema === null || typeof tool.schema.parse !== "function")) {
    throw new TypeError(`idempotent: the schema of ${tool.name} has no parse(args) method`);
  }
  if (!(store instanceof Store)) throw new TypeError("idempotent(tool, store): store must come from openStore()");
  const { native: nativeOptions, verify } = normalizeOptions({ ...store.defaults, ...options }, `idempotent(${tool.name})`);
  let nativeTool;
  try {
    nativeTool = new native.NativeWriteTool(store[NATIVE], tool.name, nativeOptions, dispatch, onAnswer);
  } catch (e) {
    throw new TypeError(`idempotent(${tool.name}): ${e.message}`, { cause: e });
  }

  async function runDetailed(args, ctx) {
    const runId = ctx === null || ctx === undefined ? undefined : ctx.runId;
    if (typeof runId !== "string" || runId === "") {
      return invalid(`${tool.name}: ctx.runId must be a non-empty string (it is the scope of the key)`);
    }
    let parsed = args;
    if (tool.schema !== undefined) {
      try {
        parsed = await tool.schema.parse(args);
      } catch (e) {
        return invalid(`${tool.name}: the arguments do not fit the schema: ${messageOf(e)}`, e);
      }
    }
    let argsJson;
    try {
      argsJson = JSON.stringify(parsed) ?? "null";
    } catch (e) {
      return invalid(`${tool.name}: the arguments are not JSON: ${e.message}`, e);
    }
    const callId = nextCallId();
    const call = { tool, args: parsed, ctx, verify, thrown: undefined, native: nativeTool, resolve: undefined };
    const answer = await new Promise((resolve) => {
      call.resolve = resolve;
      pending.set(callId, call);
      try {
        nativeTool.run(callId, runId, argsJson);
      } catch (e) {
        // Not started (Node shutting down): answered here, as the native side never will.
        pending.delete(callId);
        resolve({ outcome: "store_unavailable", key: "", errorMessage: `toolonce: the call could not start: ${messageOf(e)}` });
      }
    });
    return detailed(answer, call);
  }

  async function run(args, ctx) {
    const answer = await runDetailed(args, ctx);
    if (answer.error !== undefined) throw answer.error;
    return answer.result;
  }

  return Object.freeze({ ...tool, run, runDetailed });
}

/** The operation key of `toolName` called in `runId` with `args` (the shared vectors' key). */
function idemKey(runId, toolName, args, options = {}) {
  const json = JSON.stringify(args) ?? "null";
  return native.idemKey(runId, toolName, json, options.keyFields ?? null);
}

module.exports = {
  openStore,
  idempotent,
  idemKey,
  Store,
  ToolonceError,
  OperationInFlight,
  OperationConflict,
  OutcomeUnknown,
  StoreUnavailable,
  InvalidArguments,
  PermanentError,
};
