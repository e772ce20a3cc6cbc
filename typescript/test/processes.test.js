// 8 Node processes × 500 operations, every process calling every operation at once: each
// operation runs exactly once across all of them, and every caller gets the same result.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const { storeUrls, uniqueRunId, tempDir, runNode } = require("./support.js");

const PROCESSES = 8;
const OPERATIONS = 500;
const CHILD = path.join(__dirname, "fixtures", "many-calls.js");

async function everyOperationRunsOnce(url) {
  const runId = uniqueRunId("many");
  const log = path.join(tempDir(), `${runId}.log`);
  fs.writeFileSync(log, "");
  const children = await Promise.all(
    Array.from({ length: PROCESSES }, () => runNode(CHILD, [url, runId, String(OPERATIONS), log])),
  );
  for (const child of children) assert.equal(child.code, 0, `a caller failed: ${child.stdout}`);
  const tallies = children.map((c) => JSON.parse(c.stdout));
  const lines = fs.readFileSync(log, "utf8").trim().split("\n").map(Number);
  assert.equal(lines.length, OPERATIONS, "handler runs");
  assert.equal(new Set(lines).size, OPERATIONS, "distinct operations run");
  assert.equal(
    tallies.reduce((sum, t) => sum + t.executed, 0),
    OPERATIONS,
  );
  assert.equal(
    tallies.reduce((sum, t) => sum + t.replayed, 0),
    OPERATIONS * (PROCESSES - 1),
  );
  for (let n = 0; n < OPERATIONS; n++) {
    const results = tallies.map((t) => JSON.stringify(t.results[n]));
    assert.equal(new Set(results).size, 1, `operation ${n} answered differently: ${results}`);
  }
}

test("8 processes × 500 operations on SQLite: each operation runs exactly once", async () => {
  await everyOperationRunsOnce(storeUrls().sqlite);
});

test("8 processes × 500 operations on Redis: each operation runs exactly once", async () => {
  await everyOperationRunsOnce(storeUrls().redis);
});

test("8 processes × 500 operations on Valkey (native fenced settles): each operation runs exactly once", async () => {
  await everyOperationRunsOnce(storeUrls().valkey);
});
