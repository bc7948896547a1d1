// Never throws: network errors, 4xx, 5xx, invalid JSON and a broken fetch all resolve to
// {data: null, error: {message, code, status}}; writes retry once with the same key.
import { test } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { createClient } from "../wds.js";
import { stubServer } from "./helpers.mjs";

async function deadPort() {
  // a port that was just free: nothing listens there
  const srv = net.createServer();
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  const port = srv.address().port;
  await new Promise((r) => srv.close(r));
  return port;
}

// every public call of the SDK, as a function of a client
const CALLS = {
  select: (c) => c.from(1).select().eq("A", 1),
  selectByName: (c) => c.from("Some table").select(),
  single: (c) => c.from(1).select().single(),
  insertOne: (c) => c.from(1).insert({ A: 1 }),
  insertMany: (c) => c.from(1).insert([{ A: 1 }, { A: 2 }]),
  updateById: (c) => c.from(1).update({ A: 1 }).eq("id", 3),
  updateByFilter: (c) => c.from(1).update({ A: 1 }).eq("A", 0),
  deleteById: (c) => c.from(1).delete().eq("id", 3),
  deleteByFilter: (c) => c.from(1).delete().gt("A", 0),
  tables: (c) => c.tables(),
  run: (c) => c.run(1, 3, { mode: "edit", changedColumns: ["A"] }),
  compute: (c) => c.compute(1, 3, "B"),
  runActions: (c) => c.runActions(1, { recordIds: [3] }),
  getRun: (c) => c.getRun("run-x"),
  sql: (c) => c.sql("SELECT * FROM t"),
  schema: (c) => c.schema(),
  search: (c) => c.search(1, "hello", { limit: 3 }),
  upload: (c) => c.storage.from("b").upload("a/x.txt", "hi", { contentType: "text/plain" }),
  download: (c) => c.storage.from("b").download("a/x.txt"),
  publicUrl: (c) => c.storage.from("b").getPublicUrl("a/x.txt"),
  signedUrl: (c) => c.storage.from("b").createSignedUrl("a/x.txt", 60),
  list: (c) => c.storage.from("b").list("a/"),
  remove: (c) => c.storage.from("b").remove(["a/x.txt"]),
  listBuckets: (c) => c.storage.listBuckets(),
  createBucket: (c) => c.storage.createBucket("b"),
  signUp: (c) => c.auth.signUp({ email: "a@example.com", password: "pw-123456789" }),
  signIn: (c) => c.auth.signInWithPassword({ email: "a@example.com", password: "pw-123456789" }),
  getUser: (c) => c.auth.getUser(),
  signOut: (c) => c.auth.signOut(),
};

function assertError(r, code, status, name) {
  assert.ok(r && typeof r === "object", `${name}: an object`);
  assert.deepEqual(Object.keys(r).sort(), ["count", "data", "error", "status"], name);
  assert.ok(r.error, `${name}: an error`);
  assert.equal(typeof r.error.message, "string", name);
  if (code) assert.equal(r.error.code, code, name);
  if (status !== undefined) {
    assert.equal(r.error.status, status, name);
    assert.equal(r.status, status, name);
  }
}

test("every call resolves with NETWORK_ERROR when nothing listens (never throws)", async () => {
  const c = createClient(`http://127.0.0.1:${await deadPort()}`, { token: "t", workspaceId: 1 });
  await c.auth.setSession({ access_token: "a.b.c", refresh_token: "r", expires_in: 3600 });
  for (const [name, call] of Object.entries(CALLS)) {
    const r = await call(c);
    if (name === "getUser" || name === "signOut") {
      assert.ok(r.error === null || r.error.code === "NETWORK_ERROR", name);
      continue;
    }
    assertError(r, "NETWORK_ERROR", 0, name);
  }
});

test("every call resolves with the server's code on 4xx", async () => {
  const stub = await stubServer(() => ({ status: 403, body: JSON.stringify({ error: "no", code: "FORBIDDEN" }) }));
  try {
    const c = createClient(stub.base, { token: "t", workspaceId: 1 });
    for (const [name, call] of Object.entries(CALLS)) {
      const r = await call(c);
      if (name === "getUser") {
        assertError(r, "NO_SESSION", 0, name);
      } else if (name === "signOut") {
        assert.equal(r.error, null, name);
      } else if (name === "publicUrl") {
        assertError(r, "FORBIDDEN", 403, name); // the bucket id lookup was refused
      } else {
        assertError(r, "FORBIDDEN", 403, name);
      }
    }
  } finally {
    await stub.close();
  }
});

test("5xx, non-JSON error bodies and invalid JSON success bodies become error objects", async () => {
  const answers = [
    { status: 500, body: JSON.stringify({ error: "internal error", code: "INTERNAL" }) },
    { status: 502, headers: { "Content-Type": "text/html" }, body: "<html>bad gateway</html>" },
    { status: 503, body: "" },
    { status: 200, body: "{not json" },
  ];
  let i = 0;
  const stub = await stubServer(() => answers[i++ % answers.length]);
  try {
    const c = createClient(stub.base, { token: "t" });
    assertError(await c.from(1).select(), "INTERNAL", 500, "500");
    assertError(await c.from(1).select(), "HTTP_502", 502, "502 html");
    assertError(await c.from(1).select(), "HTTP_503", 503, "503 empty");
    assertError(await c.from(1).select(), "BAD_RESPONSE", 200, "bad json");
  } finally {
    await stub.close();
  }
});

test("a write retried after a dropped connection reuses its Idempotency-Key", async () => {
  const stub = await stubServer((req, body, n) => {
    if (n === 1) return "destroy"; // the first attempt dies mid-flight
    return { status: 201, body: JSON.stringify({ id: 7, fields: { A: 1 }, created_at: "t", updated_at: "t" }) };
  });
  try {
    const c = createClient(stub.base, { token: "t" });
    const r = await c.from(1).insert({ A: 1 });
    assert.equal(r.error, null);
    assert.deepEqual(r.data, { id: 7, created_at: "t", updated_at: "t", A: 1 });
    assert.equal(stub.seen.length, 2);
    const [a, b] = stub.seen.map((s) => s.headers["idempotency-key"]);
    assert.match(a, /^[0-9a-f-]{36}$/);
    assert.equal(a, b, "the retry carries the same key");
    assert.equal(stub.seen[0].body, stub.seen[1].body);
  } finally {
    await stub.close();
  }
});

test("reads retry once, then give up with NETWORK_ERROR", async () => {
  const stub = await stubServer(() => "destroy");
  try {
    const r = await createClient(stub.base, { token: "t" }).from(1).select();
    assertError(r, "NETWORK_ERROR", 0, "read");
    assert.equal(stub.seen.length, 2, "one retry");
  } finally {
    await stub.close();
  }
});

test("a timeout resolves with TIMEOUT and is not retried", async () => {
  const stub = await stubServer(() => new Promise((r) => setTimeout(() => r({ status: 200, body: "{}" }), 500)));
  try {
    const r = await createClient(stub.base, { token: "t", timeout: 50 }).from(1).select();
    assertError(r, "TIMEOUT", 0, "timeout");
    assert.equal(stub.seen.length, 1);
  } finally {
    await stub.close();
  }
});

test("a fetch that throws synchronously or returns garbage still resolves", async () => {
  const throwing = createClient("http://x", { token: "t", fetch: () => { throw new TypeError("boom"); } });
  assertError(await throwing.from(1).select(), "NETWORK_ERROR", 0, "throwing fetch");
  const wrongShape = async () => new Response("{}", { status: 200 });
  for (const fetch of [wrongShape, async () => null, async () => ({ ok: true, status: 200, text: async () => { throw new Error("x"); } })]) {
    const garbage = createClient("http://x", { token: "t", fetch, workspaceId: 1 });
    for (const [name, call] of Object.entries(CALLS)) {
      const r = await call(garbage);
      assert.ok(r && "data" in r && "error" in r && "count" in r && "status" in r, name);
      if (!["getUser", "signOut"].includes(name) && fetch !== wrongShape) assert.ok(r.error, `${name}: garbage fetch`);
    }
  }
  const noFetch = createClient("http://x", { token: "t", fetch: undefined });
  assert.ok((await noFetch.from(1).select()).status !== undefined);
});

test("client-side mistakes are errors too, with status 0", async () => {
  const c = createClient("http://127.0.0.1:9", { token: "t" });
  assertError(await c.from(1).insert("nope"), "VALIDATION_ERROR", 0, "insert string");
  assertError(await c.from(1).update([1]).eq("id", 1), "VALIDATION_ERROR", 0, "update array");
  assertError(await c.from(1).select().not("A", "nope", 1), "UNKNOWN_OPERATOR", 0, "bad op");
  assertError(await c.from(null).select(), "VALIDATION_ERROR", 0, "no table");
  assertError(await createClient("http://x").auth.signInWithPassword({ email: "a", password: "b" }), "WORKSPACE_REQUIRED", 0, "no ws");
});
