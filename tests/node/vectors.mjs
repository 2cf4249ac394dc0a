// Checks the shared vectors (tests/vectors/canonical.json) with libraries independent of
// Signoff's code: canonicalize (RFC 8785, by its author) with Node's SHA-256,
// standardwebhooks' signer and @octokit/webhooks-methods' X-Signature-256 verifier.
// Prints "ok" and exits 0 when every vector agrees.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import canonicalize from "canonicalize";
import { Webhook } from "standardwebhooks";
import { verify } from "@octokit/webhooks-methods";

const vectors = JSON.parse(readFileSync(new URL("../vectors/canonical.json", import.meta.url), "utf8"));
const failures = [];
for (const v of vectors.canonical) {
  const canonical = canonicalize(JSON.parse(v.json));
  if (canonical !== v.canonical) failures.push(`${v.name}: canonical form ${canonical}`);
  const digest = createHash("sha256").update(canonical ?? "", "utf8").digest("hex");
  if (digest !== v.digest) failures.push(`${v.name}: digest ${digest}`);
}
for (const v of vectors.webhooks) {
  const signed = new Webhook(v.secret).sign(v.webhook_id, new Date(v.timestamp * 1000), v.body);
  if (signed !== v.webhook_signature) failures.push(`${v.name}: webhook-signature ${signed}`);
  if (!(await verify(v.secret, v.body, v.x_signature_256))) failures.push(`${v.name}: X-Signature-256`);
  if (await verify(v.secret, v.body + " ", v.x_signature_256)) failures.push(`${v.name}: tampered body accepted`);
}
if (failures.length) {
  console.error(failures.join("\n"));
  process.exit(1);
}
console.log("ok");
