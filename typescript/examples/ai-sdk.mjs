// An AI SDK tool loop (`generateText` with `tool()`) whose write tool is wrapped by toolonce,
// runnable offline: the model is the AI SDK's own MockLanguageModelV3 (`ai/test`), scripted to
// do what real models do under retries: it calls `send_invoice`, then calls it again with the
// same input and a new tool call id; then the whole run is retried (the caller's retry after a
// timeout, a resumed job) with the same run id. The invoice is sent once: the scope is the
// caller's run id, never the tool call id. The tool sends the operation key toolonce hands it
// (`operation(options).key`) as the invoicing service's Idempotency-Key.
//
//   node examples/ai-sdk.mjs [STORE_URL]      (default memory://; try sqlite://agent.db)

import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { pathToFileURL } from "node:url";
import { z } from "zod";
import { openStore } from "toolonce";
import { idempotentTool, operation, runContext } from "toolonce/ai-sdk";

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 5, text: 5, reasoning: 0 },
};
const callInvoice = (toolCallId) => ({
  content: [
    { type: "tool-call", toolCallId, toolName: "send_invoice", input: JSON.stringify({ customerId: "cus_42", amountCents: 4900 }) },
  ],
  finishReason: { unified: "tool-calls", raw: "tool_calls" },
  usage,
  warnings: [],
});
const answer = {
  content: [{ type: "text", text: "Invoice inv_1 sent to cus_42." }],
  finishReason: { unified: "stop", raw: "stop" },
  usage,
  warnings: [],
};

export async function main(url = "memory://") {
  const store = await openStore(url);
  const sent = [];
  try {
    const sendInvoice = tool({
      description: "Send an invoice to a customer.",
      inputSchema: z.object({ customerId: z.string(), amountCents: z.number().int().positive() }),
      async execute(input, options) {
        // Stands for the invoicing service, called with the key as its Idempotency-Key header.
        const [header, key] = operation(options).idempotencyHeader;
        sent.push({ input, headers: { [header]: key } });
        return { invoiceId: `inv_${sent.length}`, status: "sent" };
      },
    });
    // The scope comes from the run's context, which the caller passes to generateText
    // (AI SDK 7: toolsContext, per tool; 5 and 6: experimental_context); runContext reads it.
    const tools = {
      send_invoice: idempotentTool("send_invoice", sendInvoice, { store, scope: (options) => runContext(options).runId }),
    };
    const runId = `agent-run-${process.pid}-${Date.now()}`;
    const runs = [];
    for (let attempt = 1; attempt <= 2; attempt++) {
      const model = new MockLanguageModelV3({
        doGenerate: [callInvoice(`call_${attempt}_a`), callInvoice(`call_${attempt}_b`), answer],
      });
      const result = await generateText({
        model,
        tools,
        stopWhen: stepCountIs(5),
        prompt: "Invoice cus_42 for $49.",
        toolsContext: { send_invoice: { runId } },
      });
      runs.push(result.steps.flatMap((s) => s.toolResults).map((r) => ({ id: r.toolCallId, output: r.output })));
    }
    return { effects: sent.length, expected: 1, runs, keys: sent.map((s) => s.headers["Idempotency-Key"]) };
  } finally {
    await store.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv[2]).then(
    (report) => {
      console.log(JSON.stringify(report, null, 2));
      console.log(`effects: ${report.effects} (expected ${report.expected})`);
      process.exit(report.effects === report.expected ? 0 : 1);
    },
    (e) => {
      console.error(e);
      process.exit(1);
    },
  );
}
