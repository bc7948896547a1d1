// Workspace Data Service — JavaScript client.
//
// One dependency-free ES module for browsers, Node 18+, Deno and Bun. It is a single file
// on purpose: the API serves it as `/sdk/wds.<hash>.js`, and a hashed file cannot import
// siblings by stable names.
//
// Contract (spec "SDK shape"): every call resolves to `{data, error, count, status}` and
// never throws; `error` is `{message, code, status}` (plus server extras such as
// `upgrade`); `status` is the HTTP status, or 0 when no HTTP answer was received.

export const VERSION = "0.1.0";

const BATCH_SIZE = 500; // the server's batch limit (spec "Records: write", rule 3)
const WRITE_CONCURRENCY = 8; // write-by-filter: one request per record, 8 in parallel (rule 4)
const ID_PAGE = 1000; // the list endpoint's maximum page
const REFRESH_MARGIN_S = 30; // refresh an app-user access token this long before it expires
const RETRY_DELAY_MS = 150;
const COUNT_MODES = ["exact", "planned", "estimated"]; // Prefer: count=<mode> (true means exact)
// query parameters the server never reads as column filters (storage/query/parse.py)
const RESERVED = new Set(["order", "sort", "limit", "offset", "after", "select", "expand", "view", "run_pipeline", "count",
  "or", "and", "not.or", "not.and"]);
const NO_HTTP = 0;

// ------------------------------------------------------------------ small helpers

function result(data, error, count, status) {
  return { data, error, count, status };
}

function fail(message, code, status, extra) {
  const error = { message, code, status };
  if (extra) Object.assign(error, extra);
  return result(null, error, null, status);
}

function uuid() {
  const c = globalThis.crypto;
  if (c && typeof c.randomUUID === "function") return c.randomUUID();
  const b = new Uint8Array(16);
  if (c && typeof c.getRandomValues === "function") c.getRandomValues(b);
  else for (let i = 0; i < 16; i++) b[i] = (Math.random() * 256) | 0;
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A record `{id, fields, created_at, updated_at}` → `{id, created_at, updated_at, ...fields}`
 * (embedded related records too). Column names never clash: id/created_at/updated_at are
 * reserved by the server. */
export function flattenRecord(rec) {
  if (rec === null || typeof rec !== "object" || rec.fields === null || typeof rec.fields !== "object") return rec;
  const out = { id: rec.id, created_at: rec.created_at, updated_at: rec.updated_at };
  const fields = rec.fields;
  for (const k in fields) {
    const v = fields[k];
    out[k] = v !== null && typeof v === "object" && !Array.isArray(v) && "fields" in v && "id" in v ? flattenRecord(v) : v;
  }
  return out;
}

// the field names a select string names at its top level ("A,Rel(X,Y),\"B,c\"" → A, Rel,
// B,c); null when it selects every field ("*" among them)
function selectedNames(select) {
  const names = [];
  let depth = 0, quoted = false, cur = "";
  const push = () => {
    let name = cur.trim();
    const paren = name.indexOf("(");
    if (paren >= 0 && !name.startsWith('"')) name = name.slice(0, paren).trim();
    if (name.startsWith('"') && name.endsWith('"') && name.length >= 2) name = name.slice(1, -1).replace(/\\(.)/g, "$1");
    if (name) names.push(name);
    cur = "";
  };
  for (let i = 0; i < select.length; i++) {
    const ch = select[i];
    if (quoted) {
      cur += ch;
      if (ch === "\\" && i + 1 < select.length) cur += select[++i];
      else if (ch === '"') quoted = false;
    } else if (ch === '"') { quoted = true; cur += ch; }
    else if (ch === "(") { depth++; cur += ch; }
    else if (ch === ")") { depth--; cur += ch; }
    else if (ch === "," && depth === 0) push();
    else cur += ch;
  }
  push();
  return names.includes("*") ? null : names;
}

// a written record with only the fields a select names (writes answer every field; the
// REST write routes take no select)
function projectRecord(rec, names) {
  if (names === null || rec === null || typeof rec !== "object" || typeof rec.fields !== "object" || rec.fields === null) return rec;
  const fields = {};
  for (const n of names) if (n in rec.fields) fields[n] = rec.fields[n];
  return { ...rec, fields };
}

function formatValue(v) {
  if (v === null || v === undefined) return "null";
  if (v instanceof Date) return v.toISOString();
  return String(v);
}

// list items of in.(...) and cs.{...}: double quotes protect separators, backslash escapes
function quoteItem(v) {
  const s = formatValue(v);
  if (s === "" || /[",(){}\\]/.test(s) || s.trim() !== s) return `"${s.replace(/[\\"]/g, "\\$&")}"`;
  return s;
}

// the complement of a filter expression: `not.<expr>`, or `<expr>` without its `not.`
// (`neq(col, null)` is `not.is.null`, so its negation is `is.null`)
function negated(expr) {
  return expr.startsWith("not.") ? expr.slice(4) : `not.${expr}`;
}

// names in order/select/expand: quoted when they hold separators
function quoteName(name) {
  const s = String(name);
  if (s === "" || /[",.()\\]/.test(s) || s.trim() !== s || s.startsWith("-")) return `"${s.replace(/[\\"]/g, "\\$&")}"`;
  return s;
}

// an item of an array select: a name, or an embedding "Rel(A,B)" written as the REST grammar
// writes it (the relation and its fields quoted one by one when they hold separators)
function selectItem(item) {
  const s = String(item);
  if (s === "*") return s;
  const m = /^([^()]+)\(([^()]*)\)$/.exec(s);
  if (m && m[1].trim() && m[2].trim()) {
    const fields = m[2].split(",").map((f) => f.trim()).map((f) => (f === "*" ? f : quoteName(f)));
    return `${quoteName(m[1].trim())}(${fields.join(",")})`;
  }
  return quoteName(s);
}

function encodePath(path) {
  return String(path).replace(/^\/+/, "").split("/").map(encodeURIComponent).join("/");
}

function isDigits(v) {
  return typeof v === "string" && /^\d{1,18}$/.test(v);
}

function memoryStorage() {
  const m = new Map();
  return {
    getItem: (k) => (m.has(k) ? m.get(k) : null),
    setItem: (k, v) => void m.set(k, String(v)),
    removeItem: (k) => void m.delete(k),
  };
}

function defaultStorage() {
  try {
    const ls = globalThis.localStorage;
    if (ls && typeof ls.getItem === "function") {
      const probe = "__wds_probe__";
      ls.setItem(probe, "1");
      ls.removeItem(probe);
      return ls;
    }
  } catch {
    // private mode or a sandboxed frame: fall back to memory
  }
  return memoryStorage();
}

async function errorFromResponse(res) {
  let body = null;
  try {
    const text = await res.text();
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (body && typeof body === "object" && typeof body.error === "string") {
    const { error: message, code, ...extra } = body;
    return { message, code: code || `HTTP_${res.status}`, status: res.status, ...extra };
  }
  return { message: res.statusText || `HTTP ${res.status}`, code: `HTTP_${res.status}`, status: res.status };
}

// ------------------------------------------------------------------ HTTP core

class Http {
  constructor(baseUrl, options, auth) {
    this.base = baseUrl;
    this.rest = `${baseUrl}/functions/v1/rest-api`;
    this.fetch = options.fetch || globalThis.fetch?.bind(globalThis);
    this.token = options.token || null;
    this.headers = options.headers || null;
    this.timeout = options.timeout || 0;
    this.auth = auth;
  }

  /** The bearer secret for this call: the app-user session's access token when signed in
   * (refreshed when about to expire), else the service token. */
  bearer() {
    const a = this.auth;
    if (a._loaded && a._session === null) return this.token;
    return a._accessToken().then((t) => t || this.token);
  }

  /**
   * One HTTP exchange → `{data, error, status, headers}`; never throws.
   * `keyed` (writes) adds an Idempotency-Key, reused on the single retry after a network
   * error; `safe` marks a request that may be retried without a key.
   */
  async request(method, url, opts = {}) {
    try {
      return await this._request(method, url, opts);
    } catch (exc) {
      // a misbehaving fetch polyfill or storage: still never throw
      return { ...fail(`client error: ${exc && exc.message}`, "CLIENT_ERROR", NO_HTTP), headers: null };
    }
  }

  async _request(method, url, opts) {
    if (!this.fetch) return { ...fail("no fetch implementation: pass options.fetch", "NO_FETCH", NO_HTTP), headers: null };
    const headers = { Accept: "application/json" };
    if (this.headers) Object.assign(headers, this.headers);
    let body = opts.body;
    if (body !== undefined && opts.raw !== true) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(body);
    }
    if (opts.headers) Object.assign(headers, opts.headers);
    if (opts.auth !== false) {
      let secret = this.bearer();
      if (secret !== null && typeof secret === "object") secret = await secret;
      if (secret) headers.Authorization = `Bearer ${secret}`;
    }
    if (opts.keyed) headers["Idempotency-Key"] = uuid();
    const retryable = opts.keyed || opts.safe || method === "GET" || method === "HEAD";
    const init = { method, headers, body };
    if (opts.duplex) init.duplex = opts.duplex;
    let res;
    for (let attempt = 0; ; attempt++) {
      if (this.timeout) init.signal = AbortSignal.timeout(this.timeout);
      try {
        res = await this.fetch(url, init);
        break;
      } catch (exc) {
        const timedOut = exc && (exc.name === "TimeoutError" || exc.name === "AbortError");
        if (attempt === 0 && retryable && opts.retry !== false && !timedOut) {
          await sleep(RETRY_DELAY_MS + Math.random() * RETRY_DELAY_MS);
          continue;
        }
        const message = (exc && exc.cause && exc.cause.message) || (exc && exc.message) || String(exc);
        return {
          ...fail(timedOut ? `request timed out: ${message}` : `network error: ${message}`, timedOut ? "TIMEOUT" : "NETWORK_ERROR", NO_HTTP),
          headers: null,
        };
      }
    }
    if (res.status === 401 && opts.auth !== false && !opts._refreshed && this.auth._session) {
      // an app-user access token expired server-side before our clock said so: refresh once
      const err = await errorFromResponse(res);
      if (err.code === "TOKEN_EXPIRED" && (await this.auth._refresh())) {
        return this._request(method, url, { ...opts, _refreshed: true });
      }
      return { data: null, error: err, count: null, status: res.status, headers: res.headers };
    }
    if (!res.ok) return { data: null, error: await errorFromResponse(res), count: null, status: res.status, headers: res.headers };
    if (opts.blob) {
      try {
        return { data: await res.blob(), error: null, count: null, status: res.status, headers: res.headers };
      } catch (exc) {
        return { ...fail(`could not read the body: ${exc && exc.message}`, "NETWORK_ERROR", res.status), headers: res.headers };
      }
    }
    let text;
    try {
      text = await res.text();
    } catch (exc) {
      return { ...fail(`could not read the body: ${exc && exc.message}`, "NETWORK_ERROR", res.status), headers: res.headers };
    }
    if (!text) return { data: null, error: null, count: null, status: res.status, headers: res.headers };
    try {
      return { data: JSON.parse(text), error: null, count: null, status: res.status, headers: res.headers };
    } catch {
      return { ...fail("the server answered with invalid JSON", "BAD_RESPONSE", res.status), headers: res.headers };
    }
  }
}

// ------------------------------------------------------------------ query builder

const OPS = ["eq", "neq", "gt", "gte", "lt", "lte", "like", "ilike"];

class QueryBuilder {
  constructor(client, table) {
    this._c = client;
    this._table = table;
    this._filters = []; // [column, expr] pairs, expr = "<op>.<value>"
    this._groups = []; // [or|and|not.or|not.and, "(...)"] pairs
    this._order = [];
    this._select = null;
    this._expand = [];
    this._limit = undefined;
    this._offset = undefined;
    this._after = undefined;
    this._view = undefined;
    this._single = 0; // 1 single, 2 maybeSingle
    this._count = false;
    this._flatten = client._flatten;
    this._action = "select";
    this._values = undefined;
    this._opts = {};
  }

  _filter(column, expr) {
    this._filters.push([String(column), expr]);
    return this;
  }

  /** A copy to build on: `select`, `insert`, `update` and `delete` start one, so a builder
   * kept in a variable (`const t = client.from("Tasks")`) is never changed by a query made
   * from it. Filters and modifiers change the builder they are called on, as in supabase-js. */
  _clone() {
    const q = Object.assign(Object.create(QueryBuilder.prototype), this);
    q._filters = [...this._filters];
    q._groups = [...this._groups];
    q._order = [...this._order];
    q._expand = [...this._expand];
    q._opts = { ...this._opts };
    return q;
  }

  /** Columns to return: `"a,b,Rel(X,Y)"` (the REST grammar) or an array of names.
   * Options: `count: "exact" | "planned" | "estimated"` fills `count` (the server's
   * `Prefer: count=...`: planned is the planner's estimate, estimated is exact below
   * 100,000 estimated rows); `flatten: false` returns the raw shape. */
  select(columns = "*", options = {}) {
    // a read starts a new query; after insert/update/delete it names what they return
    const q = this._action === "select" ? this._clone() : this;
    if (Array.isArray(columns)) columns = columns.map(selectItem).join(",");
    // "" (or []) selects no field, as `select=` does on every door; "*" every field
    q._select = columns === null || columns === undefined || columns.trim() === "*" ? null : columns;
    if (options.count) q._count = COUNT_MODES.includes(options.count) ? options.count : "exact";
    if (options.flatten !== undefined) q._flatten = options.flatten !== false;
    return q;
  }

  /** Equals; `eq(col, null)` is `is.null`, as on the JSON doors. */
  eq(column, value) {
    if (value === null || value === undefined) return this._filter(column, "is.null");
    return this._filter(column, `eq.${formatValue(value)}`);
  }

  /** Not equals; `neq(col, null)` is `not.is.null`. */
  neq(column, value) {
    if (value === null || value === undefined) return this._filter(column, "not.is.null");
    return this._filter(column, `neq.${formatValue(value)}`);
  }

  /** Any of the conditions, in the REST grammar without the outer parentheses:
   * `.or("Score.gte.10,and(Status.eq.done,Title.ilike.*x*)")` sends
   * `or=(Score.gte.10,and(Status.eq.done,Title.ilike.*x*))`. `{ negate: true }` sends `not.or`. */
  or(conditions, options = {}) {
    this._groups.push([options.negate ? "not.or" : "or", `(${conditions})`]);
    return this;
  }

  /** All of the conditions, as `or()` writes them: `.and("Score.gt.0,Score.lt.10")` sends
   * `and=(Score.gt.0,Score.lt.10)`; `{ negate: true }` sends `not.and` (not all of them). */
  and(conditions, options = {}) {
    this._groups.push([options.negate ? "not.and" : "and", `(${conditions})`]);
    return this;
  }

  gt(column, value) {
    return this._filter(column, `gt.${formatValue(value)}`);
  }

  gte(column, value) {
    return this._filter(column, `gte.${formatValue(value)}`);
  }

  lt(column, value) {
    return this._filter(column, `lt.${formatValue(value)}`);
  }

  lte(column, value) {
    return this._filter(column, `lte.${formatValue(value)}`);
  }

  /** Pattern match; `*` or `%` is the wildcard. */
  like(column, pattern) {
    return this._filter(column, `like.${formatValue(pattern)}`);
  }

  /** Case-insensitive pattern match. */
  ilike(column, pattern) {
    return this._filter(column, `ilike.${formatValue(pattern)}`);
  }

  /** Any of `values` (up to 200). */
  in(column, values) {
    return this._filter(column, `in.(${Array.from(values, quoteItem).join(",")})`);
  }

  /** multi_select contains all of `values` (`cs.{a,b}`). */
  contains(column, values) {
    return this._filter(column, `cs.{${Array.from(values, quoteItem).join(",")}}`);
  }

  is(column, value) {
    return this._filter(column, `is.${value === null || value === undefined ? "null" : String(value).toLowerCase()}`);
  }

  /** Negation of any operator: `.not("Status", "eq", "Done")`, `.not("Tag", "in", [...])`. */
  not(column, op, value) {
    const inner = new QueryBuilder(this._c, this._table);
    if (op === "cs") op = "contains";
    if (!(OPS.includes(op) || op === "in" || op === "contains" || op === "is")) {
      this._invalid = `unknown operator ${op}`;
      return this;
    }
    inner[op](column, value);
    return this._filter(column, negated(inner._filters[0][1]));
  }

  /** Escape hatch: `.filter("Score", "not.gte", 3)` writes `Score=not.gte.3`. A value reads
   * as in the JSON doors' list form `{column, op, value}`: `null` with `eq`/`neq` is
   * `is.null`/`not.is.null`, an array with `in`/`cs` is the list (`in.(a,"b,c")`). */
  filter(column, op, value) {
    const text = String(op);
    const negate = text.startsWith("not.");
    const name = negate ? text.slice(4) : text;
    let expr;
    if ((value === null || value === undefined) && (name === "eq" || name === "neq" || name === "is")) {
      expr = name === "neq" ? "not.is.null" : "is.null";
    } else if (Array.isArray(value) && name === "in") {
      expr = `in.(${value.map(quoteItem).join(",")})`;
    } else if (Array.isArray(value) && name === "cs") {
      expr = `cs.{${value.map(quoteItem).join(",")}}`;
    } else {
      return this._filter(column, `${text}.${formatValue(value)}`);
    }
    return this._filter(column, negate ? negated(expr) : expr);
  }

  /** `eq` on every key of `obj`. */
  match(obj) {
    for (const k of Object.keys(obj)) this.eq(k, obj[k]);
    return this;
  }

  order(column, options = {}) {
    let term = `${quoteName(column)}.${options.ascending === false ? "desc" : "asc"}`;
    if (options.nullsFirst !== undefined) term += options.nullsFirst ? ".nullsfirst" : ".nullslast";
    this._order.push(term);
    return this;
  }

  limit(n) {
    this._limit = n;
    return this;
  }

  /** The page after a previous page's `next` cursor (keyset paging: a deep page costs
   *  what the first does). Keep the filters and order the cursor's page had. */
  after(cursor) {
    this._after = cursor;
    return this;
  }

  /** Every matching row, page by page (`limit` rows a page, default 1000), following
   *  each page's `next` cursor: `for await (const rows of query.pages()) ...`. A page
   *  whose records pass the server's 16 MiB is asked again with as many records as fit
   *  (`RESULT_TOO_LARGE`'s `fit`), and so are the pages after it. A failed page yields
   *  nothing more; its error is thrown as an Error with `code` and `status`. */
  async *pages(pageSize) {
    let cursor = this._after;
    let offset = this._offset; // for an order no cursor continues (multi_select, JSON, file)
    let size = pageSize ?? this._limit ?? ID_PAGE;
    const base = await this._baseUrl();
    for (;;) {
      const r = await this._list(base, { limit: size, after: cursor, offset });
      if (r.error && r.error.code === "RESULT_TOO_LARGE" && r.error.fit > 0 && r.error.fit < size) {
        size = r.error.fit; // long records: smaller pages from here on
        continue;
      }
      if (r.error) throw Object.assign(new Error(r.error.message), { code: r.error.code, status: r.error.status });
      if (r.data.length || (cursor === this._after && offset === this._offset)) yield r.data; // an empty first page too
      if (r.next) {
        cursor = r.next;
      } else if (!cursor && r.data.length === size) {
        offset = (offset ?? 0) + size; // no cursor for this order: a full page may not be the last
      } else {
        return;
      }
    }
  }

  async _baseUrl() {
    let id = this._c._tableId(this._table);
    if (typeof id !== "number") id = await id;
    if (typeof id !== "number") throw Object.assign(new Error(id.error.message), { code: id.error.code, status: id.error.status });
    return `${this._c._http.rest}/tables/${id}/records`;
  }

  /** Rows `from`..`to`, both inclusive (offset/limit). */
  range(from, to) {
    this._offset = from;
    this._limit = Math.max(0, to - from + 1);
    return this;
  }

  /** Resolve to one row; an error unless exactly one row matches. */
  single() {
    this._single = 1;
    return this;
  }

  /** Resolve to one row or null; an error when several match. */
  maybeSingle() {
    this._single = 2;
    return this;
  }

  /** Embed related records whole instead of their ids. */
  expand(...columns) {
    for (const c of columns.flat()) this._expand.push(quoteName(c));
    return this;
  }

  /** Apply a saved view's filters and sort. */
  view(viewId) {
    this._view = viewId;
    return this;
  }

  /** Create one record (object) or many (array, sent in batches of 500). */
  insert(values, options = {}) {
    return this._writing("insert", values, options);
  }

  /** Change the sent fields of the matching records (`.eq("id", 5)` or any filters). */
  update(values, options = {}) {
    return this._writing("update", values, options);
  }

  _writing(action, values, options) {
    const q = this._clone();
    q._action = action;
    q._values = values;
    q._opts = options;
    if (options.flatten !== undefined) q._flatten = options.flatten !== false;
    return q;
  }

  /** Delete the matching records (`.eq("id", 5)` or any filters). */
  delete(options = {}) {
    const q = this._clone();
    q._action = "delete";
    q._opts = options;
    return q;
  }

  then(onFulfilled, onRejected) {
    return this._execute().then(onFulfilled, onRejected);
  }

  catch(onRejected) {
    return this._execute().catch(onRejected);
  }

  _query(limit, offset, extra, after = this._after) {
    const parts = [];
    for (const [col, expr] of this._filters) {
      if (RESERVED.has(col) || col.startsWith("filter[")) {
        // a column named like a reserved parameter: the legacy form keeps it a filter
        const dot = expr.startsWith("not.") ? expr.indexOf(".", 4) : expr.indexOf(".");
        parts.push(`${encodeURIComponent(`filter[${col}][${expr.slice(0, dot)}]`)}=${encodeURIComponent(expr.slice(dot + 1))}`);
      } else {
        parts.push(`${encodeURIComponent(col)}=${encodeURIComponent(expr)}`);
      }
    }
    for (const [key, text] of this._groups) parts.push(`${key}=${encodeURIComponent(text)}`);
    if (extra) parts.push(extra);
    if (this._order.length) parts.push(`order=${encodeURIComponent(this._order.join(","))}`);
    if (limit !== undefined) parts.push(`limit=${encodeURIComponent(limit)}`);
    if (offset !== undefined) parts.push(`offset=${encodeURIComponent(offset)}`);
    if (after !== undefined && after !== null) parts.push(`after=${encodeURIComponent(after)}`);
    if (this._view !== undefined) parts.push(`view=${encodeURIComponent(this._view)}`);
    return parts.join("&");
  }

  async _execute() {
    try {
      if (this._invalid) return fail(this._invalid, "UNKNOWN_OPERATOR", NO_HTTP);
      let id = this._c._tableId(this._table);
      if (typeof id !== "number") id = await id;
      if (typeof id !== "number") return id; // an error result
      const base = `${this._c._http.rest}/tables/${id}/records`;
      switch (this._action) {
        case "insert":
          return await this._insert(base);
        case "update":
        case "delete":
          return await this._write(base);
        default:
          return await this._list(base);
      }
    } catch (exc) {
      // a bug or a misbehaving fetch polyfill: still never throw
      return fail(`client error: ${exc && exc.message}`, "CLIENT_ERROR", NO_HTTP);
    }
  }

  async _list(base, page) {
    let extra = "";
    if (this._select !== null) extra = `select=${encodeURIComponent(this._select)}`;
    if (this._expand.length) extra += `${extra ? "&" : ""}expand=${encodeURIComponent(this._expand.join(","))}`;
    const limit = page ? page.limit : this._single ? 2 : this._limit;
    const qs = page ? this._query(limit, page.after ? undefined : page.offset, extra, page.after) : this._query(limit, this._offset, extra);
    const r = await this._c._http.request("GET", qs ? `${base}?${qs}` : base, this._count ? { headers: { Prefer: `count=${this._count}` } } : undefined);
    if (r.error) return result(null, r.error, null, r.status);
    const total = this._count ? r.headers.get("x-total-count") : null;
    let rows = r.data.records;
    if (this._flatten) rows = rows.map(flattenRecord);
    const count = total === null ? null : Number(total);
    if (this._single) return this._one(rows, count, r.status);
    // `next`: the cursor of the page after this one (pass it to .after()), null on the last
    return { ...result(rows, null, count, r.status), next: r.data.next ?? null };
  }

  _one(rows, count, status) {
    if (rows.length === 1) return result(rows[0], null, count, status);
    if (rows.length === 0 && this._single === 2) return result(null, null, count, status);
    const error = { message: `expected a single row, got ${rows.length === 0 ? "none" : "several"}`, code: "SINGLE_ROW_EXPECTED", status: 406 };
    return result(null, error, count, status);
  }

  _pipelineQuery() {
    return this._opts.runPipeline === false ? "?run_pipeline=false" : "";
  }

  async _insert(base) {
    const http = this._c._http;
    const values = this._values;
    if (!Array.isArray(values)) {
      if (values === null || typeof values !== "object") return fail("insert takes an object or an array of objects", "VALIDATION_ERROR", NO_HTTP);
      const r = await http.request("POST", base + this._pipelineQuery(), { body: { fields: values }, keyed: true });
      if (r.error) return result(null, r.error, null, r.status);
      return result(this._shapeWritten(r.data), null, 1, r.status);
    }
    const data = new Array(values.length).fill(null);
    const errors = [];
    let status = 200;
    let created = 0;
    for (let start = 0; start < values.length; start += BATCH_SIZE) {
      const chunk = values.slice(start, start + BATCH_SIZE);
      const body = { rows: chunk.map((fields) => ({ fields })), run_pipeline: this._opts.runPipeline !== false };
      const r = await http.request("POST", `${base}/batch`, { body, keyed: true });
      status = r.status;
      if (r.error) {
        // the call failed as a whole: later batches would fail alike, stop here
        const error = { ...r.error, inserted: created, failed_from: start };
        return result(data, error, created, r.status);
      }
      for (const item of r.data.results) {
        const i = start + item.index;
        if (item.record) {
          data[i] = this._shapeWritten(item.record);
          created++;
        } else {
          errors.push({ index: i, message: item.error, code: item.code });
        }
      }
    }
    if (errors.length) {
      const error = { message: `${errors.length} of ${values.length} rows failed`, code: "PARTIAL_FAILURE", status, errors };
      return result(data, error, created, status);
    }
    return result(data, null, created, status);
  }

  // a record a write answered, as the query asks: only the selected fields (.select(...)
  // after insert/update), flattened unless the client keeps the REST shape
  _shapeWritten(rec) {
    const projected = this._select === null ? rec : projectRecord(rec, selectedNames(this._select));
    return this._flatten ? flattenRecord(projected) : projected;
  }

  _singleId() {
    if (this._opts.id !== undefined) return this._opts.id;
    if (this._filters.length === 1 && this._groups.length === 0 && this._filters[0][0] === "id" && this._filters[0][1].startsWith("eq.") && this._limit === undefined && this._offset === undefined && this._view === undefined) {
      const v = this._filters[0][1].slice(3);
      if (isDigits(v)) return v;
    }
    return undefined;
  }

  async _write(base) {
    const http = this._c._http;
    const updating = this._action === "update";
    if (updating && (this._values === null || typeof this._values !== "object" || Array.isArray(this._values))) {
      return fail("update takes an object of fields", "VALIDATION_ERROR", NO_HTTP);
    }
    const one = (rid) =>
      updating
        ? http.request("PATCH", `${base}/${rid}${this._pipelineQuery()}`, { body: { fields: this._values }, keyed: true })
        : http.request("DELETE", `${base}/${rid}`, { keyed: true });
    const shape = (data) => (updating ? this._shapeWritten(data) : data);
    const singleId = this._singleId();
    if (singleId !== undefined) {
      const r = await one(singleId);
      if (r.error) return result(null, r.error, null, r.status);
      return this._finishWrite([shape(r.data)], r.status);
    }
    if (!this._filters.length && !this._groups.length && this._view === undefined) {
      return fail("update and delete need a filter (e.g. .eq('id', 5)); to touch every record use .gte('id', 0)", "FILTER_REQUIRED", NO_HTTP);
    }
    // write-by-filter: resolve every matching id first (paging), then one request per record
    const ids = [];
    const want = this._limit;
    let after = this._after; // each page continues after the last by its next cursor
    let offset = this._offset; // ... or by offset, for an order no cursor continues
    for (;;) {
      const page = want === undefined ? ID_PAGE : Math.min(ID_PAGE, want - ids.length);
      if (page <= 0) break;
      const order = this._order.length ? undefined : "order=id.asc";
      const qs = this._query(page, after ? undefined : offset, order ? `select=&${order}` : "select=", after);
      const r = await http.request("GET", `${base}?${qs}`);
      if (r.error) return result(null, r.error, null, r.status);
      for (const rec of r.data.records) ids.push(rec.id);
      if (r.data.next) {
        after = r.data.next;
      } else if (!after && r.data.records.length === page) {
        // an order on a multi_select, JSON or file column has no cursor: a full page
        // without one may not be the last
        offset = (offset ?? 0) + page;
      } else {
        break;
      }
    }
    const out = new Array(ids.length);
    const errors = [];
    let next = 0;
    let lastStatus = 200;
    const worker = async () => {
      while (next < ids.length) {
        const i = next++;
        const r = await one(ids[i]);
        lastStatus = r.status || lastStatus;
        if (r.error) {
          // gone meanwhile (a concurrent delete): nothing left to change
          if (r.status !== 404) errors.push({ id: ids[i], ...r.error });
        } else {
          out[i] = shape(r.data);
        }
      }
    };
    const workers = [];
    for (let w = 0; w < Math.min(WRITE_CONCURRENCY, ids.length); w++) workers.push(worker());
    await Promise.all(workers);
    const data = out.filter((x) => x !== undefined);
    if (errors.length) {
      const first = errors[0];
      const error = { message: `${errors.length} of ${ids.length} records failed: ${first.message}`, code: errors.length === ids.length ? first.code : "PARTIAL_FAILURE", status: first.status, errors };
      return result(data, error, data.length, first.status);
    }
    return this._finishWrite(data, ids.length ? lastStatus : 200);
  }

  _finishWrite(data, status) {
    if (this._single) return this._one(data, data.length, status);
    return result(data, null, data.length, status);
  }
}

// ------------------------------------------------------------------ auth (app users)

class Auth {
  constructor(client, options) {
    this._c = client;
    this._workspaceId = options.workspaceId ?? null;
    this._storage = options.storage || defaultStorage();
    this._key = options.storageKey || `wds.auth.${client._baseUrl}.${this._workspaceId ?? "default"}`;
    this._session = null;
    this._loaded = false;
    this._listeners = new Set();
    this._refreshing = null;
    this._autoRefresh = options.autoRefreshToken !== false;
    this._persist = options.persistSession !== false;
    if (options.appUserSession) {
      this._loaded = true;
      this._store(options.appUserSession);
    } else if (!this._persist) {
      this._loaded = true;
    } else {
      let stored = null;
      try {
        stored = this._storage.getItem(this._key);
      } catch {
        stored = null;
      }
      if (stored !== null && typeof stored === "object" && typeof stored.then === "function") {
        // an async storage (e.g. React Native AsyncStorage): load before the first request
        this._loading = stored.then((v) => this._adopt(v), () => this._adopt(null));
      } else {
        this._adopt(stored);
      }
    }
  }

  _adopt(raw) {
    try {
      const s = typeof raw === "string" ? JSON.parse(raw) : raw;
      this._session = s && typeof s === "object" && s.access_token ? s : null;
    } catch {
      this._session = null;
    }
    this._loaded = true;
  }

  _emit(event) {
    for (const cb of this._listeners) {
      try {
        cb(event, this._session);
      } catch {
        // a listener's failure is its own
      }
    }
  }

  _store(session) {
    if (session && !session.expires_at && session.expires_in) {
      session = { ...session, expires_at: Math.floor(Date.now() / 1000) + Number(session.expires_in) };
    }
    this._session = session || null;
    this._c._tables = null; // what is visible depends on who asks
    if (!this._persist) return;
    try {
      const p = session ? this._storage.setItem(this._key, JSON.stringify(session)) : this._storage.removeItem(this._key);
      if (p && typeof p.catch === "function") p.catch(() => {});
    } catch {
      // storage full or unavailable: the session still lives in memory
    }
  }

  async _ensureLoaded() {
    if (!this._loaded && this._loading) await this._loading;
  }

  async _accessToken() {
    await this._ensureLoaded();
    const s = this._session;
    if (!s) return null;
    if (this._autoRefresh && s.refresh_token && s.expires_at && s.expires_at - Date.now() / 1000 < REFRESH_MARGIN_S) {
      await this._refresh();
    }
    return this._session ? this._session.access_token : null;
  }

  /** Rotate the refresh token (single flight); false when the session is gone. */
  _refresh() {
    if (this._refreshing) return this._refreshing;
    const s = this._session;
    if (!s || !s.refresh_token) return Promise.resolve(false);
    const ws = this._workspaceId ?? s.workspace_id ?? s.user?.workspace_id;
    this._refreshing = (async () => {
      const r = await this._c._http.request("POST", `${this._c._baseUrl}/functions/v1/auth/token`, {
        body: { grant_type: "refresh_token", workspace_id: ws, refresh_token: s.refresh_token },
        auth: false,
        safe: false,
      });
      if (r.error) {
        if (r.status === 401 || r.status === 400) {
          this._store(null);
          this._emit("SIGNED_OUT");
        }
        return false;
      }
      this._store({ ...r.data, workspace_id: ws });
      this._emit("TOKEN_REFRESHED");
      return true;
    })().finally(() => {
      this._refreshing = null;
    });
    return this._refreshing;
  }

  _needWorkspace() {
    if (this._workspaceId === null || this._workspaceId === undefined) {
      return fail("app-user auth needs createClient(url, {workspaceId})", "WORKSPACE_REQUIRED", NO_HTTP);
    }
    return null;
  }

  async _grant(path, body, event) {
    try {
      const missing = this._needWorkspace();
      if (missing) return { ...missing, data: { user: null, session: null } };
      const r = await this._c._http.request("POST", `${this._c._baseUrl}/functions/v1/auth/${path}`, {
        body: { workspace_id: Number(this._workspaceId), ...body },
        auth: false,
      });
      if (r.error) return result({ user: null, session: null }, r.error, null, r.status);
      await this._ensureLoaded();
      this._store({ ...r.data, workspace_id: Number(this._workspaceId) });
      this._emit(event);
      return result({ user: r.data.user, session: this._session }, null, null, r.status);
    } catch (exc) {
      return fail(`client error: ${exc && exc.message}`, "CLIENT_ERROR", NO_HTTP);
    }
  }

  /** Create an app-user account and sign in. `fields` fills the Users table's columns. */
  signUp({ email, password, fields } = {}) {
    return this._grant("signup", fields ? { email, password, fields } : { email, password }, "SIGNED_IN");
  }

  signInWithPassword({ email, password } = {}) {
    return this._grant("token", { grant_type: "password", email, password }, "SIGNED_IN");
  }

  /** End the session on the server (every token of it) and forget it locally. */
  async signOut() {
    try {
      await this._ensureLoaded();
      const s = this._session;
      if (!s) return result(null, null, null, NO_HTTP);
      const fresh = s.expires_at && s.expires_at - Date.now() / 1000 > 5;
      const r = await this._c._http.request("POST", `${this._c._baseUrl}/functions/v1/auth/logout`, {
        body: { workspace_id: s.workspace_id ?? Number(this._workspaceId), refresh_token: s.refresh_token },
        headers: fresh ? { Authorization: `Bearer ${s.access_token}` } : undefined,
        auth: false,
        keyed: true,
      });
      this._store(null);
      this._emit("SIGNED_OUT");
      // 401: the server had already ended it, which is what was asked
      if (r.error && r.status !== 401) return result(null, r.error, null, r.status);
      return result(null, null, null, r.status);
    } catch (exc) {
      return fail(`client error: ${exc && exc.message}`, "CLIENT_ERROR", NO_HTTP);
    }
  }

  /** The signed-in user, fresh from the server. */
  async getUser() {
    try {
      const token = await this._accessToken();
      if (!token) return result({ user: null }, { message: "not signed in", code: "NO_SESSION", status: NO_HTTP }, null, NO_HTTP);
      const r = await this._c._http.request("GET", `${this._c._baseUrl}/functions/v1/auth/user`);
      if (r.error) return result({ user: null }, r.error, null, r.status);
      return result({ user: r.data }, null, null, r.status);
    } catch (exc) {
      return fail(`client error: ${exc && exc.message}`, "CLIENT_ERROR", NO_HTTP);
    }
  }

  /** The stored session (refreshed first when it is about to expire). */
  async getSession() {
    await this._accessToken();
    return result({ session: this._session }, null, null, NO_HTTP);
  }

  /** Adopt a session obtained elsewhere (e.g. from a relay). */
  async setSession(session) {
    await this._ensureLoaded();
    if (!session || !session.access_token) return fail("a session needs access_token", "VALIDATION_ERROR", NO_HTTP);
    this._store(session);
    this._emit("SIGNED_IN");
    return result({ session: this._session }, null, null, NO_HTTP);
  }

  /** `cb(event, session)` on SIGNED_IN, SIGNED_OUT and TOKEN_REFRESHED. */
  onAuthStateChange(cb) {
    this._listeners.add(cb);
    return { data: { subscription: { unsubscribe: () => this._listeners.delete(cb) } } };
  }
}

// ------------------------------------------------------------------ realtime

const CHANGE_EVENTS = ["INSERT", "UPDATE", "DELETE"];

/** A realtime subscription to one table over its own WebSocket, with automatic reconnect
 * and resume from the last seen `seq` (the server replays retained events after it). */
class Channel {
  constructor(client, table, options = {}) {
    this._c = client;
    this.table = table;
    this._filter = options.filter || null;
    this._flatten = options.flatten === undefined ? client._flatten : options.flatten !== false;
    this._handlers = [];
    this._statusCb = null;
    this._ws = null;
    this._closed = true;
    this._attempt = 0;
    this._timer = null;
    this._watchdog = null;
    this._heartbeatMs = options.heartbeatTimeoutMs || 45000;
    this._connectTimeoutMs = options.connectTimeoutMs || 10000;
    this._openTimer = null;
    this.lastSeq = options.since ?? null;
    this.status = "CLOSED";
    this.tableId = null;
  }

  /** `event`: INSERT, UPDATE, DELETE or `*` → `cb(change)`; also `status` and `error`. */
  on(event, cb) {
    this._handlers.push([String(event).toUpperCase(), cb]);
    return this;
  }

  subscribe(statusCb) {
    if (statusCb) this._statusCb = statusCb;
    if (!this._closed) return this;
    this._closed = false;
    this._connect();
    return this;
  }

  /** Close the socket and stop reconnecting. */
  unsubscribe() {
    this._closed = true;
    clearTimeout(this._timer);
    clearTimeout(this._watchdog);
    clearTimeout(this._openTimer);
    const ws = this._ws;
    this._ws = null;
    if (ws) {
      try {
        ws.close(1000, "unsubscribe");
      } catch {
        // already closing
      }
    }
    this._setStatus("CLOSED");
    return Promise.resolve(result(null, null, null, NO_HTTP));
  }

  _emit(kind, payload) {
    for (const [event, cb] of this._handlers) {
      if (event === kind || (event === "*" && CHANGE_EVENTS.includes(kind))) {
        try {
          cb(payload);
        } catch {
          // a handler's failure must not stop the feed
        }
      }
    }
  }

  _setStatus(status, error) {
    this.status = status;
    if (this._statusCb) {
      try {
        this._statusCb(status, error || null);
      } catch {
        // ignore
      }
    }
    this._emit("STATUS", { status, error: error || null });
  }

  _events() {
    const set = new Set();
    for (const [e] of this._handlers) {
      if (e === "*") return CHANGE_EVENTS;
      if (CHANGE_EVENTS.includes(e)) set.add(e);
    }
    return set.size ? [...set] : CHANGE_EVENTS;
  }

  async _connect() {
    if (this._closed) return;
    const WS = this._c._options.WebSocket || globalThis.WebSocket;
    if (typeof WS !== "function") {
      this._closed = true;
      this._setStatus("CHANNEL_ERROR", { message: "no WebSocket in this runtime: pass options.WebSocket", code: "WEBSOCKET_UNAVAILABLE", status: NO_HTTP });
      return;
    }
    let token = null;
    try {
      token = await this._c._http.bearer();
    } catch {
      token = this._c._http.token;
    }
    if (this._closed) return;
    const url = `${this._c._baseUrl.replace(/^http/, "ws")}/realtime/v1?token=${encodeURIComponent(token || "")}`;
    let ws;
    try {
      ws = new WS(url);
    } catch (exc) {
      this._scheduleReconnect({ message: `cannot open the socket: ${exc && exc.message}`, code: "NETWORK_ERROR", status: NO_HTTP });
      return;
    }
    this._ws = ws;
    // some WebSocket implementations (Node 20's) never report a handshake that the peer
    // cut: give up on an unopened socket after a while and reconnect
    clearTimeout(this._openTimer);
    this._openTimer = setTimeout(() => {
      if (ws === this._ws && ws.readyState !== 1) {
        try {
          ws.close();
        } catch {
          // not open yet
        }
        ws.onclose({ code: 4002, reason: "connect timeout" });
      }
    }, this._connectTimeoutMs);
    ws.onopen = () => {
      clearTimeout(this._openTimer);
      const msg = { type: "subscribe", table: this.table, events: this._events() };
      if (this._filter) msg.filter = this._filter;
      if (this.lastSeq !== null && this.lastSeq !== undefined) msg.since = this.lastSeq;
      ws.send(JSON.stringify(msg));
      this._kick();
    };
    ws.onmessage = (ev) => {
      if (ws !== this._ws) return;
      this._kick();
      let msg;
      try {
        msg = JSON.parse(typeof ev.data === "string" ? ev.data : String(ev.data));
      } catch {
        return;
      }
      this._handle(msg, ws);
    };
    ws.onerror = () => {
      // a close event follows; reconnecting happens there
    };
    ws.onclose = (ev) => {
      if (ws !== this._ws) return;
      this._ws = null;
      clearTimeout(this._watchdog);
      clearTimeout(this._openTimer);
      if (this._closed) return;
      if (ev && ev.code === 1008) {
        // auth refused: a fresh app-user token may help, a bad service token never will
        if (this._c.auth._session && this._attempt < 3) {
          this._c.auth._refresh().then(() => this._scheduleReconnect({ message: ev.reason || "unauthorized", code: "UNAUTHORIZED", status: 401 }));
          return;
        }
        this._closed = true;
        this._setStatus("CHANNEL_ERROR", { message: ev.reason || "unauthorized", code: "UNAUTHORIZED", status: 401 });
        return;
      }
      this._scheduleReconnect({ message: (ev && ev.reason) || "connection closed", code: "DISCONNECTED", status: NO_HTTP });
    };
  }

  _handle(msg, ws) {
    switch (msg.type) {
      case "change": {
        if (this.lastSeq !== null && msg.seq <= this.lastSeq) return; // replay overlap
        this.lastSeq = msg.seq;
        const payload = {
          event: msg.event,
          table_id: msg.table_id,
          table: msg.table,
          record: this._flatten ? flattenRecord(msg.record) : msg.record,
          old_record: this._flatten ? flattenRecord(msg.old_record) : msg.old_record,
          seq: msg.seq,
        };
        // an event too large to send whole carries the records' ids and timestamps only
        if (msg.truncated) payload.truncated = true;
        this._emit(msg.event, payload);
        return;
      }
      case "subscribed":
        this.tableId = msg.table_id;
        // a server that tells its current seq lets a quiet channel resume without a gap
        if (this.lastSeq === null && typeof msg.seq === "number") this.lastSeq = msg.seq;
        this._attempt = 0;
        this._setStatus("SUBSCRIBED");
        return;
      case "error": {
        const error = { message: msg.error, code: msg.code, status: NO_HTTP };
        if (msg.code === "REPLAY_TRUNCATED") {
          // more retained events than one replay: continue from where it stopped
          if (msg.last_seq !== undefined && (this.lastSeq === null || msg.last_seq > this.lastSeq)) this.lastSeq = msg.last_seq;
          ws.send(JSON.stringify({ type: "subscribe", table: this.table, events: this._events(), filter: this._filter || undefined, since: this.lastSeq }));
          return;
        }
        if (this.status !== "SUBSCRIBED" || msg.code === "SUBSCRIPTION_ENDED") {
          // the subscription itself was refused (unknown table, no permission, bad filter),
          // or the server ended it (its filter's column was deleted or converted): no retry
          this._closed = true;
          this._setStatus("CHANNEL_ERROR", error);
          try {
            ws.close(1000, msg.code === "SUBSCRIPTION_ENDED" ? "subscription ended" : "subscription refused");
          } catch {
            // ignore
          }
          this._ws = null;
        }
        this._emit("ERROR", error);
        return;
      }
      default:
        return; // heartbeat, pong
    }
  }

  _kick() {
    clearTimeout(this._watchdog);
    const ws = this._ws;
    this._watchdog = setTimeout(() => {
      // no heartbeat for too long: the connection is dead even if the socket says otherwise
      if (ws === this._ws && ws) {
        try {
          ws.close(4001, "heartbeat timeout");
        } catch {
          // ignore
        }
        ws.onclose({ code: 4001, reason: "heartbeat timeout" });
      }
    }, this._heartbeatMs);
    if (this._watchdog.unref) this._watchdog.unref();
  }

  _scheduleReconnect(error) {
    if (this._closed) return;
    this._setStatus("RECONNECTING", error);
    const delay = Math.min(10000, 250 * 2 ** this._attempt) * (0.8 + Math.random() * 0.4);
    this._attempt++;
    clearTimeout(this._timer);
    this._timer = setTimeout(() => this._connect(), delay);
  }
}

// ------------------------------------------------------------------ storage

class Bucket {
  constructor(client, bucket) {
    this._c = client;
    this.bucket = bucket;
  }

  _url(kind, path) {
    return `${this._c._baseUrl}/storage/v1/object/${kind}${encodeURIComponent(this.bucket)}/${encodePath(path)}`;
  }

  /** Upload raw bytes (string, Blob, ArrayBuffer, typed array or stream). `upsert: true` replaces. */
  async upload(path, body, options = {}) {
    try {
      const type = options.contentType || (body && typeof body === "object" && body.type) || "application/octet-stream";
      const stream = typeof ReadableStream !== "undefined" && body instanceof ReadableStream;
      const r = await this._c._http.request(options.upsert ? "PUT" : "POST", this._url("", path), {
        body,
        raw: true,
        headers: { "Content-Type": type },
        keyed: !stream, // a stream cannot be sent twice: no retry
        retry: !stream,
        duplex: stream ? "half" : undefined,
      });
      return result(r.data, r.error, null, r.status);
    } catch (exc) {
      return fail(`client error: ${exc && exc.message}`, "CLIENT_ERROR", NO_HTTP);
    }
  }

  /** The object's bytes as a Blob. */
  async download(path) {
    const r = await this._c._http.request("GET", this._url("", path), { blob: true });
    return result(r.data, r.error, null, r.status);
  }

  /** `{publicUrl}` of an object of a public bucket (the bucket's id is looked up once). */
  async getPublicUrl(path) {
    let id = typeof this.bucket === "number" || isDigits(this.bucket) ? Number(this.bucket) : this._c._buckets.get(this.bucket);
    let status = NO_HTTP;
    if (id === undefined) {
      const r = await this._c._http.request("GET", `${this._c._baseUrl}/storage/v1/bucket/${encodeURIComponent(this.bucket)}`);
      if (r.error) return result(null, r.error, null, r.status);
      id = r.data.id;
      status = r.status;
      this._c._buckets.set(this.bucket, id);
    }
    return result({ publicUrl: `${this._c._baseUrl}/storage/v1/object/public/${id}/${encodePath(path)}` }, null, null, status);
  }

  /** `{signedUrl, expiresAt}`: a download URL valid for `expiresIn` seconds. */
  async createSignedUrl(path, expiresIn = 3600) {
    const r = await this._c._http.request("POST", this._url("sign/", path), { body: { expires_in: expiresIn }, safe: true });
    if (r.error) return result(null, r.error, null, r.status);
    return result({ signedUrl: r.data.signed_url, expiresAt: r.data.expires_at }, null, null, r.status);
  }

  /** Objects whose path starts with `prefix`. */
  async list(prefix = "", options = {}) {
    let qs = `prefix=${encodeURIComponent(prefix)}`;
    if (options.limit !== undefined) qs += `&limit=${options.limit}`;
    if (options.offset !== undefined) qs += `&offset=${options.offset}`;
    const r = await this._c._http.request("GET", `${this._c._baseUrl}/storage/v1/object/list/${encodeURIComponent(this.bucket)}?${qs}`);
    if (r.error) return result(null, r.error, null, r.status);
    return result(r.data.objects, null, r.data.objects.length, r.status);
  }

  /** Delete one path or several. */
  async remove(paths) {
    const list = Array.isArray(paths) ? paths : [paths];
    const out = [];
    let last = { error: null, status: NO_HTTP };
    for (const p of list) {
      const r = await this._c._http.request("DELETE", this._url("", p), { keyed: true });
      if (r.error) return result(out, r.error, out.length, r.status);
      out.push(r.data);
      last = r;
    }
    return result(out, null, out.length, last.status);
  }
}

class StorageApi {
  constructor(client) {
    this._c = client;
  }

  from(bucket) {
    return new Bucket(this._c, bucket);
  }

  async listBuckets() {
    const r = await this._c._http.request("GET", `${this._c._baseUrl}/storage/v1/bucket`);
    return result(r.data, r.error, r.data ? r.data.length : null, r.status);
  }

  async getBucket(name) {
    const r = await this._c._http.request("GET", `${this._c._baseUrl}/storage/v1/bucket/${encodeURIComponent(name)}`);
    return result(r.data, r.error, null, r.status);
  }

  /** Create a bucket (server tokens only); `public: true` serves its objects without a token. */
  async createBucket(name, options = {}) {
    const r = await this._c._http.request("POST", `${this._c._baseUrl}/storage/v1/bucket`, { body: { name, public: !!options.public }, keyed: true });
    if (r.data) this._c._buckets.set(r.data.name, r.data.id);
    return result(r.data, r.error, null, r.status);
  }

  async deleteBucket(name, options = {}) {
    const qs = options.force ? "?force=true" : "";
    const r = await this._c._http.request("DELETE", `${this._c._baseUrl}/storage/v1/bucket/${encodeURIComponent(name)}${qs}`, { keyed: true });
    this._c._buckets.delete(name);
    return result(r.data, r.error, null, r.status);
  }
}

// ------------------------------------------------------------------ client

class WdsClient {
  constructor(baseUrl, options = {}) {
    this._baseUrl = String(baseUrl || "").replace(/\/+$/, "");
    this._options = options;
    this._flatten = options.flatten !== false;
    this._tables = null; // Map name → id, loaded once from GET {rest}/tables
    this._tablesLoading = null;
    this._buckets = new Map();
    this.auth = new Auth(this, options);
    this._http = new Http(this._baseUrl, options, this.auth);
    this.storage = new StorageApi(this);
  }

  /** A query/write builder on a table (id or name). */
  from(table) {
    return new QueryBuilder(this, table);
  }

  /** A realtime channel on a table: `.on("INSERT", cb).subscribe()`. */
  channel(table, options) {
    return new Channel(this, table, options);
  }

  /** Table id (number) synchronously when known, else a promise of the id or an error result. */
  _tableId(table) {
    if (typeof table === "number") return table;
    if (isDigits(table)) return Number(table);
    const id = this._tables !== null ? this._tables.get(table) : undefined;
    if (id !== undefined) return id;
    return this._resolveTable(table);
  }

  async _resolveTable(table) {
    if (typeof table !== "string" || !table) return fail("a table is an id or a name", "VALIDATION_ERROR", NO_HTTP);
    // a miss reloads the list once (the table may be new); concurrent misses share the load
    if (!this._tablesLoading) {
      this._tablesLoading = this._http.request("GET", `${this._http.rest}/tables`).finally(() => {
        this._tablesLoading = null;
      });
    }
    const r = await this._tablesLoading;
    if (r.error) return result(null, r.error, null, r.status);
    if (r.data !== this._lastTables) {
      this._lastTables = r.data;
      this._tables = new Map(r.data.map((t) => [t.name, t.id]));
    }
    const id = this._tables.get(table);
    if (id !== undefined) return id;
    const lower = table.toLowerCase();
    for (const t of r.data) if (t.name.toLowerCase() === lower) return t.id;
    return fail(`table ${table} not found`, "NOT_FOUND", 404);
  }

  /** Forget resolved table names (after renaming or deleting tables). */
  clearTableCache() {
    this._tables = null;
  }

  async _tableCall(table, method, suffix, opts) {
    try {
      let id = this._tableId(table);
      if (typeof id !== "number") id = await id;
      if (typeof id !== "number") return id;
      return await this._http.request(method, `${this._http.rest}/tables/${id}${suffix}`, opts);
    } catch (exc) {
      return { ...fail(`client error: ${exc && exc.message}`, "CLIENT_ERROR", NO_HTTP), headers: null };
    }
  }

  /** Tables this credential can see: `[{id, name, icon, created_at, updated_at}]`. */
  async tables() {
    const r = await this._http.request("GET", `${this._http.rest}/tables`);
    if (r.data) this._tables = new Map(r.data.map((t) => [t.name, t.id]));
    return result(r.data, r.error, r.data ? r.data.length : null, r.status);
  }

  /** Re-run a record's pipeline as if `changedColumns` changed (mode edit) or all of it (create). */
  async run(table, recordId, options = {}) {
    const body = { mode: options.mode || "edit", changed_columns: options.changedColumns || [] };
    const r = await this._tableCall(table, "POST", `/records/${encodeURIComponent(recordId)}/run`, { body, keyed: true });
    if (r.error) return result(null, r.error, null, r.status);
    const data = this._flatten && options.flatten !== false ? { ...r.data, record: flattenRecord(r.data.record) } : r.data;
    return result(data, null, null, r.status);
  }

  /** Re-run exactly one computed column of one record → `{record_id, column, value}`. */
  async compute(table, recordId, column) {
    const r = await this._tableCall(table, "POST", `/records/${encodeURIComponent(recordId)}/compute/${encodeURIComponent(column)}`, { keyed: true });
    return result(r.data, r.error, null, r.status);
  }

  /** Start a bulk run over `recordIds` or `filters` (`{column: "op.value"}` or a list). */
  async runActions(table, options = {}) {
    const body = {};
    if (options.recordIds !== undefined) body.record_ids = options.recordIds;
    if (options.filters !== undefined) body.filters = options.filters;
    if (options.columnIds !== undefined) body.column_ids = options.columnIds;
    const r = await this._tableCall(table, "POST", "/run-actions", { body, keyed: true });
    return result(r.data, r.error, r.data ? r.data.total ?? null : null, r.status);
  }

  /** Progress of a bulk run. */
  async getRun(runId) {
    const r = await this._http.request("GET", `${this._http.rest}/runs/${encodeURIComponent(runId)}`);
    return result(r.data, r.error, null, r.status);
  }

  /** A read-only SQL query → `{rows, total, has_more, ...}` or `{count}`. `{count: true}`
   *  counts every match for `total`; without it `total` is known only on a last page. */
  async sql(query, options = {}) {
    const body = { query };
    if (options.count !== undefined) body.count = options.count;
    const r = await this._http.request("POST", `${this._http.rest}/sql`, { body, safe: true });
    const count = r.data ? r.data.total ?? r.data.count ?? null : null;
    return result(r.data, r.error, count, r.status);
  }

  /** The whole workspace in one call: tables, columns, access, agents. */
  async schema() {
    const r = await this._http.request("GET", `${this._http.rest}/schema`);
    return result(r.data, r.error, null, r.status);
  }

  /** Semantic search → `[{record, score}]` (records flattened by default). */
  async search(table, query, options = {}) {
    const body = { query };
    if (options.limit !== undefined) body.limit = options.limit;
    if (options.filters !== undefined) body.filters = options.filters;
    const r = await this._tableCall(table, "POST", "/search", { body, safe: true });
    if (r.error) return result(null, r.error, null, r.status);
    const flat = this._flatten && options.flatten !== false;
    const rows = (r.data.results || []).map((x) => (flat ? { ...x, record: flattenRecord(x.record) } : x));
    return result(rows, null, rows.length, r.status);
  }
}

// Unexpected answers (a body of the wrong shape from a proxy, a broken fetch polyfill)
// must not turn into rejections: every public async method resolves with an error instead.
function guard(cls, names) {
  for (const name of names) {
    const inner = cls.prototype[name];
    cls.prototype[name] = async function guarded(...args) {
      try {
        return await inner.apply(this, args);
      } catch (exc) {
        return fail(`client error: ${exc && exc.message}`, "CLIENT_ERROR", NO_HTTP);
      }
    };
  }
}

guard(Bucket, ["upload", "download", "getPublicUrl", "createSignedUrl", "list", "remove"]);
guard(StorageApi, ["listBuckets", "getBucket", "createBucket", "deleteBucket"]);
guard(WdsClient, ["tables", "run", "compute", "runActions", "getRun", "sql", "schema", "search"]);
guard(Auth, ["getSession", "setSession"]);

/**
 * A client for `baseUrl` (the service's base URL, e.g. `https://data.example.com`).
 *
 * Options: `token` (a rest_api token, for servers — never ship it to browsers),
 * `workspaceId` + `auth.signInWithPassword()` or `appUserSession` (browsers, app users),
 * `fetch`, `storage` ({getItem, setItem, removeItem}; default localStorage or memory),
 * `WebSocket`, `headers`, `timeout` (ms), `flatten` (default true).
 */
export function createClient(baseUrl, options = {}) {
  return new WdsClient(baseUrl, options);
}

export default createClient;
