// The hand-written types compile a realistic usage file with tsc --strict.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url));
const tsc = `${here}node_modules/typescript/bin/tsc`;

test("wds.d.ts types a usage file under tsc --noEmit --strict", (t) => {
  if (!existsSync(tsc)) return t.skip("typescript is not installed (npm install in sdk/test)");
  const r = spawnSync(process.execPath, [
    tsc, "--noEmit", "--strict", "--target", "es2022", "--module", "nodenext", "--moduleResolution", "nodenext",
    "--lib", "es2022,dom", "--skipLibCheck", "false", `${here}types/usage.ts`,
  ], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stdout + r.stderr);
});
