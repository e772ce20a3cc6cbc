// The store contract's cases (crates/toolonce/tests/data/store_cases/store_cases.json, its README
// says the format), the same file the Rust suite runs on each of its store configurations: every
// case on the Backend of every store (the TypeScript side of Rust's `Store` trait: claim, renew,
// complete, fail, inspect, list, resolve, remove), all of one store's at once, each with names of
// its own. A case not run and not listed as unsupported for "typescript" (with a reason) fails.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { Redis } = require("ioredis");
const { createClient } = require("redis");
const { openStore } = require("..");
const { backendOf } = require("../dist/open.js");
const { derive } = require("../dist/key.js");
const { hexDigest, ownerToken } = require("../dist/digest.js");
const { seenOf, seenSettledOf } = require("../dist/store.js");
const { repo, storeUrls, uniqueRunId, sleep } = require("./support.js");

const RUNNER = "typescript";
const FILE = path.join(repo, "crates", "toolonce", "tests", "data", "store_cases", "store_cases.json");
const text = fs.readFileSync(FILE, "utf8");
const file = JSON.parse(text);
// JSON.rawJSON (Node 21+) is in no lib this package compiles against.
const rawJSON = /** @type {{ rawJSON?: (text: string) => unknown }} */ (/** @type {unknown} */ (JSON)).rawJSON;
// The same file with integers beyond 2^53 kept as their digits: what a step writes is the exact
// text (JSON.stringify of a raw JSON value), as the Rust runner writes it.
// The file says what this leaves unchecked ("exact integers in a result read").
if (typeof rawJSON !== "function") throw new Error(`store-cases.test.js writes the file's exact integers with JSON.rawJSON, which Node ${process.version} lacks: run it under Node 22 (scripts/test-typescript does)`);
const exact = JSON.parse(text, (_k, v, ctx) => (typeof v === "number" && Number.isInteger(v) && !Number.isSafeInteger(v) ? rawJSON(ctx.source) : v));
const PATIENCE_MS = 30_000;
const MAX_PAGES = 50;

/** The names of one run of a case, each mapped on first use to a value of the run's own. */
function names(caseId) {
  const run = uniqueRunId(`store-case-${caseId}`);
  const owners = new Map();
  return {
    key: (name = "k") => derive(run, "key", { name }).key,
    fingerprint: (name = "f") => derive(run, "fingerprint", { name }).fingerprint,
    scope: (name = "own") => `${name}-${run}`,
    owner(name) {
      if (name === undefined) throw new Error("the step names no owner");
      if (!owners.has(name)) owners.set(name, ownerToken());
      return owners.get(name);
    },
    knownOwner: (name) => owners.get(name),
  };
}

function ms(value) {
  if (typeof value === "number") return value;
  const named = file.durations[value];
  if (named === undefined) throw new Error(`no duration named ${JSON.stringify(value)}`);
  return named;
}

/** An entry as the checks read it: whole (`full`, an Inspected) or as a claim or resolve answered it (an Entry). */
function viewOf(inspected) {
  const e = inspected.entry;
  return { ...e, attempts: inspected.attempts, about: inspected.about, startedAt: inspected.startedAt, firstStartedAt: inspected.firstStartedAt, settledAt: inspected.settledAt, expiresAt: inspected.expiresAt, mark: inspected.mark, full: true };
}
const answeredView = (entry) => ({ ...entry, full: false });

/** The fields a TypeScript claim's or resolve's Entry lacks (the file's `unchecked`, "answered entries"). */
const UNCHECKED = file.unchecked?.[RUNNER] ?? {};
const WHOLE_ONLY = ["about", "expires", "expires_in_ms", "started_ago_ms", "first_start", "settled", "same_as", "differs_from"];

function aboutOf(about) {
  return { scope: about?.scope ?? null, tool: about?.tool ?? null, detail: about?.detail ?? null };
}

function field(v, name) {
  switch (name) {
    case "state":
      return v.state;
    case "attempts":
      return v.attempts;
    case "fingerprint":
      return v.fingerprint ?? null;
    case "about":
      return aboutOf(v.about);
    case "started_at":
      return v.mark.startedAt;
    case "first_started_at":
      return v.firstStartedAt ?? null;
    case "settled_at":
      return v.mark.settledAt ?? null;
    case "result":
      return v.state === "done" ? v.result : null;
    case "error":
      return v.state === "failed" ? v.error : null;
    default:
      throw new Error(`no entry field ${JSON.stringify(name)} to compare`);
  }
}

function checkError(got, wanted) {
  assert.ok(got !== undefined, "no error");
  assert.equal(got.message, wanted.message, "error message");
  if (wanted.class !== undefined) assert.equal(got.class, wanted.class, "error class");
  if (wanted.detail !== undefined) assert.deepEqual(got.detail, wanted.detail, "error detail");
}

function checkTimes(v, wanted) {
  if (wanted.expires !== undefined) assert.equal(v.expiresAt !== undefined, wanted.expires, "expiry known");
  if (wanted.expires_in_ms !== undefined) {
    const [lo, hi] = wanted.expires_in_ms;
    assert.ok(v.expiresAt !== undefined, "no expiry known");
    const left = v.expiresAt - Date.now();
    assert.ok(left >= lo && (hi === null || left <= hi), `expires in ${left} ms, expected within [${lo}, ${hi}]`);
  }
  if (wanted.started_ago_ms !== undefined) {
    const [lo, hi] = wanted.started_ago_ms;
    const ago = Date.now() - v.startedAt;
    assert.ok(ago >= lo && ago <= hi, `started ${ago} ms ago, expected within [${lo}, ${hi}]`);
  }
  if (wanted.first_start === "own") assert.equal(v.firstStartedAt, v.startedAt, "the first start is this attempt's");
  else if (wanted.first_start === "earlier") assert.ok(v.firstStartedAt !== undefined && v.firstStartedAt < v.startedAt, `first start ${v.firstStartedAt}, start ${v.startedAt}`);
  else if (wanted.first_start !== undefined) throw new Error(`first_start ${wanted.first_start}`);
  if (wanted.settled !== undefined) {
    assert.equal(v.settledAt !== undefined, wanted.settled, "settle time recorded");
    if (wanted.settled && v.firstStartedAt !== undefined) assert.ok(v.settledAt >= v.firstStartedAt, "settled before its first start");
  }
}

/** Asserts that the view `v` shows what `wanted` asks; `reads` are the entries read `as` labels. */
function checkEntry(v, wanted, n, reads) {
  const shown = JSON.stringify(v);
  if (!v.full) {
    if (UNCHECKED["answered entries"] === undefined) throw new Error("an answered entry lacks times, and the file's unchecked does not say so");
    wanted = Object.fromEntries(Object.entries(wanted).filter(([k]) => !WHOLE_ONLY.includes(k)));
  }
  if (wanted.state !== undefined) assert.equal(v.state, wanted.state, `state: ${shown}`);
  if (wanted.attempts !== undefined && (v.full || v.attempts !== undefined)) assert.equal(v.attempts, wanted.attempts, `attempts: ${shown}`);
  if (wanted.fingerprint !== undefined) assert.equal(v.fingerprint, n.fingerprint(wanted.fingerprint), `fingerprint: ${shown}`);
  if (wanted.owner !== undefined) {
    const token = n.knownOwner(wanted.owner);
    assert.ok(token !== undefined, `no owner ${wanted.owner} ever claimed`);
    assert.ok(v.owner === token || v.owner === hexDigest("sha1", token), `the entry shows ${v.owner}, not ${wanted.owner}'s token nor its digest`);
  }
  if (wanted.result !== undefined) {
    assert.equal(v.state, "done", `expected a result: ${shown}`);
    assert.deepEqual(v.result, wanted.result, "result");
  }
  if (wanted.error !== undefined) {
    assert.equal(v.state, "failed", `expected an error: ${shown}`);
    checkError(v.error, wanted.error);
  }
  if (wanted.about !== undefined) assert.deepEqual(aboutOf(v.about), { ...aboutOf(wanted.about), scope: wanted.about.scope === undefined ? null : n.scope(wanted.about.scope) }, "about");
  checkTimes(v, wanted);
  for (const [compare, same] of [[wanted.same_as, true], [wanted.differs_from, false]]) {
    if (compare === undefined) continue;
    const earlier = reads.get(compare.label);
    assert.ok(earlier !== undefined, `nothing read as ${compare.label}`);
    for (const name of compare.fields) {
      const [now, then] = [field(v, name), field(viewOf(earlier), name)];
      if (same) assert.deepEqual(now, then, `${name}, read as ${compare.label}`);
      else assert.notDeepEqual(now, then, `${name}, read as ${compare.label}`);
    }
  }
}

/** Checks `expect.entry` against the view `v` (undefined: none). */
function checkMaybe(v, expect, n, reads) {
  if (!("entry" in expect)) return;
  if (expect.entry === null) return assert.equal(v, undefined, `an entry ${JSON.stringify(v)}, expected none`);
  assert.ok(v !== undefined, "no entry, expected one");
  checkEntry(v, expect.entry, n, reads);
}

function resolutionOf(r, exactR) {
  if (r === "release") return "release";
  if (r !== null && typeof r === "object" && "done" in r) return { done: JSON.stringify(exactR.done) };
  if (r !== null && typeof r === "object" && "failed" in r) {
    const failed = { message: r.failed.message, class: "permanent" };
    if (r.failed.detail !== undefined) failed.detail = r.failed.detail;
    return { failed };
  }
  throw new Error(`resolution ${JSON.stringify(r)}`);
}

/** One case on `backend`; rejects with the round and step that failed. */
async function runCase(backend, c, exactCase) {
  for (let round = 1; round <= (c.rounds ?? 1); round++) {
    const run = { n: names(c.id), reads: new Map() };
    for (const [i, step] of c.steps.entries()) {
      const act = steps[step.do];
      try {
        if (act === undefined) throw new Error(`unknown step ${step.do}`);
        await act(backend, step, run, exactCase.steps[i]);
      } catch (/** @type {any} */ e) {
        throw new Error(`${c.id}: round ${round}, step ${i + 1} (${step.do}): ${e.message}`);
      }
    }
  }
}

function claimRequest(step, n, owner) {
  const about = { scope: n.scope(step.about?.scope), tool: step.about?.tool ?? file.defaults.tool };
  if (step.about?.detail !== undefined) about.detail = step.about.detail;
  return {
    key: n.key(step.key),
    fingerprint: n.fingerprint(step.fingerprint),
    owner,
    leaseMs: ms(step.lease ?? file.defaults.lease),
    retentionMs: ms(step.retention ?? file.defaults.retention),
    takeover: step.takeover === true,
    about,
  };
}

const fenced = (applied) => (applied ? "applied" : "not_owner");
const expectOf = (step) => step.expect ?? {};

const steps = {
  async claim(b, step, { n, reads }) {
    const claim = await b.claim(claimRequest(step, n, n.owner(step.owner)));
    const e = expectOf(step);
    if (e.claim !== undefined) assert.equal(claim.kind, e.claim, `claim: ${JSON.stringify(claim)}`);
    checkMaybe(claim.entry === undefined ? undefined : answeredView(claim.entry), e, n, reads);
  },
  async claims(b, step, { n, reads }) {
    const claims = await Promise.all(Array.from({ length: step.callers }, () => b.claim(claimRequest(step, n, ownerToken()))));
    const e = expectOf(step);
    const count = (kind) => claims.filter((c) => c.kind === kind).length;
    if (e.won !== undefined) assert.equal(count("won"), e.won, "won");
    if (e.took_over !== undefined) assert.equal(count("took_over"), e.took_over, "took_over");
    if (e.existing !== undefined) for (const c of claims.filter((c) => c.kind === "existing")) checkEntry(answeredView(c.entry), e.existing, n, reads);
  },
  async renew(b, step, { n }) {
    const renewed = await b.renew(n.key(step.key), n.owner(step.owner), ms(step.lease ?? file.defaults.lease));
    if (expectOf(step).renewed !== undefined) assert.equal(renewed, expectOf(step).renewed, "renewed");
  },
  async complete(b, step, { n }, exactStep) {
    const applied = await b.complete(n.key(step.key), n.owner(step.owner), JSON.stringify(exactStep.result), ms(step.retention ?? file.defaults.retention));
    if (expectOf(step).fenced !== undefined) assert.equal(fenced(applied), expectOf(step).fenced, "fenced");
  },
  async fail(b, step, { n }) {
    const { message, class: cls = "permanent", detail } = step.error;
    const error = detail === undefined ? { message, class: cls } : { message, class: cls, detail };
    const kept = step.retention === undefined ? undefined : JSON.stringify(error);
    const applied = await b.fail(n.key(step.key), n.owner(step.owner), kept, ms(step.retention ?? file.defaults.retention));
    if (expectOf(step).fenced !== undefined) assert.equal(fenced(applied), expectOf(step).fenced, "fenced");
  },
  async get(b, step, { n, reads }) {
    const inspected = await b.inspect(n.key(step.key));
    if (step.as !== undefined) {
      assert.ok(inspected !== undefined, `no entry to read as ${step.as}`);
      reads.set(step.as, inspected);
    }
    checkMaybe(inspected === undefined ? undefined : viewOf(inspected), expectOf(step), n, reads);
  },
  async list(b, step, { n, reads }) {
    const query = { scope: n.scope(step.scope), tool: step.tool, state: step.state, limit: step.limit ?? 100 };
    const listed = [];
    let cursor;
    for (let page = 0; ; page++) {
      assert.ok(page < MAX_PAGES, `paging did not end after ${MAX_PAGES} pages`);
      const got = await b.list({ ...query, cursor });
      assert.ok(got.entries.length <= query.limit, `a page of ${got.entries.length}, over the limit ${query.limit}`);
      listed.push(...got.entries);
      if (got.next === undefined) break;
      cursor = got.next;
    }
    const e = expectOf(step);
    for (const i of listed) {
      const passes = (query.state === undefined || i.entry.state === query.state) && (query.tool === undefined || i.about.tool === query.tool) && i.about.scope === query.scope;
      assert.ok(passes, `listed ${JSON.stringify(i)}, which the filters exclude`);
      if (e.each !== undefined) checkEntry(viewOf(i), e.each, n, reads);
    }
    if (e.keys !== undefined) assert.deepEqual(listed.map((i) => i.key).sort(), e.keys.map((k) => n.key(k)).sort(), `listed, expected ${e.keys} each once`);
  },
  async resolve(b, step, { n, reads }, exactStep) {
    const read = reads.get(step.seen);
    assert.ok(read !== undefined, `nothing read as ${step.seen}`);
    const seen = seenOf(read.entry);
    assert.ok(seen !== undefined, "resolve of a settled read");
    if (step.force) seen.evenIfLive = true;
    const answer = await b.resolve(n.key(step.key), seen, resolutionOf(step.resolution, exactStep.resolution), ms(step.retention ?? file.defaults.retention));
    const e = expectOf(step);
    if (e.answer !== undefined) assert.equal(answer.kind, e.answer, `answer: ${JSON.stringify(answer)}`);
    const v = answer.found !== undefined ? viewOf(answer.found) : answer.entry === undefined ? undefined : answeredView(answer.entry);
    checkMaybe(v, e, n, reads);
  },
  async remove(b, step, { n, reads }) {
    const read = reads.get(step.seen);
    assert.ok(read !== undefined, `nothing read as ${step.seen}`);
    const seen = seenSettledOf(read);
    assert.ok(seen !== undefined, "remove of an unsettled read");
    const answer = await b.remove(n.key(step.key), seen);
    const e = expectOf(step);
    if (e.answer !== undefined) assert.equal(answer.kind, e.answer, `answer: ${JSON.stringify(answer)}`);
    checkMaybe(answer.found === undefined ? undefined : viewOf(answer.found), e, n, reads);
  },
  async wait(b, step, { n }) {
    if (step.ms !== undefined) return sleep(ms(step.ms));
    const deadline = Date.now() + PATIENCE_MS;
    while (Date.now() < deadline) {
      if ((await b.inspect(n.key(step.key)))?.entry.state === step.until) return;
      await sleep(20);
    }
    throw new Error(`never ${step.until} within ${PATIENCE_MS} ms`);
  },
};

test("every store case has an id of its own, and each one this runner skips or leaves unchecked says why", () => {
  for (const what of ["answered entries", "exact integers in a result read"]) {
    assert.ok(typeof UNCHECKED[what] === "string" && UNCHECKED[what].trim() !== "", `the file's unchecked.${RUNNER} does not say why ${what} are not checked`);
  }
  const ids = file.cases.map((c) => c.id);
  assert.ok(ids.length >= 40, "the store-case file lost its cases");
  assert.equal(new Set(ids).size, ids.length, "two store cases share an id");
  for (const c of file.cases) {
    const why = c.unsupported?.[RUNNER];
    if (why !== undefined) assert.ok(typeof why === "string" && why.trim() !== "", `${c.id}: unsupported without a reason`);
  }
});

// The suite's Redis server is shared by test files running at the same time, some of which
// leave entries no store can read (on purpose): a listing of the default database would meet
// them and fail. The store cases run in a database of their own on that server, so their
// listings see only their own entries (the program's own clients have no key prefix to
// separate them by).
const CASES_DB = 9;

/** `url` (a Redis URL without a path) in database `db`. */
function inDatabase(url, db) {
  const u = new URL(url);
  assert.ok(u.pathname === "" || u.pathname === "/", `the test Redis URL ${url} already names a database`);
  u.pathname = `/${db}`;
  return u.toString();
}

/** Every store, by name, opened: the URL stores, and stores on the program's own Redis clients. */
function stores() {
  const urls = storeUrls();
  urls.redis = inDatabase(urls.redis, CASES_DB);
  urls.valkey = inDatabase(urls.valkey, CASES_DB);
  /** @type {[string, () => Promise<{ store: import("../dist/index.js").Store, close: () => Promise<unknown> }>][]} */
  const opened = Object.entries(urls).map(([name, url]) => [name, async () => ({ store: await openStore(url), close: async () => {} })]);
  opened.push([
    "redis (an ioredis client)",
    async () => {
      const client = new Redis(urls.redis);
      return { store: await openStore(client), close: async () => client.disconnect() };
    },
  ]);
  opened.push([
    "redis (a node-redis client)",
    async () => {
      const client = createClient({ url: urls.redis });
      await client.connect();
      return { store: await openStore(client), close: () => client.quit() };
    },
  ]);
  return opened;
}

for (const [name, open] of stores()) {
  test(`${name}: every store case runs and holds`, async () => {
    const { store, close } = await open();
    try {
      const backend = backendOf(store);
      const ran = [];
      const results = await Promise.allSettled(
        file.cases.map(async (c, i) => {
          if (c.unsupported?.[RUNNER] === undefined) await runCase(backend, c, exact.cases[i]);
          ran.push(c.id);
        }),
      );
      const failed = results.filter((r) => r.status === "rejected").map((r) => r.reason?.message ?? String(r.reason));
      assert.deepEqual(failed, [], `store cases failed on ${name}:\n${failed.join("\n")}`);
      assert.deepEqual(ran.sort(), file.cases.map((c) => c.id).sort(), "every store case is run or listed as unsupported");
    } finally {
      await store.close();
      await close();
    }
  });
}
