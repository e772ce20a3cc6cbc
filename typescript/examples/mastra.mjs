// A Mastra agent whose write tool (made by `createTool`) is wrapped by toolonce, runnable
// offline: Mastra agents take AI SDK models, so the model is the AI SDK's MockLanguageModelV3
// (`ai/test`). It is scripted the way a support agent went wrong in the field (three tickets
// for one request): it opens a ticket, opens it again with a new tool call id, and the run is
// then retried on the same thread. One ticket is opened: the scope is the thread id.
//
//   node examples/mastra.mjs [STORE_URL]      (default memory://; try sqlite://agent.db)

import { Agent } from "@mastra/core/agent";
import { createTool } from "@mastra/core/tools";
import { MockLanguageModelV3 } from "ai/test";
import { pathToFileURL } from "node:url";
import { z } from "zod";
import { openStore } from "toolonce";
import { idempotentTool, operation } from "toolonce/mastra";

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 5, text: 5, reasoning: 0 },
};
const openTicket = (toolCallId) => ({
  content: [
    { type: "tool-call", toolCallId, toolName: "open_ticket", input: JSON.stringify({ requester: "ada@example.com", subject: "Refund order 1234" }) },
  ],
  finishReason: { unified: "tool-calls", raw: "tool_calls" },
  usage,
  warnings: [],
});
const answer = {
  content: [{ type: "text", text: "Ticket opened." }],
  finishReason: { unified: "stop", raw: "stop" },
  usage,
  warnings: [],
};

export async function main(url = "memory://") {
  const store = await openStore(url);
  const tickets = [];
  try {
    const ticketTool = createTool({
      id: "open_ticket",
      description: "Open a support ticket.",
      inputSchema: z.object({ requester: z.string(), subject: z.string() }),
      execute: async (input, context) => {
        // Stands for the help desk, called with the operation key as Idempotency-Key.
        tickets.push({ input, headers: Object.fromEntries([operation(context).idempotencyHeader]) });
        return { ticketId: `T-${tickets.length}` };
      },
    });
    const tools = { open_ticket: idempotentTool(ticketTool, { store }) };
    const thread = `support-${process.pid}-${Date.now()}`;
    const runs = [];
    for (let attempt = 1; attempt <= 2; attempt++) {
      const model = new MockLanguageModelV3({ doGenerate: [openTicket(`call_${attempt}_a`), openTicket(`call_${attempt}_b`), answer] });
      const agent = new Agent({ id: "support", name: "support", instructions: "Open tickets for customers.", model, tools });
      const result = await agent.generate("Ada wants a refund for order 1234.", {
        maxSteps: 5,
        memory: { thread, resource: "ada@example.com" },
      });
      runs.push(result.toolResults.map((r) => ({ id: r.payload.toolCallId, result: r.payload.result })));
    }
    return { effects: tickets.length, expected: 1, runs };
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
