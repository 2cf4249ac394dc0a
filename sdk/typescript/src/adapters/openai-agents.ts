/**
 * The OpenAI Agents SDK for JavaScript (`@openai/agents`): a run's tool-approval
 * interruptions are answered by Signoff decisions. Keep `result.state.toString()` while a
 * person decides; a restarted process restores it (`RunState.fromString`), calls
 * `answerInterruptions` again — the same tool call is the same task (its key is the call
 * id), so it finds the task and its decision instead of asking twice — and resumes the run.
 * The tool's `execute`, wrapped by `gatedExecute`, passes the execution gate: it runs once
 * per tool call, with the arguments a person approved, however often the run is resumed.
 *
 * Typed structurally: this module imports nothing of `@openai/agents`.
 */
import type { Signoff } from "../client.js";
import type { Task } from "../models.js";
import { approved, ask, decide, refusal, runApproved, type ApprovalPolicy } from "./approvals.js";

export type { ApprovalPolicy } from "./approvals.js";

/** An interruption of a run: a tool call waiting for approval. */
export interface ToolApprovalInterruption {
  type?: string | undefined;
  toolName?: string | undefined;
  rawItem: { callId?: string | undefined; id?: string | undefined; name?: string | undefined; arguments?: string | undefined };
}

/** The run state's approval methods. */
export interface ApprovingState<I> {
  approve(item: I, options?: { alwaysApprove?: boolean | undefined }): void;
  reject(item: I, options?: { alwaysReject?: boolean | undefined; message?: string | undefined }): void;
}

/** The tool call the Agents runner passes to `execute` (its `details`). */
export interface ToolCallDetails {
  toolCall?: ToolApprovalInterruption["rawItem"] | undefined;
}

function parsed(text: string | undefined): unknown {
  if (!text) return {};
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function call(item: ToolApprovalInterruption): [string, string, unknown] {
  const callId = item.rawItem.callId ?? item.rawItem.id;
  const name = item.toolName ?? item.rawItem.name;
  if (!callId || !name) throw new TypeError("an interruption without a tool call id or name cannot be escalated");
  return [name, callId, parsed(item.rawItem.arguments)];
}

/** Escalate every interruption without waiting (idempotent by its call id): the tasks. */
export function askForInterruptions(
  client: Signoff,
  interruptions: readonly ToolApprovalInterruption[],
  policy: ApprovalPolicy,
): Promise<Task[]> {
  return Promise.all(interruptions.map((item) => ask(client, policy, ...call(item))));
}

/**
 * Escalate every interruption (idempotent by its call id), wait for each decision and
 * approve or reject it on `state`: approved only when a person approved exactly this call.
 * Returns the decided tasks, in the interruptions' order.
 */
export async function answerInterruptions<I extends ToolApprovalInterruption>(
  client: Signoff,
  interruptions: readonly I[],
  state: ApprovingState<I>,
  policy: ApprovalPolicy,
): Promise<Task[]> {
  const decided: Task[] = [];
  for (const item of interruptions) {
    const task = await decide(client, policy, ...call(item));
    if (approved(task)) state.approve(item);
    else state.reject(item, { message: refusal(task) });
    decided.push(task);
  }
  return decided;
}

/**
 * The tool's `execute` behind Signoff's execution gate (pass it to `tool({ ..., needsApproval:
 * true, execute: gatedExecute(client, execute, policy) })`): it runs only when a person
 * approved this tool call with exactly these arguments (the digest of `{tool, input}`, the
 * input parsed from the call's arguments as the interruption showed them, must be the
 * approved one), once per tool call however many runs or processes resume it; a call that
 * already ran returns its recorded output. A refusal throws `ApprovalNotValid`, which the
 * runner hands the model as the tool's error.
 */
export function gatedExecute<INPUT, OUTPUT, CONTEXT>(
  client: Signoff,
  execute: (input: INPUT, context?: CONTEXT, details?: ToolCallDetails) => PromiseLike<OUTPUT> | OUTPUT,
  policy: ApprovalPolicy,
): (input: INPUT, context?: CONTEXT, details?: ToolCallDetails) => Promise<OUTPUT> {
  return async (input, context, details) => {
    const rawItem = details?.toolCall;
    if (!rawItem) throw new TypeError("a gated tool runs only for a tool call of a run (its details carry none)");
    const [name, callId, args] = call({ rawItem });
    return runApproved(client, policy, name, callId, args, () => execute(input, context, details));
  };
}
