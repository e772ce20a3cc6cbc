// A replay's note in what an AI SDK model reads (issue 43), while the result program code gets
// (the tool-result part's output) stays the recorded one: the SDK turns an output into the
// model's message with the tool's `toModelOutput`, which the wrapped tool gets, running the
// original's (or the SDK's default) and adding the note as a text part. execute remembers the
// note by tool call id (AI SDK 6 and 7 hand it to toModelOutput) and by the output object
// (AI SDK 5 hands only the output); a note is taken once, when the message is made. A primitive
// output (a number, a string) has no identity: its note is remembered by its value, the oldest
// first, so when an executed call and a replay answer the same value at once the model may read
// the note on the other's message; at most MAX_BY_VALUE such notes are kept.

type ModelOutput = { type: string; value: unknown };

/** The most notes of primitive outputs kept for messages not made yet (the oldest go first). */
const MAX_BY_VALUE = 1000;

/** The name a primitive output is remembered by. */
function valueName(output: unknown): string | undefined {
  if (output === null || typeof output === "object" || typeof output === "function") return undefined;
  return `${typeof output}:${String(output)}`;
}

/** The notes of replayed calls whose model message is not made yet. */
export class PendingNotes {
  private readonly byCall = new Map<string, string>();
  private readonly byOutput = new WeakMap<object, string>();
  private readonly byValue = new Map<string, string[]>();
  private valueNotes = 0;

  /** Remembers the note of the call `toolCallId`, whose output is `output`. */
  remember(toolCallId: string | undefined, output: unknown, note: string): void {
    if (typeof toolCallId === "string") this.byCall.set(toolCallId, note);
    if (output !== null && typeof output === "object") this.byOutput.set(output, note);
    const name = valueName(output);
    if (name !== undefined) this.rememberValue(name, note);
  }

  private rememberValue(name: string, note: string): void {
    if (this.valueNotes >= MAX_BY_VALUE) {
      const [oldest, notes] = this.byValue.entries().next().value as [string, string[]];
      notes.shift();
      if (notes.length === 0) this.byValue.delete(oldest);
      this.valueNotes--;
    }
    const notes = this.byValue.get(name);
    if (notes === undefined) this.byValue.set(name, [note]);
    else notes.push(note);
    this.valueNotes++;
  }

  private takeValue(output: unknown): string | undefined {
    const name = valueName(output);
    const notes = name === undefined ? undefined : this.byValue.get(name);
    if (name === undefined || notes === undefined) return undefined;
    const note = notes.shift();
    if (notes.length === 0) this.byValue.delete(name);
    this.valueNotes--;
    return note;
  }

  /** The note for toModelOutput's argument, taken; undefined for an executed call. */
  take(arg: unknown): string | undefined {
    const a = arg as { toolCallId?: unknown; output?: unknown } | null;
    if (a !== null && typeof a === "object" && typeof a.toolCallId === "string" && "output" in a) {
      const note = this.byCall.get(a.toolCallId);
      if (note !== undefined) {
        this.byCall.delete(a.toolCallId);
        // Taken by its call: the same note kept by value must not go to another message.
        this.dropValue(a.output, note);
        return note;
      }
    }
    if (arg !== null && typeof arg === "object") {
      const note = this.byOutput.get(arg);
      if (note !== undefined) {
        this.byOutput.delete(arg);
        return note;
      }
    }
    return this.takeValue(arg);
  }

  private dropValue(output: unknown, note: string): void {
    const name = valueName(output);
    const notes = name === undefined ? undefined : this.byValue.get(name);
    const at = notes?.indexOf(note) ?? -1;
    if (name === undefined || notes === undefined || at < 0) return;
    notes.splice(at, 1);
    if (notes.length === 0) this.byValue.delete(name);
    this.valueNotes--;
  }
}

/** The SDK's default: text for a string, else JSON. */
function byDefault(arg: unknown): ModelOutput {
  const a = arg as { toolCallId?: unknown; output?: unknown } | null;
  const output = a !== null && typeof a === "object" && typeof a.toolCallId === "string" && "output" in a ? a.output : arg;
  if (typeof output === "string") return { type: "text", value: output };
  const json = JSON.stringify(output);
  return { type: "json", value: json === undefined ? null : JSON.parse(json) };
}

/** `out` with `note` after what it says. */
function noted(out: ModelOutput, note: string): ModelOutput {
  const said = (value: unknown) => (typeof value === "string" ? value : JSON.stringify(value));
  switch (out.type) {
    case "text":
    case "error-text":
      return { type: out.type, value: `${said(out.value)}\n\n${note}` };
    case "content":
      return { type: "content", value: [...(Array.isArray(out.value) ? out.value : []), { type: "text", text: note }] };
    case "error-json":
      return { type: "error-text", value: `${said(out.value)}\n\n${note}` };
    default:
      return { type: "content", value: [{ type: "text", text: said(out.value) }, { type: "text", text: note }] };
  }
}

/**
 * The toModelOutput of the wrapped tool: the original's (or the default), with a replay's note.
 * Synchronous unless the original is not: AI SDK 5 does not await it.
 */
export function toModelOutputWith(notes: PendingNotes, original: ((arg: any) => unknown) | undefined) {
  return (arg: unknown): unknown => {
    const note = notes.take(arg);
    const out = original === undefined ? byDefault(arg) : original(arg);
    if (note === undefined) return out;
    if (out !== null && typeof out === "object" && typeof (out as PromiseLike<unknown>).then === "function") {
      return Promise.resolve(out).then((o) => noted(o as ModelOutput, note));
    }
    return noted(out as ModelOutput, note);
  };
}
