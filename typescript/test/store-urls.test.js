// Store URLs: the shared vectors (crates/toolonce/tests/data/store_urls.json, also checked by
// the Rust core) give the same prefix, or the same refusal, here. A `+` is a literal plus, as
// RFC 3986 says; read as a space by one side, a TypeScript worker and the toolonce command on
// one URL used two prefixes and never saw each other's entries.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { parseRedisUrl } = require("../dist/stores/redis-url.js");
const { repo } = require("./support.js");

const vectors = JSON.parse(
  fs.readFileSync(path.join(repo, "crates", "toolonce", "tests", "data", "store_urls.json"), "utf8"),
).redis;

test("every shared Redis URL vector gives its prefix or is refused", () => {
  assert.ok(vectors.length > 10, `only ${vectors.length} vectors`);
  for (const v of vectors) {
    if (v.refused) {
      assert.throws(() => parseRedisUrl(v.url), undefined, `${v.url} was accepted`);
    } else {
      assert.equal(parseRedisUrl(v.url).prefix, v.prefix, v.url);
    }
  }
});
