"""Helpers of the hostile-tenant probes (issue #22): a bystander that polls ``/healthz``
and another workspace's record while an attack runs, and the API process's memory and CPU
(:mod:`bench.hostile`, shared with the bench)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.hostile import cpu_seconds, rss_bytes

__all__ = ["Bystander", "bystander_record", "cpu_seconds", "rss_bytes"]


@dataclass
class Bystander:
    """Polls ``GET /healthz`` and a record of another workspace every ``every_s`` from a
    thread, keeping every status and latency, until stopped."""

    base_url: str
    token: str
    record_path: str
    every_s: float = 0.05
    statuses: list[tuple[str, int]] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=60) as client:
            while not self._stop.is_set():
                for name, url, headers in (
                    ("healthz", f"{self.base_url}/healthz", {}),
                    ("record", f"{self.base_url}/functions/v1/rest-api{self.record_path}",
                     {"Authorization": f"Bearer {self.token}"}),
                ):
                    started = time.perf_counter()
                    try:
                        status = client.get(url, headers=headers).status_code
                    except httpx.HTTPError:
                        status = 0
                    self.statuses.append((name, status))
                    if name == "record":
                        self.latencies.append(time.perf_counter() - started)
                self._stop.wait(self.every_s)

    def __enter__(self) -> Bystander:
        self.wait_healthy()
        self._thread.start()
        return self

    def wait_healthy(self, timeout_s: float = 30.0) -> None:
        """Start from a ready service: what an earlier test left running (a backlog of
        workflows, a restarted worker) must not count as this attack's harm.

        Raises:
            AssertionError: ``/healthz`` did not answer 200 within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        last = ""
        with httpx.Client(timeout=10) as client:
            while time.monotonic() < deadline:
                try:
                    r = client.get(f"{self.base_url}/healthz")
                except httpx.HTTPError as exc:
                    last = type(exc).__name__
                else:
                    if r.status_code == 200:
                        return
                    last = f"{r.status_code} {r.text[:200]}"
                time.sleep(0.1)
        raise AssertionError(f"the service was not ready before the attack: {last}")

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=120)

    def failures(self) -> list[tuple[str, int]]:
        return [(name, status) for name, status in self.statuses if status != 200]


def bystander_record(make_workspace: Any) -> tuple[Any, str]:
    """Another workspace with one record: (workspace, path of the record)."""
    other = make_workspace()
    t = other.create_table("Quiet", [{"name": "Note", "type": "text"}])
    r = other.api.post(f"/tables/{t['id']}/records", json={"fields": {"Note": "still here"}})
    assert r.status_code == 201, r.text
    return other, f"/tables/{t['id']}/records/{r.json()['id']}"
