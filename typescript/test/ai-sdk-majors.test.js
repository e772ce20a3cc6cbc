// The AI SDK wrapper (toolonce/ai-sdk) on every AI SDK major its peer range allows (5, 6 and
// the current 7, installed side by side in examples/), each in a real `generateText` loop with
// that major's own mock model: the documented scope (`runContext(options)`, the run's context
// as that major hands it to execute) keys one run, and the tool's execute gets the operation
// key, which it sends to a real local HTTP service as Idempotency-Key; a duplicate replays
// without a second request.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { openStore, idemKey } = require("..");
const { idempotentTool, runContext } = require("../dist/ai-sdk.js");
const { framework, AI_SDKS, majorOf, downstream } = require("./frameworks.js");
const { uniqueRunId } = require("./support.js");

const INPUT = { customerId: "cus_3", amountCents: 900 };

/** One model step calling send_invoice with `ids`, in the shape of the major's model spec. */
function step(major, ids) {
  const content = ids.map((toolCallId) => ({ type: "tool-call", toolCallId, toolName: "send_invoice", input: JSON.stringify(INPUT) }));
  return finished(major, content, "tool-calls");
}

function finished(major, content, reason) {
  if (major === 5) return { content, finishReason: reason, usage: { inputTokens: 1, outputTokens: 1, totalTokens: 2 }, warnings: [] };
  const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };
  return { content, finishReason: { unified: reason, raw: reason }, usage, warnings: [] };
}

/** The major's mock model: MockLanguageModelV2 (AI SDK 5), V3 (6), V4 (7). */
async function mockModel(sdk, major, steps) {
  const mocks = await framework(`${sdk}/test`);
  const Mock = { 5: mocks.MockLanguageModelV2, 6: mocks.MockLanguageModelV3, 7: mocks.MockLanguageModelV4 }[major];
  assert.equal(typeof Mock, "function", `${sdk}/test has no mock model for AI SDK ${major}`);
  return new Mock({ doGenerate: [...steps, finished(major, [{ type: "text", text: "done" }], "stop")] });
}

/** The run's context in generateText's parameters, as the major takes it. */
function withContext(major, context) {
  return major >= 7 ? { toolsContext: { send_invoice: context } } : { experimental_context: context };
}

/** generateText with the scripted steps; every tool result and error. */
async function run(sdk, tools, stepIds, context) {
  const major = majorOf(sdk);
  const { generateText, stepCountIs } = await framework(sdk);
  const model = await mockModel(sdk, major, stepIds.map((ids) => step(major, ids)));
  const result = await generateText({ model, tools, stopWhen: stepCountIs(stepIds.length + 1), prompt: "invoice cus_3", ...withContext(major, context) });
  const parts = result.steps.flatMap((s) => s.content).filter((p) => p.type === "tool-result" || p.type === "tool-error");
  return parts.map((p) => ({ id: p.toolCallId, type: p.type, output: p.output, error: p.error }));
}

/** A send_invoice tool made by the major's tool(); execute POSTs to `service`. */
async function invoiceTool(sdk, service, seen) {
  const { tool } = await framework(sdk);
  const { z } = await framework("zod");
  return tool({
    description: "Send an invoice.",
    inputSchema: z.object({ customerId: z.string(), amountCents: z.number() }),
    async execute(input, options) {
      seen.push(options.toolonce);
      const receipt = await service.send(options.toolonce.key);
      return { receipt, to: input.customerId };
    },
  });
}

test("the AI SDK majors under test are the ones the peer range allows, the current one included", () => {
  assert.deepEqual(AI_SDKS.map(majorOf), [5, 6, 7]);
  const range = require("../package.json").peerDependencies.ai;
  assert.equal(range, ">=5 <8", "the peer range states the tested majors");
});

for (const sdk of AI_SDKS) {
  const major = majorOf(sdk);

  test(`the documented scope keys one run on AI SDK ${major}: runContext(options).runId, a second run is another scope`, async () => {
    const store = await openStore("memory://");
    const service = await downstream();
    try {
      const seen = [];
      const tools = { send_invoice: idempotentTool("send_invoice", await invoiceTool(sdk, service, seen), { store, scope: (o) => runContext(o).runId }) };
      const one = uniqueRunId("one");
      const first = await run(sdk, tools, [["a"], ["b"]], { runId: one });
      assert.deepEqual(first.map((p) => p.type), ["tool-result", "tool-result"], JSON.stringify(first.map((p) => String(p.error))));
      await run(sdk, tools, [["c"]], { runId: one });
      assert.equal(service.requests.length, 1, "one request for the run, however often the model asks");
      await run(sdk, tools, [["d"]], { runId: uniqueRunId("two") });
      assert.equal(service.requests.length, 2, "another run id is another operation");
    } finally {
      await service.close();
      await store.close();
    }
  });

  test(`the tool's execute gets the operation key and sends it downstream as Idempotency-Key; a duplicate sends nothing (AI SDK ${major})`, async () => {
    const store = await openStore("memory://");
    const service = await downstream();
    try {
      const seen = [];
      const runId = uniqueRunId();
      const tools = { send_invoice: idempotentTool("send_invoice", await invoiceTool(sdk, service, seen), { store, scope: runId }) };
      const parts = await run(sdk, tools, [["a"], ["b"]]);
      const key = idemKey(runId, "send_invoice", INPUT);
      assert.deepEqual(service.requests, [{ method: "POST", key }]);
      assert.deepEqual(seen, [{ key, idempotencyHeader: ["Idempotency-Key", key], mayHaveRunBefore: false }]);
      assert.deepEqual(parts.map((p) => [p.id, p.type, p.output]), [
        ["a", "tool-result", { receipt: "rcpt_1", to: "cus_3" }],
        ["b", "tool-result", { receipt: "rcpt_1", to: "cus_3" }],
      ]);
    } finally {
      await service.close();
      await store.close();
    }
  });
}

test("a scope function that throws is refused with a message naming where each AI SDK major puts the run's context", async () => {
  const store = await openStore("memory://");
  const service = await downstream();
  try {
    const seen = [];
    const broken = idempotentTool("send_invoice", await invoiceTool("ai", service, seen), { store, scope: (/** @type {any} */ o) => o.experimental_context.runId });
    const parts = await run("ai", { send_invoice: broken }, [["a"]], { runId: uniqueRunId() });
    assert.equal(parts[0].type, "tool-error");
    assert.equal(parts[0].error.outcome, "invalid_arguments");
    assert.match(parts[0].error.message, /the scope function failed: .*experimental_context.*runContext\(options\)/s);
    assert.equal(service.requests.length, 0);
  } finally {
    await service.close();
    await store.close();
  }
});
