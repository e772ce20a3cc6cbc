// The memory the caller's thread and the renewal worker share (renewer.ts, renewer-worker.ts):
// one slot per running call, written by the caller when the call starts and read by the worker,
// so that registering a call costs a few stores into a SharedArrayBuffer and no message, and a
// call blocked in its own thread is still seen by the worker. Each slot's state word is
// `generation << 2 | phase`; the phases hand the slot between the two threads with
// compare-and-swap (Atomics), the generation tells a slot's calls apart when it is reused.

/** Slots per page; pages are added as calls run at once, and handed to the worker as they come. */
export const PAGE_SLOTS = 256;

/** The slot is nobody's (free, stopped, or its claim was lost). */
export const FREE = 0;
/** A running call the worker renews. */
export const ACTIVE = 1;
/** The worker is renewing it now: a stop must wait for the worker's word. */
export const RENEWING = 2;
/** The caller stopped it while the worker was renewing it: the worker frees it and says so. */
export const STOPPING = 3;

const KEY_BYTES = 48;
const OWNER_BYTES = 32;
const TOOL_BYTES = 80;
const TEXT_BYTES = KEY_BYTES + OWNER_BYTES + TOOL_BYTES;

/** The header: whether the worker sleeps, how many slots may be in use, the shortest lease seen. */
export const AWAKE = 0;
export const SLEEPING = 1;
export const H_FLAG = 0;
export const H_HIGH = 1;
export const H_MIN_LEASE = 2;
export const HEADER_WORDS = 4;

export const phaseOf = (word: number) => word & 3;
export const generationOf = (word: number) => word >>> 2;
export const wordOf = (generation: number, phase: number) => ((generation & 0x1fffffff) << 2) | phase;

/** One page of slots over its SharedArrayBuffer. */
export class Page {
  readonly state: Int32Array;
  /** Per slot: when the call started (epoch ms) and its lease (ms). */
  readonly times: Float64Array;
  readonly text: Uint8Array;

  constructor(readonly buffer: SharedArrayBuffer) {
    this.times = new Float64Array(buffer, 0, PAGE_SLOTS * 2);
    this.state = new Int32Array(buffer, PAGE_SLOTS * 16, PAGE_SLOTS);
    this.text = new Uint8Array(buffer, PAGE_SLOTS * 20, PAGE_SLOTS * TEXT_BYTES);
  }

  static create(): Page {
    return new Page(new SharedArrayBuffer(PAGE_SLOTS * (20 + TEXT_BYTES)));
  }

  /** Writes a call's fields into slot `i` (its state word is written after, by the caller). */
  write(i: number, key: string, owner: string, tool: string, startedMs: number, leaseMs: number): void {
    this.times[i * 2] = startedMs;
    this.times[i * 2 + 1] = leaseMs;
    const at = i * TEXT_BYTES;
    ascii(this.text, at, KEY_BYTES, key);
    ascii(this.text, at + KEY_BYTES, OWNER_BYTES, owner);
    put(this.text.subarray(at + KEY_BYTES + OWNER_BYTES, at + TEXT_BYTES), tool);
  }

  /** The fields of slot `i`, as `write` left them. */
  read(i: number): { key: string; owner: string; tool: string; startedMs: number; leaseMs: number } {
    const at = i * TEXT_BYTES;
    return {
      key: get(this.text.subarray(at, at + KEY_BYTES)),
      owner: get(this.text.subarray(at + KEY_BYTES, at + KEY_BYTES + OWNER_BYTES)),
      tool: get(this.text.subarray(at + KEY_BYTES + OWNER_BYTES, at + TEXT_BYTES)),
      startedMs: this.times[i * 2] as number,
      leaseMs: this.times[i * 2 + 1] as number,
    };
  }
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** `text` into `field`, cut to fit, NUL-padded (keys, owners and tool names hold no NUL). */
function put(field: Uint8Array, text: string): void {
  const { written } = encoder.encodeInto(text, field);
  if (written < field.length) field.fill(0, written);
}

/** `text` (a key or an owner token: ASCII) at `at`, NUL-padded to `size`: no view made, on every call. */
function ascii(bytes: Uint8Array, at: number, size: number, text: string): void {
  const n = Math.min(text.length, size);
  for (let i = 0; i < n; i++) bytes[at + i] = text.charCodeAt(i);
  for (let i = n; i < size; i++) bytes[at + i] = 0;
}

function get(field: Uint8Array): string {
  const end = field.indexOf(0);
  // A copy: TextDecoder does not read shared memory directly.
  return decoder.decode(field.slice(0, end < 0 ? field.length : end));
}
