/**
 * Digests the SDK computes locally, exactly as the server does: SHA-256 (lowercase hex)
 * over the RFC 8785 (JSON Canonicalization Scheme) form. Web Crypto only, so it runs in
 * edge runtimes and browsers as well as Node.
 */
import canonicalizeModule from "canonicalize";
import { v5 as uuidv5 } from "uuid";
import { InvalidArgument } from "./errors.js";

// The package is CommonJS (`module.exports = serialize`): its default import is the function.
const canonicalize = canonicalizeModule as unknown as (value: unknown) => string | undefined;

/** Names every escalation id the SDK derives from a caller's key (as the Python SDK). */
export const ESCALATION_NAMESPACE = "5d0c6a36-4b5e-4f6a-9d57-0f1d3c2b8e71";

function checkRepresentable(value: unknown, path: string): void {
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new InvalidArgument(`${path}: NaN and ±Infinity are not JSON`, path);
    if (Number.isInteger(value) && Math.abs(value) > Number.MAX_SAFE_INTEGER && Math.abs(value) < 1e21) {
      // Python's RFC 8785 library refuses integers beyond ±(2^53−1); so must we.
      throw new InvalidArgument(`${path}: integers beyond ±(2^53−1) cannot be represented`, path);
    }
  } else if (typeof value === "bigint") {
    throw new InvalidArgument(`${path}: bigint is not JSON`, path);
  } else if (Array.isArray(value)) {
    value.forEach((item, index) => checkRepresentable(item, `${path}[${index}]`));
  } else if (value !== null && typeof value === "object" && !(value instanceof Date)) {
    for (const [key, item] of Object.entries(value)) checkRepresentable(item, `${path}.${key}`);
  }
}

/** The RFC 8785 canonical JSON text of `value` (serialise it as UTF-8). */
export function canonicalJson(value: unknown): string {
  checkRepresentable(value, "value");
  const text = canonicalize(value);
  if (text === undefined) throw new InvalidArgument("the value has no JSON form", "value");
  return text;
}

function hex(bytes: ArrayBuffer): string {
  return Array.from(new Uint8Array(bytes), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** SHA-256 (lowercase hex) of a text's UTF-8 bytes. */
export async function sha256Hex(text: string): Promise<string> {
  return hex(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
}

/** The digest of a subject: what the execution gate compares with the approved one. */
export async function digest(subject: unknown): Promise<string> {
  return sha256Hex(canonicalJson(subject));
}

/** The escalation's precheck hash over `diagnostic_bundle.attempted_actions`. */
export async function precheckHash(attemptedActions: unknown): Promise<string> {
  return digest(attemptedActions);
}

/**
 * `[escalationId, idempotencyKey]` derived from a caller's stable key, the same as the
 * Python SDK derives them: the same key names the same escalation in both SDKs.
 */
export async function escalationIds(key: string, principalId: string): Promise<[string, string]> {
  if (!key) throw new InvalidArgument("key must not be empty", "key");
  const escalationId = uuidv5(`${principalId}\n${key}`, ESCALATION_NAMESPACE);
  return [escalationId, `sdk-${await sha256Hex(key)}`];
}
