// Intended repeats told apart from retries (issue 43) through the Mastra wrapper in a real Agent
// with the AI SDK's mock model: the model sees the optional repeat ordinal in the tool's input
// schema, a replay's note in the tool message while the result Mastra reports stays the
// recorded one, a bad ordinal is refused and nothing runs, and a scripted agent paying Bob 5
// twice on purpose and retrying another payment makes three requests with three keys.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { openStore, idemKey, PermanentError } = require("..");
const { TEXTS } = require("../dist/artifacts.generated.js");
const { idempotentTool, operation } = require("../dist/mastra.js");
const { framework, downstream } = require("./frameworks.js");
const { uniqueRunId } = require("./support.js");

const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };
const step = (...calls) => ({
  content: calls.map(([toolCallId, input]) => ({ type: "tool-call", toolCallId, toolName: "pay", input: JSON.stringify(input) })),
  finishReason: { unified: "tool-calls", raw: "tool_calls" },
  usage,
  warnings: [],
});
const done = { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };

async function payTool(service, ran, schema) {
  const { createTool } = await framework("@mastra/core/tools");
  const { z } = await framework("zod");
  return createTool({
    id: "pay",
    description: "Pay someone.",
    inputSchema: schema ?? z.object({ to: z.string(), cents: z.number() }),
    execute: async (input, context) => {
      ran.push(input);
      return { receipt: await service.send(operation(context).key), to: input.to };
    },
  });
}

/** One agent.generate with the scripted steps on `thread`: the tool results, errors and the mock model. */
async function generate(tool, steps, thread) {
  const { Agent } = await framework("@mastra/core/agent");
  const { MockLanguageModelV3 } = await framework("ai/test");
  const model = new MockLanguageModelV3({ doGenerate: [...steps.map((calls) => step(...calls)), done] });
  const agent = new Agent({ id: "payer", name: "payer", instructions: "Pay.", model, tools: { pay: tool } });
  const result = await agent.generate("pay", { maxSteps: steps.length + 1, memory: { thread, resource: "ada" } });
  return { results: result.toolResults.map((r) => r.payload), model };
}

/** The text the model read in the tool message answering `toolCallId`. */
function toolMessageText(model, toolCallId) {
  const prompt = model.doGenerateCalls.at(-1).prompt;
  const part = prompt.flatMap((m) => (m.role === "tool" ? m.content : [])).find((p) => p.toolCallId === toolCallId);
  assert.ok(part, `no tool message for ${toolCallId}`);
  return JSON.stringify(part.output);
}

const scopeOf = (thread) => JSON.stringify(["ada", thread]);

test("the model sees the optional repeat ordinal in a Mastra tool's input schema, described", async () => {
  const store = await openStore("memory://");
  const service = await downstream();
  try {
    const { model } = await generate(idempotentTool(await payTool(service, []), { store }), [[["a", { to: "bob", cents: 500 }]]], uniqueRunId("thread"));
    const schema = model.doGenerateCalls[0].tools.find((t) => t.name === "pay").inputSchema;
    assert.deepEqual(Object.keys(schema.properties), ["to", "cents", "repeat"]);
    assert.deepEqual(schema.required, ["to", "cents"]);
    assert.deepEqual(schema.properties.repeat, { type: "integer", minimum: 1, maximum: 1000, description: TEXTS.repeat_description });
  } finally {
    await service.close();
    await store.close();
  }
});

test("a replay's note reaches the model in the tool message while the result Mastra reports is the recorded one", async () => {
  const store = await openStore("memory://");
  const service = await downstream();
  try {
    const ran = [];
    const thread = uniqueRunId("thread");
    const input = { to: "bob", cents: 500 };
    const { results, model } = await generate(idempotentTool(await payTool(service, ran), { store }), [[["a", input]], [["b", input]]], thread);
    assert.equal(ran.length, 1);
    assert.deepEqual(results.map((r) => r.result), [{ receipt: "rcpt_1", to: "bob" }, { receipt: "rcpt_1", to: "bob" }]);
    assert.doesNotMatch(toolMessageText(model, "a"), /Already done/);
    const replayed = toolMessageText(model, "b");
    assert.match(replayed, /rcpt_1/);
    assert.ok(replayed.includes("Already done: an identical call of `pay` in this scope took effect at "), replayed);
    assert.ok(replayed.includes(`(operation ${idemKey(scopeOf(thread), "pay", input)})`), replayed);
  } finally {
    await service.close();
    await store.close();
  }
});

test("a replayed primitive result (a number) carries the note to the Mastra model too", async () => {
  const store = await openStore("memory://");
  try {
    const { createTool } = await framework("@mastra/core/tools");
    const { z } = await framework("zod");
    let runs = 0;
    const pay = createTool({ id: "pay", description: "Pay.", inputSchema: z.object({ to: z.string(), cents: z.number() }), execute: async () => ++runs });
    const input = { to: "bob", cents: 500 };
    const { results, model } = await generate(idempotentTool(pay, { store }), [[["a", input]], [["b", input]]], uniqueRunId("thread"));
    assert.equal(runs, 1);
    assert.deepEqual(results.map((r) => r.result), [1, 1], "Mastra reports the recorded number");
    assert.doesNotMatch(toolMessageText(model, "a"), /Already done/);
    assert.match(toolMessageText(model, "b"), /Already done: an identical call of `pay`/);
  } finally {
    await store.close();
  }
});

test("an invalid ordinal is a tool error with the package's text, and nothing is claimed or run", async () => {
  const store = await openStore("memory://");
  const service = await downstream();
  try {
    const ran = [];
    const thread = uniqueRunId("thread");
    const { model } = await generate(idempotentTool(await payTool(service, ran), { store }), [[["a", { to: "bob", cents: 500, repeat: 1001 }]]], thread);
    assert.match(toolMessageText(model, "a"), /Not executed: `repeat` must be a whole number from 1 to 1000 \(got 1001\)/);
    assert.equal(ran.length, 0);
    assert.equal(service.requests.length, 0);
    assert.equal(await store.get(idemKey(scopeOf(thread), "pay", { to: "bob", cents: 500 })), undefined);
  } finally {
    await service.close();
    await store.close();
  }
});

test("a scripted Mastra agent pays Bob 5 twice on purpose and retries another payment: three effects, three keys", async () => {
  const store = await openStore("memory://");
  const service = await downstream();
  try {
    const ran = [];
    const thread = uniqueRunId("thread");
    const bob = { to: "bob", cents: 500 };
    const alice = { to: "alice", cents: 300 };
    const steps = [[["bob-1", bob]], [["bob-2", { ...bob, repeat: 2 }]], [["alice-1", alice]], [["alice-retry", alice]]];
    const { results, model } = await generate(idempotentTool(await payTool(service, ran), { store }), steps, thread);
    assert.deepEqual(ran, [bob, bob, alice], "the tool never sees the ordinal");
    const scope = scopeOf(thread);
    assert.deepEqual(service.requests.map((r) => r.key), [idemKey(scope, "pay", bob), idemKey(scope, "pay", bob, { repeat: 2 }), idemKey(scope, "pay", alice)]);
    assert.deepEqual(results.map((r) => r.result.receipt), ["rcpt_1", "rcpt_2", "rcpt_3", "rcpt_3"]);
    assert.match(toolMessageText(model, "alice-retry"), /Already done/);
  } finally {
    await service.close();
    await store.close();
  }
});

test("a Mastra tool whose schema has its own repeat keeps it and gets no ordinal", async () => {
  const { z } = await framework("zod");
  const store = await openStore("memory://");
  const service = await downstream();
  try {
    const ran = [];
    const schema = z.object({ to: z.string(), repeat: z.boolean() });
    const { model } = await generate(idempotentTool(await payTool(service, ran, schema), { store }), [[["a", { to: "bob", repeat: true }]]], uniqueRunId("thread"));
    assert.deepEqual(ran, [{ to: "bob", repeat: true }]);
    assert.deepEqual(model.doGenerateCalls[0].tools[0].inputSchema.properties.repeat, { type: "boolean" });
  } finally {
    await service.close();
    await store.close();
  }
});

test("a replayed failure reaches the Mastra model as the recorded error's message, then the note", async () => {
  const { createTool } = await framework("@mastra/core/tools");
  const { z } = await framework("zod");
  const store = await openStore("memory://");
  try {
    let runs = 0;
    const decline = createTool({
      id: "pay",
      description: "Charge a card.",
      inputSchema: z.object({ card: z.string() }),
      execute: async () => {
        runs++;
        throw new PermanentError("card declined");
      },
    });
    const input = { card: "4000" };
    const { model } = await generate(idempotentTool(decline, { store }), [[["a", input]], [["b", input]]], uniqueRunId("thread"));
    assert.equal(runs, 1);
    assert.match(toolMessageText(model, "a"), /card declined/);
    assert.doesNotMatch(toolMessageText(model, "a"), /Already tried/);
    assert.match(toolMessageText(model, "b"), /card declined\\n\\nAlready tried: an identical call of `pay` in this scope failed at /);
  } finally {
    await store.close();
  }
});

test("a Mastra tool whose input schema is a Standard JSON Schema with its own repeat keeps it", async () => {
  const store = await openStore("memory://");
  const service = await downstream();
  try {
    const ran = [];
    const json = { type: "object", properties: { to: { type: "string" }, repeat: { type: "string" } }, required: ["to"], additionalProperties: false };
    const schema = { "~standard": { version: 1, vendor: "test", validate: (value) => ({ value }), jsonSchema: { input: () => json, output: () => json } } };
    const tool = idempotentTool(await payTool(service, ran, schema), { store, options: {} });
    assert.equal(tool.inputSchema, schema, "no ordinal added over its own");
    await generate(tool, [[["a", { to: "bob", repeat: "weekly" }]]], uniqueRunId("thread"));
    assert.deepEqual(ran, [{ to: "bob", repeat: "weekly" }]);
  } finally {
    await service.close();
    await store.close();
  }
});
