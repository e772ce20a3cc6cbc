// The agent frameworks of the adapters' tests (LangChain.js, the AI SDK, Mastra) come from
// examples/node_modules, where examples/package.json pins them: the package itself only has
// them as optional peers, so its own install stays small. A missing install is a loud failure.

"use strict";

const fs = require("node:fs");
const path = require("node:path");
const { createRequire } = require("node:module");
const { pathToFileURL } = require("node:url");
const { pkg } = require("./support.js");

const examples = path.join(pkg, "examples");
const fromExamples = createRequire(path.join(examples, "package.json"));

/** Imports `specifier` as the examples resolve it (their pinned frameworks). */
async function framework(specifier) {
  if (!fs.existsSync(path.join(examples, "node_modules"))) {
    throw new Error(`typescript/examples has no node_modules: run \`npm ci\` there (scripts/test-typescript does) to test the framework adapters`);
  }
  return import(pathToFileURL(fromExamples.resolve(specifier)).href);
}

/** Imports one of the examples (examples/NAME.mjs); its `main(url)` runs it. */
function example(name) {
  return import(pathToFileURL(path.join(examples, `${name}.mjs`)).href);
}

module.exports = { framework, example };
