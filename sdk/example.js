// The example page's script (served at /sdk/example.js; the page's CSP allows no inline code).
import { createClient } from "./wds.js";

const base = location.origin;
const $ = (id) => document.getElementById(id);
let client = null;

function status(text, isError = false) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "muted";
}

function el(tag, text) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text; // never innerHTML: values are user data
  return node;
}

function cell(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

async function showTables() {
  $("tables").replaceChildren();
  $("records").replaceChildren();
  status("loading tables…");
  const { data, error } = await client.tables();
  if (error) return status(`${error.code}: ${error.message}`, true);
  status(data.length ? `${data.length} table(s) — pick one` : "no tables visible to this credential");
  for (const t of data) {
    const b = el("button", t.name);
    b.type = "button";
    b.dataset.tableId = String(t.id);
    b.addEventListener("click", () => showRecords(t));
    $("tables").append(b);
  }
}

async function showRecords(table) {
  status(`loading ${table.name}…`);
  const { data, error, count } = await client.from(table.id).select("*", { count: "exact" }).order("id").limit(50);
  if (error) return status(`${error.code}: ${error.message}`, true);
  status(`${table.name}: showing ${data.length} of ${count} record(s)`);
  const columns = [...new Set(data.flatMap((row) => Object.keys(row)))];
  const head = el("tr");
  for (const c of columns) head.append(el("th", c));
  const rows = data.map((row) => {
    const tr = el("tr");
    for (const c of columns) tr.append(el("td", cell(row[c])));
    return tr;
  });
  const grid = el("table");
  grid.id = "records-table";
  grid.append(el("thead"), el("tbody"));
  grid.tHead.append(head);
  grid.tBodies[0].append(...rows);
  $("records").replaceChildren(grid);
}

$("token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  // the token lives in this page's memory only: no persisted session
  client = createClient(base, { token: $("token").value.trim(), persistSession: false });
  showTables();
});

$("user-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  client = createClient(base, { workspaceId: Number($("workspace").value) });
  status("signing in…");
  const { data, error } = await client.auth.signInWithPassword({ email: $("email").value, password: $("password").value });
  if (error) return status(`${error.code}: ${error.message}`, true);
  status(`signed in as ${data.user.email}`);
  showTables();
});

$("signout").addEventListener("click", async () => {
  if (!client) return;
  await client.auth.signOut();
  $("tables").replaceChildren();
  $("records").replaceChildren();
  status("signed out");
});
