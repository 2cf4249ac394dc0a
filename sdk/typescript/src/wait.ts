/** Waiting for a decision: long-polls that outlive server restarts and network drops. */
import { ApiError, ConnectionFailed, DecisionTimeout } from "./errors.js";
import type { Task } from "./models.js";
import { TRANSIENT_STATUSES, sleep } from "./transport.js";

/** The longest a server holds one long-poll request. */
export const MAX_WAIT_SECONDS = 60;
/** The longest pause between two reconnection attempts of a wait. */
export const MAX_RECONNECT_PAUSE = 5;
const SETTLED = new Set(["RESOLVED", "EXPIRED", "CANCELLED"]);

/**
 * Full-jitter exponential backoff: 0.25 s, 0.5 s, 1 s … up to 5 s, each drawn at random
 * below its cap, so the waiters of a restarted server do not all come back at once.
 */
export function reconnectPause(attempt: number): number {
  const cap = Math.min(MAX_RECONNECT_PAUSE, 0.25 * 2 ** Math.min(attempt, 10));
  return cap * (0.2 + 0.8 * Math.random());
}

export function transient(error: unknown): boolean {
  if (error instanceof ConnectionFailed) return true;
  return error instanceof ApiError && TRANSIENT_STATUSES.has(error.status);
}

export function settled(task: Task, revision?: number): boolean {
  if (!SETTLED.has(task.status)) return false;
  return revision === undefined || task.status !== "RESOLVED" || task.current_revision === revision;
}

const now = (): number => performance.now() / 1000;

/** Run `make()`; after a lost connection or a restarting server, again until `deadline`. */
export async function reconnecting<T>(make: () => Promise<T>, deadline: number, signal?: AbortSignal): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await make();
    } catch (error) {
      const remaining = deadline - now();
      if (!transient(error) || remaining <= 0) throw error;
      await sleep(Math.min(remaining, reconnectPause(attempt)), signal);
    }
  }
}

export interface WaitOptions {
  /** Give up after this many seconds (`DecisionTimeout`). */
  timeoutSeconds: number;
  /** Only a decision about this revision counts. */
  revision?: number;
  /** Stop waiting when this signal fires (the promise rejects with its reason). */
  signal?: AbortSignal;
  /** Pause between polls against a server that does not hold requests (seconds, default 2). */
  pollIntervalSeconds?: number;
}

export interface Reader {
  get(taskId: string, signal?: AbortSignal): Promise<Task>;
  poll(task: Task, waitSeconds: number, signal?: AbortSignal): Promise<Task>;
}

export async function waitForDecision(reader: Reader, taskId: string, options: WaitOptions): Promise<Task> {
  const { timeoutSeconds, revision, signal } = options;
  const deadline = now() + timeoutSeconds;
  let task = await reconnecting(() => reader.get(taskId, signal), deadline, signal);
  while (!settled(task, revision)) {
    if (deadline - now() <= 0) {
      throw new DecisionTimeout(`no decision on task ${task.id} within ${timeoutSeconds} s (status ${task.status})`, task);
    }
    const started = now();
    let fresh: Task;
    try {
      const current = task;
      fresh = await reconnecting(
        () => reader.poll(current, Math.max(1, Math.min(MAX_WAIT_SECONDS, Math.ceil(deadline - now()))), signal),
        deadline,
        signal,
      );
    } catch (error) {
      if (!transient(error)) throw error;
      throw new DecisionTimeout(
        `no decision on task ${task.id} within ${timeoutSeconds} s (status ${task.status}; ` +
          `the server could not be reached at the end: ${(error as Error).message})`,
        task,
      );
    }
    if (fresh.version === task.version && now() - started < 0.5) {
      // The server answered at once with nothing new (it does not hold requests, or it
      // is shutting down): poll gently instead of spinning.
      await sleep(Math.min(options.pollIntervalSeconds ?? 2, Math.max(0, deadline - now())), signal);
    }
    task = fresh;
  }
  return task;
}
