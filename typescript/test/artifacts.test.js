// The package carries the Rust core's shared artifacts (scripts/artifacts.js copies them at
// build time): the Redis scripts, the SQLite and PostgreSQL migrations, the key vectors. Each
// copy, and each string the stores embed, must be byte for byte the core's file, and every one
// of the core's files must be carried.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { pkg, repo } = require("./support.js");

const core = path.join(repo, "crates", "toolonce");
const embedded = require(path.join(pkg, "dist", "artifacts.generated.js"));

function coreFiles(dir, ext) {
  return fs.readdirSync(path.join(core, dir)).filter((f) => f.endsWith(ext)).sort();
}

const read = (file) => fs.readFileSync(file, "utf8");

test("the package's Redis scripts are the core's, each of them", () => {
  const files = coreFiles("src/store/redis", ".lua");
  assert.ok(files.includes("claim.lua") && files.includes("owned.lua"), files.join(" "));
  assert.deepEqual(Object.keys(embedded.LUA).sort(), files.map((f) => path.basename(f, ".lua")).sort());
  for (const file of files) {
    const original = read(path.join(core, "src/store/redis", file));
    assert.equal(read(path.join(pkg, "artifacts", "redis", file)), original, `artifacts/redis/${file} differs from the core's`);
    assert.equal(embedded.LUA[path.basename(file, ".lua")], original, `the embedded ${file} differs from the core's`);
  }
});

for (const store of ["sqlite", "postgres"]) {
  test(`the package's ${store} migrations are the core's, each of them`, () => {
    const files = coreFiles(`src/store/${store}/migrations`, ".sql");
    assert.ok(files.length >= 1, `no ${store} migrations in the core`);
    const list = store === "sqlite" ? embedded.SQLITE_MIGRATIONS : embedded.POSTGRES_MIGRATIONS;
    assert.deepEqual(list.map((m) => m.name), files);
    for (const m of list) {
      const original = read(path.join(core, `src/store/${store}/migrations`, m.name));
      assert.equal(read(path.join(pkg, "artifacts", store, m.name)), original, `artifacts/${store}/${m.name} differs from the core's`);
      assert.equal(m.sql, original, `the embedded ${m.name} differs from the core's`);
    }
  });
}

test("the package's key vectors are the core's", () => {
  assert.equal(read(path.join(pkg, "artifacts", "keys.json")), read(path.join(core, "tests", "data", "keys.json")));
});
