// App-user auth: sign-up, sign-in, the session used for REST calls, persistence through a
// pluggable storage, refresh before expiry and after a TOKEN_EXPIRED answer, sign-out.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { createClient } from "../wds.js";
import { URL_, WORKSPACE_ID, admin, createTable, served, stubServer, suffix, until, wait } from "./helpers.mjs";

let shared, hidden, enabled = true, skipReason = "";

function memory() {
  const m = new Map();
  return {
    map: m,
    getItem: (k) => (m.has(k) ? m.get(k) : null),
    setItem: (k, v) => void m.set(k, v),
    removeItem: (k) => void m.delete(k),
  };
}

before(async () => {
  if (!(await served("/functions/v1/auth/user"))) {
    enabled = false;
    skipReason = "the auth endpoints (api/routes/auth.py) are not served by this API";
    return;
  }
  shared = await createTable("Notes", [{ name: "Text", type: "text" }]);
  hidden = await createTable("Secret", [{ name: "Text", type: "text" }]);
  const prof = await admin("POST", `/workspaces/${WORKSPACE_ID}/profiles`, {
    name: `relay-${suffix()}`,
    grants: [{ table_id: shared.id, read: true, create: true, update: true, delete: true }],
  });
  assert.equal(prof.status, 201, JSON.stringify(prof.body));
  const ws = await admin("PATCH", `/workspaces/${WORKSPACE_ID}`, { relay_profile_id: prof.body.id });
  assert.equal(ws.status, 200, JSON.stringify(ws.body));
});

const email = () => `user-${suffix()}@example.com`;
const PASSWORD = "correct horse battery staple 9";

test("sign up, act as the app user through the relay profile, sign out", async (t) => {
  if (!enabled) return t.skip(skipReason);
  const storage = memory();
  const events = [];
  const c = createClient(URL_, { workspaceId: WORKSPACE_ID, storage });
  c.auth.onAuthStateChange((event) => events.push(event));
  const who = email();
  const up = await c.auth.signUp({ email: who, password: PASSWORD });
  assert.equal(up.error, null, JSON.stringify(up.error));
  assert.equal(up.status, 201);
  assert.equal(up.data.user.email, who);
  assert.ok(up.data.session.access_token && up.data.session.refresh_token);
  assert.ok(up.data.session.expires_at > Date.now() / 1000);
  assert.deepEqual(events, ["SIGNED_IN"]);
  const [stored] = [...storage.map.values()];
  assert.equal(JSON.parse(stored).access_token, up.data.session.access_token, "persisted");

  const ins = await c.from(shared.id).insert({ Text: "mine" });
  assert.equal(ins.error, null);
  const mine = await c.from(shared.name).select().eq("id", ins.data.id).single();
  assert.equal(mine.data.Text, "mine");
  const denied = await c.from(hidden.id).select();
  assert.ok([403, 404].includes(denied.status), "only the relay profile's tables");
  const user = await c.auth.getUser();
  assert.equal(user.data.user.email, who);

  // a second client on the same storage picks the session up (a page reload)
  const again = createClient(URL_, { workspaceId: WORKSPACE_ID, storage });
  assert.equal((await again.auth.getUser()).data.user.email, who);

  const token = up.data.session.access_token;
  const out = await c.auth.signOut();
  assert.equal(out.error, null);
  assert.equal(storage.map.size, 0, "forgotten locally");
  assert.deepEqual(events, ["SIGNED_IN", "SIGNED_OUT"]);
  assert.equal((await c.auth.getUser()).error.code, "NO_SESSION");
  // the old access token stops working on the server too
  const stale = createClient(URL_, { appUserSession: { access_token: token, refresh_token: "x", expires_in: 600 }, persistSession: false });
  await until(async () => (await stale.from(shared.id).select()).status === 401, 10000, "the token to be revoked");
});

test("sign in with a password; a wrong one is INVALID_CREDENTIALS", async (t) => {
  if (!enabled) return t.skip(skipReason);
  const who = email();
  await createClient(URL_, { workspaceId: WORKSPACE_ID, persistSession: false }).auth.signUp({ email: who, password: PASSWORD });
  const c = createClient(URL_, { workspaceId: WORKSPACE_ID, storage: memory() });
  const bad = await c.auth.signInWithPassword({ email: who, password: "wrong password 123" });
  assert.deepEqual([bad.error.code, bad.status], ["INVALID_CREDENTIALS", 401]);
  assert.equal((await c.auth.getSession()).data.session, null);
  const ok = await c.auth.signInWithPassword({ email: who, password: PASSWORD });
  assert.equal(ok.error, null);
  assert.equal(ok.data.user.email, who);
  assert.equal((await c.from(shared.id).select().limit(1)).error, null);
  const dup = await c.auth.signUp({ email: who, password: PASSWORD });
  assert.equal(dup.error.code, "CONFLICT");
});

test("an access token about to expire is refreshed before the call", async (t) => {
  if (!enabled) return t.skip(skipReason);
  const storage = memory();
  const c = createClient(URL_, { workspaceId: WORKSPACE_ID, storage });
  const events = [];
  c.auth.onAuthStateChange((e) => events.push(e));
  const up = await c.auth.signUp({ email: email(), password: PASSWORD });
  const first = up.data.session;
  // pretend the token expires in 5 s (inside the refresh margin)
  await c.auth.setSession({ ...first, expires_at: Math.floor(Date.now() / 1000) + 5 });
  await wait(1100); // access tokens are signed per second: let the new one differ
  const r = await c.from(shared.id).select().limit(1);
  assert.equal(r.error, null);
  const now = (await c.auth.getSession()).data.session;
  assert.notEqual(now.access_token, first.access_token);
  assert.notEqual(now.refresh_token, first.refresh_token, "refresh tokens rotate");
  assert.ok(events.includes("TOKEN_REFRESHED"));
  assert.equal(JSON.parse([...storage.map.values()][0]).refresh_token, now.refresh_token);
  // the rotated-out refresh token no longer works (reuse revokes the family)
  const old = createClient(URL_, { workspaceId: WORKSPACE_ID, persistSession: false, appUserSession: { ...first, expires_at: 1 } });
  const denied = await old.from(shared.id).select();
  assert.equal(denied.status, 401);
  assert.equal((await old.auth.getSession()).data.session, null, "a dead session is dropped");
});

test("a TOKEN_EXPIRED answer triggers one refresh and a retry", async () => {
  let calls = 0;
  const stub = await stubServer((req, body) => {
    if (req.url.endsWith("/auth/token")) {
      const b = JSON.parse(body);
      assert.deepEqual([b.grant_type, b.refresh_token, b.workspace_id], ["refresh_token", "r1", 9]);
      return { status: 200, body: JSON.stringify({ access_token: "a.b.2", refresh_token: "r2", expires_in: 900, user: { id: 1 } }) };
    }
    calls++;
    if (req.headers.authorization === "Bearer a.b.1") return { status: 401, body: JSON.stringify({ error: "expired", code: "TOKEN_EXPIRED" }) };
    return { status: 200, body: JSON.stringify({ records: [], limit: 100, offset: 0 }) };
  });
  try {
    const c = createClient(stub.base, { workspaceId: 9, persistSession: false, appUserSession: { access_token: "a.b.1", refresh_token: "r1", expires_in: 900 } });
    const r = await c.from(1).select();
    assert.equal(r.error, null);
    assert.equal(calls, 2);
    assert.equal((await c.auth.getSession()).data.session.access_token, "a.b.2");
  } finally {
    await stub.close();
  }
});

test("sign-up without app users enabled returns the server's error", async (t) => {
  if (!enabled) return t.skip(skipReason);
  const c = createClient(URL_, { workspaceId: 999999, persistSession: false });
  const r = await c.auth.signUp({ email: email(), password: PASSWORD });
  assert.equal(r.error.status, 403);
  assert.equal(r.data.user, null);
});
