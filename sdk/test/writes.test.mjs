// Writes: insert one/many (batches of 500), update/delete by id and by filter (8 in
// flight, measured at a proxy in front of the API), run_pipeline=false, idempotency keys.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { createClient, flattenRecord } from "../wds.js";
import { URL_, TOKEN, api, close, createTable, freshToken, listen, rawList, recordingProxy } from "./helpers.mjs";

let table, client;

before(async () => {
  table = await createTable("W", [
    { name: "N", type: "number", required: true },
    { name: "Tag", type: "text" },
    { name: "Double", type: "formula", formula: "{N} * 2" },
  ]);
  client = createClient(URL_, { token: TOKEN });
});

const recordPaths = (stats, method, suffix = "") =>
  stats.requests.filter((r) => r.method === method && new URL(r.url, "http://x").pathname.endsWith(`/tables/${table.id}/records${suffix}`));

test("insert one record returns it flat, with computed columns run", async () => {
  const r = await client.from(table.id).insert({ N: 21, Tag: "one" });
  assert.equal(r.error, null);
  assert.equal(r.status, 201);
  assert.equal(r.count, 1);
  assert.equal(r.data.N, 21);
  assert.equal(r.data.Double, 42);
  const ref = await api("GET", `/tables/${table.id}/records/${r.data.id}`);
  assert.deepEqual(r.data, flattenRecord(ref.body));
});

test("insert with runPipeline: false sends run_pipeline=false and skips computed columns", async () => {
  const proxy = await recordingProxy();
  try {
    const c = createClient(proxy.base, { token: TOKEN });
    const one = await c.from(table.id).insert({ N: 5, Tag: "nopipe" }, { runPipeline: false });
    assert.equal(one.data.Double, null);
    const many = await c.from(table.id).insert([{ N: 6 }, { N: 7 }], { runPipeline: false });
    assert.deepEqual(many.data.map((x) => x.Double), [null, null]);
    const [post] = recordPaths(proxy.stats, "POST");
    assert.equal(new URL(post.url, "http://x").searchParams.get("run_pipeline"), "false");
    const [batch] = recordPaths(proxy.stats, "POST", "/batch");
    assert.equal(JSON.parse(batch.body).run_pipeline, false);
  } finally {
    await proxy.close();
  }
});

test("insert of 1,001 rows is split into 3 batch calls and keeps input order", async () => {
  const proxy = await recordingProxy();
  try {
    const c = createClient(proxy.base, { token: TOKEN });
    const rows = Array.from({ length: 1001 }, (_, i) => ({ N: i, Tag: "bulk" }));
    const r = await c.from(table.id).insert(rows, { runPipeline: false });
    assert.equal(r.error, null);
    assert.equal(r.count, 1001);
    assert.deepEqual(r.data.map((x) => x.N), rows.map((x) => x.N));
    const batches = recordPaths(proxy.stats, "POST", "/batch");
    assert.deepEqual(batches.map((b) => JSON.parse(b.body).rows.length), [500, 500, 1]);
    const keys = new Set(batches.map((b) => b.headers["idempotency-key"]));
    assert.equal(keys.size, 3, "a fresh Idempotency-Key per call");
    const stored = await client.from(table.id).select("N", { count: "exact" }).eq("Tag", "bulk").limit(1);
    assert.equal(stored.count, 1001);
  } finally {
    await proxy.close();
  }
});

test("a failing row does not hide the others: PARTIAL_FAILURE with per-row errors", async () => {
  const r = await client.from(table.id).insert([{ N: 1, Tag: "p" }, { Tag: "missing N" }, { N: "x" }, { N: 4, Tag: "p" }]);
  assert.equal(r.error.code, "PARTIAL_FAILURE");
  assert.deepEqual(r.error.errors.map((e) => [e.index, e.code]), [[1, "REQUIRED_FIELD"], [2, "INVALID_VALUE"]]);
  assert.equal(r.count, 2);
  assert.deepEqual(r.data.map((x) => x && x.N), [1, null, null, 4]);
});

test("insert of an empty list sends nothing", async () => {
  const r = await client.from(table.id).insert([]);
  assert.deepEqual([r.data, r.error, r.count], [[], null, 0]);
});

test("update and delete by id touch exactly that record", async () => {
  const { data: rec } = await client.from(table.id).insert({ N: 10, Tag: "byid" });
  const up = await client.from(table.id).update({ N: 11 }).eq("id", rec.id);
  assert.equal(up.error, null);
  assert.equal(up.data.length, 1);
  assert.deepEqual([up.data[0].id, up.data[0].N, up.data[0].Double, up.data[0].Tag], [rec.id, 11, 22, "byid"]);
  const one = await client.from(table.id).update({ Tag: "byid2" }, { id: rec.id }).single();
  assert.equal(one.data.Tag, "byid2");
  const del = await client.from(table.id).delete().eq("id", rec.id);
  assert.deepEqual(del.data, [{ id: rec.id, deleted: true }]);
  const gone = await api("GET", `/tables/${table.id}/records/${rec.id}`);
  assert.equal(gone.status, 404);
  const again = await client.from(table.id).delete({ id: rec.id });
  assert.equal(again.error.code, "NOT_FOUND");
});

test("update and delete without any filter are refused locally", async () => {
  const up = await client.from(table.id).update({ N: 0 });
  assert.equal(up.error.code, "FILTER_REQUIRED");
  assert.equal(up.status, 0);
  const del = await client.from(table.id).delete();
  assert.equal(del.error.code, "FILTER_REQUIRED");
});

test("an or/and group alone is a filter for update and delete", async () => {
  await client.from(table.id).insert([{ N: 1, Tag: "grp1" }, { N: 2, Tag: "grp2" }, { N: 3, Tag: "grp3" }]);
  const up = await client.from(table.id).update({ N: 20 }).or("Tag.eq.grp1,Tag.eq.grp2");
  assert.equal(up.error, null);
  assert.deepEqual(up.data.map((x) => x.Tag).sort(), ["grp1", "grp2"]);
  const del = await client.from(table.id).delete().and("Tag.like.grp*,N.lt.5");
  assert.equal(del.error, null);
  assert.equal(del.count, 1, "only grp3 still has N below 5");
  const left = await rawList(table.id, { Tag: "like.grp*", order: "id" });
  assert.deepEqual(left.map((x) => [x.fields.Tag, x.fields.N]), [["grp1", 20], ["grp2", 20]]);
});

test("write-by-filter resolves ids by paging and sends one request per record, exactly 8 in flight", async () => {
  const rows = Array.from({ length: 1040 }, (_, i) => ({ N: i, Tag: "wbf" }));
  await client.from(table.id).insert(rows, { runPipeline: false });
  const proxy = await recordingProxy({ delayMs: 15 });
  try {
    // ~2,100 requests: a token of its own keeps under the per-token minute budget
    const c = createClient(proxy.base, { token: await freshToken() });
    const up = await c.from(table.id).update({ Tag: "wbf2" }, { runPipeline: false }).eq("Tag", "wbf").lt("N", 1030);
    assert.equal(up.error, null);
    assert.equal(up.count, 1030);
    assert.ok(up.data.every((x) => x.Tag === "wbf2"));
    const lists = recordPaths(proxy.stats, "GET");
    assert.equal(lists.length, 2, "1030 matches: two id pages of at most 1000");
    for (const l of lists) assert.equal(new URL(l.url, "http://x").searchParams.get("limit"), "1000");
    const patches = proxy.stats.requests.filter((r) => r.method === "PATCH");
    assert.equal(patches.length, 1030);
    assert.ok(patches.every((p) => new URL(p.url, "http://x").searchParams.get("run_pipeline") === "false"));
    assert.equal(new Set(patches.map((p) => p.headers["idempotency-key"])).size, 1030);
    assert.equal(proxy.stats.maxInFlight, 8, "exactly 8 requests in flight at once");
    const left = await rawList(table.id, { Tag: "eq.wbf", limit: "100" });
    assert.deepEqual(left.map((x) => x.fields.N).sort((a, b) => a - b), [1030, 1031, 1032, 1033, 1034, 1035, 1036, 1037, 1038, 1039]);

    proxy.stats.maxInFlight = 0;
    const del = await c.from(table.id).delete().in("Tag", ["wbf", "wbf2"]);
    assert.equal(del.error, null);
    assert.equal(del.count, 1040);
    assert.equal(proxy.stats.maxInFlight, 8);
    assert.equal((await rawList(table.id, { Tag: "in.(wbf,wbf2)" })).length, 0);
  } finally {
    await proxy.close();
  }
});

test("write-by-filter honours limit and order: only the first matches change", async () => {
  await client.from(table.id).insert([3, 1, 2, 5, 4].map((N) => ({ N, Tag: "ord" })));
  const r = await client.from(table.id).update({ Tag: "ord-top" }).eq("Tag", "ord").order("N", { ascending: false }).limit(2);
  assert.deepEqual(r.data.map((x) => x.N), [5, 4]);
  const rest = await client.from(table.id).select("N").eq("Tag", "ord").order("N");
  assert.deepEqual(rest.data.map((x) => x.N), [1, 2, 3]);
});

test("write-by-filter with some failures reports them per record", async () => {
  await client.from(table.id).insert([{ N: 1, Tag: "pf" }, { N: 2, Tag: "pf" }]);
  const r = await client.from(table.id).update({ N: "not a number" }).eq("Tag", "pf");
  assert.equal(r.error.code, "INVALID_VALUE", "every record failed alike: its code");
  assert.equal(r.error.errors.length, 2);
  assert.equal(r.count, 0);
});

test("a write whose answer is lost is retried with the same key and applied once", async () => {
  // a proxy that lets the first POST reach the API, then drops the connection instead of
  // answering: the SDK must retry, and the server must recognise the retry by its key
  const t = new URL(URL_);
  let dropped = 0;
  const keys = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      if (req.method === "POST") keys.push(req.headers["idempotency-key"]);
      const up = http.request({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers: req.headers }, (upRes) => {
        const body = [];
        upRes.on("data", (c) => body.push(c));
        upRes.on("end", () => {
          if (req.method === "POST" && dropped === 0) {
            dropped++;
            return req.socket.destroy();
          }
          res.writeHead(upRes.statusCode, upRes.headers);
          res.end(Buffer.concat(body));
        });
      });
      up.end(Buffer.concat(chunks));
    });
  });
  const base = await listen(server);
  try {
    const c = createClient(base, { token: TOKEN });
    const r = await c.from(table.id).insert({ N: 77, Tag: "idem" });
    assert.equal(r.error, null, JSON.stringify(r.error));
    assert.equal(r.data.N, 77);
    assert.equal(keys.length, 2);
    assert.equal(keys[0], keys[1]);
    const stored = await rawList(table.id, { Tag: "eq.idem" });
    assert.equal(stored.length, 1, "created once");
    assert.equal(stored[0].id, r.data.id);
  } finally {
    await close(server);
  }
});

test("a builder kept in a variable is never changed by the queries made from it", async () => {
  // before, select() kept the earlier insert's action: every later "read" on t inserted again
  const t = client.from(table.id);
  const reused = async () => (await rawList(table.id, { Tag: "eq.reuse", limit: "1000" })).length;
  assert.equal(await reused(), 0);
  const ins = await t.insert([{ N: 901, Tag: "reuse" }, { N: 902, Tag: "reuse" }]);
  assert.equal(ins.error, null);
  const read = await t.select("N,Tag").eq("Tag", "reuse").order("N");
  assert.equal(read.error, null);
  assert.deepEqual(read.data.map((r) => r.N), [901, 902]);
  const again = await t.select("N").eq("Tag", "reuse").eq("N", 902);
  assert.deepEqual(again.data.map((r) => r.N), [902]); // the first read's filters did not pile up here
  assert.equal(await reused(), 2); // nothing was inserted twice
  // a filtered write from the kept builder leaves it a plain read of every record
  const del = await t.delete().eq("N", 902);
  assert.equal(del.error, null);
  const all = await t.select("N").eq("Tag", "reuse");
  assert.deepEqual(all.data.map((r) => r.N), [901]);
  // insert(...).select(...) still names what the insert returns
  const named = await t.insert({ N: 903, Tag: "reuse" }).select("N");
  assert.equal(named.error, null);
  assert.equal(named.data.N, 903);
  assert.equal(await reused(), 2);
});

test("insert(...).select(...) and update(...).select(...) answer only the selected fields", async () => {
  const t = client.from(table.id);
  const one = await t.insert({ N: 31, Tag: "sel" }).select("N,Double");
  assert.equal(one.error, null);
  assert.deepEqual(Object.keys(one.data).sort(), ["Double", "N", "created_at", "id", "updated_at"]);
  assert.equal(one.data.Double, 62);
  const many = await t.insert([{ N: 32, Tag: "sel" }, { N: 33, Tag: "sel" }]).select(["Tag"]);
  assert.deepEqual(many.data.map((r) => [r.Tag, "N" in r]), [["sel", false], ["sel", false]]);
  const upd = await t.update({ N: 34 }).eq("id", one.data.id).select("Double");
  assert.equal(upd.error, null);
  assert.deepEqual(upd.data.map((r) => [r.Double, "N" in r, "Tag" in r]), [[68, false, false]]);
  const all = await t.insert({ N: 35, Tag: "sel" }).select("*");
  assert.equal(all.data.Tag, "sel");
  assert.equal(all.data.N, 35);
});

test("write-by-filter ordered on a column no cursor continues pages by offset: every match changes", async () => {
  const t = await createTable("NoCursor", [
    { name: "N", type: "number" },
    { name: "M", type: "multi_select", options: ["a", "b"] },
  ]);
  const rows = [];
  for (let i = 0; i < 1_205; i++) rows.push({ fields: { N: i, M: i % 2 ? ["a"] : ["b"] } });
  for (let start = 0; start < rows.length; start += 500) {
    assert.equal((await api("POST", `/tables/${t.id}/records/batch`, { rows: rows.slice(start, start + 500) })).status, 200);
  }
  const r = await client.from(t.id).update({ N: -1 }).gte("N", 0).order("M");
  assert.equal(r.error, null);
  assert.equal(r.count, 1_205);
  const left = await api("GET", `/tables/${t.id}/records?N=gte.0&limit=1`);
  assert.deepEqual(left.body.records, []);
});
