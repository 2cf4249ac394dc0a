/// <reference types="node" />
/**
 * Checking a receipt before acting on it: a compact JWS (EdDSA) over the RFC 8785 form of
 * a trail record, signed by a key of the server's `/.well-known/jwks.json`. The signature
 * is checked with Node's `crypto`; the rules and the reasons are the Python SDK's
 * `verify_receipt`.
 */
import { createPublicKey, verify } from "node:crypto";
import { ReceiptInvalid } from "./errors.js";
import type { SigningKeys } from "./models.js";

/** What a receipt must state, where given. */
export interface ReceiptExpectations {
  /** The task the receipt must be of. */
  taskId?: string | undefined;
  /** The digest the receipt must name (the revision the person saw). */
  digest?: string | undefined;
  /** The decision the receipt must state. */
  decision?: string | undefined;
}

/** What a receipt states about one trail record (docs/evidence.md, "Receipts"). */
export interface ReceiptClaims {
  typ: string;
  task_id: string;
  record_id: number;
  type: string;
  action: string;
  outcome: string;
  task_version: number;
  who: { principal: string | null; role: string | null; door: string | null };
  /** When, as the chain hashes it: UTC, `YYYY-MM-DD HH:MM:SS.ffffff`. */
  at: string;
  details: unknown;
  prev_hash: string;
  record_hash: string;
  decision?: string;
  revision?: number;
  digest?: string;
  [claim: string]: unknown;
}

const BASE64URL = /^[A-Za-z0-9_-]*$/;
/** The chain's time text (with `T` or a space, a fraction, `Z` or `+00:00` also read). */
const TIME = /^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?(?:Z|[+-]00:?00)?$/;

/** A JSON value as a reason quotes it. */
function shown(value: unknown): string {
  return JSON.stringify(value) ?? "null";
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function decoded(part: string, name: string): Buffer {
  if (!BASE64URL.test(part) || part.length % 4 === 1) throw new Error(`the ${name} is not base64url`);
  return Buffer.from(part, "base64url");
}

function json(part: string, name: string): unknown {
  return JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(decoded(part, name)));
}

/** Whole seconds since the epoch of `at` (UTC); `null` when it is not a time. */
function seconds(at: string): number | null {
  const found = TIME.exec(at);
  if (found === null) return null;
  const [year, month, day, hour, minute, second] = found.slice(1).map((v) => Number(v ?? 0)) as number[];
  const moment = new Date(0);
  moment.setUTCFullYear(year!, month! - 1, day!);
  if (moment.getUTCDate() !== day || moment.getUTCMonth() !== month! - 1 || hour! > 23 || minute! > 59 || second! > 59) {
    return null;
  }
  moment.setUTCHours(hour!, minute!, second!, 0);
  return moment.getTime() / 1000;
}

/**
 * The claims of `receipt` once its signature verifies with a key of `jwks` (a JWK Set,
 * as `signingKeys()` returns it) and it names `taskId`, `digest` and `decision` where
 * given. A key's `exp` retires it: a record made at or after it, signed by that key, is
 * refused.
 *
 * @throws ReceiptInvalid: saying why.
 */
export function verifyReceipt(
  receipt: string,
  jwks: SigningKeys | { keys?: unknown },
  expected: ReceiptExpectations = {},
): ReceiptClaims {
  const parts = typeof receipt === "string" ? receipt.split(".") : [];
  if (parts.length !== 3) throw new ReceiptInvalid("not a compact JWS");
  const [head, body, sig] = parts as [string, string, string];
  let header: unknown;
  let claims: unknown;
  let signature: Buffer;
  try {
    header = json(head, "header");
    claims = json(body, "payload");
    signature = decoded(sig, "signature");
  } catch (error) {
    throw new ReceiptInvalid(`not a compact JWS: ${error instanceof Error ? error.message : String(error)}`);
  }
  if (!isObject(header) || header.alg !== "EdDSA") throw new ReceiptInvalid("not signed with EdDSA");
  const keys = new Map<unknown, Record<string, unknown>>();
  const listed = isObject(jwks) && Array.isArray(jwks.keys) ? (jwks.keys as unknown[]) : [];
  for (const key of listed) if (isObject(key)) keys.set(key.kid, key);
  const kid = header.kid;
  const jwk = typeof kid === "string" ? keys.get(kid) : undefined;
  if (jwk === undefined || jwk.kty !== "OKP" || jwk.crv !== "Ed25519") {
    throw new ReceiptInvalid(`signed by an unknown key ${shown(kid)}`);
  }
  let verified: boolean;
  try {
    const key = createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: jwk.x as string }, format: "jwk" });
    verified = verify(null, Buffer.from(`${head}.${body}`), key, signature);
  } catch {
    verified = false;
  }
  if (!verified) throw new ReceiptInvalid("the signature does not verify");
  if (!isObject(claims)) throw new ReceiptInvalid("the payload is not an object");
  const exp = jwk.exp;
  const at = claims.at;
  if (Number.isInteger(exp) && typeof at === "string") {
    const made = seconds(at);
    if (made === null) throw new ReceiptInvalid(`the receipt's at is not a time: ${shown(at)}`);
    // Whole seconds suffice: `exp` is whole, so a fraction never moves a record across it.
    if (made >= (exp as number)) throw new ReceiptInvalid("signed with a key retired before the record was made");
  }
  const wanted: Array<[string, string | undefined]> = [
    ["task_id", expected.taskId],
    ["digest", expected.digest],
    ["decision", expected.decision],
  ];
  for (const [name, value] of wanted) {
    if (value !== undefined && value !== null && claims[name] !== value) {
      throw new ReceiptInvalid(`the receipt's ${name} is ${shown(claims[name])}, not ${shown(value)}`);
    }
  }
  return claims as ReceiptClaims;
}
