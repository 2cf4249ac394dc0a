// What the tests against a live `signoff serve` share: its URL and admin key come from
// the environment (SIGNOFF_TEST_URL, SIGNOFF_TEST_ADMIN_KEY), set by the pytest that
// started the server (tests/integration/test_typescript_sdk.py).
import { randomUUID } from "node:crypto";
import { Signoff } from "../../src/index.js";

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run these through tests/integration/test_typescript_sdk.py`);
  return value;
}

export const URL_ = required("SIGNOFF_TEST_URL");
export const ADMIN_KEY = required("SIGNOFF_TEST_ADMIN_KEY");

/** A fresh API key of `role` for `principal` (with `groups`). */
export async function newKey(role: string, principal: string, groups: string[] = []): Promise<string> {
  const response = await fetch(`${URL_}/api-keys`, {
    method: "POST",
    headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ role, principal_id: principal, groups }),
  });
  if (response.status !== 201) throw new Error(`api key: ${response.status} ${await response.text()}`);
  return ((await response.json()) as { key: string }).key;
}

export async function client(role: string, principal = `${role}-${randomUUID().slice(0, 8)}`): Promise<Signoff> {
  return new Signoff(URL_, await newKey(role, principal));
}

export const unique = (prefix: string): string => `${prefix}-${randomUUID().slice(0, 8)}`;

export const evidence = {
  attemptedActions: [{ action: "fact_check", executed_at: "2026-12-01T09:00:00Z", result: "2 figures unsourced" }],
  evaluatorVerdict: { confidence_score: 0.6, threshold: 0.9 },
  inputSnapshot: { draft: 3 },
  traceId: "run-7",
};
