// A resolve (what a verify probe found, recorded by the layer) acts only on the attempt it saw,
// once its lease has passed: on every store, a live claim, an entry taken over since it was
// read, and the second of two resolves after a release and a new claim are refused with
// nothing written. The same fences as the core's store conformance suite (resolve_fenced.rs).

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const crypto = require("node:crypto");
const { openStore, idemKey } = require("..");
const { backendOf } = require("../dist/open.js");
const { seenOf } = require("../dist/store.js");
const { storeUrls, uniqueRunId, sleep } = require("./support.js");

const LONG = 60_000;
const SHORT = 300;

function request(key, fingerprint, leaseMs, takeover = false) {
  return { key, fingerprint, owner: crypto.randomBytes(16).toString("hex"), leaseMs, retentionMs: LONG, takeover, about: {} };
}

function op(label) {
  const key = idemKey(uniqueRunId(label), "charge", {});
  return { key, fingerprint: crypto.createHash("sha256").update(key).digest("hex") };
}

async function seen(backend, key) {
  const entry = await backend.get(key);
  assert.ok(entry !== undefined, "a live entry to look at");
  const s = seenOf(entry);
  assert.ok(s !== undefined, `expected an unsettled entry, got ${JSON.stringify(entry)}`);
  return s;
}

async function untilUnknown(backend, key) {
  const deadline = Date.now() + 30_000;
  while ((await backend.get(key))?.state !== "unknown") {
    assert.ok(Date.now() < deadline, "never became unknown");
    await sleep(20);
  }
}

for (const [name, url] of Object.entries(storeUrls())) {
  test(`${name}: resolve acts only on the unknown attempt it saw`, async (t) => {
    const store = await openStore(url);
    t.after(() => store.close());
    const backend = backendOf(store);

    await t.test("a live claim is refused and keeps its owner", async () => {
      const { key, fingerprint } = op("live");
      const claim = request(key, fingerprint, LONG);
      assert.equal((await backend.claim(claim)).kind, "won");
      const live = await seen(backend, key);
      for (const resolution of /** @type {import("../dist/store.js").Resolution[]} */ (["release", { done: '"operator"' }])) {
        const answer = await backend.resolve(key, live, resolution, LONG);
        assert.equal(answer.kind, "live", JSON.stringify(answer));
      }
      assert.equal(await backend.complete(key, claim.owner, '"mine"', LONG), true, "the owner still holds it");
    });

    await t.test("an entry taken over since it was read is refused", async () => {
      const { key, fingerprint } = op("takeover");
      assert.equal((await backend.claim(request(key, fingerprint, SHORT))).kind, "won");
      await untilUnknown(backend, key);
      const stale = await seen(backend, key);
      const taker = request(key, fingerprint, LONG, true);
      assert.equal((await backend.claim(taker)).kind, "took_over");
      const answer = await backend.resolve(key, stale, { done: '"probe"' }, LONG);
      assert.equal(answer.kind, "changed", JSON.stringify(answer));
      assert.equal(await backend.complete(key, taker.owner, '"ran"', LONG), true, "the taker still holds it");
    });

    await t.test("the second of two resolves spares the claim made after the first", async () => {
      const { key, fingerprint } = op("twice");
      assert.equal((await backend.claim(request(key, fingerprint, SHORT))).kind, "won");
      await untilUnknown(backend, key);
      const first = await seen(backend, key);
      const second = await seen(backend, key);
      assert.equal((await backend.resolve(key, first, "release", LONG)).kind, "applied");
      const retry = request(key, fingerprint, LONG);
      assert.equal((await backend.claim(retry)).kind, "won");
      const answer = await backend.resolve(key, second, "release", LONG);
      assert.equal(answer.kind, "changed", JSON.stringify(answer));
      assert.equal((await backend.claim(request(key, fingerprint, LONG))).kind, "existing", "no duplicate runs beside the retry");
      assert.equal(await backend.complete(key, retry.owner, '"ran"', LONG), true);
    });
  });
}
