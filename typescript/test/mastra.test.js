// The Mastra wrapper (toolonce/mastra) on a tool made by Mastra's createTool, in a real Mastra
// Agent driven by the AI SDK's MockLanguageModelV3: a duplicate on the same thread gets the
// package layer's replay, threads are separate scopes, the input is checked before anything
// is claimed, and the wrapped tool is still a Mastra tool.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { openStore, idempotent, idemKey, InvalidArguments } = require("..");
const { idempotentTool, mastraScope, operation } = require("../dist/mastra.js");
const { framework, example, downstream } = require("./frameworks.js");
const { storeUrls, uniqueRunId } = require("./support.js");

const INPUT = { requester: "ada@example.com", subject: "Refund" };
const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};
const step = (...ids) => ({
  content: ids.map((toolCallId) => ({ type: "tool-call", toolCallId, toolName: "open_ticket", input: JSON.stringify(INPUT) })),
  finishReason: { unified: "tool-calls", raw: "tool_calls" },
  usage,
  warnings: [],
});
const done = { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] };

async function ticketTool(counts) {
  const { createTool } = await framework("@mastra/core/tools");
  const { z } = await framework("zod");
  return createTool({
    id: "open_ticket",
    description: "Open a support ticket.",
    inputSchema: z.object({ requester: z.string(), subject: z.string() }),
    execute: async () => {
      counts.tickets++;
      return { ticketId: `T-${counts.tickets}` };
    },
  });
}

/** One agent.generate with the scripted steps on `thread` (none when undefined). */
async function generate(tool, steps, thread, resource = "ada") {
  const { Agent } = await framework("@mastra/core/agent");
  const { MockLanguageModelV3 } = await framework("ai/test");
  const model = new MockLanguageModelV3({ doGenerate: [...steps, done] });
  const agent = new Agent({ id: "support", name: "support", instructions: "Open tickets.", model, tools: { open_ticket: tool } });
  const memory = thread === undefined ? {} : { memory: { thread, resource } };
  const result = await agent.generate("open a ticket", { maxSteps: steps.length + 1, ...memory });
  return result.toolResults.map((r) => r.payload);
}

for (const name of ["memory", "sqlite"]) {
  test(`the Mastra example opens one ticket across a repeated call and a retried run (${name})`, async () => {
    const { main } = await example("mastra");
    const report = await main(storeUrls()[name]);
    assert.equal(report.effects, 1);
    assert.equal(report.expected, 1);
    const results = report.runs.flat();
    assert.equal(results.length, 4);
    assert.ok(results.every((r) => r.result.ticketId === "T-1"));
  });
}

test("without the wrapper the same scripted agent opens a ticket every time the model asks", async () => {
  const counts = { tickets: 0 };
  await generate(await ticketTool(counts), [step("a"), step("b")], uniqueRunId("thread"));
  assert.equal(counts.tickets, 2);
});

test("a duplicate on the same Mastra thread is the package layer's replay, keyed by the resource and thread", async () => {
  const store = await openStore("memory://");
  try {
    const counts = { tickets: 0 };
    const thread = uniqueRunId("thread");
    const results = await generate(idempotentTool(await ticketTool(counts), { store }), [step("a"), step("b")], thread);
    assert.equal(counts.tickets, 1);
    assert.deepEqual(results.map((r) => [r.toolCallId, r.result]), [
      ["a", { ticketId: "T-1" }],
      ["b", { ticketId: "T-1" }],
    ]);
    const plain = idempotent({ kind: "write", name: "open_ticket", run: () => assert.fail("must not run") }, store);
    const scope = JSON.stringify(["ada", thread]); // The resource (a principal) and the thread.
    assert.equal(mastraScope({ agent: { threadId: thread, resourceId: "ada" } }), scope);
    const answer = await plain.runDetailed(INPUT, { runId: scope });
    assert.equal(answer.outcome, "replayed");
    assert.equal(answer.key, idemKey(scope, "open_ticket", INPUT));
    assert.deepEqual(answer.result, { ticketId: "T-1" });
  } finally {
    await store.close();
  }
});

test("the Mastra tool's execute gets the operation key and sends it downstream as Idempotency-Key; a duplicate on the thread sends nothing", async () => {
  const { createTool } = await framework("@mastra/core/tools");
  const { z } = await framework("zod");
  const store = await openStore("memory://");
  const service = await downstream();
  try {
    const seen = [];
    const ticket = createTool({
      id: "open_ticket",
      description: "Open a support ticket.",
      inputSchema: z.object({ requester: z.string(), subject: z.string() }),
      execute: async (_input, context) => {
        seen.push(operation(context));
        return { ticketId: await service.send(operation(context).key), thread: context.agent?.threadId };
      },
    });
    const thread = uniqueRunId("thread");
    const results = await generate(idempotentTool(ticket, { store }), [step("a"), step("b")], thread);
    const key = idemKey(JSON.stringify(["ada", thread]), "open_ticket", INPUT);
    assert.deepEqual(service.requests, [{ method: "POST", key }]);
    assert.deepEqual(seen, [{ key, idempotencyHeader: ["Idempotency-Key", key], mayHaveRunBefore: false }]);
    assert.deepEqual(results.map((r) => r.result), [{ ticketId: "rcpt_1", thread }, { ticketId: "rcpt_1", thread }], "Mastra's own context still reaches the tool");
  } finally {
    await service.close();
    await store.close();
  }
});

test("another Mastra thread is another scope, and a caller's scope replaces the thread", async () => {
  const store = await openStore("memory://");
  try {
    const counts = { tickets: 0 };
    const byThread = idempotentTool(await ticketTool(counts), { store });
    await generate(byThread, [step("a")], uniqueRunId("thread-one"));
    await generate(byThread, [step("b")], uniqueRunId("thread-two"));
    assert.equal(counts.tickets, 2);
    const scope = uniqueRunId("ticket-batch");
    const byCaller = idempotentTool(await ticketTool(counts), { store, scope: () => scope });
    await generate(byCaller, [step("c")], uniqueRunId("thread-three"));
    await generate(byCaller, [step("d")], uniqueRunId("thread-four"));
    assert.equal(counts.tickets, 3);
  } finally {
    await store.close();
  }
});

test("the same thread id under another Mastra resource (another user) is another scope", async () => {
  const store = await openStore("memory://");
  try {
    const counts = { tickets: 0 };
    const wrapped = idempotentTool(await ticketTool(counts), { store });
    const thread = uniqueRunId("thread");
    const [ada] = await generate(wrapped, [step("a")], thread, "ada");
    const [bob] = await generate(wrapped, [step("b")], thread, "bob");
    assert.equal(counts.tickets, 2);
    assert.notDeepEqual(ada.result, bob.result, "bob does not get ada's ticket");
  } finally {
    await store.close();
  }
});

test("a Mastra call with neither a thread nor a scope is refused and opens nothing", async () => {
  const store = await openStore("memory://");
  try {
    const counts = { tickets: 0 };
    const wrapped = idempotentTool(await ticketTool(counts), { store });
    await assert.rejects(wrapped.execute(INPUT, {}), (e) => e instanceof InvalidArguments && /thread id/.test(e.message));
    const results = await generate(wrapped, [step("a")], undefined);
    assert.equal(counts.tickets, 0);
    assert.equal(results.length, 0, "the agent got a tool error, not a result");
  } finally {
    await store.close();
  }
});

test("input that fails the Mastra tool's schema is refused before anything is claimed", async () => {
  const store = await openStore("memory://");
  try {
    const counts = { tickets: 0 };
    const thread = uniqueRunId("thread");
    const wrapped = idempotentTool(await ticketTool(counts), { store });
    await assert.rejects(wrapped.execute({ requester: 42 }, { agent: { threadId: thread } }), (e) => e instanceof InvalidArguments && /schema/.test(e.message));
    assert.equal(counts.tickets, 0);
    // Nothing was stored for it: the same (bad) arguments asked of the layer run as a first call.
    const plain = idempotent({ kind: "write", name: "open_ticket", run: () => "first" }, store);
    const scope = mastraScope({ agent: { threadId: thread } });
    assert.equal((await plain.runDetailed({ requester: 42 }, { runId: scope })).outcome, "executed");
  } finally {
    await store.close();
  }
});

test("input the Mastra tool's schema turns into a Set cannot be keyed: refused naming it, and nothing runs", async () => {
  const { createTool } = await framework("@mastra/core/tools");
  const { z } = await framework("zod");
  const store = await openStore("memory://");
  try {
    let runs = 0;
    const book = createTool({ id: "book", description: "Book a slot.", inputSchema: z.object({ when: z.string().transform((s) => new Set([s])) }), execute: async () => ++runs });
    const wrapped = idempotentTool(book, { store });
    await assert.rejects(
      wrapped.execute({ when: "2025-01-01T09:00:00Z" }, { agent: { threadId: uniqueRunId("thread") } }),
      (e) => e instanceof InvalidArguments && /args\.when: a Set cannot be keyed exactly/.test(e.message),
    );
    assert.equal(runs, 0);
  } finally {
    await store.close();
  }
});

test("the wrapped tool is still a Mastra tool and the original is left as it was", async () => {
  const { Tool } = await framework("@mastra/core/tools");
  const store = await openStore("memory://");
  try {
    const counts = { tickets: 0 };
    const original = await ticketTool(counts);
    const originalExecute = original.execute;
    const wrapped = idempotentTool(original, { store });
    assert.ok(wrapped instanceof Tool);
    assert.equal(wrapped[Symbol.for("mastra.core.tool.Tool")], true);
    assert.equal(wrapped.id, "open_ticket");
    assert.equal(wrapped.description, original.description);
    const originalSchema = original.inputSchema;
    // The model's schema gains the repeat ordinal (mastra-repeats.test.js); the original keeps its own.
    assert.notEqual(wrapped.inputSchema, originalSchema);
    assert.equal(original.inputSchema, originalSchema);
    assert.equal(idempotentTool(original, { store, options: { repeatArgument: false } }).inputSchema, originalSchema, "without the ordinal the schema is the original");
    assert.equal(original.execute, originalExecute);
    assert.notEqual(wrapped.execute, originalExecute);
  } finally {
    await store.close();
  }
});

test("the Mastra idempotentTool refuses a bad configuration with a message naming it", async () => {
  const store = await openStore("memory://");
  try {
    const t = await ticketTool({ tickets: 0 });
    // @ts-expect-error: a misspelt option
    assert.throws(() => idempotentTool(t, { store, scop: "x" }), /unknown option "scop"/);
    assert.throws(() => idempotentTool(t, { store, scope: "" }), /scope must be a non-empty string or a function/);
    assert.throws(() => idempotentTool({ id: "x" }, { store }), /has no execute function/);
    // @ts-expect-error: not a store from openStore
    assert.throws(() => idempotentTool(t, { store: {} }), /store must come from openStore/);
  } finally {
    await store.close();
  }
});
