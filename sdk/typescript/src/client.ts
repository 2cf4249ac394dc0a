/** `Signoff`: the client a producer, a reviewer bot or an executor uses. */
import { canonicalJson, digest, escalationIds, precheckHash } from "./digest.js";
import { IdempotencyKeyReused, NotFound, TaskConflict } from "./errors.generated.js";
import { InvalidArgument, type ApiError } from "./errors.js";
import { beginExecution, type ExecutionOptions, type ExecutionRun } from "./execution.js";
import {
  isActive,
  type AuditEvent,
  type Decision,
  type Diff,
  type EventDocument,
  type EventsSince,
  type FieldFeedback,
  type OnTimeout,
  type Revision,
  type SigningKeys,
  type Task,
  type TaskPage,
  type TaskReceipt,
  type TaskStatus,
  type WebhookEndpoint,
} from "./models.js";
import { segment, Transport, type ClientOptions } from "./transport.js";
import { waitForDecision, type WaitOptions } from "./wait.js";

type Json = Record<string, unknown>;

export interface EscalateOptions {
  /** Your stable name for this escalation: the same key is the same escalation. */
  key: string;
  entityType: string;
  entityId: string;
  reasonCode: string;
  attemptedActions: Json[];
  evaluatorVerdict: Json;
  inputSnapshot: Json;
  traceId: string;
  /** What the person approves; its digest binds the approval. */
  subject?: Json;
  sourceRevisions?: string[];
  materialPaths?: string[];
  metadata?: Json;
  deadline?: string;
  assignedGroup?: string;
  summary?: Json;
  policy?: string;
  approvalTtlSeconds?: number;
  /** The producer's time limit, in seconds. */
  timeoutSeconds?: number;
  /** What happens at the time limit (default `reject`; never an approval). */
  onTimeout?: OnTimeout;
  timeoutGroup?: string;
  /** Decided by votes: `{approvals: 2}`, or an admin rule's name. */
  approvalRule?: Json | string;
  requestedBy?: string;
  traceparent?: string;
  /** `adopt`: another active task of the entity is returned instead of refused. */
  onConflict?: "raise" | "adopt";
}

export interface TaskFilters {
  status?: TaskStatus;
  entityType?: string;
  entityId?: string;
  reasonCode?: string;
  executionStatus?: string;
  claimedBy?: string;
  assignedGroup?: string;
  /** Only the tasks awaiting the caller's vote. */
  awaitingMyVote?: boolean;
  pageSize?: number;
}

export interface DecideOptions {
  decision: Decision;
  notes?: string;
  revision?: number;
  digest?: string;
}

const taskPath = (task: string | Task): string =>
  `/tasks/${segment(typeof task === "string" ? task : task.id, "taskId")}`;
const idOf = (task: string | Task): string => (typeof task === "string" ? task : task.id);

function leaseHeaders(task: string | Task, leaseToken?: string): Record<string, string> {
  const token = leaseToken ?? (typeof task === "string" ? undefined : task.lease_token);
  if (!token) throw new InvalidArgument("a lease token is needed (the claimed task, or leaseToken)", "leaseToken");
  return { "x-lease-token": token };
}

/** The escalation request without its ids, the precheck hash computed. */
export async function escalationBody(o: EscalateOptions): Promise<Json> {
  const body: Json = {
    entity_type: o.entityType,
    entity_id: o.entityId,
    reason_code: o.reasonCode,
    precheck_hash: await precheckHash(o.attemptedActions),
    diagnostic_bundle: {
      trace_id: o.traceId,
      attempted_actions: o.attemptedActions,
      input_snapshot: o.inputSnapshot,
      evaluator_verdict: o.evaluatorVerdict,
    },
  };
  const optional: Json = {
    subject: o.subject,
    source_revisions: o.sourceRevisions,
    material_paths: o.materialPaths,
    metadata: o.metadata,
    deadline: o.deadline,
    assigned_group: o.assignedGroup,
    summary: o.summary,
    policy: o.policy,
    approval_ttl_seconds: o.approvalTtlSeconds,
    approval_rule: o.approvalRule,
    requested_by: o.requestedBy,
  };
  for (const [name, value] of Object.entries(optional)) if (value !== undefined) body[name] = value;
  if (o.timeoutSeconds !== undefined) {
    const timeout: Json = { after_seconds: o.timeoutSeconds, outcome: o.onTimeout ?? "reject" };
    if (o.timeoutGroup !== undefined) timeout["group"] = o.timeoutGroup;
    body["timeout"] = timeout;
  }
  return body;
}

/** The fields a person decides on that differ between `task` and an escalation `body`. */
export async function contentChanges(task: Task, body: Json): Promise<string[]> {
  const changed = (["entity_type", "entity_id", "reason_code"] as const).filter((n) => task[n] !== body[n]);
  const snapshot = task.diagnostic_bundle?.["input_snapshot"];
  const sent = (body["diagnostic_bundle"] as Json)["input_snapshot"];
  const out: string[] = [...changed];
  if (snapshot !== undefined && canonicalJson(snapshot) !== canonicalJson(sent)) out.push("diagnostic_bundle.input_snapshot");
  if ((task.digest ?? null) !== ("subject" in body ? await digest(body["subject"]) : null)) out.push("subject");
  return out;
}

export class Signoff {
  readonly http: Transport;
  private principal: string | null = null;

  constructor(baseUrl: string, apiKey: string, options: ClientOptions = {}) {
    this.http = new Transport(baseUrl, apiKey, options);
  }

  /** The caller's principal id (`GET /me`). */
  async whoAmI(): Promise<string> {
    const answer = await this.http.request({ method: "GET", path: "/me", retry: true });
    return String((answer.body as Json)["principal_id"]);
  }

  async getTask(task: string | Task, signal?: AbortSignal): Promise<Task> {
    return (await this.http.request({ method: "GET", path: taskPath(task), retry: true, signal })).body as Task;
  }

  /**
   * Escalate idempotently by `key`: a retry or a re-run returns the task that key created,
   * never a second one; the same key with other content throws `IdempotencyKeyReused`.
   */
  async escalate(options: EscalateOptions): Promise<Task> {
    this.principal ??= await this.whoAmI();
    const [escalationId, idempotencyKey] = await escalationIds(options.key, this.principal);
    const body: Json = { escalation_id: escalationId, idempotency_key: idempotencyKey, ...(await escalationBody(options)) };
    const headers = options.traceparent ? { traceparent: options.traceparent } : undefined;
    try {
      const answer = await this.http.request({ method: "POST", path: "/tasks/escalate", json: body, headers, retry: true });
      return answer.body as Task;
    } catch (error) {
      if (error instanceof IdempotencyKeyReused) {
        const existing = await this.#find(escalationId);
        if (existing === null) throw error;
        return this.#sameContent(existing, body, error);
      }
      if (!(error instanceof TaskConflict)) throw error;
      if (error.taskId === escalationId) return this.#sameContent(await this.getTask(escalationId), body, error);
      if (options.onConflict !== "adopt") throw error;
      if (error.taskId) return this.getTask(error.taskId);
      const page = await this.#listPage({ entityType: options.entityType, entityId: options.entityId }, null, 200);
      const active = page.items.find(isActive);
      if (active) return active;
      throw error;
    }
  }

  async #find(taskId: string): Promise<Task | null> {
    try {
      return await this.getTask(taskId);
    } catch (error) {
      if (error instanceof NotFound) return null;
      throw error;
    }
  }

  async #sameContent(task: Task, body: Json, refusal: ApiError): Promise<Task> {
    const changed = await contentChanges(task, body);
    if (changed.length === 0) return task;
    const message =
      `this key was used with different content (${changed.join(", ")}); submit a new ` +
      `revision to task ${task.id} (client.revise(...)) or use a new key`;
    const error = new IdempotencyKeyReused(message, 422, "ERR_IDEMPOTENCY_KEY_REUSED", {
      status: 422,
      error_code: "ERR_IDEMPOTENCY_KEY_REUSED",
      message,
      task_id: task.id,
      changed,
      errors: changed.map((field) => ({ field, message: "differs from the key's task" })),
      cause: refusal.problem,
    });
    error.task = task;
    throw error;
  }

  /** Block until the task is decided, expired or cancelled; survives restarts and drops. */
  waitForDecision(task: string | Task, options: WaitOptions): Promise<Task> {
    const http = this.http;
    return waitForDecision(
      {
        get: (id, signal) => this.getTask(id, signal),
        poll: async (current, wait, signal) => {
          const answer = await http.request({
            method: "GET",
            path: taskPath(current),
            params: { wait, after_version: current.version },
            retry: true,
            holdSeconds: wait,
            signal,
          });
          return answer.status === 304 ? current : (answer.body as Task);
        },
      },
      idOf(task),
      options,
    );
  }

  /** A new revision of the subject (`If-Match`): back to review. */
  async revise(task: string | Task, subject: Json, options: { expectedRevision: number; sourceRevisions?: string[] }): Promise<Task> {
    const body: Json = { subject };
    if (options.sourceRevisions) body["source_revisions"] = options.sourceRevisions;
    const headers = { "if-match": `"${options.expectedRevision}"` };
    return (await this.http.request({ method: "PUT", path: `${taskPath(task)}/subject`, json: body, headers })).body as Task;
  }

  /** Withdraw a waiting task. */
  async cancel(task: string | Task): Promise<Task> {
    return (await this.http.request({ method: "POST", path: `${taskPath(task)}/cancel` })).body as Task;
  }

  async #listPage(filters: TaskFilters, cursor: string | null, limit: number): Promise<TaskPage> {
    const params = {
      status: filters.status,
      entity_type: filters.entityType,
      entity_id: filters.entityId,
      reason_code: filters.reasonCode,
      execution_status: filters.executionStatus,
      claimed_by: filters.claimedBy,
      assigned_group: filters.assignedGroup,
      awaiting_my_vote: filters.awaitingMyVote ? "true" : undefined,
      limit,
      cursor: cursor ?? undefined,
    };
    return (await this.http.request({ method: "GET", path: "/tasks", params, retry: true })).body as TaskPage;
  }

  /** Every matching task, fetching pages as you go. */
  async *listTasks(filters: TaskFilters = {}): AsyncGenerator<Task> {
    let cursor: string | null = null;
    do {
      const page: TaskPage = await this.#listPage(filters, cursor, filters.pageSize ?? 50);
      yield* page.items;
      cursor = page.next_cursor;
    } while (cursor);
  }

  /** The task's audit trail. */
  async taskEvents(task: string | Task): Promise<AuditEvent[]> {
    const answer = await this.http.request({ method: "GET", path: `${taskPath(task)}/events`, retry: true });
    return (answer.body as { items: AuditEvent[] }).items;
  }

  /** The task's trail as signed receipts, oldest first, each with its chain link. */
  async receipts(task: string | Task): Promise<TaskReceipt[]> {
    const answer = await this.http.request({ method: "GET", path: `${taskPath(task)}/receipts`, retry: true });
    return (answer.body as { items: TaskReceipt[] }).items;
  }

  /** The server's public keys, the JWK Set receipts verify against. */
  async signingKeys(): Promise<SigningKeys> {
    return (await this.http.request({ method: "GET", path: "/.well-known/jwks.json", retry: true })).body as SigningKeys;
  }

  /** Every event of your tasks after `cursor` (`null`: from the first), and the next cursor. */
  async eventsSince(cursor: string | null, options: { pageSize?: number } = {}): Promise<EventsSince> {
    const events: EventDocument[] = [];
    for (;;) {
      const params = { limit: options.pageSize ?? 100, cursor: cursor ?? undefined };
      const answer = await this.http.request({ method: "GET", path: "/events", params, retry: true });
      const page = answer.body as { items: EventDocument[]; next_cursor: string | null; has_more: boolean };
      events.push(...page.items);
      cursor = page.next_cursor;
      if (!page.has_more || page.items.length === 0) return { events, cursor };
    }
  }

  async revisions(task: string | Task): Promise<Revision[]> {
    return ((await this.http.request({ method: "GET", path: `${taskPath(task)}/revisions`, retry: true })).body as { items: Revision[] }).items;
  }

  /** One revision with its subject (the current one without `revision`). */
  async getRevision(task: string | Task, revision?: number): Promise<Revision> {
    const n = revision ?? (await this.getTask(task)).current_revision ?? 1;
    return (await this.http.request({ method: "GET", path: `${taskPath(task)}/revisions/${Math.trunc(n)}`, retry: true })).body as Revision;
  }

  async diff(task: string | Task, options: { fromRevision: number; toRevision: number }): Promise<Diff> {
    const params = { from: options.fromRevision, to: options.toRevision };
    return (await this.http.request({ method: "GET", path: `${taskPath(task)}/diff`, params, retry: true })).body as Diff;
  }

  // --- executing ---------------------------------------------------------------------------

  /** Pass the execution gate for `subject`; report actions on the run, then `finish()`. */
  async beginExecution(task: string | Task, options: ExecutionOptions): Promise<ExecutionRun> {
    return beginExecution(this.http, idOf(task), options);
  }

  /**
   * Pass the gate, run `work(run)` with the lease renewed in the background, then complete
   * every action not reported (or fail them when `work` throws, and rethrow).
   */
  async withExecution<T>(task: string | Task, options: ExecutionOptions, work: (run: ExecutionRun) => Promise<T>): Promise<T> {
    const run = await this.beginExecution(task, options);
    run.startRenewing();
    let result: T;
    try {
      result = await work(run);
    } catch (error) {
      await run.finish(error);
      throw error;
    }
    await run.finish();
    return result;
  }

  // --- reviewing ---------------------------------------------------------------------------

  async claim(task: string | Task): Promise<Task> {
    return (await this.http.request({ method: "POST", path: `${taskPath(task)}/claim` })).body as Task;
  }

  /** The next task waiting for the caller, claimed; `null` when none waits. */
  async claimNext(filters: { entityType?: string; reasonCode?: string } = {}): Promise<Task | null> {
    const body: Json = {};
    if (filters.entityType) body["entity_type"] = filters.entityType;
    if (filters.reasonCode) body["reason_code"] = filters.reasonCode;
    const answer = await this.http.request({ method: "POST", path: "/tasks/claim-next", json: Object.keys(body).length ? body : undefined });
    return answer.status === 204 ? null : (answer.body as Task);
  }

  async renew(task: string | Task, leaseToken?: string): Promise<Task> {
    const headers = leaseHeaders(task, leaseToken);
    return (await this.http.request({ method: "POST", path: `${taskPath(task)}/lease/renew`, headers, retry: true })).body as Task;
  }

  async release(task: string | Task, leaseToken?: string): Promise<Task> {
    const headers = leaseHeaders(task, leaseToken);
    return (await this.http.request({ method: "POST", path: `${taskPath(task)}/release`, headers })).body as Task;
  }

  /** Resolve under the lease; given the claimed task, the revision and digest it showed. */
  async resolve(
    task: string | Task,
    options: DecideOptions & {
      leaseToken?: string;
      resolutionPayload?: Json;
      fields?: FieldFeedback[];
      /** With APPROVED_WITH_EDITS: the subject as edited (only the task's `editable` paths). */
      subject?: Record<string, unknown>;
      /** With an approval: allow the same action again for this many seconds. */
      rememberSeconds?: number;
    },
  ): Promise<Task> {
    const headers = leaseHeaders(task, options.leaseToken);
    const body = decisionBody(task, options);
    if (options.resolutionPayload !== undefined) body["resolution_payload"] = options.resolutionPayload;
    // With REVISION_REQUESTED: the subject's fields that should change, each with its reason.
    if (options.subject !== undefined) body["subject"] = options.subject;
    if (options.rememberSeconds !== undefined) body["remember_seconds"] = options.rememberSeconds;
    if (options.fields?.length) body["fields"] = options.fields.map((f) => ({ path: f.path, reason: f.reason }));
    return (await this.http.request({ method: "POST", path: `${taskPath(task)}/resolve`, json: body, headers, retry: true })).body as Task;
  }

  /** Vote on a task with an approval rule (no lease); the same vote again is harmless. */
  async vote(task: string | Task, options: DecideOptions): Promise<Task> {
    const body = decisionBody(task, options);
    return (await this.http.request({ method: "POST", path: `${taskPath(task)}/votes`, json: body, retry: true })).body as Task;
  }

  // --- webhook endpoints -------------------------------------------------------------------

  async createWebhookEndpoint(url: string, options: { eventTypes?: string[]; entityTypes?: string[]; description?: string } = {}): Promise<WebhookEndpoint> {
    const body: Json = { url };
    if (options.eventTypes) body["event_types"] = options.eventTypes;
    if (options.entityTypes) body["entity_types"] = options.entityTypes;
    if (options.description) body["description"] = options.description;
    return (await this.http.request({ method: "POST", path: "/webhook-endpoints", json: body })).body as WebhookEndpoint;
  }

  async deleteWebhookEndpoint(endpointId: string): Promise<void> {
    await this.http.request({ method: "DELETE", path: `/webhook-endpoints/${segment(endpointId, "endpointId")}`, retry: true });
  }
}

function decisionBody(task: string | Task, options: DecideOptions): Json {
  const body: Json = { decision: options.decision };
  let { revision, digest: shown } = options;
  if (typeof task !== "string" && task.current_revision != null) {
    revision ??= task.current_revision;
    shown ??= task.digest ?? undefined;
  }
  if (options.notes !== undefined) body["notes"] = options.notes;
  if (revision !== undefined) body["revision"] = revision;
  if (shown !== undefined) body["digest"] = shown;
  return body;
}
