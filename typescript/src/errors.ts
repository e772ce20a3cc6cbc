// The errors toolonce raises, and the failure a handler throws to be stored and replayed.
// Every error of a call names its outcome (the core's word) and the operation key.

/** How a write call ended: the core's outcome words. */
export type Outcome =
  | "executed"
  | "replayed"
  | "replayed_failure"
  | "in_flight"
  | "conflict"
  | "invalid_arguments"
  | "store_unavailable"
  | "unknown";

interface ErrorFields {
  outcome: Outcome;
  key?: string | undefined;
  cause?: unknown;
  detail?: unknown;
}

/** Every error toolonce raises itself: `outcome` is the core's word, `key` the operation key. */
export class ToolonceError extends Error {
  /** The core's outcome word. */
  readonly outcome: Outcome;
  /** The operation key, when the call got that far. */
  readonly key: string | undefined;
  readonly detail?: unknown;

  constructor(message: string, fields: ErrorFields) {
    super(message, fields.cause === undefined ? undefined : { cause: fields.cause });
    this.name = new.target.name;
    this.outcome = fields.outcome;
    this.key = fields.key;
    if (fields.detail !== undefined) this.detail = fields.detail;
  }
}

/** The same operation is running elsewhere now; nothing ran here. Do not retry blindly. */
export class OperationInFlight extends ToolonceError {}
/** The key fields match an earlier operation whose other arguments differ; nothing ran. */
export class OperationConflict extends ToolonceError {}
/** An earlier attempt was interrupted (its lease expired) and may have taken effect; held, nothing ran. */
export class OutcomeUnknown extends ToolonceError {}
/** The store could not be used, so the handler was not run (fail closed). */
export class StoreUnavailable extends ToolonceError {}
/** The arguments failed the schema or cannot be keyed, or the call is malformed; nothing claimed. */
export class InvalidArguments extends ToolonceError {}

/**
 * A failure that will not go away on another try (a declined card, bad input): stored and
 * replayed to every duplicate, where it has `replayed = true`. Any other exception, or one
 * without `permanent = true`, is transient: the claim is released and a duplicate runs again.
 */
export class PermanentError extends Error {
  readonly permanent = true as const;
  /** True on a failure replayed from the store. */
  replayed?: boolean;
  key?: string;
  outcome?: Outcome;
  detail?: unknown;
  /** On a replayed failure: what the model should read beside the message (see `Detailed.note`). */
  note?: string;

  constructor(message: string, options: { detail?: unknown; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "PermanentError";
    if (options.detail !== undefined) this.detail = options.detail;
  }
}

/** The error a store operation failed with: `retryable` when the store could not be reached. */
export class StoreError extends Error {
  constructor(
    message: string,
    readonly retryable: boolean,
    cause?: unknown,
  ) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "StoreError";
  }
}

/**
 * An entry that is there but cannot be decoded (damaged, or written by a writer this reader
 * cannot follow): the operation was begun, perhaps done, so it is never taken for absent.
 */
export class CorruptEntry extends StoreError {
  constructor(message: string, cause?: unknown) {
    super(message, false, cause);
    this.name = "CorruptEntry";
  }
}

/** A store URL or option that cannot be used (a malformed URL, an unknown scheme). */
export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

/** The text of anything thrown. */
export function messageOf(e: unknown): string {
  if (e instanceof Error) return e.message;
  if (typeof e === "string") return e;
  try {
    return JSON.stringify(e) ?? String(e);
  } catch {
    return String(e);
  }
}
