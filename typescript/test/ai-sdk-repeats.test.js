// Intended repeats told apart from retries (issue 43) in real `generateText` loops of every AI SDK
// major (5, 6, 7) with each major's own mock model: the model sees the optional repeat ordinal
// in the tool's input schema, a replay's note in the tool message while the tool-result output
// stays the recorded one, a bad ordinal is refused and nothing runs, and a scripted agent that
// pays Bob 5 twice on purpose and retries another payment makes exactly three requests with
// three Idempotency-Keys to a real loopback service.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { openStore, idemKey, PermanentError } = require("..");
const { TEXTS } = require("../dist/artifacts.generated.js");
const { idempotentTool } = require("../dist/ai-sdk.js");
const { framework, AI_SDKS, majorOf, downstream } = require("./frameworks.js");
const { uniqueRunId } = require("./support.js");

function finished(major, content, reason) {
  if (major === 5) return { content, finishReason: reason, usage: { inputTokens: 1, outputTokens: 1, totalTokens: 2 }, warnings: [] };
  const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };
  return { content, finishReason: { unified: reason, raw: reason }, usage, warnings: [] };
}

/** One model step calling `pay` once per [id, input]. */
const step = (major, ...calls) => finished(major, calls.map(([toolCallId, input, toolName]) => ({ type: "tool-call", toolCallId, toolName: toolName ?? "pay", input: JSON.stringify(input) })), "tool-calls");

async function mockModel(sdk, major, steps) {
  const mocks = await framework(`${sdk}/test`);
  const Mock = { 5: mocks.MockLanguageModelV2, 6: mocks.MockLanguageModelV3, 7: mocks.MockLanguageModelV4 }[major];
  return new Mock({ doGenerate: [...steps, finished(major, [{ type: "text", text: "done" }], "stop")] });
}

/** A pay tool made by the major's tool(): execute POSTs to `service` with the operation's key. */
async function payTool(sdk, service, ran, schema) {
  const { tool } = await framework(sdk);
  const { z } = await framework("zod");
  return tool({
    description: "Pay someone.",
    inputSchema: schema ?? z.object({ to: z.string(), cents: z.number() }),
    async execute(input, options) {
      ran.push(input);
      return { receipt: await service.send(options.toolonce.key), to: input.to };
    },
  });
}

/** Runs the scripted steps; the tool results and errors, and the mock model (its calls say what it saw). */
async function run(sdk, tools, steps) {
  const major = majorOf(sdk);
  const { generateText, stepCountIs } = await framework(sdk);
  const model = await mockModel(sdk, major, steps.map((calls) => step(major, ...calls)));
  const result = await generateText({ model, tools, stopWhen: stepCountIs(steps.length + 1), prompt: "pay" });
  const parts = result.steps.flatMap((s) => s.content).filter((p) => p.type === "tool-result" || p.type === "tool-error");
  return { parts: parts.map((p) => ({ id: p.toolCallId, type: p.type, output: p.output, error: p.error })), model };
}

/** The text the model read in the tool message answering `toolCallId` (its last call's prompt has them all). */
function toolMessageText(model, toolCallId) {
  const prompt = model.doGenerateCalls.at(-1).prompt;
  const part = prompt.flatMap((m) => (m.role === "tool" ? m.content : [])).find((p) => p.toolCallId === toolCallId);
  assert.ok(part, `no tool message for ${toolCallId}`);
  return JSON.stringify(part.output);
}

for (const sdk of AI_SDKS) {
  const major = majorOf(sdk);

  test(`the model sees the optional repeat ordinal in the tool's schema, described, and the tool's own properties (AI SDK ${major})`, async () => {
    const store = await openStore("memory://");
    const service = await downstream();
    try {
      const pay = idempotentTool("pay", await payTool(sdk, service, []), { store, scope: uniqueRunId() });
      const { model } = await run(sdk, { pay }, [[["a", { to: "bob", cents: 500 }]]]);
      const shown = model.doGenerateCalls[0].tools.find((t) => t.name === "pay");
      const schema = shown.inputSchema ?? shown.parameters;
      assert.deepEqual(Object.keys(schema.properties), ["to", "cents", "repeat"]);
      assert.deepEqual(schema.required, ["to", "cents"], "the ordinal is optional");
      assert.deepEqual(schema.properties.repeat, { type: "integer", minimum: 1, maximum: 1000, description: TEXTS.repeat_description });
      assert.equal(schema.additionalProperties, false, "converted as the SDK converts a zod schema");
    } finally {
      await service.close();
      await store.close();
    }
  });

  test(`a replay's note reaches the model in the tool message while the output program code gets is the recorded one (AI SDK ${major})`, async () => {
    const store = await openStore("memory://");
    const service = await downstream();
    try {
      const ran = [];
      const runId = uniqueRunId();
      const pay = idempotentTool("pay", await payTool(sdk, service, ran), { store, scope: runId });
      const input = { to: "bob", cents: 500 };
      const { parts, model } = await run(sdk, { pay }, [[["a", input]], [["b", input]]]);
      assert.equal(ran.length, 1);
      assert.deepEqual(parts.map((p) => [p.id, p.type, p.output]), [
        ["a", "tool-result", { receipt: "rcpt_1", to: "bob" }],
        ["b", "tool-result", { receipt: "rcpt_1", to: "bob" }],
      ]);
      assert.doesNotMatch(toolMessageText(model, "a"), /Already done/, "an executed call has no note");
      const replayed = toolMessageText(model, "b");
      assert.match(replayed, /rcpt_1/);
      assert.ok(replayed.includes(`Already done: an identical call of \`pay\` in this scope took effect at `), replayed);
      assert.ok(replayed.includes(`(operation ${idemKey(runId, "pay", input)})`), replayed);
      assert.ok(replayed.includes(JSON.stringify(`with the same arguments and "repeat": 2.`).slice(1, -1)), replayed);
    } finally {
      await service.close();
      await store.close();
    }
  });

  test(`a replayed primitive result (a number, a string) carries the note to the model too (AI SDK ${major})`, async () => {
    const store = await openStore("memory://");
    try {
      const { tool } = await framework(sdk);
      const { z } = await framework("zod");
      let runs = 0;
      const count = idempotentTool("count", tool({ description: "Count.", inputSchema: z.object({ n: z.number() }), execute: async () => ++runs }), { store, scope: uniqueRunId() });
      const word = idempotentTool("word", tool({ description: "Say.", inputSchema: z.object({ n: z.number() }), execute: async () => "said" }), { store, scope: uniqueRunId() });
      const { parts, model } = await run(sdk, { count, word }, [[["a", { n: 1 }, "count"], ["w1", { n: 1 }, "word"]], [["b", { n: 1 }, "count"], ["w2", { n: 1 }, "word"]]]);
      assert.equal(runs, 1);
      assert.deepEqual(parts.filter((p) => p.id === "a" || p.id === "b").map((p) => p.output), [1, 1], "program code gets the recorded number");
      assert.doesNotMatch(toolMessageText(model, "a"), /Already done/);
      assert.match(toolMessageText(model, "b"), /Already done: an identical call of `count`/);
      assert.doesNotMatch(toolMessageText(model, "w1"), /Already done/);
      assert.match(toolMessageText(model, "w2"), /said[^]*Already done: an identical call of `word`/);
    } finally {
      await store.close();
    }
  });

  test(`an invalid ordinal is a tool error with the package's text, and nothing is claimed or run (AI SDK ${major})`, async () => {
    const store = await openStore("memory://");
    const service = await downstream();
    try {
      const ran = [];
      const runId = uniqueRunId();
      const pay = idempotentTool("pay", await payTool(sdk, service, ran), { store, scope: runId });
      const { parts, model } = await run(sdk, { pay }, [[["a", { to: "bob", cents: 500, repeat: 0 }], ["b", { to: "bob", cents: 500, repeat: 2.5 }]]]);
      assert.deepEqual(parts.map((p) => p.type), ["tool-error", "tool-error"]);
      assert.equal(parts[0].error.outcome, "invalid_arguments");
      assert.ok(parts[0].error.message.startsWith("Not executed: `repeat` must be a whole number from 1 to 1000 (got 0)."), parts[0].error.message);
      assert.match(toolMessageText(model, "b"), /got 2\.5/);
      assert.equal(ran.length, 0);
      assert.equal(service.requests.length, 0);
      assert.equal(await store.get(idemKey(runId, "pay", { to: "bob", cents: 500 })), undefined, "nothing was claimed");
    } finally {
      await service.close();
      await store.close();
    }
  });

  test(`a scripted agent pays Bob 5 twice on purpose and retries another payment: three effects, three keys (AI SDK ${major})`, async () => {
    const store = await openStore("memory://");
    const service = await downstream();
    try {
      const ran = [];
      const runId = uniqueRunId();
      const pay = idempotentTool("pay", await payTool(sdk, service, ran), { store, scope: runId });
      const bob = { to: "bob", cents: 500 };
      const alice = { to: "alice", cents: 300 };
      const { parts, model } = await run(sdk, { pay }, [
        [["bob-1", bob]],
        [["bob-2", { ...bob, repeat: 2 }]],
        [["alice-1", alice]],
        [["alice-retry", alice]],
        [["bob-2-retry", { ...bob, repeat: 2 }]],
      ]);
      assert.deepEqual(parts.map((p) => p.type), Array(5).fill("tool-result"));
      assert.deepEqual(ran, [bob, bob, alice], "the handler never sees the ordinal");
      const keys = service.requests.map((r) => r.key);
      assert.equal(keys.length, 3, "Bob twice on purpose, Alice once");
      assert.equal(new Set(keys).size, 3);
      assert.deepEqual(keys, [idemKey(runId, "pay", bob), idemKey(runId, "pay", bob, { repeat: 2 }), idemKey(runId, "pay", alice)]);
      assert.deepEqual(parts.map((p) => p.output.receipt), ["rcpt_1", "rcpt_2", "rcpt_3", "rcpt_3", "rcpt_2"]);
      assert.match(toolMessageText(model, "alice-retry"), /Already done.*\\"repeat\\": 2\./);
      assert.match(toolMessageText(model, "bob-2-retry"), /Already done.*\\"repeat\\": 3\./);
    } finally {
      await service.close();
      await store.close();
    }
  });

  test(`a replayed failure reaches the model as a tool error whose message is the recorded one, then the note (AI SDK ${major})`, async () => {
    const { tool } = await framework(sdk);
    const { z } = await framework("zod");
    const store = await openStore("memory://");
    try {
      let runs = 0;
      const decline = tool({
        description: "Charge a card.",
        inputSchema: z.object({ card: z.string() }),
        async execute() {
          runs++;
          throw new PermanentError("card declined");
        },
      });
      const charge = idempotentTool("pay", decline, { store, scope: uniqueRunId() });
      const input = { card: "4000" };
      const { parts, model } = await run(sdk, { pay: charge }, [[["a", input]], [["b", input]]]);
      assert.equal(runs, 1);
      assert.deepEqual(parts.map((p) => p.type), ["tool-error", "tool-error"]);
      assert.equal(parts[0].error.message, "card declined");
      assert.equal(parts[1].error.replayed, true);
      assert.ok(parts[1].error.message.startsWith("card declined\n\nAlready tried: an identical call of `pay` in this scope failed at "), parts[1].error.message);
      assert.match(toolMessageText(model, "b"), /Already tried/);
    } finally {
      await store.close();
    }
  });

  test(`a tool whose own schema has a repeat property keeps its own and gets no ordinal (AI SDK ${major})`, async () => {
    const { z } = await framework("zod");
    const store = await openStore("memory://");
    const service = await downstream();
    const warnings = [];
    const onWarning = (w) => warnings.push(w.message);
    process.on("warning", onWarning);
    const quiet = process.env.TOOLONCE_QUIET;
    delete process.env.TOOLONCE_QUIET;
    try {
      const ran = [];
      const schema = z.object({ to: z.string(), repeat: z.enum(["weekly", "monthly"]) });
      const pay = idempotentTool("pay", await payTool(sdk, service, ran, schema), { store, scope: uniqueRunId() });
      await new Promise((resolve) => setImmediate(resolve));
      assert.ok(warnings.some((w) => w.includes("the tool pay has its own argument \"repeat\"")), JSON.stringify(warnings));
      const { parts, model } = await run(sdk, { pay }, [[["a", { to: "bob", repeat: "weekly" }]]]);
      assert.equal(parts[0].type, "tool-result");
      assert.deepEqual(ran, [{ to: "bob", repeat: "weekly" }]);
      const shown = model.doGenerateCalls[0].tools[0];
      assert.deepEqual((shown.inputSchema ?? shown.parameters).properties.repeat, { type: "string", enum: ["weekly", "monthly"] });
    } finally {
      if (quiet !== undefined) process.env.TOOLONCE_QUIET = quiet;
      process.off("warning", onWarning);
      await service.close();
      await store.close();
    }
  });
}

test("repeatArgument renames the ordinal, and false shows none and keys the argument as the tool's own", async () => {
  const sdk = "ai";
  const store = await openStore("memory://");
  const service = await downstream();
  try {
    const again = idempotentTool("pay", await payTool(sdk, service, []), { store, scope: uniqueRunId(), options: { repeatArgument: "again" } });
    const off = idempotentTool("pay", await payTool(sdk, service, []), { store, scope: uniqueRunId(), options: { repeatArgument: false } });
    const { model } = await run(sdk, { pay: again }, [[["a", { to: "bob", cents: 1, again: 2 }]]]);
    assert.deepEqual(Object.keys(model.doGenerateCalls[0].tools[0].inputSchema.properties), ["to", "cents", "again"]);
    const plain = await run(sdk, { pay: off }, [[["a", { to: "bob", cents: 1 }]], [["b", { to: "bob", cents: 1 }]]]);
    assert.deepEqual(Object.keys(plain.model.doGenerateCalls[0].tools[0].inputSchema.properties), ["to", "cents"]);
    assert.ok(toolMessageText(plain.model, "b").includes(TEXTS.repeat_off), "a replay says it cannot be repeated");
  } finally {
    await service.close();
    await store.close();
  }
});
