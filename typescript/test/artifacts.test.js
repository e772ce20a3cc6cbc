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

for (const store of ["sqlite", "postgres"]) {
  test(`the package's ${store} statements are the core's, each of them`, () => {
    const dir = `src/store/${store}/statements`;
    const files = coreFiles(dir, ".sql");
    assert.ok(files.includes("claim.sql") && files.includes("list.sql"), files.join(" "));
    const set = store === "sqlite" ? embedded.SQLITE_STATEMENTS : embedded.POSTGRES_STATEMENTS;
    assert.deepEqual(Object.keys(set).sort(), files.map((f) => path.basename(f, ".sql")).sort());
    for (const file of files) {
      const original = read(path.join(core, dir, file));
      assert.equal(read(path.join(pkg, "artifacts", store, "statements", file)), original, `artifacts/${store}/statements/${file} differs from the core's`);
      assert.equal(set[path.basename(file, ".sql")], original, `the embedded ${file} differs from the core's`);
    }
  });
}

/** The package's TypeScript and JavaScript sources, but the generated one. */
function sources(dir = path.join(pkg, "src")) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const file = path.join(dir, e.name);
    if (e.isDirectory()) return sources(file);
    return /\.(ts|js)$/.test(e.name) && e.name !== "artifacts.generated.ts" ? [file] : [];
  });
}

test("the TypeScript sources hold no SQL statement of their own", () => {
  // A statement in a string: a keyword that starts one, inside quotes or backticks. Comments
  // may name statements; Redis's SELECT command is a Redis command, not SQL.
  const sql = /["'`]\s*(SELECT|INSERT INTO|UPDATE \S+ SET|DELETE FROM|CREATE |PRAGMA|BEGIN|COMMIT|ROLLBACK)\b/;
  const found = [];
  for (const file of [...sources(), ...sources(path.join(pkg, "bin"))]) {
    read(file)
      .split("\n")
      .forEach((line, i) => {
        if (/^\s*(\/\/|\/\*|\*)/.test(line)) return;
        if (sql.test(line) && !/\["SELECT", /.test(line)) found.push(`${path.relative(pkg, file)}:${i + 1}: ${line.trim()}`);
      });
  }
  assert.deepEqual(found, []);
});

test("the package's texts and limits are the core's", () => {
  for (const file of ["texts.json", "limits.json"]) {
    assert.equal(read(path.join(pkg, "artifacts", file)), read(path.join(core, "data", file)), `artifacts/${file} differs from the core's`);
  }
  assert.deepEqual(embedded.TEXTS, JSON.parse(read(path.join(core, "data", "texts.json"))).texts);
  assert.deepEqual(embedded.LIMITS, JSON.parse(read(path.join(core, "data", "limits.json"))));
});
