// `toolonce resolve | rm` in JavaScript: the same options, output and exit codes as
// crates/toolonce-cli/src/settle.rs. Each reads the entry, says what it saw, and acts only on
// that: the store compares the attempt seen (resolve, and rm of a claim: a fenced release) or the
// settled entry seen (rm) in the same atomic step as its write. A write whose answer was lost
// exits 73: it may have applied, so "nothing was done" would be untrue.

"use strict";

const { UsageError, retentionMs } = require("./operate-args.js");
const { absent, ownerCell } = require("./operate-inspect.js");
const { duration, timestamp, json } = require("./operate-output.js");

const SETTLED = 67;
const LIVE = 68;
const UNKNOWN = 73;

/** What an entry is, for a person: its state, attempt and owner digest (or when it settled). */
function described(entry) {
  const attempt = entry.attempts === undefined ? "-" : String(entry.attempts);
  const holder =
    entry.state === "running" || entry.state === "unknown"
      ? `owner ${ownerCell(entry)}`
      : `settled at ${entry.settledAt === undefined ? "-" : timestamp(entry.settledAt)}`;
  return `${entry.state}, attempt ${attempt}, ${holder}`;
}

/** Says why nothing was changed (stderr; JSON on stdout with --json) and picks 67 or 68. */
function refusal(io, key, kind, entry, was, asJson) {
  const now = Date.now();
  let code;
  let message;
  if (kind === "settled") {
    code = SETTLED;
    const when = entry.settledAt === undefined ? "" : ` (settled ${duration(now - entry.settledAt.getTime())} ago)`;
    message =
      `${key} is already ${entry.state}${when}, perhaps since you last looked; nothing was changed. ` +
      `\`toolonce show ${key}\` shows its outcome; \`toolonce rm ${key}\` forgets it.`;
  } else if (kind === "live") {
    code = LIVE;
    const end = entry.leaseEndsAt;
    const lease = end === undefined ? "its writer recorded no lease end" : `its lease ends in ${duration(end.getTime() - now)} (at ${timestamp(end)})`;
    message =
      `${key} is running; ${lease}; nothing was changed. Its owner (${described(entry)}) is alive and renewing the claim: ` +
      "wait for it to settle, or for its lease to end if it died. Only for an owner that is stuck (hung, not dead), --force acts on this claim anyway.";
  } else {
    code = LIVE;
    message = `${key} changed since it was read: it was ${was}, it is now ${described(entry)}; nothing was changed. Look again with \`toolonce show ${key}\`.`;
  }
  if (asJson) {
    const doc = { key, resolved: false, state: kind === "live" ? "running" : entry.state };
    if (kind === "live") doc.lease_ends_at = entry.leaseEndsAt === undefined ? null : timestamp(entry.leaseEndsAt);
    io.out(json(doc) + "\n");
  }
  io.err(`toolonce: ${message}\n`);
  return code;
}

/** The error for a write the store did not answer: exit 73, the message saying it may have applied. */
function unknownEffect(io, e, key, what) {
  const { EffectUnknown } = io.api;
  if (!(e instanceof EffectUnknown)) throw e;
  io.err(
    `toolonce: the ${what} of ${key} may or may not have been applied: ` +
      `the store failed before it answered (${e.cause?.message ?? e.message}). Run \`toolonce show ${key}\` to see the entry as it is now.\n`,
  );
  return UNKNOWN;
}

/** `--done JSON` (`-`: standard input); text that does not even start like JSON gets the JSON string it may have meant. */
function doneValue(io, text) {
  const source = text === "-" ? io.stdin() : text;
  try {
    return JSON.parse(source);
  } catch (/** @type {any} */ e) {
    const startsLikeJson = /^\s*[{["]/.test(source);
    const hint = !startsLikeJson && text !== "-" ? `; --done takes JSON: to record a text, give it as a JSON string: --done '${JSON.stringify(text).replace(/'/g, "'\\''")}'` : "";
    throw new UsageError(`invalid --done: ${e.message}${hint}`);
  }
}

/** The refusal before any write: a settled entry, or a live claim without --force. */
function seenRefusal(entry, force) {
  if (entry.state === "done" || entry.state === "failed") return "settled";
  if (entry.state === "running" && !force) return "live";
  return undefined;
}

async function resolve(io, options, key) {
  io.checkKey(key);
  const given = ["done", "failed", "release"].filter((o) => options[o] !== undefined);
  if (given.length === 0) throw new UsageError("the following required arguments were not provided:\n  <--done <JSON>|--failed <MESSAGE>|--release>");
  if (given.length > 1) throw new UsageError(`the argument '--${given[0]}' cannot be used with '--${given[1]}'`);
  /** @type {import("../dist/index.js").OperatorResolution} */
  let resolution = "release";
  if (options.done !== undefined) resolution = { done: doneValue(io, options.done) };
  if (options.failed !== undefined) {
    if (options.failed.trim() === "") throw new UsageError("--failed needs a message saying what happened");
    resolution = { failed: options.failed };
  }
  const retention = retentionMs(options.retention);
  const store = await io.open(options);
  const entry = await store.get(key);
  if (entry === undefined) return absent(io, key, options.json);
  const refused = seenRefusal(entry, options.force === true);
  if (refused !== undefined) return refusal(io, key, refused, entry, described(entry), options.json);
  const what = described(entry);
  let answer;
  try {
    answer = await store.resolve(key, entry, resolution, { force: options.force === true, retentionMs: retention });
  } catch (e) {
    return unknownEffect(io, e, key, "resolution");
  }
  if (answer.kind === "absent") return absent(io, key, options.json);
  if (answer.kind !== "applied") return refusal(io, key, answer.kind, answer.entry, what, options.json);
  const [word, result] =
    resolution === "release"
      ? ["released", "released: the next call runs the operation again"]
      : "done" in resolution
        ? ["done", "recorded as done: duplicates replay it"]
        : ["failed", "recorded as failed: duplicates replay it"];
  if (options.json) {
    const seen = { state: entry.state, attempts: entry.attempts ?? null, owner_digest: entry.ownerDigest ?? null };
    io.out(json({ key, resolved: word, seen }) + "\n");
  } else {
    io.out(`${key} (${what}) ${result}\n`);
  }
  return 0;
}

async function rm(io, options, key) {
  io.checkKey(key);
  const store = await io.open(options);
  const entry = await store.get(key);
  if (entry === undefined) return absent(io, key, options.json);
  const what = described(entry);
  let answer;
  if (entry.state === "done" || entry.state === "failed") {
    // Only the settled entry read: one deleted and claimed again since is the agent's retry.
    try {
      answer = await store.remove(key, entry);
    } catch (e) {
      return unknownEffect(io, e, key, "removal");
    }
  } else {
    // An unsettled one only as the attempt read: a fenced release.
    const refused = seenRefusal(entry, options.force === true);
    if (refused !== undefined) return refusal(io, key, refused, entry, what, options.json);
    try {
      answer = await store.resolve(key, entry, "release", { force: options.force === true });
    } catch (e) {
      return unknownEffect(io, e, key, "removal");
    }
  }
  if (answer.kind === "absent") return absent(io, key, options.json);
  if (answer.kind !== "applied") return refusal(io, key, answer.kind, answer.entry, what, options.json);
  io.out(options.json ? json({ key, removed: true }) + "\n" : `removed ${key}\n`);
  return 0;
}

module.exports = { resolve, rm };
