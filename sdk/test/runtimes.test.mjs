// The same module in Deno (imported from the served /sdk/<hashed file>) and Bun (from the
// file): query, batch insert, errors, realtime. The binaries come from the npm registry
// packages `deno` and `bun` (installed into sdk/test/node_modules by the pytest wrapper);
// each test is skipped with the reason when its binary is missing.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { URL_, freshToken } from "./helpers.mjs";

const here = fileURLToPath(new URL(".", import.meta.url));
const bin = (name) => process.env[`WDS_${name.toUpperCase()}`] || `${here}node_modules/.bin/${name}`;
const smoke = `${here}runtimes/smoke.mjs`;

function check(stdout, runtime) {
  const line = stdout.trim().split("\n").pop();
  const out = JSON.parse(line);
  assert.equal(out.runtime, runtime);
  assert.equal(out.inserted, 3);
  assert.deepEqual(out.query, [3, 2]);
  assert.equal(out.badCode, "UNKNOWN_COLUMN");
  assert.equal(out.deadCode, "NETWORK_ERROR");
  assert.deepEqual(out.realtime, [1, 2, 3]);
}

test("Deno imports the served hashed module and uses it", async (t) => {
  const deno = bin("deno");
  if (!existsSync(deno)) return t.skip(`no deno binary at ${deno} (npm install in sdk/test, or set WDS_DENO)`);
  const { latest } = await (await fetch(`${URL_}/sdk/`)).json();
  const host = new URL(URL_).host;
  const cache = mkdtempSync(join(tmpdir(), "wds-deno-"));
  try {
    const r = spawnSync(deno, ["run", "--no-config", "--no-prompt", "--allow-net", "--allow-env", `--allow-import=${host}`, smoke], {
      encoding: "utf8",
      timeout: 120000,
      env: { ...process.env, DENO_DIR: cache, NO_COLOR: "1", WDS_SDK_MODULE: `${URL_}/sdk/${latest}`, WDS_TOKEN: await freshToken() },
    });
    assert.equal(r.status, 0, r.stdout + r.stderr);
    check(r.stdout, "deno");
  } finally {
    rmSync(cache, { recursive: true, force: true });
  }
});

test("Bun imports the module file and uses it", async (t) => {
  const bun = bin("bun");
  if (!existsSync(bun)) return t.skip(`no bun binary at ${bun} (npm install in sdk/test, or set WDS_BUN)`);
  const r = spawnSync(bun, ["run", smoke], {
    encoding: "utf8",
    timeout: 120000,
    env: { ...process.env, NO_COLOR: "1", WDS_SDK_MODULE: fileURLToPath(new URL("../wds.js", import.meta.url)), WDS_TOKEN: await freshToken() },
  });
  assert.equal(r.status, 0, r.stdout + r.stderr);
  check(r.stdout, "bun");
});
