/** What the API answers with, typed. Unknown fields a newer server adds are kept. */
import type { components } from "./openapi.generated.js";

/** A decision a person can make. */
export type Decision = "APPROVED" | "REJECTED" | "REVISION_REQUESTED" | "APPROVED_WITH_EDITS" | "APPROVED_BY_GRANT";
/** A task's status. */
export type TaskStatus = "PENDING_REVIEW" | "CLAIMED" | "RESOLVED" | "EXPIRED" | "CANCELLED";
/** What happens when the producer's time limit runs out (never an approval). */
export type OnTimeout = "reject" | "expire" | "escalate";

/** The principal that decides a task when the producer's time limit runs out. */
export const TIMEOUT_ACTOR = "signoff-sweeper";

/** One vote on a task decided by an approval rule. */
export interface Vote {
  voter: string;
  groups: string[];
  decision: Decision;
  notes: string | null;
  revision: number;
  digest: string;
  stage: number;
  at: string;
  door?: string;
  [extra: string]: unknown;
}

/** One labelled value of a headline, as shown (`text`) and as given (`value`). */
export interface KeyField {
  label: string;
  type: "money" | "date" | "person" | "link" | "text" | string;
  pointer: string;
  text: string;
  value?: unknown;
  currency?: string | null;
  [extra: string]: unknown;
}

/** What is being approved, in one line, bound to a revision (`null`: the input). */
export interface Headline {
  title: string;
  fields: KeyField[];
  template?: string | null;
  values?: Record<string, unknown>;
  revision?: number | null;
  [extra: string]: unknown;
}

/** Where a task's approval rule stands (`text` says it in words). */
export interface ApprovalProgress {
  stage: number;
  stage_name: string | null;
  stages: number;
  approvals: number;
  required: number;
  waiting_on: string[];
  against: number;
  met: boolean;
  outcome: Decision | null;
  text: string;
  [extra: string]: unknown;
}

/** One field of the subject a reviewer asked to change, and why. */
export interface FieldFeedback {
  path: string;
  reason: string;
}

/** What a reviewer asked to change: notes, fields with reasons, about which revision. */
export interface ChangeRequest {
  notes: string | null;
  fields: FieldFeedback[];
  revision: number | null;
  by: string;
  at: string;
}

/** One review task, as `GET /tasks/{id}` shows it. */
export interface Task {
  id: string;
  status: TaskStatus;
  /** What is being approved: its title and key fields. */
  headline?: Headline | null;
  entity_type: string;
  entity_id: string;
  reason_code: string;
  version: number;
  precheck_hash?: string | null;
  diagnostic_bundle?: Record<string, unknown>;
  producer_id?: string | null;
  claimed_by?: string | null;
  lease_expires_at?: string | null;
  decision?: Decision | null;
  notes?: string | null;
  resolution_payload?: Record<string, unknown> | null;
  operator_id?: string | null;
  created_at?: string | null;
  updated_at?: string | null;
  resolved_at?: string | null;
  current_revision?: number | null;
  digest?: string | null;
  material_paths?: string[] | null;
  approved_revision?: number | null;
  approved_digest?: string | null;
  approval_expires_at?: string | null;
  execution_status?: string | null;
  deadline_at?: string | null;
  escalation_level?: number | null;
  policy?: string | null;
  assigned_group?: string | null;
  summary?: Record<string, unknown> | null;
  /** JSON Pointers a reviewer may edit before approving (null: no edits). */
  editable?: string[] | null;
  /** The remembered approval that approved it, if one did. */
  grant_id?: string | null;
  /** Whose move it is: reviewers, the producer (changes were asked for), or nobody. */
  awaiting?: "reviewers" | "producer" | null;
  /** The last feedback that asked for changes, kept until the task is decided again. */
  change_request?: ChangeRequest | null;
  metadata?: Record<string, unknown> | null;
  /** Only in claim answers. */
  lease_token?: string | null;
  requested_by?: string | null;
  approval_rule?: Record<string, unknown> | null;
  votes?: Vote[] | null;
  approval_progress?: ApprovalProgress | null;
  review_url?: string | null;
  execution_lease_expires_at?: string | null;
  traceparent?: string | null;
  [extra: string]: unknown;
}

/** A reviewer edited the subject and approved the edit: run revision `approved_revision`. */
export function isEdited(task: Task): boolean {
  return task.status === "RESOLVED" && task.decision === "APPROVED_WITH_EDITS";
}

/** Sent back for changes: revise the subject and the task returns to review. */
export function changesRequested(task: Task): boolean {
  return task.status === "RESOLVED" && task.awaiting === "producer";
}

/** Waiting for a person (pending or claimed). */
export function isActive(task: Task): boolean {
  return task.status === "PENDING_REVIEW" || task.status === "CLAIMED";
}

/** Rejected because the producer's time limit ran out, not by a person. */
export function isTimedOut(task: Task): boolean {
  return task.status === "RESOLVED" && task.decision === "REJECTED" && task.operator_id === TIMEOUT_ACTOR;
}

export interface TaskPage {
  items: Task[];
  next_cursor: string | null;
}

export interface Action {
  id: string;
  status: "PENDING" | "COMPLETED" | "FAILED" | string;
  operation_id?: string | null;
  result?: unknown;
}

/** The execution gate's answer, and each action report's. */
export interface Execution {
  task_id: string;
  execution_status?: string | null;
  operation_id?: string | null;
  actions: Action[];
  revision?: number | null;
  digest?: string | null;
  approved_by?: string | null;
  granted_at?: string | null;
  /** Fencing token of the execution lease (absent on a replay). */
  execution_token?: string | null;
  execution_lease_expires_at?: string | null;
  [extra: string]: unknown;
}

export interface AuditEvent {
  id: number;
  task_id: string;
  type: string;
  action: string;
  status: string;
  version: number;
  actor_id: string;
  actor_role: string;
  details: Record<string, unknown>;
  created_at: string;
}

/** One record of a task's trail as a signed receipt (`GET /tasks/{id}/receipts`):
 * its chain link and `receipt`, a compact JWS (EdDSA) over the record, checked against
 * `signingKeys()`. */
export interface TaskReceipt {
  record_id: number;
  type: string;
  prev_hash: string;
  hash: string;
  receipt: string | null;
}

/** The server's public keys (`/.well-known/jwks.json`), a JWK Set. */
export interface SigningKeys {
  keys: Array<Record<string, unknown>>;
}

export interface Revision {
  revision: number;
  digest: string;
  source_revisions: string[];
  created_by: string;
  created_at: string;
  subject?: Record<string, unknown> | null;
}

export interface Diff {
  from: number;
  to: number;
  added: Record<string, unknown>[];
  removed: Record<string, unknown>[];
  changed: Record<string, unknown>[];
  sources: Record<string, unknown>;
}

export interface WebhookEndpoint {
  id: string;
  url: string;
  event_types?: string[] | null;
  entity_types?: string[] | null;
  enabled: boolean;
  /** Only when created or rotated. */
  secret?: string | null;
  /** Deliveries also carry a v1a (Ed25519) signature, checked with /.well-known/jwks.json. */
  asymmetric_signature?: boolean;
  [extra: string]: unknown;
}

/** One event of the caller's tasks: the document its webhook delivery carries. */
export interface EventDocument {
  id: string;
  type: string;
  created_at?: string | null;
  data: Task;
  metadata?: Record<string, unknown> | null;
  /** The signed receipt (compact JWS, EdDSA) of the trail record this event reports. */
  receipt?: string | null;
  [extra: string]: unknown;
}

/** A verified webhook delivery. */
export interface WebhookEvent extends EventDocument {
  /** The signed id to deduplicate on (the `webhook-id` header, or the body's id). */
  webhookId: string;
  scheme: "standard-webhooks" | "x-signature-256";
  dedupeKey: string;
}

/** The events since a cursor, oldest first, and the cursor to pass next time. */
export interface EventsSince {
  events: EventDocument[];
  cursor: string | null;
}

// Every field the served OpenAPI document gives a task or an execution grant is typed
// above: a field the server adds fails this build until it is (openapi.generated.ts is
// regenerated from the served document, and a test checks it is current).
type Named<T> = keyof { [K in keyof T as string extends K ? never : number extends K ? never : K]: T[K] };
type Untyped<Served, Ours> = Exclude<Named<Served>, Named<Ours>>;
export const TASK_FIELDS_TYPED: [Untyped<components["schemas"]["TaskOut"], Task>] extends [never] ? true : false = true;
export const EXECUTION_FIELDS_TYPED: [Untyped<components["schemas"]["ExecutionGrantOut"], Execution>] extends [never]
  ? true
  : false = true;
