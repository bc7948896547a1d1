"""The web chat page ``/chat/<token>`` in headless Chromium (Debian ``chromium`` driven by
``playwright-core`` from npm, installed into ``tests/chat/browser/node_modules`` once per
``package.json``): a phone-sized screen, a streamed reply seen while it streams, markup
kept as text, the session kept across a reload. Skips, saying why, without node, npm
or ``/usr/bin/chromium`` (CI: ``apt-get install -y chromium nodejs npm``)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.chat.support import make_agent, patch_channel
from tests.conftest import ApiProcess, Workspace

BROWSER = Path(__file__).resolve().parent / "browser"
CHROMIUM = os.environ.get("WDS_CHROMIUM", "/usr/bin/chromium")


def _tools() -> str | None:
    """Install playwright-core once per package.json; the reason to skip, if any."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        return "node/npm are not installed (apt-get install -y nodejs npm)"
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install -y chromium)"
    stamp = BROWSER / "node_modules" / ".wds-installed"
    digest = hashlib.sha256((BROWSER / "package.json").read_bytes()).hexdigest()
    if stamp.is_file() and stamp.read_text() == digest:
        return None
    r = subprocess.run([npm, "install", "--no-package-lock", "--no-audit", "--no-fund", "--loglevel=error"],
                       cwd=BROWSER, capture_output=True, text=True, timeout=600, check=False)
    if r.returncode != 0:
        return f"npm install playwright-core failed: {(r.stderr or r.stdout)[-300:]}"
    stamp.write_text(digest)
    return None


def test_the_chat_page_streams_replies_on_a_phone_screen(cws: Workspace, ai_api: ApiProcess, tmp_path: Path) -> None:
    reason = _tools()
    if reason:
        pytest.skip(reason)
    bot = make_agent(cws, [])
    shot = tmp_path / "chat.png"
    r = subprocess.run(["node", "chat_page.mjs"], cwd=BROWSER, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "CHAT_URL": f"{ai_api.base_url}/chat/{bot['token']}", "SHOT": str(shot),
                            "CHROMIUM": CHROMIUM}, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["title"] == bot["agent"]["name"]
    assert report["partial"].startswith("t0") and len(report["partial"]) < len(report["streamed"])
    assert report["streamed"].strip().endswith("t24")
    assert report["echo"] == "You said: hi <b>bold</b> <img src=x onerror=alert(1)> (history 2)"
    assert report["injected"] == 0
    assert report["session"] and report["afterReload"] == "You said: again (history 4)"
    assert report["overflow"] is False and report["viewportMeta"] is True
    assert report["errors"] == []
    assert shot.stat().st_size > 1000


def test_the_chat_page_of_an_unknown_or_disabled_channel_is_404(cws: Workspace, ai_api: ApiProcess) -> None:
    assert httpx.get(f"{ai_api.base_url}/chat/wds_chan_nope").status_code == 404
    bot = make_agent(cws, [])
    page = httpx.get(f"{ai_api.base_url}/chat/{bot['token']}")
    assert page.status_code == 200 and "script-src 'nonce-" in page.headers["content-security-policy"]
    patch_channel(cws, bot, enabled=False)
    assert httpx.get(f"{ai_api.base_url}/chat/{bot['token']}").status_code == 404


def test_the_agent_name_is_escaped_in_the_page(cws: Workspace, ai_api: ApiProcess) -> None:
    bot = make_agent(cws, [])
    r = cws.api.patch(f"/agents/{bot['agent']['id']}", json={"name": "<script>alert(1)</script>"})
    assert r.status_code == 200, r.text
    page = httpx.get(f"{ai_api.base_url}/chat/{bot['token']}").text
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
