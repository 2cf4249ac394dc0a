// Problems become the generated classes, by code first and by status for a new code.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  AlreadyExecuting, ApiError, ApprovalNotValid, Conflict, ERROR_CODES, errorFromResponse, IdempotencyKeyReused,
  InvalidArgument, NotFound, NotReady, ServerError, Signoff, TaskClosed, ValidationFailed,
} from "../src/index.js";

test("a code with a class of its own gets it, with its problem's fields", () => {
  const refused = errorFromResponse(409, { error_code: "ERR_APPROVAL_NOT_VALID", message: "no", reason: "STALE_DIGEST" });
  assert.ok(refused instanceof ApprovalNotValid && refused instanceof Conflict && refused instanceof ApiError);
  assert.equal(refused.reason, "STALE_DIGEST");
  const busy = errorFromResponse(409, { error_code: "ERR_ALREADY_EXECUTING", execution_lease_expires_at: "2026-01-01T00:00:00Z" });
  assert.ok(busy instanceof AlreadyExecuting);
  assert.equal(busy.leaseExpiresAt, "2026-01-01T00:00:00Z");
  const reused = errorFromResponse(422, { error_code: "ERR_IDEMPOTENCY_KEY_REUSED", task_id: "t", changed: ["subject"] });
  assert.ok(reused instanceof IdempotencyKeyReused && reused instanceof ValidationFailed);
  assert.deepEqual(reused.changed, ["subject"]);
  assert.ok(errorFromResponse(409, { error_code: "ERR_TASK_CANCELLED" }) instanceof TaskClosed);
});

test("a code without a class of its own, or a new one, goes by status", () => {
  assert.ok(errorFromResponse(404, { error_code: "ERR_TASK_NOT_FOUND" }) instanceof NotFound);
  assert.ok(errorFromResponse(503, { error_code: "ERR_SOMETHING_NEW" }) instanceof NotReady);
  assert.ok(errorFromResponse(502, "<html>") instanceof ServerError);
  assert.equal(errorFromResponse(418, null).errorCode, "HTTP_418");
});

test("a message names the SDK call, not the API route; the problem keeps the server's words", () => {
  const text = "task t-1 has an approval rule: it is decided by votes (POST /tasks/t-1/votes), with no lease";
  const refused = errorFromResponse(409, { error_code: "ERR_DECIDED_BY_VOTES", message: text });
  assert.equal(refused.message, "task t-1 has an approval rule: it is decided by votes (client.vote(...)), with no lease");
  assert.equal(refused.problem.message, text);
  const lapsed = errorFromResponse(409, { error_code: "ERR_LEASE_EXPIRED", message: "renew it (POST /tasks/{id}/lease/renew) first" });
  assert.equal(lapsed.message, "renew it (client.renew(...)) first");
});

test("every server code is listed with its status", () => {
  assert.equal(ERROR_CODES.ERR_TASK_NOT_FOUND.status, 404);
  assert.equal(ERROR_CODES.ERR_HTTP.status, null);
});

test("bad arguments are refused before anything is sent, naming the argument", async () => {
  assert.throws(() => new Signoff("http://127.0.0.1:9", " "), (e: unknown) => e instanceof InvalidArgument && e.field === "apiKey");
  const client = new Signoff("http://127.0.0.1:9", "k", { fetch: () => Promise.reject(new Error("sent")) });
  await assert.rejects(client.getTask(""), (e: unknown) => e instanceof InvalidArgument && e.field === "taskId");
});
