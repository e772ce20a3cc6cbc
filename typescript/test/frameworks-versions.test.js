// The framework versions the adapters are tested with are the ones the package promises: each
// framework's peer range has an upper bound (no untested major is allowed), and the version
// examples/ installs for the tests (every AI SDK major under its alias) is inside it.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { pkg } = require("./support.js");
const { AI_SDKS } = require("./frameworks.js");

/** @type {Record<string, string>} */
const peers = require("../package.json").peerDependencies;
const examples = require("../examples/package.json").dependencies;

/** The [low, high) majors of a range written ">=LOW <HIGH". */
function bounds(range) {
  const m = /^>=(\d+) <(\d+)$/.exec(range);
  assert.ok(m, `the peer range ${JSON.stringify(range)} is ">=LOW <HIGH" (tested majors only)`);
  return [Number(m[1]), Number(m[2])];
}

function installed(name) {
  const file = path.join(pkg, "examples", "node_modules", name, "package.json");
  assert.ok(fs.existsSync(file), `${name} is not installed in typescript/examples: run \`npm ci\` there`);
  return JSON.parse(fs.readFileSync(file, "utf8")).version;
}

for (const [framework, installs] of /** @type {[string, string[]][]} */ ([["ai", AI_SDKS], ["langchain", ["langchain"]], ["@langchain/core", ["@langchain/core"]], ["@mastra/core", ["@mastra/core"]]])) {
  test(`the ${framework} peer range is bounded and every tested install of it is inside`, () => {
    const [low, high] = bounds(peers[framework]);
    const majors = installs.map((name) => Number(installed(name).split(".")[0]));
    for (const major of majors) assert.ok(major >= low && major < high, `${framework} ${major} is outside ${peers[framework]}`);
    // The newest allowed major is the one tested as the framework's own name (what npm installs).
    assert.equal(Number(installed(framework).split(".")[0]), high - 1, `the tests run ${framework} ${high - 1}, the newest major the range allows`);
    for (const name of installs) assert.match(examples[name], /^(npm:[^@]+@)?\d+\.\d+\.\d+$/, `examples/package.json pins ${name} exactly`);
  });
}
