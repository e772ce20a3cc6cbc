// The package under Node 20.0.0, the oldest its `engines` allow (scripts/install-node20 puts it in
// ../target/tmp/node20; TOOLONCE_NODE20 names another binary): the built package works there on
// memory, Redis, Valkey, Redis Cluster and PostgreSQL, and refuses SQLite (node:sqlite came in
// Node 22.5) with an error naming the Node it needs, before anything runs or is created. The
// suite itself runs on Node 22, so without this file nothing would load the package on 20.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { storeUrls, tempDir, runProgram } = require("./support.js");

const NODE20 = process.env.TOOLONCE_NODE20;
const EVERY_STORE = path.join(__dirname, "fixtures", "every-store.js");

/** Runs every-store.js under Node 20 on `urls`; its answers by URL, after checking the runtime. */
async function underNode20(urls) {
  if (!NODE20 || !fs.existsSync(NODE20)) {
    throw new Error(`no Node 20 at ${NODE20 ?? "(TOOLONCE_NODE20 unset)"}: run scripts/install-node20 (scripts/install-test-deps does), or set TOOLONCE_NODE20`);
  }
  const out = await runProgram(NODE20, [EVERY_STORE, ...urls]);
  assert.equal(out.code, 0, out.stderr);
  const answers = JSON.parse(out.stdout);
  assert.match(answers.runtime, /^v20\./, "the fixture did not run under Node 20");
  return answers;
}

test("under Node 20, a duplicate is replayed on memory, Redis, Valkey, Redis Cluster and PostgreSQL", async () => {
  const { sqlite: _, ...urls } = storeUrls();
  const answers = await underNode20(Object.values(urls));
  for (const [name, url] of Object.entries(urls)) assert.deepEqual(answers[url], ["executed", "replayed", 1, true], name);
});

test("under Node 20, a sqlite:// store is refused with an error naming the Node it needs, and nothing runs or is created", async () => {
  const file = path.join(tempDir(), `node20-${process.pid}.db`);
  const url = `sqlite://${file}`;
  const answers = await underNode20([url]);
  const { error, runs } = answers[url] ?? {};
  assert.match(error ?? "", /^InvalidArguments: openStore\(sqlite:\/\/.*\): a sqlite:\/\/ store needs node:sqlite.*\(Node 20\.\d+\.\d+; it needs Node 22\.5 or later\)$/, JSON.stringify(answers[url]));
  assert.equal(runs, 0);
  assert.equal(fs.existsSync(file), false, "the SQLite file was created");
});
