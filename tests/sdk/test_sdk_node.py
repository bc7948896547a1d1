"""The JavaScript SDK's own tests (``sdk/test/*.test.mjs``, ``node --test``) against the
session's API process, one pytest case per test file.

Each file gets ``WDS_URL`` (the API), ``WDS_TOKEN`` (the builder token of a fresh
enterprise-plan workspace per file: no workspace rate limit, so the request-heavy files
can run), ``WDS_WORKSPACE_ID`` and ``WDS_ADMIN_KEY``. Optional tools (playwright-core, typescript,
deno, bun; ``sdk/test/package.json``) are installed with npm into ``sdk/test/node_modules``
once and reused while ``package.json`` is unchanged; without them (offline, no Chromium)
the node tests that need them skip with their reason, which is reported here as a pytest
skip (whole file) or a warning (some tests).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Services, Workspace

ROOT = Path(__file__).resolve().parents[2]
SDK_TEST = ROOT / "sdk" / "test"
FILES = sorted(p.name for p in SDK_TEST.glob("*.test.mjs"))
NODE = shutil.which("node")
NPM = shutil.which("npm")
_SKIP = re.compile(r"^\s*ok \d+ - (.+?) # SKIP (.*)$", re.MULTILINE)


def _install_tools() -> str | None:
    """npm install the optional test tools once per package.json; the failure, if any."""
    manifest = SDK_TEST / "package.json"
    stamp = SDK_TEST / "node_modules" / ".wds-installed"
    digest = hashlib.sha256(manifest.read_bytes()).hexdigest()
    if stamp.is_file() and stamp.read_text() == digest:
        return None
    if NPM is None:
        return "npm is not installed"
    r = subprocess.run(
        [NPM, "install", "--no-package-lock", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=SDK_TEST, check=False, capture_output=True, text=True, timeout=600,
    )
    if r.returncode != 0:
        return f"npm install failed: {(r.stderr or r.stdout)[-500:]}"
    stamp.write_text(digest)
    return None


@pytest.fixture
def node_env(make_workspace: Callable[..., Workspace], base_url: str, services: Services) -> dict[str, str]:
    """The environment of one node test file: a workspace of its own (and so a per-token
    request budget of its own)."""
    if NODE is None:
        pytest.skip("node is not installed: the JavaScript SDK tests need Node 18+")
    problem = _install_tools()
    if problem:
        warnings.warn(f"SDK test tools not installed, dependent tests will skip: {problem}", stacklevel=1)
    ws = make_workspace(plan="enterprise")
    env = dict(os.environ)
    env.update({
        "WDS_URL": base_url,
        "WDS_TOKEN": ws.builder_token,
        "WDS_WORKSPACE_ID": str(ws.id),
        "WDS_ADMIN_KEY": services.admin_key,
        "NO_COLOR": "1",
    })
    return env


@functools.cache
def _node_flags() -> list[str]:
    # Node 20 has a WebSocket only behind a flag; 22+ has it by default
    r = subprocess.run([NODE or "node", "-e", "process.stdout.write(typeof WebSocket)"],
                       check=False, capture_output=True, text=True)
    return [] if r.stdout == "function" else ["--experimental-websocket"]


@pytest.mark.slow
@pytest.mark.parametrize("name", FILES)
def test_sdk_node_file(name: str, node_env: dict[str, str], record_property: Callable[[str, object], None]) -> None:
    r = subprocess.run(
        [NODE or "node", *_node_flags(), "--test", "--test-reporter=tap", str(SDK_TEST / name)],
        check=False, cwd=ROOT, env=node_env, capture_output=True, text=True, timeout=900,
    )
    out = r.stdout + r.stderr
    for line in out.splitlines():
        if "SDK_OVERHEAD" in line:
            report = json.loads(line.split("SDK_OVERHEAD", 1)[1])
            record_property("sdk_overhead", report)
            print(f"SDK overhead per call over bare fetch: {report['overhead_median_of_pairs_ms']} ms ({report})")
            break
    assert r.returncode == 0, out[-12000:]
    skipped = _SKIP.findall(out)
    total = len(re.findall(r"^\s*(?:not )?ok \d+ - ", out, re.MULTILINE))
    if skipped and len(skipped) == total:
        pytest.skip("; ".join(sorted({reason for _, reason in skipped})))
    for test_name, reason in skipped:
        warnings.warn(f"sdk/test/{name}: {test_name!r} skipped: {reason}", stacklevel=1)
