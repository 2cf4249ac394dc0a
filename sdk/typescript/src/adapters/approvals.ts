/**
 * What the agent-framework adapters share: a tool call is a Signoff task (its key is the
 * tool call id, its subject the tool and its exact input), and an approved call runs
 * through the execution gate once, with the input the person approved.
 *
 * Typed structurally: this module imports nothing of any agent framework.
 */
import type { Signoff } from "../client.js";
import { escalationIds } from "../digest.js";
import { AlreadyExecuting } from "../errors.generated.js";
import type { Task } from "../models.js";

/** How an adapter escalates a tool call. */
export interface ApprovalPolicy {
  /** Names the escalation with the tool call id: `${keyPrefix}:${toolCallId}`. */
  keyPrefix: string;
  reasonCode: string;
  /** Entity type of the tasks (default: the tool's name). */
  entityType?: string;
  /** How long to wait for the person, in seconds. */
  timeoutSeconds: number;
  /** Evidence for the escalation (default: "held until a person approves this input", confidence 0). */
  attemptedActions?: Record<string, unknown>[];
  evaluatorVerdict?: Record<string, unknown>;
  assignedGroup?: string;
  /** The producer's time limit on the person (`onTimeout` rejects by default). */
  limitSeconds?: number;
}

/** What a person is asked to approve: the tool and its exact input. */
export const subjectOf = (toolName: string, input: unknown): Record<string, unknown> => ({ tool: toolName, input });

/** The escalation key of a tool call. */
const keyOf = (policy: ApprovalPolicy, toolCallId: string): string => `${policy.keyPrefix}:${toolCallId}`;

function escalation(policy: ApprovalPolicy, toolName: string, toolCallId: string, input: unknown) {
  return {
    key: keyOf(policy, toolCallId),
    entityType: policy.entityType ?? toolName,
    entityId: toolCallId,
    reasonCode: policy.reasonCode,
    subject: subjectOf(toolName, input),
    attemptedActions: policy.attemptedActions ?? [
      { action: `call ${toolName}`, executed_at: new Date().toISOString(), result: "held until a person approves this input" },
    ],
    evaluatorVerdict: policy.evaluatorVerdict ?? { confidence_score: 0, threshold: 1 },
    inputSnapshot: { tool: toolName, input: input as Record<string, unknown> },
    traceId: toolCallId,
    assignedGroup: policy.assignedGroup,
    timeoutSeconds: policy.limitSeconds,
  };
}

/** Escalate one tool call (idempotent by its id): the task a person decides. */
export function ask(client: Signoff, policy: ApprovalPolicy, toolName: string, toolCallId: string, input: unknown): Promise<Task> {
  return client.escalate(escalation(policy, toolName, toolCallId, input));
}

/** Escalate one tool call (idempotent by its id) and wait for the decision. */
export async function decide(client: Signoff, policy: ApprovalPolicy, toolName: string, toolCallId: string, input: unknown): Promise<Task> {
  const task = await ask(client, policy, toolName, toolCallId, input);
  return client.waitForDecision(task, { timeoutSeconds: policy.timeoutSeconds });
}

/** A person approved exactly this call. */
export const approved = (task: Task): boolean => task.status === "RESOLVED" && task.decision === "APPROVED";

/** Why a call was not approved, for the model and the run's history. */
export const refusal = (task: Task): string => task.notes ?? `${task.decision ?? task.status} in Signoff`;

/** The action result an executed tool call leaves: what the tool returned. */
interface Outcome {
  output: unknown;
}

/** What the tool returned when another executor ran the call: its recorded outcome. */
async function recordedOutput(client: Signoff, taskId: string, toolCallId: string): Promise<unknown> {
  const events = await client.taskEvents(taskId);
  const done = events.filter((e) => e.type === "task.action_completed").pop();
  const result = done?.details["result"];
  if (result === null || typeof result !== "object" || !("output" in result)) {
    throw new Error(`tool call ${toolCallId} already ran; its output is not recorded in Signoff`);
  }
  return (result as Outcome).output;
}

/**
 * Run an approved tool call through the execution gate: `run` executes at most once per
 * tool call, however many runs resume it and in however many processes, and only when
 * the digest of `{tool, input}` is the approved one. Its output is stored as the
 * action's result; a call that already ran returns that output without running again.
 * A refusal (rejected, undecided, other input) throws `ApprovalNotValid`; a call never
 * escalated throws `NotFound`.
 *
 * Each pass is its own operation, so a second executor waits for the first one's lease
 * (it never takes it over); one that crashed is taken over when its lease lapses, so a
 * side effect that must not repeat after a crash takes the tool call id as its own
 * idempotency key.
 */
export async function runApproved<OUTPUT>(
  client: Signoff,
  policy: ApprovalPolicy,
  toolName: string,
  toolCallId: string,
  input: unknown,
  run: () => PromiseLike<OUTPUT> | OUTPUT,
): Promise<OUTPUT> {
  const [taskId] = await escalationIds(keyOf(policy, toolCallId), await client.whoAmI());
  const options = { subject: subjectOf(toolName, input), operationId: `${toolCallId}:${crypto.randomUUID()}` };
  try {
    return await client.withExecution(taskId, options, async (gate) => {
      const output = await run();
      const outcome: Outcome = { output: output ?? null };
      for (const action of gate.pending) await gate.complete(action, outcome);
      return output;
    });
  } catch (error) {
    if (error instanceof AlreadyExecuting && error.problem["execution_status"] === "COMPLETED") {
      return (await recordedOutput(client, taskId, toolCallId)) as OUTPUT;
    }
    throw error;
  }
}
