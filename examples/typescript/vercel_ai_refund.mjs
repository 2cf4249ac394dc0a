// A Vercel AI SDK agent whose refund tool needs a person's approval, asked in Signoff.
// The model is scripted (MockLanguageModelV3: no network, no key). Run against a server:
//   SIGNOFF_URL=http://127.0.0.1:8000 SIGNOFF_API_KEY=<producer key> node vercel_ai_refund.mjs
// then decide the task in the console (or as a reviewer) — the run resumes with the answer.
import { Signoff } from "@signoff/sdk";
import { answerApprovals, requireSignoff } from "@signoff/sdk/adapters/ai";
import { generateText, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { z } from "zod";

const client = new Signoff(process.env.SIGNOFF_URL, process.env.SIGNOFF_API_KEY);
const policy = { keyPrefix: `refund-agent-${process.env.RUN_ID ?? "demo"}`, reasonCode: "REFUND_REVIEW", timeoutSeconds: 600 };
const refunds = [];
const refund = requireSignoff(client, "refund", tool({
  description: "Refund a customer",
  inputSchema: z.object({ customer: z.string(), amount_eur: z.number() }),
  execute: async ({ customer, amount_eur }) => {
    refunds.push({ customer, amount_eur }); // yours: the payment provider
    return { refunded: amount_eur };
  },
}), policy);

const usage = { inputTokens: { total: 1, noCache: 1 }, outputTokens: { total: 1, text: 1 } };
const model = new MockLanguageModelV3({
  doGenerate: [
    { content: [{ type: "tool-call", toolCallId: `call-${policy.keyPrefix}`, toolName: "refund",
        input: JSON.stringify({ customer: "c-17", amount_eur: 50 }) }],
      finishReason: { unified: "tool-calls", raw: undefined }, usage, warnings: [] },
    { content: [{ type: "text", text: "Done." }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] },
  ],
});

const messages = [{ role: "user", content: "Refund c-17 their 50 euros." }];
const first = await generateText({ model, tools: { refund }, messages });
messages.push(...first.responseMessages);
const answers = await answerApprovals(client, first.content, policy); // a person decides
messages.push({ role: "tool", content: answers });
const second = await generateText({ model, tools: { refund }, messages });
console.log(JSON.stringify({ approved: answers.map((a) => a.approved), refunds, text: second.text }));
