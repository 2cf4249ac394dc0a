// An OpenAI Agents SDK agent whose refund tool needs a person's approval, asked in Signoff,
// with the run state kept across a restart. The model is scripted (no network, no key).
//   node openai_agents_refund.mjs ask      runs until the approval, escalates, saves the state
//   node openai_agents_refund.mjs resume   (any later process) waits for the decision, resumes
// with SIGNOFF_URL, SIGNOFF_API_KEY and STATE_FILE set. The refund passes the execution gate:
// resume the same state twice, or in two processes at once, and it runs once.
import { readFileSync, writeFileSync } from "node:fs";
import { Signoff } from "@signoff/sdk";
import { answerInterruptions, askForInterruptions, gatedExecute } from "@signoff/sdk/adapters/openai-agents";
import { Agent, run, RunState, setTracingDisabled, tool, Usage } from "@openai/agents";
import { z } from "zod";

setTracingDisabled(true);
const client = new Signoff(process.env.SIGNOFF_URL, process.env.SIGNOFF_API_KEY);
const policy = { keyPrefix: "agents-refund", reasonCode: "REFUND_REVIEW", timeoutSeconds: 600 };
const refunds = []; // the refunds this process made (yours: the payment provider)
const refund = tool({
  name: "refund", description: "Refund a customer", needsApproval: true,
  parameters: z.object({ customer: z.string(), amount_eur: z.number() }),
  execute: gatedExecute(client, async ({ customer, amount_eur }) => {
    refunds.push({ customer, amount_eur });
    return `refunded ${amount_eur} EUR`;
  }, policy),
});
const scripted = { // answers with the tool call until its result is in the input, then with text
  async getResponse(request) {
    const called = JSON.stringify(request.input).includes("function_call_result");
    const output = called
      ? [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "Done." }] }]
      : [{ type: "function_call", callId: `call-${process.env.RUN_ID ?? "demo"}`, name: "refund", status: "completed",
          arguments: JSON.stringify({ customer: "c-17", amount_eur: 50 }) }];
    return { usage: new Usage(), output };
  },
  async *getStreamedResponse() { throw new Error("not scripted"); },
};
const agent = new Agent({ name: "refunds", instructions: "Refund when asked.", model: scripted, tools: [refund] });

if (process.argv[2] === "ask") {
  const result = await run(agent, "Refund c-17 their 50 euros.");
  writeFileSync(process.env.STATE_FILE, result.state.toString()); // kept while a person decides
  await askForInterruptions(client, result.interruptions, policy); // a person is asked
  console.log(JSON.stringify({ asked: result.interruptions.length }));
} else {
  const state = await RunState.fromString(agent, readFileSync(process.env.STATE_FILE, "utf8"));
  const tasks = await answerInterruptions(client, state.getInterruptions(), state, policy); // waits for the person
  const result = await run(agent, state);
  const outputs = result.newItems.filter((i) => i.type === "tool_call_output_item").map((i) => i.output);
  console.log(JSON.stringify({ decisions: tasks.map((t) => t.decision), refunds, outputs, text: result.finalOutput }));
}
