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
import { approved, decide, refusal, runApproved, type ApprovalPolicy } from "./approvals.js";

export { ask, decide, subjectOf, type ApprovalPolicy } from "./approvals.js";

/** The part of an `ai` result that asks for an approval. */
export interface ToolApprovalRequestPart {
  type: "tool-approval-request";
  approvalId: string;
  toolCall: { toolCallId: string; toolName: string; input: unknown };
  isAutomatic?: boolean | undefined;
}

/** The answer `ai` reads on the next call (push `{ role: "tool", content: responses }`). */
export interface ToolApprovalResponsePart {
  type: "tool-approval-response";
  approvalId: string;
  approved: boolean;
  reason?: string | undefined;
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
      return { type: "tool-approval-response", approvalId: request.approvalId, approved: approved(task), reason: refusal(task) } as const;
    }),
  );
}

interface ExecutableTool<INPUT, OUTPUT> {
  execute?: (input: INPUT, options: { toolCallId: string }) => PromiseLike<OUTPUT> | OUTPUT;
  [other: string]: unknown;
}

/**
 * The tool with `needsApproval: true` and an `execute` that passes Signoff's execution
 * gate first: it runs once per tool call, only with the input a person approved; a call
 * that already ran (in this process or another) returns its recorded output.
 */
export function requireSignoff<INPUT, OUTPUT, T extends ExecutableTool<INPUT, OUTPUT>>(
  client: Signoff,
  toolName: string,
  tool: T,
  policy: ApprovalPolicy,
): T & { needsApproval: true } {
  const run = tool.execute;
  if (!run) throw new TypeError(`${toolName} has no execute function to guard`);
  const execute = (input: INPUT, options: { toolCallId: string }): Promise<OUTPUT> =>
    runApproved(client, policy, toolName, options.toolCallId, input, () => run(input, options));
  return { ...tool, needsApproval: true as const, execute };
}
