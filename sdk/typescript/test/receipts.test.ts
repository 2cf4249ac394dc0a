// verifyReceipt against receipts signed here with keys made here (Node's crypto): each
// reason a receipt is refused, and the claims of one that verifies.
import assert from "node:assert/strict";
import { generateKeyPairSync, sign, type KeyObject } from "node:crypto";
import { test } from "node:test";
import { canonicalJson, ReceiptInvalid, SignoffError, verifyReceipt, type SigningKeys } from "../src/index.js";

interface Key {
  kid: string;
  privateKey: KeyObject;
  jwk: Record<string, unknown>;
}

function makeKey(kid: string, extra: Record<string, unknown> = {}): Key {
  const { publicKey, privateKey } = generateKeyPairSync("ed25519");
  const jwk = { ...publicKey.export({ format: "jwk" }), kid, alg: "EdDSA", use: "sig", ...extra };
  return { kid, privateKey, jwk };
}

const b64 = (text: string): string => Buffer.from(text, "utf8").toString("base64url");

function signed(key: Key, claims: unknown, header: Record<string, unknown> = { alg: "EdDSA", kid: key.kid, typ: "JWT" }): string {
  const head = b64(canonicalJson(header));
  const body = b64(canonicalJson(claims));
  const signature = sign(null, Buffer.from(`${head}.${body}`), key.privateKey).toString("base64url");
  return `${head}.${body}.${signature}`;
}

const TASK = "0b6f6c1e-2f43-4a4e-9d0e-6c0c5b7c2a11";
const DIGEST = "a".repeat(64);
const claims = {
  typ: "signoff.receipt/v1",
  task_id: TASK,
  record_id: 7,
  type: "task.resolved",
  action: "resolve",
  outcome: "RESOLVED",
  task_version: 3,
  who: { principal: "rita", role: "reviewer", door: "api" },
  at: "2026-12-01 09:00:00.250000",
  details: { decision: "APPROVED", digest: DIGEST, revision: 1, door: "api" },
  prev_hash: "b".repeat(64),
  record_hash: "c".repeat(64),
  decision: "APPROVED",
  digest: DIGEST,
  revision: 1,
};
const AT = Date.UTC(2026, 11, 1, 9, 0, 0) / 1000;

const key = makeKey("live");
const jwks: SigningKeys = { keys: [key.jwk] };

function refused(run: () => unknown, reason: string | RegExp): void {
  assert.throws(run, (error: unknown) => {
    assert.ok(error instanceof ReceiptInvalid && error instanceof SignoffError, String(error));
    assert.equal(error.name, "ReceiptInvalid");
    if (typeof reason === "string") assert.equal(error.message, reason);
    else assert.match(error.message, reason);
    return true;
  });
}

test("a receipt signed by a published key gives its claims, checked against what was expected", () => {
  const receipt = signed(key, claims);
  assert.deepEqual(verifyReceipt(receipt, jwks), claims);
  const checked = verifyReceipt(receipt, jwks, { taskId: TASK, digest: DIGEST, decision: "APPROVED" });
  assert.equal(checked.record_hash, claims.record_hash);
  assert.equal(checked.who.principal, "rita");
  // Any key of the set will do; one retired after the record was made still verifies.
  const older = makeKey("older", { exp: AT + 1 });
  assert.equal(verifyReceipt(signed(older, claims), { keys: [key.jwk, older.jwk] }).record_id, 7);
});

test("not a compact JWS: refused before any key is looked at", () => {
  const receipt = signed(key, claims);
  refused(() => verifyReceipt("a.b", jwks), "not a compact JWS");
  refused(() => verifyReceipt(`${receipt}.x`, jwks), "not a compact JWS");
  refused(() => verifyReceipt(null as unknown as string, jwks), "not a compact JWS");
  const [head, , signature] = receipt.split(".");
  refused(() => verifyReceipt(`${head}.${b64("{not json")}.${signature}`, jwks), /^not a compact JWS: /);
  refused(() => verifyReceipt(`${head}.a+b/.${signature}`, jwks), "not a compact JWS: the payload is not base64url");
  refused(() => verifyReceipt(`${head}.${receipt.split(".")[1]}.abcde`, jwks), "not a compact JWS: the signature is not base64url");
});

test("a header that does not name EdDSA is refused", () => {
  refused(() => verifyReceipt(signed(key, claims, { alg: "none", kid: key.kid }), jwks), "not signed with EdDSA");
  refused(() => verifyReceipt(signed(key, claims, ["EdDSA"] as unknown as Record<string, unknown>), jwks), "not signed with EdDSA");
});

test("a key the set does not have, or that is not an Ed25519 key, is unknown", () => {
  const stranger = makeKey("stranger");
  refused(() => verifyReceipt(signed(stranger, claims), jwks), 'signed by an unknown key "stranger"');
  refused(() => verifyReceipt(signed(key, claims, { alg: "EdDSA" }), jwks), "signed by an unknown key null");
  refused(() => verifyReceipt(signed(key, claims), { keys: [{ ...key.jwk, crv: "X25519" }] }), 'signed by an unknown key "live"');
  refused(() => verifyReceipt(signed(key, claims), { keys: [{ ...key.jwk, kty: "EC" }] }), 'signed by an unknown key "live"');
  refused(() => verifyReceipt(signed(key, claims), { keys: [] }), 'signed by an unknown key "live"');
  refused(() => verifyReceipt(signed(key, claims), {}), 'signed by an unknown key "live"');
});

test("a changed claim, another key's signature under the same id, or a broken key do not verify", () => {
  const [head, , signature] = signed(key, claims).split(".");
  const turned = b64(canonicalJson({ ...claims, decision: "REJECTED" }));
  refused(() => verifyReceipt(`${head}.${turned}.${signature}`, jwks), "the signature does not verify");
  const impostor = makeKey("live");
  refused(() => verifyReceipt(signed(impostor, claims), jwks), "the signature does not verify");
  refused(() => verifyReceipt(signed(key, claims), { keys: [{ ...key.jwk, x: "AAAA" }] }), "the signature does not verify");
  refused(() => verifyReceipt(signed(key, claims), { keys: [{ ...key.jwk, x: undefined }] }), "the signature does not verify");
  const short = signed(key, claims).split(".").slice(0, 2).join(".") + ".AAAA";
  refused(() => verifyReceipt(short, jwks), "the signature does not verify");
});

test("a signed payload that is not an object is refused", () => {
  refused(() => verifyReceipt(signed(key, [claims]), jwks), "the payload is not an object");
});

test("a record made at or after its key's exp is refused; whole seconds decide", () => {
  const retiring = (exp: number): Key => makeKey("retired", { exp });
  const at = (text: string) => ({ ...claims, at: text });
  let k = retiring(AT);
  refused(() => verifyReceipt(signed(k, claims), { keys: [k.jwk] }), "signed with a key retired before the record was made");
  k = retiring(AT - 3600);
  refused(() => verifyReceipt(signed(k, claims), { keys: [k.jwk] }), "signed with a key retired before the record was made");
  k = retiring(AT + 1);
  assert.equal(verifyReceipt(signed(k, at("2026-12-01 09:00:00.999999")), { keys: [k.jwk] }).record_id, 7);
  refused(() => verifyReceipt(signed(k, at("2026-12-01T09:00:01Z")), { keys: [k.jwk] }), "signed with a key retired before the record was made");
  refused(() => verifyReceipt(signed(k, at("next tuesday")), { keys: [k.jwk] }), 'the receipt\'s at is not a time: "next tuesday"');
  refused(() => verifyReceipt(signed(k, at("2026-02-30 09:00:00")), { keys: [k.jwk] }), /at is not a time/);
  // No exp, or no time to compare it with: nothing to refuse on.
  assert.equal(verifyReceipt(signed(key, at("next tuesday")), jwks).at, "next tuesday");
  const { at: _dropped, ...timeless } = claims;
  assert.equal(verifyReceipt(signed(k, timeless), { keys: [k.jwk] }).record_id, 7);
});

test("a receipt of another task, digest or decision is refused, naming what it states", () => {
  const receipt = signed(key, claims);
  refused(() => verifyReceipt(receipt, jwks, { taskId: "t-2" }), `the receipt's task_id is "${TASK}", not "t-2"`);
  refused(() => verifyReceipt(receipt, jwks, { digest: "0".repeat(64) }), `the receipt's digest is "${DIGEST}", not "${"0".repeat(64)}"`);
  refused(() => verifyReceipt(receipt, jwks, { taskId: TASK, decision: "REJECTED" }), `the receipt's decision is "APPROVED", not "REJECTED"`);
  const { decision: _dropped, ...undecided } = claims;
  refused(() => verifyReceipt(signed(key, undecided), jwks, { decision: "APPROVED" }), `the receipt's decision is null, not "APPROVED"`);
  assert.equal(verifyReceipt(receipt, jwks, { taskId: undefined, digest: DIGEST }).digest, DIGEST);
});
