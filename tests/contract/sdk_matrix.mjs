// The SDK door of the query contract matrix (tests/contract/test_matrix.py).
//
// Reads {url, token, table, cases: [{name, calls: [[method, ...args]], pages?}]} as JSON on
// stdin, runs every case through sdk/wds.js's query builder one after the other
// (`client.from(table)` then each call in order, then `await`), and prints
// {name: {data, error, count, status, next}} as JSON on stdout. A case with `pages: n`
// walks `q.pages(n)` instead: `data` is the list of pages (or `error` the failure). An argument
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
for (const { name, calls, pages } of cases) {
  let q = client.from(table);
  for (const [method, ...args] of calls) q = q[method](...args.map(arg));
  if (pages !== undefined) {
    const walked = [];
    try {
      for await (const rows of q.pages(pages)) walked.push(rows);
      out[name] = { data: walked, error: null };
    } catch (exc) {
      out[name] = { data: walked, error: { message: exc.message, code: exc.code, status: exc.status } };
    }
    continue;
  }
  const { data, error, count, status, next } = await q;
  out[name] = { data, error, count, status, next: next ?? null };
}
process.stdout.write(JSON.stringify(out));
