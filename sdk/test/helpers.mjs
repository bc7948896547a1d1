// Shared helpers of the SDK tests: environment, raw REST calls (to compare the SDK with),
// and small local servers that sit between the SDK and the API to measure what reaches it.
import http from "node:http";
import net from "node:net";
import { randomBytes } from "node:crypto";

export const URL_ = process.env.WDS_URL;
export const TOKEN = process.env.WDS_TOKEN;
export const ADMIN_KEY = process.env.WDS_ADMIN_KEY;
export const WORKSPACE_ID = Number(process.env.WDS_WORKSPACE_ID);
export const REST = `${URL_}/functions/v1/rest-api`;

if (!URL_ || !TOKEN) {
  throw new Error("set WDS_URL and WDS_TOKEN (tests/sdk/test_sdk_node.py does)");
}

export const suffix = () => randomBytes(3).toString("hex");

/** A raw call to the API with the builder token (the reference the SDK is compared with). */
export async function api(method, path, body, { token = TOKEN, base = REST, headers = {} } = {}) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { Authorization: `Bearer ${token}`, ...(body ? { "Content-Type": "application/json" } : {}), ...headers },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null, headers: res.headers };
}

export async function admin(method, path, body) {
  return api(method, path, body, { token: ADMIN_KEY, base: `${URL_}/functions/v1/admin` });
}

export async function createTable(name, columns) {
  const r = await api("POST", "/tables", { name: `${name}-${suffix()}`, icon: "table", columns });
  if (r.status !== 201) throw new Error(`create table: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

/** Records from a raw GET with `params` (an object or [[k, v]] pairs). */
export async function rawList(tableId, params) {
  const qs = new URLSearchParams(params).toString();
  const r = await api("GET", `/tables/${tableId}/records?${qs}`);
  if (r.status !== 200) throw new Error(`list: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.records;
}

export function listen(server) {
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(`http://127.0.0.1:${server.address().port}`)));
}

export function close(server) {
  return new Promise((resolve) => {
    server.closeAllConnections?.();
    server.close(() => resolve());
  });
}

/**
 * An HTTP proxy in front of the API that records every request (method, path, query,
 * headers) and the highest number in flight at once. `delayMs` holds each request
 * before forwarding, so concurrency is observable.
 */
export async function recordingProxy({ delayMs = 0, target = URL_ } = {}) {
  const t = new URL(target);
  const stats = { requests: [], inFlight: 0, maxInFlight: 0 };
  const server = http.createServer((req, res) => {
    stats.inFlight++;
    stats.maxInFlight = Math.max(stats.maxInFlight, stats.inFlight);
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      stats.requests.push({ method: req.method, url: req.url, headers: req.headers, body: body.toString() });
      setTimeout(() => {
        const up = http.request(
          { host: t.hostname, port: t.port, method: req.method, path: req.url, headers: { ...req.headers, host: t.host } },
          (upRes) => {
            res.writeHead(upRes.statusCode, upRes.headers);
            upRes.pipe(res);
            upRes.on("end", () => stats.inFlight--);
          },
        );
        up.on("error", () => {
          stats.inFlight--;
          res.destroy();
        });
        up.end(body);
      }, delayMs);
    });
  });
  const base = await listen(server);
  return { base, stats, close: () => close(server) };
}

/** A TCP proxy to the API whose connections can be cut and refused on demand (realtime resume). */
export async function tcpProxy(target = URL_) {
  const t = new URL(target);
  const sockets = new Set();
  let refusing = false;
  const server = net.createServer((client) => {
    if (refusing) return client.destroy();
    const upstream = net.connect(Number(t.port), t.hostname);
    sockets.add(client).add(upstream);
    client.pipe(upstream).pipe(client);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on("error", drop).on("close", drop);
    upstream.on("error", drop).on("close", drop);
  });
  const base = await listen(server);
  return {
    base,
    cut() {
      for (const s of sockets) s.destroy();
      sockets.clear();
    },
    refuse(on) {
      refusing = on;
    },
    connections: () => sockets.size / 2,
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** A stub HTTP server answering with `handler(req, body) → {status, headers?, body}`. */
export async function stubServer(handler) {
  const seen = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", async () => {
      const body = Buffer.concat(chunks).toString();
      seen.push({ method: req.method, url: req.url, headers: req.headers, body });
      const out = await handler(req, body, seen.length);
      if (out === "destroy") return req.socket.destroy();
      res.writeHead(out.status, out.headers || { "Content-Type": "application/json" });
      res.end(out.body ?? "");
    });
  });
  const base = await listen(server);
  return { base, seen, close: () => close(server) };
}

export const wait = (ms) => new Promise((r) => setTimeout(r, ms));

/** Poll `fn` until it returns a truthy value (or fail after `ms`). */
export async function until(fn, ms = 10000, what = "condition") {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await wait(25);
  }
}

/** Whether the API serves a path (other helpers' routes may not be there yet). */
export async function served(path) {
  const r = await fetch(`${URL_}${path}`, { method: "GET" }).catch(() => null);
  return r !== null && !(r.status === 404 && (await r.json().catch(() => ({}))).error === "no such endpoint");
}

/** A new builder token of the test workspace: each token has its own per-minute budget
 * (3,000 requests), so request-heavy tests do not starve the others. */
export async function freshToken(type = "vibe_mcp") {
  const r = await admin("POST", `/workspaces/${WORKSPACE_ID}/tokens`, { type, name: `sdk-${suffix()}` });
  if (r.status !== 201) throw new Error(`token: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.token;
}
