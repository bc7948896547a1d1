// The SDK adds at most 0.2 ms per call over a bare fetch (sdk/bench/overhead.mjs, same
// endpoint, same run). The figure is printed for the report.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { URL_, freshToken } from "./helpers.mjs";

test("the SDK adds at most 0.2 ms per call over a bare fetch", async (t) => {
  const script = fileURLToPath(new URL("../bench/overhead.mjs", import.meta.url));
  // ~1,400 requests: a token of its own (per-token minute budget)
  const r = spawnSync(process.execPath, [script, "--json", "--n", "600"], {
    encoding: "utf8",
    timeout: 180000,
    env: { ...process.env, WDS_URL: URL_, WDS_TOKEN: await freshToken() },
  });
  assert.equal(r.status, 0, r.stdout + r.stderr);
  const report = JSON.parse(r.stdout.trim().split("\n").pop());
  t.diagnostic(`overhead ${JSON.stringify(report)}`);
  console.log(`SDK_OVERHEAD ${JSON.stringify(report)}`);
  assert.ok(report.overhead_median_of_pairs_ms <= 0.2, JSON.stringify(report));
});
