// A smoke test of the SDK in another runtime (Deno, Bun): the module comes from
// WDS_SDK_MODULE (a file path or the served URL); prints one JSON line with what happened.
const env = (k) => (globalThis.Deno ? globalThis.Deno.env.get(k) : globalThis.process.env[k]);
const { createClient } = await import(env("WDS_SDK_MODULE"));
const base = env("WDS_URL");
const client = createClient(base, { token: env("WDS_TOKEN"), persistSession: false });
const out = { runtime: globalThis.Deno ? "deno" : globalThis.Bun ? "bun" : "other" };

const name = `rt-${out.runtime}-${Date.now()}`;
const made = await fetch(`${base}/functions/v1/rest-api/tables`, {
  method: "POST",
  headers: { Authorization: `Bearer ${env("WDS_TOKEN")}`, "Content-Type": "application/json" },
  body: JSON.stringify({ name, icon: "t", columns: [{ name: "N", type: "number" }] }),
});
const table = await made.json();
const seen = [];
let channel = null;
if (typeof WebSocket === "function") {
  channel = client.channel(name).on("INSERT", (c) => seen.push(c.record.N));
  await new Promise((resolve) => channel.subscribe((s) => (s === "SUBSCRIBED" || s === "CHANNEL_ERROR") && resolve()));
}
const ins = await client.from(name).insert([{ N: 1 }, { N: 2 }, { N: 3 }]);
out.inserted = ins.count;
const q = await client.from(table.id).select().gte("N", 2).order("N", { ascending: false });
out.query = q.data && q.data.map((r) => r.N);
const bad = await client.from(table.id).select().eq("Nope", 1);
out.badCode = bad.error && bad.error.code;
const dead = await createClient("http://127.0.0.1:9", { token: "t", persistSession: false }).from(1).select();
out.deadCode = dead.error && dead.error.code;
if (channel) {
  const deadline = Date.now() + 10000;
  while (seen.length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  out.realtime = seen;
  await channel.unsubscribe();
}
console.log(JSON.stringify(out));
