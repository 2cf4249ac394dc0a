/** HTTP over `fetch`: retries with backoff for what the server treats idempotently. */
import { ConnectionFailed, InvalidArgument } from "./errors.js";
import { errorFromResponse } from "./errors.generated.js";

export interface ClientOptions {
  /** Seconds one request may take (a long-poll adds what the server may hold it). Default 30. */
  timeoutSeconds?: number;
  /** Attempts after the first, for retry-safe requests. Default 3. */
  retries?: number;
  /** First pause between attempts, in seconds, doubled each time. Default 0.5. */
  backoffSeconds?: number;
  /** A `fetch` of your own (tests, proxies, edge runtimes). Default: the global one. */
  fetch?: typeof fetch;
  /** Extra headers sent with every request. */
  headers?: Record<string, string>;
}

export interface Call {
  method: string;
  path: string;
  params?: Record<string, string | number | undefined | null>;
  json?: unknown;
  headers?: Record<string, string>;
  /** Safe to send again after a lost answer or a 5xx (idempotent on the server). */
  retry?: boolean;
  /** Seconds the server may hold the request (long-poll), added to the timeout. */
  holdSeconds?: number;
  /** Abort the request (and any retry) when this signal fires. */
  signal?: AbortSignal;
}

export interface Answer {
  status: number;
  body: unknown;
}

/** Answers worth another attempt: overloaded or restarting. */
export const TRANSIENT_STATUSES: ReadonlySet<number> = new Set([429, 500, 502, 503, 504]);

export const sleep = (seconds: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(done, Math.max(0, seconds * 1000));
    function done(): void {
      signal?.removeEventListener("abort", aborted);
      resolve();
    }
    function aborted(): void {
      clearTimeout(timer);
      reject(signal?.reason);
    }
    signal?.addEventListener("abort", aborted, { once: true });
  });

/** `value` as one path segment: percent-encoded whole, so an id never names another route. */
export function segment(value: unknown, name: string): string {
  const text = String(value ?? "");
  if (!text.trim()) throw new InvalidArgument(`${name} must not be empty`, name);
  return encodeURIComponent(text).replace(/\./g, "%2E").replace(/[!'()*]/g, (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase());
}

function refusedBeforeSending(error: unknown): boolean {
  const cause = (error as { cause?: { code?: unknown } } | null)?.cause;
  return typeof cause?.code === "string" && cause.code === "ECONNREFUSED";
}

function retryAfter(value: string | null): number | null {
  if (!value) return null;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds);
  const when = Date.parse(value);
  return Number.isNaN(when) ? null : Math.max(0, (when - Date.now()) / 1000);
}

export class Transport {
  readonly baseUrl: string;
  private readonly apiKey: string;
  private readonly timeout: number;
  private readonly retries: number;
  private readonly backoff: number;
  private readonly fetcher: typeof fetch;
  private readonly extraHeaders: Record<string, string>;

  constructor(baseUrl: string, apiKey: string, options: ClientOptions = {}) {
    if (!baseUrl || !/^https?:\/\//.test(baseUrl)) {
      throw new InvalidArgument("baseUrl must be an http(s) URL", "baseUrl");
    }
    if (!apiKey || !apiKey.trim()) throw new InvalidArgument("apiKey must not be empty", "apiKey");
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.apiKey = apiKey;
    this.timeout = options.timeoutSeconds ?? 30;
    this.retries = options.retries ?? 3;
    this.backoff = options.backoffSeconds ?? 0.5;
    this.fetcher = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.extraHeaders = options.headers ?? {};
  }

  private url(call: Call): string {
    const query = new URLSearchParams();
    for (const [name, value] of Object.entries(call.params ?? {})) {
      if (value !== undefined && value !== null) query.set(name, String(value));
    }
    const text = query.toString();
    return `${this.baseUrl}${call.path}${text ? `?${text}` : ""}`;
  }

  async request(call: Call): Promise<Answer> {
    const headers: Record<string, string> = {
      ...this.extraHeaders,
      authorization: `Bearer ${this.apiKey}`,
      accept: "application/json",
      ...(call.headers ?? {}),
    };
    let body: string | undefined;
    if (call.json !== undefined) {
      headers["content-type"] = "application/json";
      body = JSON.stringify(call.json);
    }
    for (let attempt = 0; ; attempt++) {
      const last = attempt >= this.retries;
      const limit = AbortSignal.timeout(Math.ceil((this.timeout + (call.holdSeconds ?? 0)) * 1000));
      const signal = call.signal ? AbortSignal.any([call.signal, limit]) : limit;
      let response: Response;
      try {
        response = await this.fetcher(this.url(call), { method: call.method, headers, body, signal });
      } catch (error) {
        if (call.signal?.aborted) throw call.signal.reason;
        if (!last && (call.retry || refusedBeforeSending(error))) {
          await sleep(this.backoff * 2 ** attempt, call.signal);
          continue;
        }
        throw new ConnectionFailed(`${call.method} ${call.path}: no answer (${describe(error)})`);
      }
      if (!last && call.retry && TRANSIENT_STATUSES.has(response.status)) {
        await response.body?.cancel();
        const pause = retryAfter(response.headers.get("retry-after")) ?? this.backoff * 2 ** attempt;
        await sleep(Math.min(pause, 30), call.signal);
        continue;
      }
      const text = await response.text();
      let parsed: unknown = null;
      if (text) {
        try {
          parsed = JSON.parse(text);
        } catch {
          parsed = text;
        }
      }
      if (response.status >= 400) throw errorFromResponse(response.status, parsed);
      return { status: response.status, body: parsed };
    }
  }
}

function describe(error: unknown): string {
  const cause = (error as { cause?: unknown } | null)?.cause;
  const text = error instanceof Error ? error.message : String(error);
  return cause instanceof Error ? `${text}: ${cause.message}` : text;
}
