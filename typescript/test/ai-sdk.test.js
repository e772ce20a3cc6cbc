// The AI SDK example (examples/ai-sdk.js) runs offline and sends its invoice once although
// the model calls the tool twice; on SQLite too, where a second agent process would share it.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { main } = require("../examples/ai-sdk.js");
const { storeUrls } = require("./support.js");

for (const name of ["memory", "sqlite"]) {
  test(`the AI SDK tool loop sends the invoice once although the model calls it twice (${name})`, async () => {
    const report = await main(storeUrls()[name]);
    assert.equal(report.toolResults.length, 2);
    assert.deepEqual(report.toolResults.map((r) => r.id), ["call_1", "call_2"]);
    assert.deepEqual(report.toolResults[1].output, report.toolResults[0].output);
    assert.equal(report.sent.length, 1);
    assert.match(report.sent[0].idempotencyKey, /^idem:[0-9a-f]{32}$/);
    assert.equal(report.text, "Invoice inv_1 sent to cus_42.");
  });
}
