// rpc-style helpers: run, compute, runActions (+ getRun), sql, schema, search, tables.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { createClient } from "../wds.js";
import { URL_, TOKEN, api, createTable, until } from "./helpers.mjs";

let table, client, rec;

before(async () => {
  table = await createTable("R", [
    { name: "A", type: "number" },
    { name: "B", type: "formula", formula: "{A} + 1" },
  ]);
  client = createClient(URL_, { token: TOKEN });
  rec = (await client.from(table.id).insert({ A: 1 }, { runPipeline: false })).data;
  assert.equal(rec.B, null);
});

test("run re-runs a record's pipeline and returns the flat record", async () => {
  const r = await client.run(table.name, rec.id, { mode: "create" });
  assert.equal(r.error, null);
  assert.equal(r.data.record.B, 2);
  assert.equal(r.data.record.id, rec.id);
  assert.equal(typeof r.data.pipeline.status, "string");
  const edit = await client.run(table.id, rec.id, { mode: "edit", changedColumns: ["A"] });
  assert.equal(edit.error, null);
  const bad = await client.run(table.id, rec.id, { changedColumns: ["Nope"] });
  assert.equal(bad.error.code, "UNKNOWN_COLUMN");
});

test("compute re-runs exactly one computed column", async () => {
  await api("PATCH", `/tables/${table.id}/records/${rec.id}?run_pipeline=false`, { fields: { A: 41 } });
  const r = await client.compute(table.id, rec.id, "B");
  assert.equal(r.error, null);
  assert.deepEqual([r.data.record_id, r.data.column, r.data.value], [rec.id, "B", 42]);
  const notComputed = await client.compute(table.id, rec.id, "A");
  assert.equal(notComputed.error.code, "VALIDATION_ERROR");
});

test("runActions starts a bulk run over ids or filters; getRun reports it", async () => {
  const more = await client.from(table.id).insert([{ A: 10 }, { A: 20 }], { runPipeline: false });
  const ids = more.data.map((x) => x.id);
  const byIds = await client.runActions(table.id, { recordIds: ids });
  assert.equal(byIds.error, null);
  assert.equal(byIds.status, 202);
  assert.equal(byIds.data.total, 2);
  assert.equal(byIds.count, 2);
  const done = await until(async () => {
    const r = await client.getRun(byIds.data.run_id);
    return r.data && r.data.status !== "running" ? r : null;
  }, 30000, "the bulk run");
  assert.equal(done.data.done, 2);
  const rows = await client.from(table.id).select().in("id", ids).order("id");
  assert.deepEqual(rows.data.map((x) => x.B), [11, 21]);
  const byFilter = await client.runActions(table.name, { filters: { A: "lt.30" }, columnIds: [table.columns[1].id] });
  assert.equal(byFilter.error, null);
  assert.equal(byFilter.data.total, 2);
  const both = await client.runActions(table.id, { recordIds: ids, filters: { A: "lt.30" } });
  assert.equal(both.error.code, "VALIDATION_ERROR");
});

test("sql runs a read-only query and fills count from total", async () => {
  const r = await client.sql(`SELECT A FROM "${table.name}" WHERE A >= 10 ORDER BY A`);
  assert.equal(r.error, null);
  const ref = await api("POST", "/sql", { query: `SELECT A FROM "${table.name}" WHERE A >= 10 ORDER BY A` });
  assert.deepEqual(r.data, ref.body);
  assert.equal(r.count, ref.body.total ?? ref.body.count ?? null);
  // a page that does not end the result: total only with a count
  const page = `SELECT A FROM "${table.name}" ORDER BY A LIMIT 1`;
  const uncounted = await client.sql(page);
  assert.equal(uncounted.data.has_more, true);
  assert.equal(uncounted.data.total, null);
  const counted = await client.sql(page, { count: true });
  const all = await api("POST", "/sql", { query: `SELECT COUNT(*) FROM "${table.name}"` });
  assert.equal(counted.data.total, all.body.count);
  assert.equal(counted.count, all.body.count);
  const bad = await client.sql("DELETE FROM x");
  assert.ok(bad.error);
  assert.equal(bad.status, 400);
});

test("schema returns the whole workspace like GET {rest}/schema", async () => {
  const r = await client.schema();
  assert.equal(r.error, null);
  const ref = await api("GET", "/schema");
  assert.deepEqual(Object.keys(r.data).sort(), Object.keys(ref.body).sort());
  assert.ok(JSON.stringify(r.data).includes(table.name));
});

test("tables lists what the token sees", async () => {
  const r = await client.tables();
  assert.equal(r.error, null);
  assert.ok(r.data.some((t) => t.id === table.id && t.name === table.name));
  assert.equal(r.count, r.data.length);
});

test("search posts to {rest}/tables/{id}/search and returns the server's answer or error", async () => {
  const r = await client.search(table.name, "forty-two", { limit: 3 });
  const ref = await api("POST", `/tables/${table.id}/search`, { query: "forty-two", limit: 3 });
  if (ref.status === 200) {
    assert.equal(r.error, null);
    assert.equal(r.data.length, ref.body.results.length);
  } else {
    // not enabled for this table, or the endpoint is not there yet: the server's error
    assert.equal(r.data, null);
    assert.equal(r.status, ref.status);
    assert.equal(r.error.code, ref.body.code);
  }
});
