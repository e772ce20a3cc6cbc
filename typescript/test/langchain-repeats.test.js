// Intended repeats told apart from retries (issue 43) through the LangChain.js middleware in a
// real `createAgent` with LangChain's own fake model: the model is bound each write tool with
// the optional repeat ordinal among its parameters (read here as LangChain's own
// convertToOpenAITool sends it), a replay's ToolMessage carries the note after the recorded
// content, a bad ordinal is refused and nothing runs, and a scripted agent paying Bob 5 twice
// on purpose and retrying another payment makes three requests with three keys.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { openStore, idemKey } = require("..");
const { TEXTS } = require("../dist/artifacts.generated.js");
const { idempotentMiddleware, operation } = require("../dist/langchain.js");
const { framework, downstream } = require("./frameworks.js");
const { uniqueRunId } = require("./support.js");

/**
 * An agent with a pay tool POSTing to `service` and a read tool; `steps` script the model, one tool call each.
 * @param {{ middleware: any, steps: any[], service: any, ran: any[], schema?: any }} options
 */
async function agentWith({ middleware, steps, service, ran, schema }) {
  const { createAgent, tool } = await framework("langchain");
  const { AIMessage } = await framework("@langchain/core/messages");
  const { fakeModel } = await framework("@langchain/core/testing");
  const { z } = await framework("zod");
  const pay = tool(
    async (args, runtime) => {
      ran.push(args);
      return `receipt ${await service.send(operation(runtime).key)}`;
    },
    { name: "pay", description: "Pay someone.", schema: schema ?? z.object({ to: z.string(), cents: z.number() }) },
  );
  const lookup = tool(async () => "bob exists", { name: "lookup", description: "Look someone up.", schema: z.object({ who: z.string() }), metadata: { toolonce: "read" } });
  const model = fakeModel();
  for (const call of steps) model.respondWithTools([call]);
  model.respond(new AIMessage("done"));
  const bound = [];
  const spy = { name: "spy", wrapModelCall: (request, handler) => (bound.push(request.tools), handler(request)) };
  const agent = createAgent({ model, tools: [lookup, pay], middleware: [middleware, spy] });
  return { agent, bound };
}

const ask = (agent, thread) => agent.invoke({ messages: [{ role: "user", content: "pay" }] }, { configurable: { thread_id: thread } });
const toolMessage = (state, id) => state.messages.find((m) => m.type === "tool" && m.tool_call_id === id);

test("the model is bound each write tool with the optional repeat ordinal, described; a read tool is bound as it is", async () => {
  const { convertToOpenAITool } = await framework("@langchain/core/utils/function_calling");
  const store = await openStore("memory://");
  const service = await downstream();
  try {
    const { agent, bound } = await agentWith({ middleware: idempotentMiddleware({ store }), steps: [{ name: "pay", args: { to: "bob", cents: 500 }, id: "a" }], service, ran: [] });
    await ask(agent, uniqueRunId("thread"));
    const sent = bound[0].map((t) => convertToOpenAITool(t).function);
    const pay = sent.find((f) => f.name === "pay");
    assert.deepEqual(Object.keys(pay.parameters.properties), ["to", "cents", "repeat"]);
    assert.deepEqual(pay.parameters.required, ["to", "cents"]);
    assert.deepEqual(pay.parameters.properties.repeat, { type: "integer", minimum: 1, maximum: 1000, description: TEXTS.repeat_description });
    assert.equal(pay.description, "Pay someone.");
    assert.deepEqual(Object.keys(sent.find((f) => f.name === "lookup").parameters.properties), ["who"]);
  } finally {
    await service.close();
    await store.close();
  }
});

test("a replay's ToolMessage carries the note after the recorded content", async () => {
  const store = await openStore("memory://");
  const service = await downstream();
  try {
    const ran = [];
    const thread = uniqueRunId("thread");
    const args = { to: "bob", cents: 500 };
    const steps = [{ name: "pay", args, id: "a" }, { name: "pay", args, id: "b" }];
    const { agent } = await agentWith({ middleware: idempotentMiddleware({ store }), steps, service, ran });
    const state = await ask(agent, thread);
    assert.equal(ran.length, 1);
    assert.equal(toolMessage(state, "a").content, "receipt rcpt_1");
    const replayed = toolMessage(state, "b").content;
    assert.ok(replayed.startsWith("receipt rcpt_1\n\nAlready done: an identical call of `pay` in this scope took effect at "), replayed);
    assert.ok(replayed.includes(`(operation ${idemKey(thread, "pay", args)})`), replayed);
    assert.ok(replayed.endsWith('with the same arguments and "repeat": 2.'), replayed);
  } finally {
    await service.close();
    await store.close();
  }
});

test("an invalid ordinal is told to the model in a ToolMessage with the package's text, the run goes on, and nothing is claimed or run", async () => {
  const store = await openStore("memory://");
  const service = await downstream();
  try {
    const ran = [];
    const thread = uniqueRunId("thread");
    const steps = [{ name: "pay", args: { to: "bob", cents: 500, repeat: -1 }, id: "a" }];
    const { agent } = await agentWith({ middleware: idempotentMiddleware({ store }), steps, service, ran });
    // The model reads the refusal, as every other adapter tells it: the run is not aborted.
    const state = await ask(agent, thread);
    const refusal = toolMessage(state, "a");
    assert.ok(refusal.content.startsWith("Not executed: `repeat` must be a whole number from 1 to 1000 (got -1)."), refusal.content);
    assert.equal(refusal.status, "error");
    assert.equal(ran.length, 0);
    assert.equal(service.requests.length, 0);
    assert.equal(await store.get(idemKey(thread, "pay", { to: "bob", cents: 500 })), undefined);
  } finally {
    await service.close();
    await store.close();
  }
});

test("a scripted agent pays Bob 5 twice on purpose and retries another payment: three effects, three keys", async () => {
  const store = await openStore("memory://");
  const service = await downstream();
  try {
    const ran = [];
    const thread = uniqueRunId("thread");
    const bob = { to: "bob", cents: 500 };
    const alice = { to: "alice", cents: 300 };
    const steps = [
      { name: "pay", args: bob, id: "bob-1" },
      { name: "pay", args: { ...bob, repeat: 2 }, id: "bob-2" },
      { name: "pay", args: alice, id: "alice-1" },
      { name: "pay", args: alice, id: "alice-retry" },
    ];
    const { agent } = await agentWith({ middleware: idempotentMiddleware({ store }), steps, service, ran });
    const state = await ask(agent, thread);
    assert.deepEqual(ran, [bob, bob, alice], "the tool never sees the ordinal");
    const keys = service.requests.map((r) => r.key);
    assert.deepEqual(keys, [idemKey(thread, "pay", bob), idemKey(thread, "pay", bob, { repeat: 2 }), idemKey(thread, "pay", alice)]);
    assert.equal(new Set(keys).size, 3);
    assert.match(toolMessage(state, "alice-retry").content, /^receipt rcpt_3\n\nAlready done/);
  } finally {
    await service.close();
    await store.close();
  }
});

test("a tool whose schema has its own repeat keeps it, is bound as it is, and its argument is its own", async () => {
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
    const schema = z.object({ to: z.string(), repeat: z.string() });
    const steps = [{ name: "pay", args: { to: "bob", repeat: "weekly" }, id: "a" }];
    const { agent, bound } = await agentWith({ middleware: idempotentMiddleware({ store }), steps, service, ran, schema });
    await ask(agent, uniqueRunId("thread"));
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(ran, [{ to: "bob", repeat: "weekly" }]);
    assert.ok(bound[0].every((t) => typeof t.invoke === "function"), "the tools are bound as they are");
    assert.ok(warnings.some((w) => w.includes('the tool pay has its own argument "repeat"')), JSON.stringify(warnings));
  } finally {
    if (quiet !== undefined) process.env.TOOLONCE_QUIET = quiet;
    process.off("warning", onWarning);
    await service.close();
    await store.close();
  }
});
