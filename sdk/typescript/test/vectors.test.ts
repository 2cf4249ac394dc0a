// The shared vectors (tests/vectors/canonical.json), as the Python tests and the Node
// verifiers check them: RFC 8785 forms, digests and webhook signatures.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { canonicalJson, digest, InvalidArgument, standardSignature, verifyEvent, WebhookVerificationFailed, xSignature256 } from "../src/index.js";

interface Vectors {
  canonical: { name: string; json: string; canonical: string; digest: string }[];
  refused: { name: string; json: string }[];
  webhooks: {
    name: string; secret: string; webhook_id: string; timestamp: number; body: string;
    webhook_signature: string; x_signature_256: string;
  }[];
}

const file = new URL("../../../../tests/vectors/canonical.json", import.meta.url);
const vectors = JSON.parse(readFileSync(file, "utf8")) as Vectors;

test("the vectors cover the RFC's examples and awkward input", () => {
  const names = vectors.canonical.map((v) => v.name);
  assert.ok(names.includes("rfc8785-3.2.2-example") && names.includes("rfc8785-3.2.3-key-order-utf16"));
  assert.ok(vectors.webhooks.length >= 2);
});

for (const vector of vectors.canonical) {
  test(`canonical form and digest: ${vector.name}`, async () => {
    const value: unknown = JSON.parse(vector.json);
    assert.equal(canonicalJson(value), vector.canonical);
    assert.equal(await digest(value), vector.digest);
  });
}

for (const vector of vectors.refused) {
  test(`refused, as by every SDK: ${vector.name}`, async () => {
    await assert.rejects(digest(JSON.parse(vector.json)), InvalidArgument);
  });
}

for (const vector of vectors.webhooks) {
  test(`webhook signatures: ${vector.name}`, async () => {
    assert.equal(standardSignature(vector.secret, vector.webhook_id, vector.timestamp, vector.body), vector.webhook_signature);
    assert.equal(await xSignature256(vector.secret, vector.body), vector.x_signature_256);
    const headers = {
      "webhook-id": vector.webhook_id,
      "webhook-timestamp": String(vector.timestamp),
      "webhook-signature": vector.webhook_signature,
    };
    const event = await verifyEvent(headers, vector.body, [vector.secret], { now: vector.timestamp + 10 });
    assert.equal(event.scheme, "standard-webhooks");
    assert.equal(event.dedupeKey, vector.webhook_id);
    assert.deepEqual(event.data, (JSON.parse(vector.body) as { data: unknown }).data);
    const bodyOnly = await verifyEvent({ "X-Signature-256": vector.x_signature_256 }, new TextEncoder().encode(vector.body), vector.secret);
    assert.equal(bodyOnly.scheme, "x-signature-256");
    // Tampering, a stale timestamp, a wrong secret and a body-only signature when refused.
    await assert.rejects(verifyEvent(headers, vector.body + " ", [vector.secret], { now: vector.timestamp }), WebhookVerificationFailed);
    await assert.rejects(verifyEvent(headers, vector.body, [vector.secret], { now: vector.timestamp + 301 }), WebhookVerificationFailed);
    await assert.rejects(verifyEvent(headers, vector.body, ["whsec_" + btoa("another secret!!")], { now: vector.timestamp }), WebhookVerificationFailed);
    await assert.rejects(
      verifyEvent({ "x-signature-256": vector.x_signature_256 }, vector.body, vector.secret, { allowBodyOnlySignature: false }),
      WebhookVerificationFailed,
    );
  });
}
