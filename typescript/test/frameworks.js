// The agent frameworks of the adapters' tests (LangChain.js, the AI SDK, Mastra) come from
// examples/node_modules, where examples/package.json pins them: the package itself only has
// them as optional peers, so its own install stays small. A missing install is a loud failure.
// The AI SDK is there in every major the peer range allows: `ai` (the current one) and the
// earlier ones under aliases (`ai5`, `ai6`). Also the downstream HTTP service the tools call.

"use strict";

const fs = require("node:fs");
const http = require("node:http");
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

/** The AI SDK majors the tests run, each as the examples install it. */
const AI_SDKS = ["ai5", "ai6", "ai"];

/** The major version of the package installed under `specifier` (an alias too). */
function majorOf(specifier) {
  const version = JSON.parse(fs.readFileSync(fromExamples.resolve(`${specifier}/package.json`), "utf8")).version;
  return Number(version.split(".")[0]);
}

/**
 * A real HTTP service on 127.0.0.1 standing for the tool's downstream API (a payment, a mail
 * service): it records each request's Idempotency-Key header. `close()` stops it.
 */
async function downstream() {
  const requests = [];
  const server = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      requests.push({ method: req.method, key: req.headers["idempotency-key"] });
      res.writeHead(201, { "content-type": "application/json" });
      res.end(JSON.stringify({ id: `rcpt_${requests.length}` }));
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(undefined)));
  const url = `http://127.0.0.1:${/** @type {import("node:net").AddressInfo} */ (server.address()).port}/`;
  /** POSTs with `key` as Idempotency-Key; resolves with the service's receipt id. */
  const send = async (key) => {
    const res = await fetch(url, { method: "POST", headers: { "Idempotency-Key": key }, body: "{}" });
    return /** @type {{ id: string }} */ (await res.json()).id;
  };
  return { url, requests, send, close: () => new Promise((resolve) => {
    server.close(resolve);
    server.closeAllConnections(); // fetch keeps its connection alive
  }) };
}

module.exports = { framework, example, AI_SDKS, majorOf, downstream };
