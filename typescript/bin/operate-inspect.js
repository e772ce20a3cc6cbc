// `toolonce ls | show` in JavaScript, for a program that has the npm package and not the Rust
// command: the same options, output and exit codes as crates/toolonce-cli/src/inspect.rs. `ls`
// reads every matching entry a page at a time and keeps the newest --limit, so memory stays
// bounded by the limit whatever the size of the store.

"use strict";

const { UsageError, limit: parseLimit } = require("./operate-args.js");
const { duration, timestamp, table, wrap, json, pretty } = require("./operate-output.js");

const NOT_FOUND = 66;
// An entry toolonce cannot read (the table in operate.js).
const INTERNAL = 70;
const STATES = ["running", "done", "failed", "unknown"];

/** The owner as a person is shown it: `#` and its digest, `-` when none. */
function ownerCell(entry) {
  return entry.ownerDigest === undefined ? "-" : `#${entry.ownerDigest}`;
}

const cell = (text) => (text === undefined || text === "" ? "-" : text);

/** What an entry holds: its result when done, its error when failed. */
function payload(entry) {
  if (entry.state === "done") return { value: entry.result };
  if (entry.state === "failed") return { value: entry.error };
  return undefined;
}

function size(entry) {
  const p = payload(entry);
  return p === undefined ? undefined : Buffer.byteLength(json(p.value ?? null));
}

/** The fields `ls --json` gives for each entry (and `show --json` starts from). */
function summary(entry, now) {
  const unknown = entry.state === "unknown";
  const deadline = entry.leaseEndsAt ?? entry.expiresAt;
  const at = (d) => (d === undefined ? null : timestamp(d));
  return {
    key: entry.key,
    state: entry.state,
    scope: entry.scope ?? null,
    tool: entry.tool ?? null,
    detail: entry.detail ?? null,
    attempts: entry.attempts ?? null,
    fingerprint: entry.fingerprint ?? null,
    first_started_at: at(entry.firstStartedAt),
    started_at: timestamp(entry.startedAt),
    age_ms: Math.max(0, now - entry.startedAt.getTime()),
    settled_at: at(entry.settledAt),
    lease_expired_at: unknown ? at(deadline) : null,
    expires_at: unknown ? null : at(deadline),
    expires_in_ms: unknown || deadline === undefined ? null : Math.max(0, deadline.getTime() - now),
    size: size(entry) ?? null,
  };
}

/** The answer for a key without a live entry: exit 66, and the JSON document with --json. */
function absent(io, key, asJson) {
  if (asJson) io.out(json({ key, found: false }) + "\n");
  io.err(`toolonce: no live entry for ${key}\n`);
  return NOT_FOUND;
}

/** Newest first: by the start of the latest attempt, then by key. */
function newer(a, b) {
  const d = b.startedAt.getTime() - a.startedAt.getTime();
  return d !== 0 ? d : a.key < b.key ? 1 : a.key > b.key ? -1 : 0;
}

async function ls(io, options) {
  const state = options.state;
  if (state !== undefined && !STATES.includes(state)) {
    throw new UsageError(`invalid value '${state}' for '--state <STATE>'\n  [possible values: running, done, failed, unknown]`);
  }
  const limit = parseLimit(options.limit);
  const store = await io.open(options);
  const keep = [];
  /** @type {{ kept: import("../dist/index.js").UnreadableEntry[], count: number }} */
  const unreadable = { kept: [], count: 0 };
  let matched = 0;
  let cursor;
  do {
    const page = await store.list({ state, scope: options.scope, tool: options.tool, cursor, limit: 500 });
    unreadable.count += page.unreadable.length;
    unreadable.kept.push(...page.unreadable.slice(0, Math.max(limit, 1) - unreadable.kept.length));
    for (const entry of page.entries) {
      // Checked again here, as the Rust command does: a store that ignores a filter cannot show the wrong entries.
      if ((state !== undefined && entry.state !== state) || (options.scope !== undefined && entry.scope !== options.scope) || (options.tool !== undefined && entry.tool !== options.tool)) continue;
      matched++;
      keep.push(entry);
      if (keep.length > 2 * limit + 500) keep.sort(newer).length = limit;
    }
    cursor = page.next;
  } while (cursor !== undefined);
  const entries = keep.sort(newer).slice(0, limit);
  const more = matched > limit;
  const now = Date.now();
  if (options.json) {
    const listed = { entries: unreadable.kept.map(({ key, reason }) => ({ key, reason })), count: unreadable.count };
    io.out(json({ entries: entries.map((e) => summary(e, now)), more, unreadable: listed }) + "\n");
    return unreadableCode(io, unreadable);
  }
  if (entries.length === 0) {
    io.out("no entries\n");
    printUnreadable(io, unreadable);
    return unreadableCode(io, unreadable);
  }
  const headers = [["KEY", "left"], ["STATE", "left"], ["SCOPE", "left"], ["TOOL", "left"], ["ATTEMPTS", "right"], ["AGE", "right"], ["EXPIRES IN", "right"], ["SIZE", "right"]];
  const rows = entries.map((e) => {
    const deadline = e.leaseEndsAt ?? e.expiresAt;
    const bytes = size(e);
    return [
      e.key,
      e.state,
      cell(e.scope),
      cell(e.tool),
      e.attempts === undefined ? "-" : String(e.attempts),
      duration(now - e.startedAt.getTime()),
      e.state === "unknown" || deadline === undefined ? "-" : duration(deadline.getTime() - now),
      bytes === undefined ? "-" : `${bytes} B`,
    ];
  });
  io.out(table(headers, rows));
  if (more) io.out(`(${matched - entries.length} more matching entries: raise --limit to see them)\n`);
  printUnreadable(io, unreadable);
  return unreadableCode(io, unreadable);
}

/** The entries a listing could not decode, after the table (whatever the filters: what they hold is unknown). */
function printUnreadable(io, unreadable) {
  if (unreadable.count === 0) return;
  const what = unreadable.count === 1 ? "entry" : "entries";
  io.out(
    `\n${unreadable.count} ${what} cannot be read (stored in a form this version does not decode). A call of such an operation is answered ` +
      "that its outcome cannot be read, never run again, until the entry's retention ends:\n",
  );
  for (const u of unreadable.kept) io.out(`  ${u.key}  ${u.reason}\n`);
  if (unreadable.count > unreadable.kept.length) io.out(`  (${unreadable.count - unreadable.kept.length} more: raise --limit to see them)\n`);
}

/** 0 when every entry was read; otherwise 70, an entry toolonce cannot read, after the whole listing, the first on stderr. */
function unreadableCode(io, unreadable) {
  const first = unreadable.kept[0];
  if (first === undefined) return 0;
  io.err(`toolonce: ${unreadable.count} listed ${unreadable.count === 1 ? "entry" : "entries"} cannot be read; the first: ${first.reason}\n`);
  return INTERNAL;
}

async function show(io, options, key) {
  io.checkKey(key);
  const store = await io.open(options);
  const entry = await store.get(key);
  if (entry === undefined) return absent(io, key, options.json);
  const now = Date.now();
  if (options.json) {
    const doc = summary(entry, now);
    if (entry.state === "running" || entry.state === "unknown") doc.owner_digest = entry.ownerDigest ?? null;
    if (entry.state === "done") doc.result = entry.result;
    if (entry.state === "failed") doc.error = entry.error;
    io.out(json(doc) + "\n");
    return 0;
  }
  const at = (d) => {
    const t = d.getTime();
    return t <= now ? `${timestamp(d)} (${duration(now - t)} ago)` : `${timestamp(d)} (in ${duration(t - now)})`;
  };
  const line = (label, value) => io.out(`${label.padEnd(15)}${value}\n`);
  line("key", entry.key);
  line("state", entry.state);
  line("scope", cell(entry.scope));
  line("tool", cell(entry.tool));
  if (entry.detail !== undefined) line("detail", entry.detail);
  if (entry.fingerprint !== undefined) line("fingerprint", entry.fingerprint);
  if (entry.attempts !== undefined) line("attempts", String(entry.attempts));
  if (entry.firstStartedAt !== undefined) line("first started", at(entry.firstStartedAt));
  line("started", at(entry.startedAt));
  if (entry.state === "running" && entry.leaseEndsAt !== undefined) line("lease until", at(entry.leaseEndsAt));
  else if (entry.state === "unknown" && entry.leaseEndsAt !== undefined) line("lease ended", at(entry.leaseEndsAt));
  else if (entry.expiresAt !== undefined) line("expires", at(entry.expiresAt));
  if (entry.settledAt !== undefined) line("settled", at(entry.settledAt));
  if (entry.state === "running") line("owner", ownerCell(entry));
  if (entry.state === "unknown") {
    line("owner", ownerCell(entry));
    io.out(
      wrap(
        "Its run ended without recording an outcome: it may or may not have taken effect. Check, then " +
          `\`toolonce resolve ${entry.key} --done JSON | --failed MESSAGE | --release\`.`,
        96,
      ),
    );
  }
  if (entry.state === "done") io.out(`result\n${pretty(entry.result ?? null)}\n`);
  if (entry.state === "failed") {
    line("error", `${entry.error.message} (${entry.error.class === "transient" ? "transient" : "permanent"})`);
    if (entry.error.detail !== undefined) io.out(`detail\n${pretty(entry.error.detail)}\n`);
  }
  return 0;
}

module.exports = { ls, show, absent, ownerCell };
