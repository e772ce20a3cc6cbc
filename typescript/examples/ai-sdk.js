// A write tool wrapped by `idempotent` in a Vercel AI SDK tool loop (`generateText` with
// `tool()`), runnable offline: the model is the AI SDK's own MockLanguageModelV3, scripted to
// do what real models do under retries: it calls `send_invoice`, then calls it again with the
// same arguments and a new tool call id. The invoice is sent once; the second call gets the
// first call's result back.
//
//   node examples/ai-sdk.js [STORE_URL]      (default memory://; try sqlite://agent.db)

"use strict";

const { generateText, tool, stepCountIs } = require("ai");
const { MockLanguageModelV3 } = require("ai/test");
const { z } = require("zod");
const { openStore, idempotent, ToolonceError } = require("..");

// The tool as the reference design writes it: kind, name, schema, run(args, ctx). `sent`
// stands for the invoicing service.
function invoiceTool(sent) {
  return {
    kind: "write",
    name: "send_invoice",
    schema: z.object({ customerId: z.string(), amountCents: z.number().int().positive() }),
    async run(args, ctx) {
      // Downstream, pass the key along: fetch(url, { headers: [ctx.idempotencyHeader] }).
      sent.push({ ...args, idempotencyKey: ctx.idem });
      return { invoiceId: `inv_${sent.length}`, status: "sent" };
    },
  };
}

/** The AI SDK's tool() around a wrapped write tool; the agent run's id is the scope. */
function aiTool(wrapped, description, runId) {
  return tool({
    description,
    inputSchema: wrapped.schema,
    async execute(input) {
      try {
        return await wrapped.run(input, { runId });
      } catch (e) {
        // In flight, unknown, store down: tell the model, which must not retry blindly.
        if (e instanceof ToolonceError) return { error: e.outcome, message: e.message };
        throw e;
      }
    },
  });
}

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 5, text: 5, reasoning: 0 },
};
const callInvoice = (toolCallId) => ({
  content: [
    {
      type: "tool-call",
      toolCallId,
      toolName: "send_invoice",
      input: JSON.stringify({ customerId: "cus_42", amountCents: 4900 }),
    },
  ],
  finishReason: { unified: "tool-calls", raw: "tool_calls" },
  usage,
  warnings: [],
});

async function main(url = "memory://") {
  const store = await openStore(url);
  const sent = [];
  try {
    const model = new MockLanguageModelV3({
      doGenerate: [
        callInvoice("call_1"),
        callInvoice("call_2"), // The duplicate: same arguments, new tool call id.
        {
          content: [{ type: "text", text: "Invoice inv_1 sent to cus_42." }],
          finishReason: { unified: "stop", raw: "stop" },
          usage,
          warnings: [],
        },
      ],
    });
    const runId = `agent-run-${process.pid}-${Date.now()}`;
    const result = await generateText({
      model,
      tools: { send_invoice: aiTool(idempotent(invoiceTool(sent), store), "Send an invoice to a customer.", runId) },
      stopWhen: stepCountIs(5),
      prompt: "Invoice cus_42 for $49.",
    });
    const toolResults = result.steps.flatMap((s) => s.toolResults).map((r) => ({ id: r.toolCallId, output: r.output }));
    return { text: result.text, toolResults, sent };
  } finally {
    await store.close();
  }
}

module.exports = { main };

if (require.main === module) {
  main(process.argv[2]).then(
    (report) => console.log(JSON.stringify(report, null, 2)),
    (e) => {
      console.error(e);
      process.exit(1);
    },
  );
}
