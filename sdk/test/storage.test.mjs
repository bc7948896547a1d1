// Storage: buckets, upload/download, public and signed URLs, list, remove.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { createClient } from "../wds.js";
import { URL_, TOKEN, served, suffix } from "./helpers.mjs";

let client, enabled = true, skipReason = "";

before(async () => {
  if (!(await served("/storage/v1/bucket"))) {
    enabled = false;
    skipReason = "the storage endpoints (api/routes/storage.py) are not served by this API";
  }
  client = createClient(URL_, { token: TOKEN });
});

test("upload, download, list and remove in a private bucket; signed URLs work without a token", async (t) => {
  if (!enabled) return t.skip(skipReason);
  const name = `docs-${suffix()}`;
  const made = await client.storage.createBucket(name);
  assert.equal(made.error, null, JSON.stringify(made.error));
  assert.deepEqual([made.data.name, made.data.public], [name, false]);
  const bucket = client.storage.from(name);
  const text = "hello, ünïcode\n";
  const up = await bucket.upload("notes/a b.txt", text, { contentType: "text/plain" });
  assert.equal(up.error, null, JSON.stringify(up.error));
  assert.equal(up.status, 201);
  assert.deepEqual([up.data.path, up.data.size], ["notes/a b.txt", Buffer.byteLength(text)]);
  const conflict = await bucket.upload("notes/a b.txt", "again", { contentType: "text/plain" });
  assert.equal(conflict.error.code, "CONFLICT");
  const replaced = await bucket.upload("notes/a b.txt", new Blob([text + "!"], { type: "text/plain" }), { upsert: true });
  assert.equal(replaced.error, null);
  const bytes = new Uint8Array([0, 1, 2, 250, 251, 252]);
  assert.equal((await bucket.upload("bin/x.bin", bytes)).error, null);

  const down = await bucket.download("notes/a b.txt");
  assert.equal(down.error, null);
  assert.ok(down.data instanceof Blob);
  assert.equal(await down.data.text(), text + "!");
  const bin = await bucket.download("bin/x.bin");
  assert.deepEqual(new Uint8Array(await bin.data.arrayBuffer()), bytes);

  const listed = await bucket.list("notes/");
  assert.deepEqual(listed.data.map((o) => o.path), ["notes/a b.txt"]);

  const signed = await bucket.createSignedUrl("notes/a b.txt", 60);
  assert.equal(signed.error, null);
  const viaUrl = await fetch(signed.data.signedUrl);
  assert.equal(viaUrl.status, 200);
  assert.equal(await viaUrl.text(), text + "!");
  const missing = await bucket.createSignedUrl("nope.txt", 60);
  assert.equal(missing.error.code, "NOT_FOUND");

  const pub = await bucket.getPublicUrl("notes/a b.txt");
  assert.equal(pub.error, null);
  assert.equal((await fetch(pub.data.publicUrl)).status, 404, "a private bucket serves nothing publicly");

  const removed = await bucket.remove(["notes/a b.txt", "bin/x.bin"]);
  assert.equal(removed.error, null);
  assert.equal(removed.count, 2);
  assert.equal((await bucket.download("notes/a b.txt")).error.code, "NOT_FOUND");
});

test("public buckets serve objects at getPublicUrl without a token", async (t) => {
  if (!enabled) return t.skip(skipReason);
  const name = `pub-${suffix()}`;
  const made = await client.storage.createBucket(name, { public: true });
  assert.equal(made.error, null);
  const up = await client.storage.from(name).upload("img/logo.svg", "<svg xmlns='http://www.w3.org/2000/svg'/>", { contentType: "image/svg+xml" });
  assert.equal(up.error, null);
  // a fresh client resolves the bucket id by name; by id it needs no lookup
  for (const ref of [name, made.data.id]) {
    const pub = await createClient(URL_, { token: TOKEN }).storage.from(ref).getPublicUrl("img/logo.svg");
    assert.equal(pub.data.publicUrl, `${URL_}/storage/v1/object/public/${made.data.id}/img/logo.svg`);
    const res = await fetch(pub.data.publicUrl);
    assert.equal(res.status, 200);
    assert.match(await res.text(), /<svg/);
  }
  const buckets = await client.storage.listBuckets();
  assert.ok(buckets.data.some((b) => b.name === name && b.public));
});

test("a stream body uploads without being buffered by the SDK", async (t) => {
  if (!enabled) return t.skip(skipReason);
  const name = `stream-${suffix()}`;
  await client.storage.createBucket(name);
  const chunks = ["part one, ", "part two"];
  const stream = new ReadableStream({
    pull(controller) {
      const next = chunks.shift();
      if (next === undefined) controller.close();
      else controller.enqueue(new TextEncoder().encode(next));
    },
  });
  const up = await client.storage.from(name).upload("s.txt", stream, { contentType: "text/plain" });
  assert.equal(up.error, null, JSON.stringify(up.error));
  assert.equal(await (await client.storage.from(name).download("s.txt")).data.text(), "part one, part two");
});
