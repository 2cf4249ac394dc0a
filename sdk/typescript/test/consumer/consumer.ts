// Compiled by tests/integration/test_typescript_package.py with `tsc --strict` against the
// package's built declarations (dist/*.d.ts), as an application would import it.
import {
  ApprovalNotValid,
  isTimedOut,
  ReceiptInvalid,
  Signoff,
  verifyEvent,
  verifyReceipt,
  type ApprovalProgress,
  type Decision,
  type Task,
  type Vote,
} from "@signoff/sdk";
import { answerInterruptions, askForInterruptions, gatedExecute } from "@signoff/sdk/adapters/openai-agents";
import { Agent, run, RunState, tool } from "@openai/agents";
import { z } from "zod";

export async function agent(url: string, key: string): Promise<Decision | null | undefined> {
  const client = new Signoff(url, key, { retries: 2 });
  const task: Task = await client.escalate({
    key: "order-42", entityType: "order", entityId: "42", reasonCode: "REFUND_REVIEW",
    attemptedActions: [], evaluatorVerdict: {}, inputSnapshot: {}, traceId: "t",
    subject: { amount_eur: 50 }, timeoutSeconds: 3600, onTimeout: "expire",
  });
  const decided = await client.waitForDecision(task, { timeoutSeconds: 60 });
  const votes: Vote[] = decided.votes ?? [];
  const progress: ApprovalProgress | null | undefined = decided.approval_progress;
  if (isTimedOut(decided) || votes.length > 0 || progress?.met) return decided.decision;
  try {
    await client.withExecution(task, { subject: { amount_eur: 50 }, operationId: "pay-42" }, async (run) => run.pending);
  } catch (error) {
    if (error instanceof ApprovalNotValid) return error.reason === "STALE_DIGEST" ? null : undefined;
    throw error;
  }
  const event = await verifyEvent(new Headers(), "{}", ["whsec_x"]);
  try {
    const claims = verifyReceipt(event.receipt ?? "", await client.signingKeys(), { taskId: task.id, digest: undefined });
    if (claims.decision !== event.data.decision) return null;
  } catch (error) {
    if (error instanceof ReceiptInvalid) return null;
    throw error;
  }
  return event.data.decision;
}

// The gated execute is the Agents SDK's own `execute`: its input typed from `parameters`.
export function refundTool(client: Signoff) {
  const policy = { keyPrefix: "refund", reasonCode: "REFUND_REVIEW", timeoutSeconds: 60 };
  return tool({
    name: "refund", description: "Refund a customer", needsApproval: true,
    parameters: z.object({ customer: z.string(), amount_eur: z.number() }),
    execute: gatedExecute(client, async ({ customer, amount_eur }, _context, details) =>
      `refunded ${amount_eur.toFixed(2)} EUR to ${customer.toUpperCase()} (${details?.toolCall?.callId ?? "?"})`, policy),
  });
}

// The Agents SDK's own interruptions and run state fit the adapter's structural types.
export async function askThenResume(client: Signoff, agent: Agent, saved: string | null): Promise<string> {
  const policy = { keyPrefix: "refund", reasonCode: "REFUND_REVIEW", timeoutSeconds: 60 };
  if (saved === null) {
    const result = await run(agent, "Refund c-17 their 50 euros.");
    await askForInterruptions(client, result.interruptions, policy);
    return result.state.toString();
  }
  const state = await RunState.fromString(agent, saved);
  await answerInterruptions(client, state.getInterruptions(), state, policy);
  return String((await run(agent, state)).finalOutput);
}
