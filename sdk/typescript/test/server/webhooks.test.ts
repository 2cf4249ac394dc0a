// A real delivery from the server's dispatcher, verified by verifyEvent.
import assert from "node:assert/strict";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { Signoff, verifyEvent, WebhookVerificationFailed } from "../../src/index.js";
import { ADMIN_KEY, client, evidence, unique, URL_ } from "./support.js";

interface Delivery {
  headers: IncomingHttpHeaders;
  body: Buffer;
}

test("a decision's signed delivery verifies, and a tampered one does not", async () => {
  const deliveries: Delivery[] = [];
  let arrived: () => void = () => undefined;
  const receiver = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      deliveries.push({ headers: request.headers, body: Buffer.concat(chunks) });
      response.writeHead(200).end("ok");
      arrived();
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  const port = (receiver.address() as AddressInfo).port;
  const admin = new Signoff(URL_, ADMIN_KEY);
  const entityType = unique("hooked");
  const endpoint = await admin.createWebhookEndpoint(`http://127.0.0.1:${port}/hook`, {
    eventTypes: ["task.resolved"], entityTypes: [entityType],
  });
  try {
    assert.ok(endpoint.secret);
    const agent = await client("producer");
    const reviewer = await client("reviewer");
    const slug = unique("e");
    const task = await agent.escalate({ key: slug, entityType, entityId: slug, reasonCode: "R", metadata: { run: slug }, ...evidence });
    const delivered = new Promise<void>((resolve) => (arrived = resolve));
    await reviewer.resolve(await reviewer.claim(task.id), { decision: "REJECTED", notes: "no" });
    await delivered;
    const delivery = deliveries[0]!;
    const headers = Object.fromEntries(Object.entries(delivery.headers).map(([k, v]) => [k, String(v)]));
    const event = await verifyEvent(headers, delivery.body, [endpoint.secret!]);
    assert.equal(event.type, "task.resolved");
    assert.equal(event.data.id, task.id);
    assert.equal(event.data.decision, "REJECTED");
    assert.equal(event.dedupeKey, headers["webhook-id"]);
    const tampered = Buffer.from(delivery.body.toString("utf8").replace("REJECTED", "APPROVED"));
    await assert.rejects(verifyEvent(headers, tampered, [endpoint.secret!]), WebhookVerificationFailed);
  } finally {
    await admin.deleteWebhookEndpoint(endpoint.id);
    receiver.close();
  }
});
