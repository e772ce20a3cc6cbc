// A LangChain.js v1 agent (`createAgent`) whose write tool goes through toolonce's middleware,
// runnable offline: the model is LangChain's own scripted fake (`fakeModel` from
// @langchain/core/testing). It does what real models and retries do: in the first run it
// looks the customer up, sends the invoice, then asks to send it again with a new tool call
// id; the run is then retried on the same thread from the start (a crash after the tool, a
// retry policy, a user pressing "regenerate"). The invoice is sent once; the read tool runs
// every time it is called.
//
//   node examples/langchain.mjs [STORE_URL]      (default memory://; try sqlite://agent.db)

import { createAgent, tool } from "langchain";
import { AIMessage } from "@langchain/core/messages";
import { fakeModel } from "@langchain/core/testing";
import { pathToFileURL } from "node:url";
import { z } from "zod";
import { openStore } from "toolonce";
import { idempotentMiddleware, operation } from "toolonce/langchain";

const invoice = { customerId: "cus_42", amountCents: 4900 };

/** One run of the model: look up, send, send again (the duplicate), then answer. */
function scriptedRun(model, attempt) {
  return model
    .respondWithTools([{ name: "get_customer", args: { customerId: "cus_42" }, id: `lookup_${attempt}` }])
    .respondWithTools([{ name: "send_invoice", args: invoice, id: `send_${attempt}_a` }])
    .respondWithTools([{ name: "send_invoice", args: invoice, id: `send_${attempt}_b` }])
    .respond(new AIMessage("Invoice sent to cus_42."));
}

export async function main(url = "memory://") {
  const store = await openStore(url);
  const sent = [];
  const lookups = [];
  try {
    const sendInvoice = tool(
      async (args, runtime) => {
        // Stands for the invoicing service, called with the operation key as Idempotency-Key.
        sent.push({ args, headers: Object.fromEntries([operation(runtime).idempotencyHeader]) });
        return JSON.stringify({ invoiceId: `inv_${sent.length}`, status: "sent" });
      },
      {
        name: "send_invoice",
        description: "Send an invoice to a customer.",
        schema: z.object({ customerId: z.string(), amountCents: z.number().int().positive() }),
      },
    );
    const getCustomer = tool(
      async ({ customerId }) => {
        lookups.push(customerId);
        return JSON.stringify({ customerId, name: "Ada" });
      },
      {
        name: "get_customer",
        description: "Look a customer up.",
        schema: z.object({ customerId: z.string() }),
        metadata: { toolonce: "read" }, // A read: the middleware leaves it alone.
      },
    );
    const model = fakeModel();
    scriptedRun(model, 1);
    scriptedRun(model, 2);
    const agent = createAgent({
      model,
      tools: [getCustomer, sendInvoice],
      middleware: [idempotentMiddleware({ store })],
    });
    // The thread id is the scope: the retried run on the same thread is the same operation.
    const thread = `invoices-${process.pid}-${Date.now()}`;
    const config = { configurable: { thread_id: thread } };
    const runs = [];
    for (let attempt = 1; attempt <= 2; attempt++) {
      const state = await agent.invoke({ messages: [{ role: "user", content: "Invoice cus_42 for $49." }] }, config);
      runs.push(state.messages.filter((m) => m.type === "tool" && m.name === "send_invoice").map((m) => ({ id: m.tool_call_id, content: m.content })));
    }
    return { effects: sent.length, expected: 1, lookups: lookups.length, runs };
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
