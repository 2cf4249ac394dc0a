// Fetches tasks' receipts and the server's keys through the SDK and verifies each, then
// gives a verdict on each given case (a receipt, a JWK Set, what is expected). Driven by
// tests/integration/test_typescript_receipts.py, which reads the file named on the
// command line ({"key", "task_ids", "cases"}) and compares every verdict with Python's.
import { readFileSync } from "node:fs";
import { ReceiptInvalid, Signoff, verifyReceipt, type ReceiptExpectations, type SigningKeys } from "../../src/index.js";
import { URL_ } from "./support.js";

interface Case {
  receipt: string;
  jwks: SigningKeys;
  expected: ReceiptExpectations;
}

const input = JSON.parse(readFileSync(process.argv[2]!, "utf8")) as { key: string; task_ids: string[]; cases: Case[] };
const client = new Signoff(URL_, input.key);
const keys = await client.signingKeys();

const fetched: Record<string, unknown[]> = {};
for (const taskId of input.task_ids) {
  fetched[taskId] = (await client.receipts(taskId)).map((item) => verifyReceipt(item.receipt ?? "", keys, { taskId }));
}

const verdicts = input.cases.map(({ receipt, jwks, expected }) => {
  try {
    return { claims: verifyReceipt(receipt, jwks, expected) };
  } catch (error) {
    if (error instanceof ReceiptInvalid) return { refused: error.message };
    throw error;
  }
});
console.log(JSON.stringify({ fetched, verdicts }));
