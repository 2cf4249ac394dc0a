/**
 * The Vercel AI SDK (`ai`): a tool's approval is a Signoff task. Wrap the tool with
 * `requireSignoff` (it asks for approval and, once approved, runs through the execution
 * gate exactly once with exactly the approved input); answer the run's
 * `tool-approval-request` parts with `answerApprovals`, which escalates each one and
 * waits for the person's decision. The same tool call is the same task (its key is the
 * tool call id), so a process that restarts while waiting resumes the same wait.
 *
 * Typed structurally: this module imports nothing of `ai`.
 */
import type { Signoff } from "../client.js";
import type { Task } from "../models.js";

/** What `answerApprovals` and the wrapped tool need to escalate a tool call. */
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

/** The part of an `ai` result that asks for an approval. */
export interface ToolApprovalRequestPart {
  type: "tool-approval-request";
  approvalId: string;
  toolCall: { toolCallId: string; toolName: string; input: unknown };
  isAutomatic?: boolean;
}

/** The answer `ai` reads on the next call (push `{ role: "tool", content: responses }`). */
export interface ToolApprovalResponsePart {
  type: "tool-approval-response";
  approvalId: string;
  approved: boolean;
  reason?: string;
}

/** What a person is asked to approve: the tool and its exact input. */
export const subjectOf = (toolName: string, input: unknown): Record<string, unknown> => ({ tool: toolName, input });

function escalation(policy: ApprovalPolicy, toolName: string, toolCallId: string, input: unknown) {
  return {
    key: `${policy.keyPrefix}:${toolCallId}`,
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

/**
 * Answer every (non-automatic) approval request of `content` with a Signoff decision:
 * approved only when a person approved exactly this call.
 */
export async function answerApprovals(
  client: Signoff,
  content: readonly { type: string }[],
  policy: ApprovalPolicy,
): Promise<ToolApprovalResponsePart[]> {
  const requests = content.filter(
    (part): part is ToolApprovalRequestPart => part.type === "tool-approval-request" && !(part as ToolApprovalRequestPart).isAutomatic,
  );
  return Promise.all(
    requests.map(async (request) => {
      const { toolName, toolCallId, input } = request.toolCall;
      const task = await decide(client, policy, toolName, toolCallId, input);
      const approved = task.status === "RESOLVED" && task.decision === "APPROVED";
      const reason = task.notes ?? (task.decision ? `${task.decision} in Signoff` : `${task.status} in Signoff`);
      return { type: "tool-approval-response", approvalId: request.approvalId, approved, reason } as const;
    }),
  );
}

interface ExecutableTool<INPUT, OUTPUT> {
  execute?: (input: INPUT, options: { toolCallId: string }) => PromiseLike<OUTPUT> | OUTPUT;
  [other: string]: unknown;
}

/**
 * The tool with `needsApproval: true` and an `execute` that passes Signoff's execution
 * gate first: it runs once per tool call, only with the input a person approved.
 */
export function requireSignoff<INPUT, OUTPUT, T extends ExecutableTool<INPUT, OUTPUT>>(
  client: Signoff,
  toolName: string,
  tool: T,
  policy: ApprovalPolicy,
): T & { needsApproval: true } {
  const run = tool.execute;
  if (!run) throw new TypeError(`${toolName} has no execute function to guard`);
  const execute = async (input: INPUT, options: { toolCallId: string }): Promise<OUTPUT> => {
    const task = await ask(client, policy, toolName, options.toolCallId, input);
    let output: OUTPUT | undefined;
    await client.withExecution(task, { subject: subjectOf(toolName, input), operationId: options.toolCallId }, async (gate) => {
      if (gate.completed) throw new Error(`tool call ${options.toolCallId} already ran`);
      output = await run(input, options);
    });
    return output as OUTPUT;
  };
  return { ...tool, needsApproval: true as const, execute };
}
