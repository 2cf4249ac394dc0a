// Escalates, prints the task id, waits for the decision (through whatever happens to the
// server meanwhile) and prints it: driven by tests/integration/test_typescript_sdk.py,
// which restarts and kills the server while this waits.
import { Signoff } from "../../src/index.js";
import { evidence, newKey, unique, URL_ } from "./support.js";

const agent = new Signoff(URL_, await newKey("producer", unique("waiter")));
const slug = unique("restart");
const task = await agent.escalate({ key: slug, entityType: "restart", entityId: slug, reasonCode: "R", ...evidence });
console.log(JSON.stringify({ task_id: task.id }));
const decided = await agent.waitForDecision(task.id, { timeoutSeconds: 240 });
console.log(JSON.stringify({ decision: decided.decision }));
