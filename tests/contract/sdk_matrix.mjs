// The SDK door of the query contract matrix (tests/contract/test_matrix.py).
//
// Reads {url, token, table, cases: [{name, calls: [[method, ...args]]}]} as JSON on stdin,
// runs every case through sdk/wds.js's query builder one after the other
// (`client.from(table)` then each call in order, then `await`), and prints
// {name: {data, error, count, status, next}} as JSON on stdout. An argument
// {"$date": "<ISO text>"} is passed as a Date (the SDK's date values). Rows are raw
// (`flatten: false`): the shape REST answers, so the test compares them as they are.
import { createClient } from "../../sdk/wds.js";

function arg(v) {
  if (v !== null && typeof v === "object" && !Array.isArray(v) && "$date" in v) return new Date(v.$date);
  if (Array.isArray(v)) return v.map(arg);
  return v;
}

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const { url, token, table, cases } = JSON.parse(Buffer.concat(chunks).toString());
const client = createClient(url, { token, flatten: false });
const out = {};
for (const { name, calls } of cases) {
  let q = client.from(table);
  for (const [method, ...args] of calls) q = q[method](...args.map(arg));
  const { data, error, count, status, next } = await q;
  out[name] = { data, error, count, status, next: next ?? null };
}
process.stdout.write(JSON.stringify(out));
