// The AI SDK wrapper (toolonce/ai-sdk) in a real `generateText` tool loop of the current AI SDK
// (examples/ pins it; ai-sdk-majors.test.js runs the earlier majors) with its MockLanguageModelV3: the tool call id is not the identity (a model asking again with a new
// one is the duplicate stopped), a duplicate gets the package layer's replay, the caller's
// scope separates runs, and refusals reach the model as tool errors.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { openStore, idempotent, idemKey, InvalidArguments } = require("..");
const { idempotentTool, runContext } = require("../dist/ai-sdk.js");
const { framework, example } = require("./frameworks.js");
const { storeUrls, uniqueRunId } = require("./support.js");

const INPUT = { customerId: "cus_9", amountCents: 700 };
const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};
const step = (...ids) => ({
  content: ids.map((toolCallId) => ({ type: "tool-call", toolCallId, toolName: "send_invoice", input: JSON.stringify(INPUT) })),
  finishReason: { unified: "tool-calls", raw: "tool_calls" },
  usage,
  warnings: [],
});
const done = { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };

/** A counted send_invoice tool made by the AI SDK's own tool(). */
async function invoiceTool(counts, delayMs = 0) {
  const { tool } = await framework("ai");
  const { z } = await framework("zod");
  return tool({
    description: "Send an invoice.",
    inputSchema: z.object({ customerId: z.string(), amountCents: z.number() }),
    async execute(input) {
      counts.sent++;
      if (delayMs) await new Promise((resolve) => setTimeout(resolve, delayMs));
      return { invoiceId: `inv_${counts.sent}`, to: input.customerId };
    },
  });
}

/** Runs generateText with the scripted steps; resolves with every tool result and error. */
async function run(tools, steps, context) {
  const { generateText, stepCountIs } = await framework("ai");
  const { MockLanguageModelV3 } = await framework("ai/test");
  const result = await generateText({
    model: new MockLanguageModelV3({ doGenerate: [...steps, done] }),
    tools,
    stopWhen: stepCountIs(steps.length + 1),
    prompt: "invoice cus_9",
    toolsContext: context === undefined ? undefined : { send_invoice: context },
  });
  const parts = result.steps.flatMap((s) => s.content).filter((p) => p.type === "tool-result" || p.type === "tool-error");
  return parts.map((p) => ({ id: p.toolCallId, type: p.type, output: p.output, error: p.error }));
}

for (const name of ["memory", "sqlite"]) {
  test(`the AI SDK example sends its invoice once across a repeated call and a retried run (${name})`, async () => {
    const { main } = await example("ai-sdk");
    const report = await main(storeUrls()[name]);
    assert.equal(report.effects, 1);
    assert.equal(report.expected, 1);
    const results = report.runs.flat();
    assert.deepEqual(results.map((r) => r.id), ["call_1_a", "call_1_b", "call_2_a", "call_2_b"]);
    assert.ok(results.every((r) => JSON.stringify(r.output) === JSON.stringify({ invoiceId: "inv_1", status: "sent" })));
  });
}

test("without the wrapper the same scripted loop sends the invoice every time the model asks", async () => {
  const counts = { sent: 0 };
  await run({ send_invoice: await invoiceTool(counts) }, [step("a"), step("b")]);
  assert.equal(counts.sent, 2);
});

test("a new tool call id is not a new operation: the duplicate is the package layer's replay", async () => {
  const store = await openStore("memory://");
  try {
    const counts = { sent: 0 };
    const runId = uniqueRunId();
    const tools = { send_invoice: idempotentTool("send_invoice", await invoiceTool(counts), { store, scope: runId }) };
    const parts = await run(tools, [step("a"), step("b")]);
    assert.equal(counts.sent, 1);
    assert.deepEqual(parts.map((p) => [p.id, p.type, p.output]), [
      ["a", "tool-result", { invoiceId: "inv_1", to: "cus_9" }],
      ["b", "tool-result", { invoiceId: "inv_1", to: "cus_9" }],
    ]);
    const plain = idempotent({ kind: "write", name: "send_invoice", run: () => assert.fail("must not run") }, store);
    const answer = await plain.runDetailed(INPUT, { runId });
    assert.equal(answer.outcome, "replayed");
    assert.equal(answer.key, idemKey(runId, "send_invoice", INPUT));
    assert.deepEqual(answer.result, { invoiceId: "inv_1", to: "cus_9" });
  } finally {
    await store.close();
  }
});

test("the caller's scope separates runs: a function of the run's context (runContext), or a string", async () => {
  const store = await openStore("memory://");
  try {
    const counts = { sent: 0 };
    const byContext = idempotentTool("send_invoice", await invoiceTool(counts), { store, scope: (o) => runContext(o).runId });
    const one = uniqueRunId("one");
    await run({ send_invoice: byContext }, [step("a")], { runId: one });
    await run({ send_invoice: byContext }, [step("b")], { runId: one });
    await run({ send_invoice: byContext }, [step("c")], { runId: uniqueRunId("two") });
    assert.equal(counts.sent, 2, "one send per run id");
    const fixed = idempotentTool("send_invoice", await invoiceTool(counts), { store, scope: one });
    await run({ send_invoice: fixed }, [step("d")]);
    assert.equal(counts.sent, 2, "the string scope is the same run");
  } finally {
    await store.close();
  }
});

test("two identical calls in one step run once: the twin is a tool error in flight, or waits with inFlight wait", async () => {
  const store = await openStore("memory://");
  try {
    const counts = { sent: 0 };
    const rejecting = idempotentTool("send_invoice", await invoiceTool(counts, 100), { store, scope: uniqueRunId() });
    const parts = await run({ send_invoice: rejecting }, [step("a", "b")]);
    assert.equal(counts.sent, 1);
    const [first, twin] = parts.sort((x, y) => x.id.localeCompare(y.id));
    assert.equal(first.type, "tool-result");
    assert.equal(twin.type, "tool-error");
    assert.equal(twin.error.outcome, "in_flight");
    const waiting = idempotentTool("send_invoice", await invoiceTool(counts, 100), { store, scope: uniqueRunId(), options: { inFlight: { wait: 5000 } } });
    const waited = await run({ send_invoice: waiting }, [step("c", "d")]);
    assert.equal(counts.sent, 2);
    assert.deepEqual(waited.map((p) => p.type), ["tool-result", "tool-result"]);
    assert.deepEqual(waited[0].output, waited[1].output);
  } finally {
    await store.close();
  }
});

test("a scope that is not a non-empty string refuses the call before anything runs", async () => {
  const store = await openStore("memory://");
  try {
    const counts = { sent: 0 };
    const wrapped = idempotentTool("send_invoice", await invoiceTool(counts), { store, scope: /** @type {any} */ (() => undefined) });
    await assert.rejects(wrapped.execute(INPUT, { toolCallId: "a", messages: [] }), InvalidArguments);
    assert.equal(counts.sent, 0);
  } finally {
    await store.close();
  }
});

test("input the tool's schema turns into a Set cannot be keyed: the model gets a tool error naming it, and execute never runs", async () => {
  const { tool, generateText, stepCountIs } = await framework("ai");
  const { MockLanguageModelV3 } = await framework("ai/test");
  const { z } = await framework("zod");
  const store = await openStore("memory://");
  try {
    let runs = 0;
    // A transform of the string the model sends into a value JSON cannot carry.
    const book = tool({ description: "Book a slot.", inputSchema: z.object({ when: z.string().transform((s) => new Set([s])) }), execute: async () => ++runs });
    const wrapped = idempotentTool("book", book, { store, scope: uniqueRunId() });
    const call = { type: "tool-call", toolCallId: "a", toolName: "book", input: JSON.stringify({ when: "2025-01-01T09:00:00Z" }) };
    const asked = { content: [call], finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage, warnings: [] };
    const result = await generateText({ model: new MockLanguageModelV3({ doGenerate: [asked, done] }), tools: { book: wrapped }, stopWhen: stepCountIs(2), prompt: "book" });
    const errors = result.steps.flatMap((s) => s.content).filter((p) => p.type === "tool-error");
    assert.equal(errors.length, 1);
    assert.ok(errors[0].error instanceof InvalidArguments, String(errors[0].error));
    assert.match(errors[0].error.message, /args\.when: a Set cannot be keyed exactly/);
    assert.equal(runs, 0);
  } finally {
    await store.close();
  }
});

test("idempotentTool refuses a bad configuration with a message naming it", async () => {
  const store = await openStore("memory://");
  try {
    const t = await invoiceTool({ sent: 0 });
    // @ts-expect-error: no scope, which the AI SDK adapter needs
    assert.throws(() => idempotentTool("send_invoice", t, { store }), /scope must be a non-empty string or a function/);
    // @ts-expect-error: a misspelt option
    assert.throws(() => idempotentTool("send_invoice", t, { store, scope: "r", scop: 1 }), /unknown option "scop"/);
    // @ts-expect-error: a client-side tool, without execute
    assert.throws(() => idempotentTool("send_invoice", { description: "client side" }, { store, scope: "r" }), /has no execute function/);
    assert.throws(() => idempotentTool("", t, { store, scope: "r" }), /tool.name must be a non-empty string/);
    assert.throws(() => idempotentTool("send_invoice", t, { store, scope: "r", options: { retention: -1 } }), /retention must be/);
  } finally {
    await store.close();
  }
});
