// Store URLs: the shared vectors (crates/toolonce/tests/data/store_urls.json, also checked by
// the Rust core) give the same parsed result, or the same refusal, here; what only the Rust
// core reads is refused as such. No refusal and no displayed URL shows a password. A `+` is a
// literal plus, as RFC 3986 says; read as a space by one side, a TypeScript worker and the
// toolonce command on one URL used two prefixes and never saw each other's entries.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { nameStore, openStore } = require("../dist/open.js");
const { parseRedisUrl } = require("../dist/stores/redis-target.js");
const { parsePostgresUrl } = require("../dist/stores/postgres-url.js");
const { redactUrl } = require("../dist/url.js");
const { repo } = require("./support.js");

const data = JSON.parse(fs.readFileSync(path.join(repo, "crates", "toolonce", "tests", "data", "store_urls.json"), "utf8"));

/** The parsed URL in the vectors' neutral form, by the functions openStore uses. */
function describe(url) {
  const named = nameStore(url);
  if (named.kind === "memory") return { kind: "memory" };
  if (named.kind === "sqlite") return { kind: "sqlite", path: named.path };
  if (named.kind === "postgres") {
    const { connectionString, ...fields } = parsePostgresUrl(named.url);
    // What pg itself reads from the string it is given agrees (it would read sslrootcert's file).
    if (fields.sslrootcert !== null) return { kind: "postgres", ...fields };
    const pg = require("pg-connection-string").parse(connectionString);
    if (fields.application_name !== null) assert.equal(pg.application_name, fields.application_name, url);
    if (fields.password !== null) assert.equal(pg.password, fields.password, url);
    return { kind: "postgres", ...fields };
  }
  const t = parseRedisUrl(named.url);
  return {
    kind: "redis",
    mode: t.cluster ? "cluster" : "single",
    tls: t.tls,
    hosts: t.nodes.map((n) => `${n.host.includes(":") ? `[${n.host}]` : n.host}:${n.port}`),
    username: t.username ?? null,
    password: t.password ?? null,
    db: t.db,
    prefix: t.prefix,
    allow_eviction: t.allowEviction,
    native_claim: t.nativeClaim,
    replicas: 0,
    replica_timeout_ms: 500,
    protocol: 2,
    master: null,
  };
}

const secrets = (v) => (v.secret === undefined ? [] : Array.isArray(v.secret) ? v.secret : [v.secret]);

function refusal(url) {
  try {
    describe(url);
  } catch (/** @type {any} */ e) {
    return e;
  }
  return undefined;
}

async function check(v) {
  const hidden = secrets(v);
  for (const s of hidden) assert.ok(!redactUrl(v.url).includes(s), `${v.url}: shown as ${redactUrl(v.url)}`);
  assert.notEqual(v.rust, "unsupported", `${v.url}: no vector is Rust-only yet`);
  const words = v.typescript === "unsupported" ? "not yet by this package" : v.refused;
  if (words === undefined) {
    assert.ok(v.store !== undefined, `${v.url}: a vector has store or refused`);
    assert.deepEqual(describe(v.url), { ...(data.defaults[v.store.kind] ?? {}), ...v.store }, v.url);
    return;
  }
  const e = refusal(v.url);
  assert.ok(e !== undefined, `${v.url} was accepted`);
  assert.equal(e.name, "ConfigError", `${v.url}: ${e}`);
  assert.ok(e.message.includes(words), `${v.url}: ${e.message}`);
  // openStore refuses it the same way, before connecting to anything, and shows no secret.
  const opened = await openStore(v.url).then(
    () => assert.fail(`${v.url}: openStore accepted it`),
    (err) => err,
  );
  assert.equal(opened.name, "InvalidArguments", `${v.url}: ${opened}`);
  assert.ok(opened.message.includes(words), `${v.url}: ${opened.message}`);
  for (const s of hidden) {
    assert.ok(!e.message.includes(s) && !opened.message.includes(s), `${v.url}: ${opened.message} shows ${s}`);
  }
}

test("every shared store URL vector gives its result, its refusal or the refusal of what only the Rust core reads", async () => {
  assert.ok(data.vectors.length > 150, `only ${data.vectors.length} vectors`);
  let read = 0;
  const failed = [];
  for (const v of data.vectors) {
    try {
      await check(v);
      read += 1;
    } catch (/** @type {any} */ e) {
      failed.push(e.message);
    }
  }
  assert.deepEqual(failed, []);
  assert.equal(read, data.vectors.length);
});
