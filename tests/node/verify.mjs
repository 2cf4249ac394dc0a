// Reads {"secret", "headers", "body"} as JSON on stdin and verifies the delivery with two
// independent libraries: standardwebhooks (webhook-* headers) and @octokit/webhooks-methods
// (X-Signature-256, GitHub's scheme). Prints "ok" and exits 0 when both accept it.
import { Webhook } from "standardwebhooks";
import { verify } from "@octokit/webhooks-methods";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const { secret, headers, body } = JSON.parse(Buffer.concat(chunks).toString("utf8"));
const lower = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));

new Webhook(secret).verify(body, lower); // throws on a bad signature or a stale timestamp
if (!(await verify(secret, body, lower["x-signature-256"]))) {
  console.error("X-Signature-256 rejected by @octokit/webhooks-methods");
  process.exit(1);
}
console.log("ok");
