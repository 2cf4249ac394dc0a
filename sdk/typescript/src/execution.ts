/**
 * The execution gate: pass it for what is about to run (its digest computed here), hold
 * the execution lease while it runs, report every action. The fencing token travels
 * with every report, so an executor whose lease was taken over cannot report any more.
 */
import { digest } from "./digest.js";
import { AlreadyExecuting, ExecutionLeaseLost } from "./errors.generated.js";
import { ApiError, ConnectionFailed, SignoffError } from "./errors.js";
import type { Execution, Task } from "./models.js";
import { segment, sleep, type Transport } from "./transport.js";
import { MAX_WAIT_SECONDS } from "./wait.js";

/** With no `waitForLeaseSeconds`: how long after the other lease lapses the wait ends. */
const LAPSE_MARGIN_SECONDS = 5;
const MIN_RENEW_INTERVAL = 0.2;

export interface ExecutionOptions {
  /** What is about to run: its digest must be the approved one. */
  subject: unknown;
  /** Your side effect's idempotency key; the same id again resumes, never runs twice. */
  operationId: string;
  /** Cap, in seconds, on waiting for another executor's lease (default: as long as it lives). */
  waitForLeaseSeconds?: number;
}

const now = (): number => performance.now() / 1000;

async function revisionOf(http: Transport, task: Task, localDigest: string): Promise<number | null | undefined> {
  if (task.digest === localDigest || task.current_revision == null) return task.current_revision;
  if (task.approved_digest === localDigest) return task.approved_revision;
  const answer = await http.request({ method: "GET", path: `/tasks/${segment(task.id, "taskId")}/revisions`, retry: true });
  const items = ((answer.body as { items?: { revision: number; digest: string }[] }).items ?? []);
  const earlier = items.filter((i) => i.digest === localDigest).map((i) => i.revision);
  return earlier.length ? Math.max(...earlier) : task.current_revision;
}

/** One pass through the gate: report each action, then `finish()` (or use `client.withExecution`). */
export class ExecutionRun {
  execution: Execution;
  readonly task: Task;
  readonly digest: string;
  readonly operationId: string;
  /** Set when a renewal found the lease taken over: stop, another executor runs. */
  leaseLost: SignoffError | null = null;
  private readonly http: Transport;
  private readonly reported = new Set<string>();
  private renewing: ReturnType<typeof setTimeout> | null = null;

  constructor(http: Transport, execution: Execution, task: Task, localDigest: string, operationId: string) {
    this.http = http;
    this.execution = execution;
    this.task = task;
    this.digest = localDigest;
    this.operationId = operationId;
  }

  /** The fencing token of this run's execution lease (absent on a replay). */
  get token(): string | null {
    return this.execution.execution_token ?? null;
  }

  /** Every action of the approved subject. */
  get actions(): string[] {
    return this.execution.actions.map((a) => a.id);
  }

  /** Actions still to run; empty when this operation already completed. */
  get pending(): string[] {
    return this.execution.actions.filter((a) => a.status !== "COMPLETED").map((a) => a.id);
  }

  /** This operation completed (now or before): nothing is left to run. */
  get completed(): boolean {
    return this.execution.execution_status === "COMPLETED";
  }

  private async report(actionId: string, succeeded: boolean, result: unknown): Promise<Execution> {
    if (this.leaseLost) throw this.leaseLost;
    const headers: Record<string, string> = this.token ? { "x-execution-token": this.token } : {};
    const answer = await this.http.request({
      method: "POST",
      path: `/tasks/${segment(this.task.id, "taskId")}/actions/${segment(actionId, "actionId")}/${succeeded ? "complete" : "fail"}`,
      json: { operation_id: this.operationId, result: result ?? null },
      headers,
      retry: true, // idempotent by operation_id
    });
    this.reported.add(actionId);
    this.execution = answer.body as Execution;
    return this.execution;
  }

  /** Report an action done, with its result (a JSON value). */
  complete(actionId: string, result?: unknown): Promise<Execution> {
    return this.report(actionId, true, result);
  }

  /** Report an action failed: the execution may be passed again for it. */
  fail(actionId: string, error?: unknown): Promise<Execution> {
    return this.report(actionId, false, error);
  }

  /** Renew the execution lease now (`ExecutionLeaseLost` when another executor took it over). */
  async renew(): Promise<Execution> {
    if (!this.token) return this.execution;
    const answer = await this.http.request({
      method: "POST",
      path: `/tasks/${segment(this.task.id, "taskId")}/execution/renew`,
      headers: { "x-execution-token": this.token },
      retry: true,
    });
    this.execution = answer.body as Execution;
    return this.execution;
  }

  /** Keep the lease alive in the background (a third of its length) until `stop()`. */
  startRenewing(): void {
    const expires = this.execution.execution_lease_expires_at;
    if (!this.token || !expires || this.renewing) return;
    const seconds = Math.max(MIN_RENEW_INTERVAL, (Date.parse(expires) - Date.now()) / 3000);
    this.renewing = setTimeout(() => {
      this.renewing = null;
      this.renew().then(
        () => this.startRenewing(),
        (error: unknown) => {
          if (error instanceof ExecutionLeaseLost || (error instanceof ApiError && error.status === 409)) {
            this.leaseLost = error as SignoffError;
          } else if (error instanceof ConnectionFailed || error instanceof ApiError) {
            this.startRenewing(); // try again at the next interval
          }
        },
      );
    }, seconds * 1000);
  }

  stop(): void {
    if (this.renewing) clearTimeout(this.renewing);
    this.renewing = null;
  }

  /** Complete every action not reported (`error` given: fail them with it). */
  async finish(error?: unknown): Promise<void> {
    this.stop();
    if (this.completed || this.leaseLost) return;
    for (const action of this.pending) {
      if (this.reported.has(action)) continue;
      if (error === undefined) await this.complete(action);
      else await this.fail(action, { message: error instanceof Error ? error.message : String(error) });
    }
  }
}

/**
 * Pass the gate for `subject` as it is now. When another executor holds the lease, wait
 * for its outcome (a long-poll wakes on the task's next change); a lease that lapses is
 * taken over. The same `operationId` is never kept waiting by its own lease.
 */
export async function beginExecution(http: Transport, taskId: string, options: ExecutionOptions): Promise<ExecutionRun> {
  const localDigest = await digest(options.subject);
  const path = `/tasks/${segment(taskId, "taskId")}`;
  const task = (await http.request({ method: "GET", path, retry: true })).body as Task;
  const revision = await revisionOf(http, task, localDigest);
  const body = { revision: revision || 1, digest: localDigest, operation_id: options.operationId };
  const deadline = options.waitForLeaseSeconds === undefined ? null : now() + options.waitForLeaseSeconds;
  let seen = task;
  for (;;) {
    try {
      const answer = await http.request({ method: "POST", path: `${path}/execute`, json: body, retry: true });
      return new ExecutionRun(http, answer.body as Execution, task, localDigest, options.operationId);
    } catch (error) {
      if (!(error instanceof AlreadyExecuting)) throw error;
      const expires = error.leaseExpiresAt;
      if (!expires) throw error; // no lease to wait out: another operation completed it
      const lapse = (Date.parse(expires) - Date.now()) / 1000;
      const remaining = deadline === null ? lapse + LAPSE_MARGIN_SECONDS : deadline - now();
      if (remaining <= 0) throw error;
      const wait = Math.min(MAX_WAIT_SECONDS, Math.max(0.05, Math.min(lapse + 0.05, remaining)));
      const started = now();
      const polled = await http.request({
        method: "GET",
        path,
        params: { wait: Math.round(wait * 1000) / 1000, after_version: seen.version },
        retry: true,
        holdSeconds: wait,
      });
      const fresh = polled.status === 304 ? seen : (polled.body as Task);
      if (fresh.version === seen.version && now() - started < wait / 2) await sleep(wait);
      seen = fresh;
    }
  }
}
