// Realtime: change events over WebSocket, filters, and resume from the last seen seq after
// the connection is cut (through a TCP proxy that drops and refuses connections).
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { createClient } from "../wds.js";
import { URL_, TOKEN, api, createTable, tcpProxy, until, wait } from "./helpers.mjs";

let table, client, enabled = true, skipReason = "";

before(async () => {
  if (typeof WebSocket !== "function") {
    enabled = false;
    skipReason = "no global WebSocket in this Node (run node with --experimental-websocket, or Node 22+)";
    return;
  }
  table = await createTable("RT", [{ name: "N", type: "number" }, { name: "Tag", type: "text" }]);
  client = createClient(URL_, { token: TOKEN });
  // is the realtime door there at all?
  const probe = client.channel(table.id);
  const status = await new Promise((resolve) => {
    probe.subscribe((s, err) => (s === "SUBSCRIBED" || s === "CHANNEL_ERROR" || s === "RECONNECTING") && resolve([s, err]));
  });
  await probe.unsubscribe();
  if (status[0] !== "SUBSCRIBED") {
    enabled = false;
    skipReason = `the realtime endpoint (api/routes/realtime.py) does not answer: ${status[0]} ${status[1] && status[1].message}`;
  }
});

const insert = async (fields) => (await api("POST", `/tables/${table.id}/records`, { fields })).body;

function subscribed(channel) {
  return new Promise((resolve, reject) => {
    channel.subscribe((status, error) => {
      if (status === "SUBSCRIBED") resolve(channel);
      if (status === "CHANNEL_ERROR") reject(Object.assign(new Error(error.message), error));
    });
  });
}

test("INSERT, UPDATE and DELETE arrive flat, in seq order", async (t) => {
  if (!enabled) return t.skip(skipReason);
  const got = [];
  const ch = client.channel(table.name).on("*", (c) => got.push(c));
  await subscribed(ch);
  assert.equal(ch.tableId, table.id);
  const rec = await insert({ N: 1, Tag: "a" });
  await api("PATCH", `/tables/${table.id}/records/${rec.id}`, { fields: { N: 2 } });
  await api("DELETE", `/tables/${table.id}/records/${rec.id}`);
  await until(() => got.length >= 3, 10000, "three changes");
  await ch.unsubscribe();
  assert.deepEqual(got.map((c) => c.event), ["INSERT", "UPDATE", "DELETE"]);
  assert.deepEqual([got[0].record.id, got[0].record.N, got[0].record.Tag], [rec.id, 1, "a"]);
  assert.equal(got[0].record.fields, undefined, "flat by default");
  assert.deepEqual([got[1].record.N, got[1].old_record.N], [2, 1]);
  assert.equal(got[2].old_record.id, rec.id);
  assert.ok(got[0].seq < got[1].seq && got[1].seq < got[2].seq);
  assert.equal(ch.lastSeq, got[2].seq);
  assert.equal(ch.status, "CLOSED");
});

test("on(event) and a filter narrow what arrives; flatten: false keeps the raw shape", async (t) => {
  if (!enabled) return t.skip(skipReason);
  const inserts = [];
  const ch = client.channel(table.id, { filter: { Tag: "eq.keep" }, flatten: false }).on("INSERT", (c) => inserts.push(c));
  await subscribed(ch);
  await insert({ N: 1, Tag: "drop" });
  const kept = await insert({ N: 2, Tag: "keep" });
  await api("PATCH", `/tables/${table.id}/records/${kept.id}`, { fields: { N: 3 } });
  await until(() => inserts.length >= 1, 10000, "the insert");
  await wait(300);
  await ch.unsubscribe();
  assert.equal(inserts.length, 1);
  assert.equal(inserts[0].record.fields.Tag, "keep");
});

test("an event too large to send whole arrives truncated, with the record's id", async (t) => {
  if (!enabled) return t.skip(skipReason);
  const got = [];
  const ch = client.channel(table.id).on("INSERT", (c) => got.push(c));
  await subscribed(ch);
  const big = await insert({ N: 7, Tag: "x".repeat(300000) }); // past the default 256 KiB
  const small = await insert({ N: 8, Tag: "small" });
  await until(() => got.length >= 2, 10000, "two inserts");
  await ch.unsubscribe();
  assert.equal(got[0].truncated, true);
  assert.deepEqual(got[0].record, { id: big.id, created_at: big.created_at, updated_at: big.updated_at });
  assert.equal(got[1].truncated, undefined);
  assert.equal(got[1].record.Tag, "small");
  assert.equal(got[1].record.id, small.id);
});

test("after the connection is cut, the channel reconnects and resumes after the last seq", async (t) => {
  if (!enabled) return t.skip(skipReason);
  const proxy = await tcpProxy();
  try {
    const c = createClient(proxy.base, { token: TOKEN });
    const got = [];
    const statuses = [];
    const ch = c.channel(table.id, { filter: { Tag: "eq.resume" }, connectTimeoutMs: 1000 }).on("INSERT", (x) => got.push(x));
    ch.on("status", (s) => statuses.push(s.status));
    await subscribed(ch);
    await insert({ N: 0, Tag: "resume" });
    await until(() => got.length === 1, 10000, "the first event");
    const seen = ch.lastSeq;

    proxy.refuse(true);
    proxy.cut();
    await until(() => ch.status === "RECONNECTING", 5000, "the drop to be noticed");
    for (let i = 1; i <= 3; i++) await insert({ N: i, Tag: "resume" }); // missed while away
    await wait(400);
    assert.equal(got.length, 1, "nothing arrives while disconnected");
    proxy.refuse(false);

    await until(() => got.length >= 4, 15000, "the missed events to be replayed");
    await insert({ N: 4, Tag: "resume" }); // and live ones continue
    await until(() => got.length >= 5, 10000, "a live event after resume");
    await wait(300);
    await ch.unsubscribe();
    assert.deepEqual(got.map((x) => x.record.N), [0, 1, 2, 3, 4], "each exactly once, in order");
    assert.ok(got[1].seq > seen);
    assert.ok(statuses.includes("RECONNECTING"));
    assert.ok(statuses.filter((s) => s === "SUBSCRIBED").length >= 2);
  } finally {
    await proxy.close();
  }
});

test("a refused subscription or credential ends in CHANNEL_ERROR without reconnect loops", async (t) => {
  if (!enabled) return t.skip(skipReason);
  const missing = client.channel("no such table");
  await assert.rejects(subscribed(missing), (e) => e.code === "NOT_FOUND");
  assert.equal(missing.status, "CHANNEL_ERROR");
  const badToken = createClient(URL_, { token: "wds_rest_nope" }).channel(table.id);
  await assert.rejects(subscribed(badToken), (e) => e.code === "UNAUTHORIZED");
  await wait(500);
  assert.equal(badToken.status, "CHANNEL_ERROR", "no reconnect with a bad service token");
});

test("a subscription the server ends (its filter's column deleted) ends in CHANNEL_ERROR", async (t) => {
  if (!enabled) return t.skip(skipReason);
  const own = await createTable("RTEnd", [{ name: "N", type: "number" }, { name: "Tag", type: "text" }]);
  const column = own.columns.find((c) => c.name === "Tag").id;
  const statuses = [];
  const ch = client.channel(own.id, { filter: { Tag: "eq.a" } });
  await new Promise((resolve, reject) => {
    ch.subscribe((status, error) => {
      statuses.push([status, error && error.code]);
      if (status === "SUBSCRIBED") resolve();
      if (status === "CHANNEL_ERROR" && !statuses.some(([s]) => s === "SUBSCRIBED")) reject(error);
    });
  });
  try {
    const deleted = await api("DELETE", `/tables/${own.id}/columns/${column}?force=true`);
    assert.equal(deleted.status, 200);
    await api("POST", `/tables/${own.id}/records`, { fields: { N: 1 } });
    await until(() => ch.status === "CHANNEL_ERROR", 10000, "the channel ends");
    assert.deepEqual(statuses.at(-1), ["CHANNEL_ERROR", "SUBSCRIPTION_ENDED"]);
    await wait(500);
    assert.equal(ch.status, "CHANNEL_ERROR", "no resubscribe loop");
  } finally {
    await ch.unsubscribe(); // a failing run must not leave its socket open (node would wait on it)
  }
});

test("without a WebSocket the channel reports WEBSOCKET_UNAVAILABLE", async () => {
  const c = createClient(URL_, { token: TOKEN, WebSocket: "none" });
  const ch = c.channel(1);
  await assert.rejects(subscribed(ch), (e) => e.code === "WEBSOCKET_UNAVAILABLE");
});
