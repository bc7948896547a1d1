// Every builder method against the REST results for the same query.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { createClient, flattenRecord } from "../wds.js";
import { URL_, TOKEN, api, createTable, rawList, recordingProxy } from "./helpers.mjs";

let tasks, people, ids, client;
const ODD = 'Odd name. "q", ü';

before(async () => {
  people = await createTable("People", [{ name: "Name", type: "text" }, { name: "Age", type: "number" }]);
  ids = [];
  for (const [n, a] of [["Ann", 30], ["Bob", 40]]) {
    ids.push((await api("POST", `/tables/${people.id}/records`, { fields: { Name: n, Age: a } })).body.id);
  }
  tasks = await createTable("Tasks", [
    { name: "Title", type: "text" },
    { name: "Score", type: "number" },
    { name: "Status", type: "single_select", options: ["a", "b", "c"] },
    { name: "Tags", type: "multi_select", options: ["x", "y", "z"] },
    { name: "Done", type: "checkbox" },
    { name: "Due", type: "date" },
    { name: "Owner", type: "relation", relation_table_id: people.id },
    { name: ODD, type: "text" },
    { name: "limit", type: "text" }, // a column named like a reserved parameter
  ]);
  const rows = [];
  for (let i = 0; i < 30; i++) {
    rows.push({
      fields: {
        Title: `task ${String(i).padStart(2, "0")}`, Score: i * 10, Status: "abc"[i % 3], Tags: i % 2 ? ["x", "y"] : ["z"],
        Done: i % 4 === 0, Due: `2026-01-${String(i + 1).padStart(2, "0")}`, Owner: ids[i % 2], [ODD]: i % 5 ? `v${i}` : null,
        limit: i < 3 ? "L" : "M",
      },
    });
  }
  const r = await api("POST", `/tables/${tasks.id}/records/batch`, { rows, run_pipeline: false });
  assert.equal(r.status, 200);
  client = createClient(URL_, { token: TOKEN });
});

const titles = (rows) => rows.map((r) => r.Title ?? r.fields?.Title);

// [builder, the equivalent REST query parameters]
const CASES = [
  ["eq", (q) => q.eq("Status", "b"), { Status: "eq.b" }],
  ["neq", (q) => q.neq("Status", "b"), { Status: "neq.b" }],
  ["gt", (q) => q.gt("Score", 250), { Score: "gt.250" }],
  ["gte", (q) => q.gte("Score", 250), { Score: "gte.250" }],
  ["lt", (q) => q.lt("Score", 30), { Score: "lt.30" }],
  ["lte", (q) => q.lte("Score", 30), { Score: "lte.30" }],
  ["like", (q) => q.like("Title", "task 1*"), { Title: "like.task 1*" }],
  ["ilike", (q) => q.ilike("Title", "TASK 2%"), { Title: "ilike.TASK 2%" }],
  ["in", (q) => q.in("Title", ["task 01", "task 07", "nope, with comma"]), { Title: 'in.(task 01,task 07,"nope, with comma")' }],
  ["contains", (q) => q.contains("Tags", ["x", "y"]), { Tags: "cs.{x,y}" }],
  ["is null", (q) => q.is(ODD, null), { [ODD]: "is.null" }],
  ["is true", (q) => q.is("Done", true), { Done: "is.true" }],
  ["not eq", (q) => q.not("Status", "eq", "a"), { Status: "not.eq.a" }],
  ["not in", (q) => q.not("Status", "in", ["a", "b"]), { Status: "not.in.(a,b)" }],
  ["not is", (q) => q.not(ODD, "is", null), { [ODD]: "not.is.null" }],
  ["date gte", (q) => q.gte("Due", new Date("2026-01-28T00:00:00Z")), { Due: "gte.2026-01-28T00:00:00.000Z" }],
  ["two filters", (q) => q.gt("Score", 100).eq("Status", "a"), { Score: "gt.100", Status: "eq.a" }],
  ["reserved column name", (q) => q.eq("limit", "L"), { "filter[limit][eq]": "L" }],
  ["order desc", (q) => q.order("Score", { ascending: false }).limit(3), { order: "Score.desc", limit: "3" }],
  ["two orders", (q) => q.order("Status", { ascending: false }).order("Score").limit(4), { order: "Status.desc,Score.asc", limit: "4" }],
  ["limit", (q) => q.limit(5), { limit: "5" }],
  ["range", (q) => q.order("Score").range(3, 7), { order: "Score.asc", offset: "3", limit: "5" }],
  ["match", (q) => q.match({ Status: "c", Done: true }), { Status: "eq.c", Done: "eq.true" }],
  ["filter", (q) => q.filter("Score", "not.gte", 30), { Score: "not.gte.30" }],
  ["filter eq null", (q) => q.filter(ODD, "eq", null), { [ODD]: "is.null" }],
  ["filter in list", (q) => q.filter("Score", "in", [10, 20]), { Score: "in.(10,20)" }],
  ["not neq null", (q) => q.not(ODD, "neq", null), { [ODD]: "is.null" }],
  ["odd column name", (q) => q.like(ODD, "v1*").order(ODD), { [ODD]: "like.v1*", order: `"${ODD.replace(/"/g, '\\"')}".asc` }],
  ["eq null", (q) => q.eq(ODD, null), { [ODD]: "is.null" }],
  ["neq null", (q) => q.neq(ODD, null), { [ODD]: "not.is.null" }],
  ["or group", (q) => q.or("Score.gte.250,and(Status.eq.a,Title.ilike.*0*)"), { or: "(Score.gte.250,and(Status.eq.a,Title.ilike.*0*))" }],
  ["not.or group", (q) => q.or("Score.gte.50,Done.is.true", { negate: true }), { "not.or": "(Score.gte.50,Done.is.true)" }],
  ["and group", (q) => q.and("Score.gte.50,Status.eq.a"), { and: "(Score.gte.50,Status.eq.a)" }],
  ["not.and group", (q) => q.and("Score.gte.50,Done.is.true", { negate: true }), { "not.and": "(Score.gte.50,Done.is.true)" }],
];

for (const [name, build, params] of CASES) {
  test(`builder ${name} returns what REST returns`, async () => {
    const { data, error, status, count } = await build(client.from(tasks.id).select());
    assert.equal(error, null);
    assert.equal(status, 200);
    assert.equal(count, null);
    const expected = await rawList(tasks.id, params);
    assert.ok(expected.length > 0 || name === "in", `${name}: the case should match something`);
    assert.deepEqual(data, expected.map(flattenRecord));
  });
}

test("rows are flat by default and raw with flatten: false", async () => {
  const flat = await client.from(tasks.id).select().eq("Title", "task 04").single();
  assert.deepEqual(Object.keys(flat.data).slice(0, 3), ["id", "created_at", "updated_at"]);
  assert.equal(flat.data.Title, "task 04");
  assert.equal(flat.data.fields, undefined);
  const raw = await client.from(tasks.id).select("*", { flatten: false }).eq("Title", "task 04").single();
  assert.equal(raw.data.fields.Title, "task 04");
  assert.equal(raw.data.id, flat.data.id);
  const rawClient = createClient(URL_, { token: TOKEN, flatten: false });
  assert.equal((await rawClient.from(tasks.id).select().eq("Title", "task 04").single()).data.fields.Score, 40);
});

test("select picks columns and embeds relations, flattened recursively", async () => {
  const picked = await client.from(tasks.id).select(["Title", "Score"]).eq("Title", "task 03");
  assert.deepEqual(Object.keys(picked.data[0]).sort(), ["Score", "Title", "created_at", "id", "updated_at"]);
  const embedded = await client.from(tasks.id).select("Title,Owner(Name)").eq("Title", "task 03").single();
  assert.equal(embedded.data.Owner.Name, "Bob");
  assert.equal(embedded.data.Owner.id, ids[1]);
  const expanded = await client.from(tasks.id).select().expand("Owner").eq("Title", "task 02").single();
  assert.deepEqual({ Name: expanded.data.Owner.Name, Age: expanded.data.Owner.Age }, { Name: "Ann", Age: 30 });
  const ref = await rawList(tasks.id, { expand: "Owner", Title: "eq.task 02" });
  assert.deepEqual(expanded.data, flattenRecord(ref[0]));
});

test("count exact fills count from the server's total", async () => {
  const r = await client.from(tasks.id).select("*", { count: "exact" }).gte("Score", 100).limit(5);
  assert.equal(r.count, 20);
  assert.equal(r.data.length, 5);
});

test("count planned and estimated send their Prefer mode", async () => {
  const estimated = await client.from(tasks.id).select("*", { count: "estimated" }).gte("Score", 100).limit(5);
  assert.equal(estimated.count, 20); // exact: far below 100,000 estimated rows
  const planned = await client.from(tasks.id).select("*", { count: "planned" }).gte("Score", 100).limit(5);
  assert.equal(typeof planned.count, "number"); // the planner's estimate
  assert.equal(planned.data.length, 5);
  const asTrue = await client.from(tasks.id).select("*", { count: true }).gte("Score", 100).limit(5);
  assert.equal(asTrue.count, 20);
});

test("single and maybeSingle", async () => {
  const none = await client.from(tasks.id).select().eq("Title", "missing").single();
  assert.equal(none.data, null);
  assert.equal(none.error.code, "SINGLE_ROW_EXPECTED");
  const several = await client.from(tasks.id).select().eq("Status", "a").single();
  assert.equal(several.error.code, "SINGLE_ROW_EXPECTED");
  const maybe = await client.from(tasks.id).select().eq("Title", "missing").maybeSingle();
  assert.deepEqual([maybe.data, maybe.error], [null, null]);
  const one = await client.from(tasks.id).select().eq("Title", "task 09").maybeSingle();
  assert.equal(one.data.Score, 90);
});

test("a table is named by id, numeric string or name; names resolve once and are cached", async () => {
  const proxy = await recordingProxy();
  try {
    const c = createClient(proxy.base, { token: TOKEN });
    const [byName, byId, byString] = await Promise.all([
      c.from(tasks.name).select().eq("Title", "task 05"),
      c.from(tasks.id).select().eq("Title", "task 05"),
      c.from(String(tasks.id)).select().eq("Title", "task 05"),
    ]);
    assert.deepEqual(byName.data, byId.data);
    assert.deepEqual(byString.data, byId.data);
    await c.from(tasks.name).select().limit(1);
    await c.from(people.name).select().limit(1);
    const tableLists = proxy.stats.requests.filter((r) => r.url === "/functions/v1/rest-api/tables");
    assert.equal(tableLists.length, 1, "GET /tables once for every name");
    const missing = await c.from("no such table").select();
    assert.equal(missing.error.code, "NOT_FOUND");
    assert.equal(missing.error.status, 404);
  } finally {
    await proxy.close();
  }
});

test("server errors come back as error objects with the server's code", async () => {
  const unknown = await client.from(tasks.id).select().eq("Nope", 1);
  assert.equal(unknown.data, null);
  assert.deepEqual([unknown.error.code, unknown.error.status, unknown.status], ["UNKNOWN_COLUMN", 400, 400]);
  assert.equal(typeof unknown.error.message, "string");
  const badOp = await client.from(tasks.id).select().not("Score", "between", 1);
  assert.equal(badOp.error.code, "UNKNOWN_OPERATOR");
  const unauth = await createClient(URL_, { token: "wds_rest_nope" }).from(tasks.id).select();
  assert.deepEqual([unauth.error.code, unauth.status], ["UNAUTHORIZED", 401]);
});

test("a builder is a thenable: then and catch work without await", async () => {
  const viaThen = await new Promise((resolve) => client.from(tasks.id).select().limit(1).then(resolve));
  assert.equal(viaThen.data.length, 1);
  const viaCatch = await client.from(tasks.id).select().limit(1).catch(() => "unreached");
  assert.equal(viaCatch.data.length, 1);
});

// the query string the SDK sends is exactly the documented REST query (docs/query.md)
const SENT = [
  [(q) => q.eq("Score", null), "Score=is.null"],
  [(q) => q.neq("Score", null), "Score=not.is.null"],
  [(q) => q.not("Score", "eq", null), "Score=not.is.null"],
  // as the JSON doors' list form reads {column, op, value} (docs/query.md)
  [(q) => q.not("Score", "neq", null), "Score=is.null"],
  [(q) => q.filter("Score", "eq", null), "Score=is.null"],
  [(q) => q.filter("Score", "neq", null), "Score=not.is.null"],
  [(q) => q.filter("Score", "not.eq", null), "Score=not.is.null"],
  [(q) => q.filter("Score", "not.neq", null), "Score=is.null"],
  [(q) => q.filter("Title", "in", ["a", "b,c"]), "Title=in.(a%2C%22b%2Cc%22)"],
  [(q) => q.filter("Title", "not.in", ["a"]), "Title=not.in.(a)"],
  [(q) => q.filter("Tags", "cs", ["x", "y"]), "Tags=cs.%7Bx%2Cy%7D"],
  [(q) => q.filter("Score", "in", "(1,2)"), "Score=in.(1%2C2)"],
  [(q) => q.gte("Due", new Date("2026-01-28T00:00:00Z")), "Due=gte.2026-01-28T00%3A00%3A00.000Z"],
  [(q) => q.in("Title", ["a", "b,c"]), "Title=in.(a%2C%22b%2Cc%22)"],
  [(q) => q.contains("Tags", ["x", "y"]), "Tags=cs.%7Bx%2Cy%7D"],
  [(q) => q.or("Score.gte.10,Done.is.true"), "or=(Score.gte.10%2CDone.is.true)"],
  [(q) => q.and("Score.gt.0,Score.lt.10"), "and=(Score.gt.0%2CScore.lt.10)"],
  [(q) => q.and("Score.gt.0,Done.is.true", { negate: true }), "not.and=(Score.gt.0%2CDone.is.true)"],
  [(q) => q.select(["Title", "Owner(Name)"]), "select=Title%2COwner(Name)"],
  [(q) => q.select(["Title", "Owner(Name, Age)"]), "select=Title%2COwner(Name%2CAge)"],
  [(q) => q.select(""), "select="], // no field, as on every door
  [(q) => q.select("*"), ""],
];

test("the builder sends the documented REST query", async () => {
  const seen = [];
  const recording = createClient(URL_, { token: TOKEN, fetch: (url, init) => { seen.push(String(url)); return fetch(url, init); } });
  for (const [build, query] of SENT) {
    seen.length = 0;
    const { error } = await build(recording.from(tasks.id).select());
    assert.equal(error, null, query);
    const url = seen.find((u) => u.includes("/records"));
    assert.equal(decodeURIComponent(url.split("?")[1] ?? ""), decodeURIComponent(query));
  }
});

test("limit and offset are sent as one parameter each, whatever they hold", async () => {
  // a text limit cannot smuggle in a filter: the server sees it whole and refuses it as REST does
  const r = await client.from(tasks.id).select().limit("5&Title=eq.task 01");
  const raw = await api("GET", `/tables/${tasks.id}/records?limit=${encodeURIComponent("5&Title=eq.task 01")}`);
  assert.equal(raw.status, 400);
  assert.equal(r.status, 400);
  assert.deepEqual({ message: r.error.message, code: r.error.code }, { message: raw.body.error, code: raw.body.code });
  const off = await client.from(tasks.id).select().range("1&Title=eq.task 01", 3);
  assert.equal(off.error.code, "VALIDATION_ERROR");
});

test("an array select with an embedding embeds, as the text form does", async () => {
  const a = await client.from(tasks.id).select(["Title", "Owner(Name)"]).eq("Title", "task 03").single();
  const b = await client.from(tasks.id).select("Title,Owner(Name)").eq("Title", "task 03").single();
  assert.equal(a.error, null);
  assert.deepEqual(a.data, b.data);
  assert.equal(a.data.Owner.Name, "Bob");
});

test("pages by cursor: .after(next) and pages() give the rows of one big page", async () => {
  const orders = [
    (q) => q.order("Score", { ascending: false }),
    (q) => q.order(ODD),
    (q) => q.order(ODD, { ascending: false, nullsFirst: false }),
    (q) => q.order("Status").order("Score", { ascending: false }),
  ];
  for (const order of orders) {
    const whole = await order(client.from(tasks.id).select().gte("Score", 30)).limit(1000);
    assert.equal(whole.error, null);
    assert.equal(whole.next, null);
    const byAfter = [];
    let next;
    let pages = 0;
    do {
      let q = order(client.from(tasks.id).select().gte("Score", 30)).limit(7);
      if (next) q = q.after(next);
      const r = await q;
      assert.equal(r.error, null);
      byAfter.push(...r.data);
      next = r.next;
      pages += 1;
    } while (next);
    assert.deepEqual(byAfter, whole.data);
    assert.equal(pages, Math.ceil(whole.data.length / 7));
    const byPages = [];
    for await (const rows of order(client.from(tasks.id).select().gte("Score", 30)).pages(4)) byPages.push(...rows);
    assert.deepEqual(byPages, whole.data);
  }
  const first = await client.from(tasks.id).select().order("Score").limit(3);
  const other = await client.from(tasks.id).select().order("Score", { ascending: false }).after(first.next);
  assert.equal(other.error.code, "INVALID_CURSOR");
  const tampered = await client.from(tasks.id).select().order("Score").after(first.next.slice(0, -2));
  assert.equal(tampered.error.code, "INVALID_CURSOR");
});

test("pages() asks again with fewer records when a page passes the server's 16 MiB", async () => {
  const big = await createTable("BigPages", [{ name: "Body", type: "text" }, { name: "N", type: "number" }]);
  const body = "x".repeat(1_000_000);
  for (let start = 0; start < 20; start += 4) {
    const rows = [];
    for (let i = start; i < start + 4; i++) rows.push({ fields: { Body: body, N: i } });
    assert.equal((await api("POST", `/tables/${big.id}/records/batch`, { rows })).status, 200);
  }
  const whole = await client.from(big.id).select().order("N").limit(100);
  assert.equal(whole.error.code, "RESULT_TOO_LARGE");
  assert.equal(whole.error.fit, 16);
  const sizes = [];
  const seen = [];
  for await (const rows of client.from(big.id).select().order("N").pages()) {
    sizes.push(rows.length);
    seen.push(...rows.map((r) => r.N));
  }
  assert.deepEqual(sizes, [16, 4]);
  assert.deepEqual(seen, [...Array(20).keys()]);
});

test("pages() over an order no cursor continues (a multi_select) pages by offset to the end", async () => {
  const byTags = [];
  for await (const rows of client.from(tasks.id).select().order("Tags").pages(7)) byTags.push(...rows);
  const whole = await client.from(tasks.id).select().order("Tags").limit(1000);
  assert.equal(whole.error, null);
  assert.equal(whole.data.length, 30);
  assert.deepEqual(byTags, whole.data);
});
