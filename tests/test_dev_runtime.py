"""``wds dev`` (the README's run command after its install step), as a user runs it.

It starts embedded PostgreSQL, the Temporal dev server, a worker and the API in the
foreground; ``/healthz`` turns 200; Ctrl-C stops everything, even when pressed twice
(PostgreSQL and Temporal run in their own sessions: a cut-short shutdown would leave them
holding the ports the next start needs); and a second start reuses the data, so the
builder token printed by the first start still works.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from wds.runtime import free_port, port_open, wait_healthy

ROOT = Path(__file__).resolve().parent.parent
TOKEN = re.compile(r"Builder token\s+(\S+)")


def _start(data_dir: Path, ports: dict[str, int], log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WDS_")}
    env["COLUMNS"] = "200"  # the banner's token on one line
    return subprocess.Popen(
        [sys.executable, "-m", "wds.cli", "dev", "--data-dir", str(data_dir), "--port", str(ports["api"]),
         "--pg-port", str(ports["pg"]), "--temporal-port", str(ports["temporal"]), "--ui-port", str(ports["ui"])],
        cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )


def _wait_healthy(proc: subprocess.Popen[bytes], base_url: str, log: Path) -> None:
    try:
        wait_healthy(base_url, [proc], timeout=180)
    except RuntimeError as exc:
        raise AssertionError(f"{exc}:\n{log.read_text()[-3000:]}") from None


def _banner_token(log: Path) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = TOKEN.search(log.read_text())
        if found:
            return found.group(1)
        time.sleep(0.2)
    raise AssertionError(f"no builder token in the banner:\n{log.read_text()[-3000:]}")


def _interrupt_twice(proc: subprocess.Popen[bytes], log: Path) -> None:
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)  # the impatient second Ctrl-C
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"wds dev did not stop:\n{log.read_text()[-3000:]}") from None


def test_dev_starts_stops_on_ctrl_c_and_restarts_on_its_data(tmp_path: Path) -> None:
    ports = {name: free_port() for name in ("api", "pg", "temporal", "ui")}
    base_url = f"http://127.0.0.1:{ports['api']}"
    data_dir = tmp_path / "wds"
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"

    proc = _start(data_dir, ports, first_log)
    try:
        _wait_healthy(proc, base_url, first_log)
        token = _banner_token(first_log)
        r = httpx.post(f"{base_url}/functions/v1/rest-api/tables", headers={"Authorization": f"Bearer {token}"},
                       json={"name": "Kept", "columns": [{"name": "Name", "type": "text"}]}, timeout=30)
        assert r.status_code == 201, r.text
    finally:
        _interrupt_twice(proc, first_log)
    for name in ("api", "pg", "temporal"):
        assert not port_open("127.0.0.1", ports[name]), f"{name} still listening after Ctrl-C"

    proc = _start(data_dir, ports, second_log)
    try:
        _wait_healthy(proc, base_url, second_log)
        r = httpx.get(f"{base_url}/functions/v1/rest-api/tables", headers={"Authorization": f"Bearer {token}"},
                      timeout=30)
        assert r.status_code == 200, r.text
        assert [t["name"] for t in r.json()] == ["Kept"]
    finally:
        _interrupt_twice(proc, second_log)
    for name in ("api", "pg", "temporal"):
        assert not port_open("127.0.0.1", ports[name]), f"{name} still listening after the second Ctrl-C"
