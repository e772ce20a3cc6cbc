// The LangChain.js middleware (toolonce/langchain) in a real `createAgent` with LangChain's own
// fake model: a write tool runs once per (thread, tool, arguments) however often the model
// asks or the run is retried, the answer a duplicate gets is the package layer's replay, read
// tools pass untouched, and threads are separate scopes.

"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { openStore, idempotent, idemKey, InvalidArguments, OperationInFlight } = require("..");
const { idempotentMiddleware, operation } = require("../dist/langchain.js");
const { framework, example, downstream } = require("./frameworks.js");
const { storeUrls, uniqueRunId } = require("./support.js");

const ARGS = { customerId: "cus_7", amountCents: 1200 };

/**
 * An agent with a counted write tool and a counted read tool; `calls` scripts the model.
 * @param {{ middleware?: any, calls: any[], runs?: number, readMarked?: object }} options
 */
async function agentWith({ middleware, calls, runs = 1, readMarked = { metadata: { toolonce: "read" } } }) {
  const { createAgent, tool } = await framework("langchain");
  const { AIMessage } = await framework("@langchain/core/messages");
  const { fakeModel } = await framework("@langchain/core/testing");
  const { z } = await framework("zod");
  const counts = { sent: 0, lookups: 0 };
  const send = tool(
    async () => {
      counts.sent++;
      return `invoice inv_${counts.sent}`;
    },
    { name: "send_invoice", description: "Send an invoice.", schema: z.object({ customerId: z.string(), amountCents: z.number() }) },
  );
  const lookup = tool(
    async ({ customerId }) => {
      counts.lookups++;
      return `customer ${customerId} (lookup ${counts.lookups})`;
    },
    { name: "get_customer", description: "Look a customer up.", schema: z.object({ customerId: z.string() }), ...readMarked },
  );
  const model = fakeModel();
  for (let run = 0; run < runs; run++) {
    for (const call of calls) model.respondWithTools([call]);
    model.respond(new AIMessage("done"));
  }
  const agent = createAgent({ model, tools: [lookup, send], middleware: middleware ? [middleware] : [] });
  return { agent, counts };
}

const sendCall = (id) => ({ name: "send_invoice", args: ARGS, id });
const lookupCall = (id) => ({ name: "get_customer", args: { customerId: "cus_7" }, id });
const ask = (agent, thread) => agent.invoke({ messages: [{ role: "user", content: "invoice cus_7" }] }, { configurable: { thread_id: thread } });
const toolMessages = (state, name) => state.messages.filter((m) => m.type === "tool" && m.name === name);

for (const name of ["memory", "sqlite"]) {
  test(`the LangChain example sends its invoice once across a duplicate call and a retried run (${name})`, async () => {
    const { main } = await example("langchain");
    const report = await main(storeUrls()[name]);
    assert.equal(report.effects, 1);
    assert.equal(report.expected, 1);
    assert.equal(report.lookups, 2, "the read tool ran in both runs");
    const contents = report.runs.flat().map((m) => m.content);
    assert.equal(contents.length, 4);
    // A replay's content is the first call's, then the note telling the model it is a replay.
    assert.ok(contents.slice(1).every((c) => c.startsWith(`${contents[0]}\n\nAlready done: `)), "every duplicate got the first call's content");
  });
}

test("without the middleware the same scripted agent sends the invoice every time the model asks", async () => {
  const { agent, counts } = await agentWith({ calls: [sendCall("a"), sendCall("b")] });
  await ask(agent, uniqueRunId("thread"));
  assert.equal(counts.sent, 2);
});

test("a duplicate through the LangChain middleware is the package layer's replay, keyed by the thread", async () => {
  const store = await openStore("memory://");
  try {
    const thread = uniqueRunId("thread");
    const { agent, counts } = await agentWith({ middleware: idempotentMiddleware({ store }), calls: [sendCall("a"), sendCall("b")] });
    const state = await ask(agent, thread);
    assert.equal(counts.sent, 1);
    const [first, second] = toolMessages(state, "send_invoice");
    assert.equal(first.content, "invoice inv_1");
    assert.equal(second.artifact.toolonce.content, "invoice inv_1", "program code finds the recorded content in the artifact");
    assert.equal(second.artifact.toolonce.outcome, "replayed");
    assert.equal(second.content, `invoice inv_1\n\n${second.artifact.toolonce.note}`, "the model reads it with the note");
    assert.equal(second.tool_call_id, "b", "the replayed answer belongs to the duplicate's own tool call");
    // The same operation asked of the layer directly: replayed, under the key of (thread, tool, args).
    const plain = idempotent({ kind: "write", name: "send_invoice", run: () => assert.fail("must not run") }, store);
    const answer = await plain.runDetailed(ARGS, { runId: thread });
    assert.equal(answer.outcome, "replayed");
    assert.equal(answer.key, idemKey(thread, "send_invoice", ARGS));
    assert.deepEqual(answer.result, { content: "invoice inv_1" });
  } finally {
    await store.close();
  }
});

test("the LangChain tool gets the operation key in its runtime and sends it downstream as Idempotency-Key; a duplicate sends nothing", async () => {
  const { createAgent, tool } = await framework("langchain");
  const { AIMessage } = await framework("@langchain/core/messages");
  const { fakeModel } = await framework("@langchain/core/testing");
  const { z } = await framework("zod");
  const store = await openStore("memory://");
  const service = await downstream();
  try {
    const seen = [];
    const send = tool(
      async (_args, runtime) => {
        seen.push(operation(runtime));
        return `invoice ${await service.send(operation(runtime).key)} (call ${runtime.toolCall.id})`;
      },
      { name: "send_invoice", description: "Send an invoice.", schema: z.object({ customerId: z.string(), amountCents: z.number() }) },
    );
    const model = fakeModel().respondWithTools([sendCall("a")]).respondWithTools([sendCall("b")]).respond(new AIMessage("done"));
    const agent = createAgent({ model, tools: [send], middleware: [idempotentMiddleware({ store })] });
    const thread = uniqueRunId("thread");
    const state = await ask(agent, thread);
    const key = idemKey(thread, "send_invoice", ARGS);
    assert.deepEqual(service.requests, [{ method: "POST", key }]);
    assert.deepEqual(seen, [{ key, idempotencyHeader: ["Idempotency-Key", key], mayHaveRunBefore: false }]);
    const recorded = (m) => m.artifact?.toolonce?.content ?? m.content;
    assert.deepEqual(toolMessages(state, "send_invoice").map(recorded), ["invoice rcpt_1 (call a)", "invoice rcpt_1 (call a)"], "LangChain's own runtime still reaches the tool");
  } finally {
    await service.close();
    await store.close();
  }
});

test("read tools pass the LangChain middleware untouched, marked by metadata, a tag, a name or by writes", async () => {
  const marks = [
    { how: "metadata", readMarked: { metadata: { toolonce: "read" } }, options: {} },
    { how: "tag", readMarked: { tags: ["toolonce:read"] }, options: {} },
    { how: "reads", readMarked: {}, options: { reads: ["get_customer"] } },
    { how: "writes", readMarked: {}, options: { writes: ["send_invoice"] } },
  ];
  for (const { how, readMarked, options } of marks) {
    const store = await openStore("memory://");
    try {
      const thread = uniqueRunId("thread");
      const calls = [lookupCall("l1"), sendCall("s1"), lookupCall("l2"), sendCall("s2")];
      const { agent, counts } = await agentWith({ middleware: idempotentMiddleware({ store, ...options }), calls, readMarked });
      const state = await ask(agent, thread);
      assert.equal(counts.lookups, 2, `the read ran each time (${how})`);
      assert.deepEqual(toolMessages(state, "get_customer").map((m) => m.content), ["customer cus_7 (lookup 1)", "customer cus_7 (lookup 2)"]);
      assert.equal(counts.sent, 1, `the write ran once (${how})`);
      // Nothing was claimed for the read: the layer runs it as a first call.
      const plain = idempotent({ kind: "write", name: "get_customer", run: () => "fresh" }, store);
      assert.equal((await plain.runDetailed({ customerId: "cus_7" }, { runId: thread })).outcome, "executed");
    } finally {
      await store.close();
    }
  }
});

test("an unmarked tool is a write: the LangChain middleware deduplicates it", async () => {
  const store = await openStore("memory://");
  try {
    const { agent, counts } = await agentWith({ middleware: idempotentMiddleware({ store }), calls: [lookupCall("l1"), lookupCall("l2")], readMarked: {} });
    await ask(agent, uniqueRunId("thread"));
    assert.equal(counts.lookups, 1);
  } finally {
    await store.close();
  }
});

test("another thread is another scope: the same invoice asked in two threads is sent twice", async () => {
  const store = await openStore("memory://");
  try {
    const { agent, counts } = await agentWith({ middleware: idempotentMiddleware({ store }), calls: [sendCall("a"), sendCall("b")], runs: 2 });
    await ask(agent, uniqueRunId("thread-one"));
    await ask(agent, uniqueRunId("thread-two"));
    assert.equal(counts.sent, 2);
  } finally {
    await store.close();
  }
});

test("a scope function replaces the thread id as the scope", async () => {
  const store = await openStore("memory://");
  try {
    const scope = (request) => `tenant-${request.runtime.configurable.tenant}`;
    const { agent, counts } = await agentWith({ middleware: idempotentMiddleware({ store, scope }), calls: [sendCall("a"), sendCall("b"), sendCall("c")] });
    const tenant = uniqueRunId("t");
    const state = await agent.invoke({ messages: [{ role: "user", content: "invoice" }] }, { configurable: { tenant } });
    assert.equal(counts.sent, 1);
    assert.equal(toolMessages(state, "send_invoice").length, 3);
    const plain = idempotent({ kind: "write", name: "send_invoice", run: () => assert.fail("must not run") }, store);
    assert.equal((await plain.runDetailed(ARGS, { runId: `tenant-${tenant}` })).outcome, "replayed");
  } finally {
    await store.close();
  }
});

test("a write call without a thread id is refused by the LangChain middleware and does not run", async () => {
  const store = await openStore("memory://");
  try {
    const { agent, counts } = await agentWith({ middleware: idempotentMiddleware({ store }), calls: [sendCall("a")] });
    await assert.rejects(agent.invoke({ messages: [{ role: "user", content: "invoice" }] }), (/** @type {any} */ e) => {
      // LangChain wraps what a middleware throws in its MiddlewareError, the error as the cause.
      assert.ok(e.cause instanceof InvalidArguments, `got ${e}`);
      assert.match(e.cause.message, /thread id/);
      return true;
    });
    assert.equal(counts.sent, 0);
  } finally {
    await store.close();
  }
});

test("tool call arguments JSON cannot represent (a NaN in the program's own message) are refused by the middleware, naming them, and do not run", async () => {
  const store = await openStore("memory://");
  try {
    const call = { name: "send_invoice", args: { customerId: "cus_7", amountCents: NaN }, id: "a" };
    const { agent, counts } = await agentWith({ middleware: idempotentMiddleware({ store }), calls: [call] });
    await assert.rejects(ask(agent, uniqueRunId("thread")), (/** @type {any} */ e) => {
      // LangChain wraps what a middleware throws in its MiddlewareError, the error as the cause.
      assert.ok(e.cause instanceof InvalidArguments, `got ${e}`);
      assert.match(e.cause.message, /args\.amountCents: NaN is not a JSON number/);
      return true;
    });
    assert.equal(counts.sent, 0);
  } finally {
    await store.close();
  }
});

test("a transient failure of the tool is the tool's error and releases the call: the next ask runs it", async () => {
  const store = await openStore("memory://");
  try {
    let attempts = 0;
    const middleware = idempotentMiddleware({ store });
    const thread = uniqueRunId("thread");
    const request = { toolCall: { name: "send_invoice", args: ARGS, id: "a" }, tool: { name: "send_invoice" }, runtime: { configurable: { thread_id: thread } } };
    const failing = async () => {
      attempts++;
      throw new Error("gateway timeout");
    };
    await assert.rejects(middleware.wrapToolCall(request, failing), /gateway timeout/);
    const ok = async () => {
      attempts++;
      return { type: "tool", content: "sent" };
    };
    assert.deepEqual(await middleware.wrapToolCall({ ...request, toolCall: { ...request.toolCall, id: "b" } }, ok), { type: "tool", content: "sent" });
    assert.equal(attempts, 2);
  } finally {
    await store.close();
  }
});

test("a tool name the agent does not have is passed on: LangChain answers it, and nothing is claimed", async () => {
  const store = await openStore("memory://");
  try {
    const thread = uniqueRunId("thread");
    const invented = { name: "wire_money", args: { to: "x" }, id: "w" };
    const { agent, counts } = await agentWith({ middleware: idempotentMiddleware({ store }), calls: [invented, sendCall("a")] });
    const state = await ask(agent, thread);
    const [answer] = toolMessages(state, "wire_money");
    assert.equal(answer.status, "error");
    assert.match(String(answer.content), /wire_money/);
    assert.equal(counts.sent, 1);
    const plain = idempotent({ kind: "write", name: "wire_money", run: () => "first" }, store);
    assert.equal((await plain.runDetailed({ to: "x" }, { runId: thread })).outcome, "executed");
  } finally {
    await store.close();
  }
});

test("idempotentMiddleware refuses a bad configuration with a message naming it", async () => {
  const store = await openStore("memory://");
  try {
    // @ts-expect-error: a misspelt option
    assert.throws(() => idempotentMiddleware({ store, writs: ["x"] }), /unknown option "writs"/);
    // @ts-expect-error: one name, not an array
    assert.throws(() => idempotentMiddleware({ store, reads: "get_customer" }), /reads must be an array of tool names/);
    // @ts-expect-error: not a store from openStore
    assert.throws(() => idempotentMiddleware({ store: {} }), /store must come from openStore/);
    assert.throws(() => idempotentMiddleware({ store, options: { lease: 1 } }), /lease must be a number of milliseconds/);
  } finally {
    await store.close();
  }
});

test("two identical calls in one model message run once: the twin is refused in flight, or waits with inFlight wait", async () => {
  const { createAgent, tool } = await framework("langchain");
  const { AIMessage } = await framework("@langchain/core/messages");
  const { fakeModel } = await framework("@langchain/core/testing");
  const { z } = await framework("zod");
  const store = await openStore("memory://");
  try {
    let sent = 0;
    const send = tool(
      async () => {
        sent++;
        await new Promise((resolve) => setTimeout(resolve, 100)); // Still running when the twin arrives.
        return "invoice inv_1";
      },
      { name: "send_invoice", description: "Send an invoice.", schema: z.object({ customerId: z.string(), amountCents: z.number() }) },
    );
    const twins = () => fakeModel().respondWithTools([sendCall("a"), sendCall("b")]).respond(new AIMessage("done"));
    // LangChain runs the calls of one message concurrently: by default the twin is refused.
    const rejecting = createAgent({ model: twins(), tools: [send], middleware: [idempotentMiddleware({ store })] });
    await assert.rejects(ask(rejecting, uniqueRunId("thread")), (/** @type {any} */ e) => e.cause instanceof OperationInFlight);
    assert.equal(sent, 1);
    sent = 0;
    const middleware = idempotentMiddleware({ store, options: { inFlight: { wait: 5000 } } });
    const agent = createAgent({ model: twins(), tools: [send], middleware: [middleware] });
    const state = await ask(agent, uniqueRunId("thread"));
    assert.equal(sent, 1);
    assert.deepEqual(toolMessages(state, "send_invoice").map((m) => [m.tool_call_id, m.artifact?.toolonce?.content ?? m.content]), [
      ["a", "invoice inv_1"],
      ["b", "invoice inv_1"],
    ]);
  } finally {
    await store.close();
  }
});
