// The generated declarations (dist/index.d.ts) compile a TypeScript agent's usage in strict mode, and
// infer a handler's arguments from its zod schema (a misspelt field is a type error). The tests'
// own type-check (tsconfig.test.json, `npm run typecheck:test`) refuses a test file with a type error.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { spawnSync } = require("node:child_process");
const { pkg, tempDir } = require("./support.js");

const FLAGS = ["--noEmit", "--strict", "--target", "es2022", "--module", "commonjs", "--esModuleInterop", "--types", "node"];
const FIXTURE = path.join(__dirname, "fixtures", "types-check.ts");

function tsc(file) {
  return spawnSync(process.execPath, [require.resolve("typescript/bin/tsc"), ...FLAGS, file], { encoding: "utf8" });
}

test("the declarations type the reference design's usage in strict TypeScript", () => {
  const out = tsc(FIXTURE);
  assert.equal(out.status, 0, out.stdout + out.stderr);
});

test("a field the schema does not have is a type error in the handler", () => {
  const wrong = path.join(path.dirname(FIXTURE), `types-wrong-${process.pid}.ts`);
  fs.writeFileSync(wrong, fs.readFileSync(FIXTURE, "utf8").replace("args.amountCents < 0", "args.amountCentz < 0"));
  try {
    const out = tsc(wrong);
    assert.notEqual(out.status, 0);
    assert.match(out.stdout, /amountCentz/);
  } finally {
    fs.rmSync(wrong);
  }
});

test("the tests' type-check refuses a JavaScript test file that calls the package wrongly", () => {
  const dir = fs.mkdtempSync(path.join(tempDir(), "typecheck-"));
  const file = path.join(dir, "wrong.test.js");
  fs.writeFileSync(file, `"use strict";\nconst { idempotent } = require(${JSON.stringify(path.join(pkg, "dist", "index.js"))});\nidempotent({ kind: "write", name: "send", run: async () => 1 });\n`);
  const config = path.join(dir, "tsconfig.json");
  fs.writeFileSync(config, JSON.stringify({ extends: path.join(pkg, "tsconfig.test.json"), compilerOptions: { typeRoots: [path.join(pkg, "node_modules", "@types")] }, include: [], files: [file] }));
  const out = spawnSync(process.execPath, [require.resolve("typescript/bin/tsc"), "-p", config], { encoding: "utf8" });
  assert.notEqual(out.status, 0, out.stdout);
  // The missing store, at the call: the file was checked as the suite's files are, not skipped.
  assert.match(out.stdout, /wrong\.test\.js\(3,1\): error TS2554: Expected 2-3 arguments, but got 1/);
});
