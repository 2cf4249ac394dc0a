/**
 * Verifying a delivery and reading it as a typed event. Standard Webhooks signatures are
 * checked with the `standardwebhooks` library; `X-Signature-256` with Web Crypto's HMAC.
 */
import { Webhook } from "standardwebhooks";
import { WebhookVerificationFailed } from "./errors.js";
import type { EventDocument, WebhookEvent } from "./models.js";

export interface VerifyOptions {
  /** How far `webhook-timestamp` may be from now, in seconds (default 300). */
  toleranceSeconds?: number;
  /** Accept a body-only `X-Signature-256` when Standard Webhooks headers are absent (default true). */
  allowBodyOnlySignature?: boolean;
  /** The time to check freshness against, in Unix seconds (default: now). */
  now?: number;
}

type Headers_ = Headers | Record<string, string | string[] | undefined>;

function lowered(headers: Headers_): Record<string, string> {
  const out: Record<string, string> = {};
  if (typeof Headers !== "undefined" && headers instanceof Headers) {
    headers.forEach((value, name) => (out[name.toLowerCase()] = value));
    return out;
  }
  for (const [name, value] of Object.entries(headers as Record<string, unknown>)) {
    if (value !== undefined) out[name.toLowerCase()] = Array.isArray(value) ? value.join(", ") : String(value);
  }
  return out;
}

function bytesOf(body: string | Uint8Array): Uint8Array<ArrayBuffer> {
  return typeof body === "string" ? new TextEncoder().encode(body) : new Uint8Array(body);
}

function equal(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/** `sha256=` + lowercase hex HMAC-SHA256 of `body` keyed with `secret` (UTF-8). */
export async function xSignature256(secret: string, body: string | Uint8Array): Promise<string> {
  const key = await crypto.subtle.importKey(
    "raw", new TextEncoder().encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"],
  );
  const mac = await crypto.subtle.sign("HMAC", key, bytesOf(body));
  return "sha256=" + Array.from(new Uint8Array(mac), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** The Standard Webhooks `v1,<base64>` signature of one delivery. */
export function standardSignature(secret: string, id: string, timestamp: number, body: string | Uint8Array): string {
  return new Webhook(secret).sign(id, new Date(timestamp * 1000), bytesOf(body));
}

/**
 * Verify a delivery over its **raw** body and return it as a `WebhookEvent`.
 *
 * `secrets` are the endpoint's secrets, newest first; any one that verifies is enough.
 * Standard Webhooks headers are checked first (they sign the id and the timestamp, which
 * must be within `toleranceSeconds`). Only when they are absent is `X-Signature-256`
 * accepted: it signs the body alone, so deduplicate on `event.dedupeKey`.
 *
 * @throws WebhookVerificationFailed: answer 400 and do nothing.
 */
export async function verifyEvent(
  headers: Headers_,
  body: string | Uint8Array,
  secrets: string | string[],
  options: VerifyOptions = {},
): Promise<WebhookEvent> {
  const keys = (typeof secrets === "string" ? [secrets] : secrets).filter((s) => s);
  if (keys.length === 0) throw new WebhookVerificationFailed("at least one secret is needed");
  const tolerance = options.toleranceSeconds ?? 300;
  const now = options.now ?? Math.floor(Date.now() / 1000);
  const h = lowered(headers);
  let scheme: WebhookEvent["scheme"];
  if ("webhook-signature" in h) {
    scheme = "standard-webhooks";
    const timestamp = h["webhook-timestamp"] ?? "";
    if (!/^\d+$/.test(timestamp) || Math.abs(now - Number(timestamp)) > tolerance) {
      throw new WebhookVerificationFailed("stale or missing webhook-timestamp");
    }
    const given = h["webhook-signature"]!.split(" ");
    const id = h["webhook-id"] ?? "";
    const ok = keys.some((secret) => {
      let expected: string;
      try {
        expected = standardSignature(secret, id, Number(timestamp), body);
      } catch {
        return false;
      }
      return given.some((signature) => equal(signature, expected));
    });
    if (!ok) throw new WebhookVerificationFailed("webhook-signature does not match");
  } else if ("x-signature-256" in h && (options.allowBodyOnlySignature ?? true)) {
    scheme = "x-signature-256";
    const given = h["x-signature-256"]!;
    const expected = await Promise.all(keys.map((secret) => xSignature256(secret, body)));
    if (!expected.some((e) => equal(given, e))) {
      throw new WebhookVerificationFailed("X-Signature-256 does not match");
    }
  } else {
    throw new WebhookVerificationFailed("no signature a receiver may accept");
  }
  let document: unknown;
  try {
    document = JSON.parse(typeof body === "string" ? body : new TextDecoder().decode(body));
  } catch (error) {
    throw new WebhookVerificationFailed(`the body is not a Signoff event: ${String(error)}`);
  }
  if (document === null || typeof document !== "object" || typeof (document as { id?: unknown }).id !== "string"
      || typeof (document as { type?: unknown }).type !== "string"
      || typeof (document as { data?: unknown }).data !== "object") {
    throw new WebhookVerificationFailed("the body is not a Signoff event: id, type and data are required");
  }
  const event = document as EventDocument;
  // What a receiver deduplicates on must be signed: Standard Webhooks signs webhook-id;
  // X-Signature-256 signs only the body, whose "id" is the same event id.
  const webhookId = scheme === "standard-webhooks" ? (h["webhook-id"] ?? event.id) : event.id;
  return { ...event, webhookId, scheme, dedupeKey: webhookId };
}
