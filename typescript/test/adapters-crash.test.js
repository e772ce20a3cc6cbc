// A process killed inside a write tool that a framework adapter runs leaves the operation
// `unknown` (the lease runs out, nothing released it): the retried run, in the real framework,
// gets OutcomeUnknown and the tool does not run again. The adapters add no semantics here;
// this is the layer's hold reaching each framework.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const path = require("node:path");
const readline = require("node:readline");
const { spawn } = require("node:child_process");
const { openStore, OutcomeUnknown } = require("..");
const { idempotentTool: aiSdkTool } = require("../dist/ai-sdk.js");
const { idempotentMiddleware } = require("../dist/langchain.js");
const { idempotentTool: mastraTool } = require("../dist/mastra.js");
const { framework } = require("./frameworks.js");
const { storeUrls, uniqueRunId, sleep } = require("./support.js");

const HANG = path.join(__dirname, "fixtures", "adapter-hang.js");
const INPUT = { customerId: "cus_crash", amountCents: 1200 };
const LEASE_MS = 300;
const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

/** Runs the fixture until its tool runs, SIGKILLs it, and waits out its lease. */
async function killMidCall(adapter, url, scope) {
  const child = spawn(process.execPath, [HANG, adapter, url, scope, String(LEASE_MS)], { stdio: ["ignore", "pipe", "inherit"] });
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  const line = await new Promise((resolve, reject) => {
    readline.createInterface({ input: child.stdout }).once("line", resolve);
    exited.then(({ code }) => reject(new Error(`the child exited (${code}) before its tool ran`)));
  });
  assert.equal(line, "running");
  child.kill("SIGKILL");
  assert.equal((await exited).signal, "SIGKILL");
  await sleep(LEASE_MS * 2);
}

test("a process killed inside an AI SDK tool leaves it unknown: the retried loop gets a tool error and does not run it", async () => {
  const url = storeUrls().sqlite;
  const scope = uniqueRunId();
  await killMidCall("ai-sdk", url, scope);
  const { generateText, stepCountIs, tool } = await framework("ai");
  const { MockLanguageModelV3 } = await framework("ai/test");
  const { z } = await framework("zod");
  const store = await openStore(url);
  try {
    let runs = 0;
    const send = tool({ inputSchema: z.object({ customerId: z.string(), amountCents: z.number() }), execute: async () => ++runs });
    const model = new MockLanguageModelV3({
      doGenerate: [
        { content: [{ type: "tool-call", toolCallId: "retry", toolName: "send_invoice", input: JSON.stringify(INPUT) }], finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage, warnings: [] },
        { content: [{ type: "text", text: "held" }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] },
      ],
    });
    const result = await generateText({ model, tools: { send_invoice: aiSdkTool("send_invoice", send, { store, scope }) }, stopWhen: stepCountIs(2), prompt: "retry" });
    const errors = result.steps.flatMap((s) => s.content).filter((p) => p.type === "tool-error");
    assert.equal(errors.length, 1);
    assert.ok(errors[0].error instanceof OutcomeUnknown, `got ${errors[0].error}`);
    assert.equal(runs, 0);
  } finally {
    await store.close();
  }
});

test("a process killed inside a LangChain tool leaves it unknown: the retried run on the thread fails and does not run it", async () => {
  const url = storeUrls().sqlite;
  const thread = uniqueRunId("thread");
  await killMidCall("langchain", url, thread);
  const { createAgent, tool } = await framework("langchain");
  const { fakeModel } = await framework("@langchain/core/testing");
  const { z } = await framework("zod");
  const store = await openStore(url);
  try {
    let runs = 0;
    const send = tool(async () => String(++runs), { name: "send_invoice", description: "Send.", schema: z.object({ customerId: z.string(), amountCents: z.number() }) });
    const model = fakeModel().respondWithTools([{ name: "send_invoice", args: INPUT, id: "retry" }]);
    const agent = createAgent({ model, tools: [send], middleware: [idempotentMiddleware({ store })] });
    await assert.rejects(agent.invoke({ messages: [{ role: "user", content: "retry" }] }, { configurable: { thread_id: thread } }), (/** @type {any} */ e) => e.cause instanceof OutcomeUnknown);
    assert.equal(runs, 0);
  } finally {
    await store.close();
  }
});

test("a process killed inside a Mastra tool leaves it unknown: the retried agent run on the thread does not run it", async () => {
  const url = storeUrls().sqlite;
  const thread = uniqueRunId("thread");
  await killMidCall("mastra", url, thread);
  const { createTool } = await framework("@mastra/core/tools");
  const { z } = await framework("zod");
  const store = await openStore(url);
  try {
    let runs = 0;
    const send = createTool({ id: "send_invoice", description: "Send.", inputSchema: z.object({ customerId: z.string(), amountCents: z.number() }), execute: async () => ++runs });
    const wrapped = mastraTool(send, { store });
    const { Agent } = await framework("@mastra/core/agent");
    const { MockLanguageModelV3 } = await framework("ai/test");
    const model = new MockLanguageModelV3({
      doGenerate: [
        { content: [{ type: "tool-call", toolCallId: "retry", toolName: "send_invoice", input: JSON.stringify(INPUT) }], finishReason: { unified: "tool-calls", raw: "tool_calls" }, usage, warnings: [] },
        { content: [{ type: "text", text: "held" }], finishReason: { unified: "stop", raw: "stop" }, usage, warnings: [] },
      ],
    });
    const agent = new Agent({ id: "a", name: "a", instructions: "Send invoices.", model, tools: { send_invoice: wrapped } });
    const result = await agent.generate("retry", { maxSteps: 2, memory: { thread, resource: "r" } });
    assert.equal(result.toolResults.length, 0, "the agent got a tool error, not a result");
    await assert.rejects(wrapped.execute(INPUT, { agent: { threadId: thread, resourceId: "r" } }), OutcomeUnknown);
    assert.equal(runs, 0);
  } finally {
    await store.close();
  }
});
