// What the SDK adds per call over a bare fetch, against the same endpoint in the same run.
//
//   WDS_URL=http://127.0.0.1:8000 WDS_TOKEN=wds_... node sdk/bench/overhead.mjs [--table <id>] [--n 600] [--json]
//
// Both sides do the same work a caller needs: GET {rest}/tables/{id}/records?Tag=eq.x&limit=5,
// read the JSON body. The SDK additionally builds the query, resolves the envelope and
// flattens the rows. Calls alternate (bare, SDK, bare, SDK, ...) so server and machine
// drift hit both alike; the figure is the median of the per-pair differences, with the
// difference of the medians and of the trimmed means for reference.
// Without --table a small table is created (needs a token that may create tables).
import { createClient } from "../wds.js";

const args = process.argv.slice(2);
const arg = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : dflt;
};
const BASE = process.env.WDS_URL;
const TOKEN = process.env.WDS_TOKEN;
const N = Number(arg("n", "600"));
const WARMUP = 100;
if (!BASE || !TOKEN) {
  console.error("set WDS_URL and WDS_TOKEN");
  process.exit(2);
}
const REST = `${BASE}/functions/v1/rest-api`;

async function setupTable() {
  const headers = { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json" };
  const t = await (await fetch(`${REST}/tables`, {
    method: "POST", headers,
    body: JSON.stringify({ name: `bench-${Date.now()}`, icon: "table", columns: [{ name: "Tag", type: "text" }, { name: "N", type: "number" }] }),
  })).json();
  const rows = Array.from({ length: 20 }, (_, i) => ({ fields: { Tag: i % 2 ? "x" : "y", N: i } }));
  await fetch(`${REST}/tables/${t.id}/records/batch`, { method: "POST", headers, body: JSON.stringify({ rows, run_pipeline: false }) });
  return t.id;
}

const tableId = Number(arg("table", 0)) || (await setupTable());
const url = `${REST}/tables/${tableId}/records?Tag=eq.x&limit=5`;
const headers = { Authorization: `Bearer ${TOKEN}`, Accept: "application/json" };
const client = createClient(BASE, { token: TOKEN });

async function bare() {
  const res = await fetch(url, { headers });
  const body = await res.json();
  if (!res.ok || body.records.length !== 5) throw new Error(`bare: ${res.status}`);
}

async function sdk() {
  const { data, error } = await client.from(tableId).select().eq("Tag", "x").limit(5);
  if (error || data.length !== 5) throw new Error(`sdk: ${JSON.stringify(error)}`);
}

const now = () => Number(process.hrtime.bigint()) / 1e6;
for (let i = 0; i < WARMUP; i++) {
  await bare();
  await sdk();
}
const a = [];
const b = [];
for (let i = 0; i < N; i++) {
  // alternate who goes first, so neither always gets the warmer connection
  const order = i % 2 ? [[bare, a], [sdk, b]] : [[sdk, b], [bare, a]];
  for (const [fn, out] of order) {
    const t0 = now();
    await fn();
    out.push(now() - t0);
  }
}

// pure client-side cost: the SDK's work with a fetch that answers instantly
const canned = JSON.stringify({ records: Array.from({ length: 5 }, (_, i) => ({ id: i, fields: { Tag: "x", N: i }, created_at: "t", updated_at: "t" })), limit: 5, offset: 0 });
const instant = createClient(BASE, { token: TOKEN, fetch: async () => new Response(canned, { status: 200, headers: { "Content-Type": "application/json" } }) });
const bareInstant = async () => {
  const res = new Response(canned, { status: 200 });
  return res.json();
};
for (let i = 0; i < 2000; i++) {
  await instant.from(tableId).select().eq("Tag", "x").limit(5);
  await bareInstant();
}
const M = 20000;
let t0 = now();
for (let i = 0; i < M; i++) await bareInstant();
const bareLocal = (now() - t0) / M;
t0 = now();
for (let i = 0; i < M; i++) await instant.from(tableId).select().eq("Tag", "x").limit(5);
const sdkLocal = (now() - t0) / M;

const sorted = (xs) => [...xs].sort((x, y) => x - y);
const median = (xs) => sorted(xs)[Math.floor(xs.length / 2)];
const trimmed = (xs) => {
  const s = sorted(xs);
  const k = Math.floor(s.length * 0.1);
  const mid = s.slice(k, s.length - k);
  return mid.reduce((x, y) => x + y, 0) / mid.length;
};
const pairs = a.map((x, i) => b[i] - x);
const report = {
  calls_per_side: N,
  bare_fetch_median_ms: +median(a).toFixed(4),
  sdk_median_ms: +median(b).toFixed(4),
  overhead_median_of_pairs_ms: +median(pairs).toFixed(4),
  overhead_difference_of_medians_ms: +(median(b) - median(a)).toFixed(4),
  overhead_trimmed_mean_ms: +(trimmed(b) - trimmed(a)).toFixed(4),
  client_side_only_ms: +(sdkLocal - bareLocal).toFixed(4),
  budget_ms: 0.2,
};
report.within_budget = report.overhead_median_of_pairs_ms <= report.budget_ms;
if (args.includes("--json")) console.log(JSON.stringify(report));
else console.table(report);
