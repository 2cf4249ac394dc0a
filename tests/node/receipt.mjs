// Reads {"jwks", "receipts"} as JSON on stdin and checks each receipt (a compact JWS,
// EdDSA) with Node's own crypto only: the key from the JWK Set by kid, the signature over
// "<header>.<payload>". Prints the payloads (JSON array) and exits 0 when all verify.
import { createPublicKey, verify } from "node:crypto";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const { jwks, receipts } = JSON.parse(Buffer.concat(chunks).toString("utf8"));
const keys = new Map(jwks.keys.map((jwk) => [jwk.kid, createPublicKey({ key: jwk, format: "jwk" })]));

const payloads = [];
for (const receipt of receipts) {
  const [header, payload, signature] = receipt.split(".");
  const { alg, kid } = JSON.parse(Buffer.from(header, "base64url").toString("utf8"));
  if (alg !== "EdDSA" || !keys.has(kid)) {
    console.error(`not EdDSA or an unknown key: ${kid}`);
    process.exit(1);
  }
  const ok = verify(null, Buffer.from(`${header}.${payload}`), keys.get(kid), Buffer.from(signature, "base64url"));
  if (!ok) {
    console.error(`signature rejected: ${receipt.slice(0, 40)}…`);
    process.exit(1);
  }
  payloads.push(JSON.parse(Buffer.from(payload, "base64url").toString("utf8")));
}
console.log(JSON.stringify(payloads));
