// The README loop, the execution gate race, a 2-of-3 vote and catch-up, against a real server.
import assert from "node:assert/strict";
import { createPublicKey, verify } from "node:crypto";
import { test } from "node:test";
import {
  AlreadyExecuting, AlreadyVoted, ApprovalNotValid, IdempotencyKeyReused, isTimedOut, type Task,
} from "../../src/index.js";
import { client, evidence, unique } from "./support.js";

test("the README loop: escalate, a person decides, the agent runs exactly what was approved, once", async (t) => {
  const agent = await client("producer");
  const reviewer = await client("reviewer");
  const slug = unique("article");
  const article = { title: "Rates held", body: "Inflation was 2.3%.", actions: [{ id: "publish" }] };
  const options = { key: slug, entityType: "article", entityId: slug, reasonCode: "EDITORIAL_REVIEW", subject: article, ...evidence };
  const task = await agent.escalate(options);
  assert.equal(task.status, "PENDING_REVIEW");
  // The same key again (a retry, or a re-run with fresh evidence) is the same task.
  const again = await agent.escalate({ ...options, attemptedActions: [{ action: "fact_check", executed_at: "2026-12-02T09:00:00Z", result: "again" }] });
  assert.equal(again.id, task.id);
  await assert.rejects(agent.escalate({ ...options, subject: { ...article, body: "changed" } }),
    (e: unknown) => e instanceof IdempotencyKeyReused && e.changed.includes("subject") && e.taskId === task.id);

  const stop = new AbortController();
  const waiting = agent.waitForDecision(task.id, { timeoutSeconds: 120, signal: stop.signal });
  waiting.catch(() => undefined); // awaited below; a failure before that must not leave it running
  t.after(() => stop.abort());
  const claimed = await reviewer.claimNext({ entityType: "article" });
  assert.equal(claimed?.id, task.id);
  await reviewer.resolve(claimed!, { decision: "APPROVED", notes: "sourced" });
  const decided = await waiting;
  assert.equal(decided.decision, "APPROVED");
  assert.equal(isTimedOut(decided), false);

  // The trail as signed receipts, chained, each verifying with a published key; the
  // decision names the door it came through.
  const receipts = await agent.receipts(task.id);
  const keys = await agent.signingKeys();
  assert.equal(receipts.at(-1)?.type, "task.resolved");
  for (const [i, item] of receipts.entries()) {
    if (i > 0) assert.equal(item.prev_hash, receipts[i - 1]!.hash);
    const [head, body, signature] = item.receipt!.split(".");
    const { kid } = JSON.parse(Buffer.from(head!, "base64url").toString()) as { kid: string };
    const jwk = keys.keys.find((k) => k["kid"] === kid);
    assert.ok(jwk, `key ${kid} is published`);
    const key = createPublicKey({ key: jwk, format: "jwk" });
    assert.ok(verify(null, Buffer.from(`${head}.${body}`), key, Buffer.from(signature!, "base64url")));
  }
  const stated = JSON.parse(Buffer.from(receipts.at(-1)!.receipt!.split(".")[1]!, "base64url").toString());
  assert.equal(stated.who.door, "api");

  // Something else than what was approved does not pass the gate.
  await assert.rejects(agent.beginExecution(task.id, { subject: { ...article, title: "Rates cut" }, operationId: `${slug}-x` }),
    (e: unknown) => e instanceof ApprovalNotValid && e.reason === "STALE_DIGEST");
  const published: string[] = [];
  await agent.withExecution(task.id, { subject: article, operationId: `publish-${slug}` }, async (run) => {
    for (const action of run.pending) published.push(action);
  });
  assert.deepEqual(published, ["publish"]);
  // The same operation again returns its stored outcome: nothing left to run.
  const replay = await agent.beginExecution(task.id, { subject: article, operationId: `publish-${slug}` });
  assert.equal(replay.completed, true);
  assert.deepEqual(replay.pending, []);

  // On PostgreSQL the feed holds back what transactions still running anywhere on the
  // server may precede (other tests' too): read on from the cursor until the decision is in,
  // as a consumer does; no event comes twice.
  let cursor: string | null = null;
  const seen: string[] = [];
  const mine: string[] = [];
  for (let read = 0; read < 100 && !mine.includes("task.resolved"); read++) {
    const caught = await agent.eventsSince(cursor);
    for (const e of caught.events) {
      assert.ok(!seen.includes(e.id), `event ${e.id} came twice`);
      seen.push(e.id);
      if (e.data.id === task.id) mine.push(e.type);
    }
    assert.ok(caught.cursor);
    cursor = caught.cursor;
    if (!mine.includes("task.resolved")) await new Promise((done) => setTimeout(done, 100));
  }
  assert.ok(mine.includes("task.created") && mine.includes("task.resolved"), mine.join(","));
  const later = await agent.eventsSince(cursor);
  assert.ok(later.events.every((e) => !seen.includes(e.id)), "a cursor read nothing twice");
});

test("two workers race to execute: exactly one runs, the other is told", async () => {
  const agent = await client("producer");
  const reviewer = await client("reviewer");
  const slug = unique("refund");
  const refund = { amount_eur: 50, actions: [{ id: "pay" }] };
  const task = await agent.escalate({ key: slug, entityType: "refund", entityId: slug, reasonCode: "REFUND_REVIEW", subject: refund, ...evidence });
  const claimed = await reviewer.claim(task.id);
  await reviewer.resolve(claimed, { decision: "APPROVED" });
  const ran: string[] = [];
  const worker = async (name: string): Promise<string> => {
    try {
      await agent.withExecution(task.id, { subject: refund, operationId: `pay-${slug}-${name}`, waitForLeaseSeconds: 60 }, async (run) => {
        for (const action of run.pending) ran.push(`${name}:${action}`);
      });
      return "ran";
    } catch (error) {
      if (error instanceof AlreadyExecuting) return "refused";
      throw error;
    }
  };
  const outcomes = (await Promise.all([worker("a"), worker("b")])).sort();
  assert.deepEqual(outcomes, ["ran", "refused"]);
  assert.equal(ran.length, 1);
  assert.equal((await agent.getTask(task.id)).execution_status, "COMPLETED");
});

test("a 2-of-3 vote decides once two approve; a second, different vote is refused", async (t) => {
  const agent = await client("producer", "vote-bot");
  const voters = await Promise.all(["ann", "bob", "cy"].map((n) => client("reviewer", unique(n))));
  const slug = unique("contract");
  const task = await agent.escalate({
    key: slug, entityType: "contract", entityId: slug, reasonCode: "CONTRACT_REVIEW",
    subject: { clause: "7.2" }, approvalRule: { approvals: 2 }, requestedBy: "vote-bot", ...evidence,
  });
  const stop = new AbortController();
  const waiting = agent.waitForDecision(task.id, { timeoutSeconds: 120, signal: stop.signal });
  waiting.catch(() => undefined); // awaited below; a failure before that must not leave it running
  t.after(() => stop.abort());
  const first = await voters[0]!.vote(await voters[0]!.getTask(task.id), { decision: "APPROVED" });
  assert.equal(first.status, "PENDING_REVIEW");
  assert.equal(first.approval_progress?.approvals, 1);
  assert.equal(first.approval_progress?.required, 2);
  assert.match(first.approval_progress?.text ?? "", /1 of 2/);
  await assert.rejects(voters[0]!.vote(first, { decision: "REJECTED", notes: "changed my mind" }), AlreadyVoted);
  await voters[1]!.vote(await voters[1]!.getTask(task.id), { decision: "APPROVED" });
  const decided: Task = await waiting;
  assert.equal(decided.decision, "APPROVED");
  assert.equal(decided.votes?.length, 2);
  assert.equal(decided.approval_progress?.met, true);
});
