// The OpenAI Agents adapter against a real server, with a real `@openai/agents` run and a
// scripted model: the tool runs through the execution gate, once, with the approved input.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Agent, run, RunState, setTracingDisabled, tool, Usage, type Model, type ModelRequest } from "@openai/agents";
import { z } from "zod";
import { answerInterruptions, askForInterruptions, gatedExecute } from "../../src/adapters/openai-agents.js";
import type { Signoff, Task } from "../../src/index.js";
import { client, unique } from "./support.js";

setTracingDisabled(true);

/** An agent whose refund tool needs approval; `refunds` records every refund it made. */
function refundAgent(signoff: Signoff, keyPrefix: string, callId: string, failures = 0) {
  const policy = { keyPrefix, reasonCode: "REFUND_REVIEW", timeoutSeconds: 120 };
  const refunds: { customer: string; amount_eur: number }[] = [];
  let attempts = 0;
  const refund = tool({
    name: "refund",
    description: "Refund a customer",
    needsApproval: true,
    parameters: z.object({ customer: z.string(), amount_eur: z.number() }),
    execute: gatedExecute(signoff, async ({ customer, amount_eur }) => {
      if (++attempts <= failures) throw new Error("the payment provider is down");
      refunds.push({ customer, amount_eur });
      return `refunded ${amount_eur} EUR`;
    }, policy),
  });
  const model = {
    async getResponse(request: ModelRequest) {
      const called = JSON.stringify(request.input).includes("function_call_result");
      const output = called
        ? [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "Done." }] }]
        : [{ type: "function_call", callId, name: "refund", status: "completed", arguments: JSON.stringify({ customer: "c-17", amount_eur: 50 }) }];
      return { usage: new Usage(), output };
    },
    async *getStreamedResponse() {
      throw new Error("not scripted");
    },
  } as unknown as Model;
  const agent = new Agent({ name: "refunds", instructions: "Refund when asked.", model, tools: [refund] });
  return { agent, policy, refunds, attempts: () => attempts };
}

/** Run until the approval, escalate it; the saved state and the task. */
async function asked(signoff: Signoff, setup: ReturnType<typeof refundAgent>): Promise<[string, Task]> {
  const result = await run(setup.agent, "Refund c-17 their 50 euros.");
  const [task] = await askForInterruptions(signoff, result.interruptions, setup.policy);
  return [result.state.toString(), task!];
}

async function decide(task: Task, decision: "APPROVED" | "REJECTED"): Promise<void> {
  const reviewer = await client("reviewer");
  await reviewer.resolve(await reviewer.claim(task.id), { decision, notes: "checked the order" });
}

/** Why the gate refused to run `task`, in order (its audit trail). */
async function refusals(signoff: Signoff, task: Task): Promise<unknown[]> {
  const events = await signoff.taskEvents(task.id);
  return events.filter((e) => e.type === "task.execution_refused").map((e) => e.details["reason"]);
}

/** Restore `saved`, approve every interruption on the state itself (not asking Signoff), run. */
async function resumeApprovedLocally(setup: ReturnType<typeof refundAgent>, saved: string): Promise<unknown[]> {
  const state = await RunState.fromString(setup.agent, saved);
  for (const item of state.getInterruptions()) state.approve(item);
  const result = await run(setup.agent, state);
  return result.newItems.filter((i) => i.type === "tool_call_output_item").map((i) => (i as { output: unknown }).output);
}

test("agents gate: a call a person rejected never runs, even when the run state approves it", async () => {
  const signoff = await client("producer");
  const setup = refundAgent(signoff, unique("agents-reject"), unique("call"));
  const [saved, task] = await asked(signoff, setup);
  await decide(task, "REJECTED");
  const outputs = await resumeApprovedLocally(setup, saved);
  assert.deepEqual(setup.refunds, []);
  assert.equal(outputs.length, 1); // the model is told the tool failed
  assert.deepEqual(await refusals(signoff, task), ["REJECTED"]);
});

test("agents gate: arguments other than the approved ones never run", async () => {
  const signoff = await client("producer");
  const setup = refundAgent(signoff, unique("agents-tamper"), unique("call"));
  const [saved, task] = await asked(signoff, setup);
  await decide(task, "APPROVED");
  const tampered = saved.replaceAll('amount_eur\\":50', 'amount_eur\\":5000');
  assert.notEqual(tampered, saved);
  await resumeApprovedLocally(setup, tampered);
  assert.deepEqual(setup.refunds, []);
  assert.deepEqual(await refusals(signoff, task), ["STALE_DIGEST"]);
  // The approved arguments still run, once.
  assert.deepEqual(await resumeApprovedLocally(setup, saved), ["refunded 50 EUR"]);
  assert.deepEqual(setup.refunds, [{ customer: "c-17", amount_eur: 50 }]);
});

test("agents gate: two runs resuming the same approved call at once run it once", async () => {
  const signoff = await client("producer");
  const keyPrefix = unique("agents-twice");
  const callId = unique("call");
  const first = refundAgent(signoff, keyPrefix, callId);
  const [saved, task] = await asked(signoff, first);
  await decide(task, "APPROVED");
  const other = await client("producer", await signoff.whoAmI()); // another process of the same agent
  const second = refundAgent(other, keyPrefix, callId);
  const resume = async (setup: ReturnType<typeof refundAgent>, by: Signoff) => {
    const state = await RunState.fromString(setup.agent, saved);
    const decided = await answerInterruptions(by, state.getInterruptions(), state, setup.policy);
    const result = await run(setup.agent, state);
    return { decisions: decided.map((t) => t.decision), text: result.finalOutput };
  };
  const outcomes = await Promise.all([resume(first, signoff), resume(second, other)]);
  assert.deepEqual(outcomes, [
    { decisions: ["APPROVED"], text: "Done." },
    { decisions: ["APPROVED"], text: "Done." },
  ]);
  assert.equal(first.refunds.length + second.refunds.length, 1);
  const events = await signoff.taskEvents(task.id);
  assert.equal(events.filter((e) => e.type === "task.action_completed").length, 1);
  assert.equal((await signoff.getTask(task.id)).execution_status, "COMPLETED");
});

test("agents gate: a call whose tool failed runs again on the next resume, then never again", async () => {
  const signoff = await client("producer");
  const setup = refundAgent(signoff, unique("agents-fail"), unique("call"), 1);
  const [saved, task] = await asked(signoff, setup);
  await decide(task, "APPROVED");
  await resumeApprovedLocally(setup, saved); // the provider is down: the action fails
  assert.deepEqual(setup.refunds, []);
  assert.equal((await signoff.getTask(task.id)).execution_status, "FAILED");
  assert.deepEqual(await resumeApprovedLocally(setup, saved), ["refunded 50 EUR"]);
  assert.deepEqual(await resumeApprovedLocally(setup, saved), ["refunded 50 EUR"]);
  assert.equal(setup.attempts(), 2);
  assert.deepEqual(setup.refunds, [{ customer: "c-17", amount_eur: 50 }]);
  assert.equal((await signoff.getTask(task.id)).execution_status, "COMPLETED");
});
