// The served module in headless Chromium: imported from /sdk/<hashed file>, running a
// query; and the example page at /sdk/example driven like a user would.
// Needs playwright-core (installed into sdk/test/node_modules by the pytest wrapper) and a
// Chromium binary (WDS_CHROMIUM, default /usr/bin/chromium); skipped with the reason otherwise.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { URL_, TOKEN, createTable, api } from "./helpers.mjs";

const CHROMIUM = process.env.WDS_CHROMIUM || "/usr/bin/chromium";
const FLAGS = [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
];
let browser = null;
let skipReason = "";
let table;

before(async () => {
  let chromium;
  try {
    ({ chromium } = await import("playwright-core"));
  } catch {
    skipReason = "playwright-core is not installed (npm install in sdk/test)";
    return;
  }
  if (!existsSync(CHROMIUM)) {
    skipReason = `no Chromium at ${CHROMIUM} (apt-get install -y chromium, or set WDS_CHROMIUM)`;
    return;
  }
  try {
    browser = await chromium.launch({ executablePath: CHROMIUM, args: FLAGS, timeout: 60000 });
  } catch (exc) {
    skipReason = `Chromium did not start: ${exc.message.split("\n")[0]}`;
    return;
  }
  table = await createTable("Browser", [{ name: "Name", type: "text" }, { name: "N", type: "number" }]);
  await api("POST", `/tables/${table.id}/records/batch`, { rows: [{ Name: "a", N: 1 }, { Name: "b", N: 2 }, { Name: "c", N: 3 }] });
});

after(async () => {
  if (browser) await browser.close();
});

test("the hashed module imported from /sdk/ runs a query in Chromium", async (t) => {
  if (!browser) return t.skip(skipReason);
  const index = await (await fetch(`${URL_}/sdk/`)).json();
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  try {
    // same origin as the API (CORS for the REST door is the deployment's business)
    await page.goto(`${URL_}/sdk/`);
    const out = await page.evaluate(
      async ({ file, base, token, tableId }) => {
        const { createClient, VERSION } = await import(`/sdk/${file}`);
        const client = createClient(base, { token, persistSession: false });
        const r = await client.from(tableId).select("Name,N", { count: "exact" }).gt("N", 1).order("N", { ascending: false });
        const bad = await client.from(tableId).select().eq("Nope", 1);
        return { version: VERSION, data: r.data, count: r.count, error: r.error, badCode: bad.error && bad.error.code };
      },
      { file: index.latest, base: URL_, token: TOKEN, tableId: table.id },
    );
    assert.equal(out.error, null);
    assert.equal(out.version, index.version);
    assert.deepEqual(out.data.map((r) => [r.Name, r.N]), [["c", 3], ["b", 2]]);
    assert.equal(out.count, 2);
    assert.equal(out.badCode, "UNKNOWN_COLUMN");
    assert.deepEqual(errors, []);
  } finally {
    await page.close();
  }
});

test("the example page lists tables and records for a token typed into its form", async (t) => {
  if (!browser) return t.skip(skipReason);
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  try {
    await page.goto(`${URL_}/sdk/example`);
    await page.fill("#token", TOKEN);
    await page.click("#token-form button[type=submit]");
    const button = page.locator(`#tables button[data-table-id="${table.id}"]`);
    await button.waitFor({ timeout: 15000 });
    await button.click();
    await page.locator("#records-table tbody tr").nth(2).waitFor({ timeout: 15000 });
    const cells = await page.locator("#records-table tbody tr").evaluateAll((rows) => rows.map((r) => r.textContent));
    assert.equal(cells.length, 3);
    assert.match(await page.textContent("#status"), /3 of 3/);
    // the token never lands in storage or in the page's URL
    const stored = await page.evaluate(() => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }) + location.href);
    assert.ok(!stored.includes(TOKEN));
    assert.deepEqual(errors, []);
  } finally {
    await page.close();
  }
});
