// The package under Bun (npm's bun package, scripts/install-bun): every store works there as it
// does under Node, with the same keys.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const path = require("node:path");
const { storeUrls, runProgram } = require("./support.js");

const BUN = process.env.TOOLONCE_BUN;

test("under Bun, a duplicate is replayed on every store", { skip: BUN ? false : "no Bun: set TOOLONCE_BUN or run scripts/install-bun" }, async () => {
  const urls = Object.values(storeUrls());
  const out = await runProgram(BUN, [path.join(__dirname, "fixtures", "every-store.js"), ...urls]);
  assert.equal(out.code, 0, out.stderr);
  const answers = JSON.parse(out.stdout);
  for (const url of urls) assert.deepEqual(answers[url], ["executed", "replayed", 1, true], url);
});
