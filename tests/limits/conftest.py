"""Fixtures for the limits tests: direct database access (to seed quota counters — test
setup, not mocking), extra API processes, and a real Redis server when one is installed."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone

import httpx
import psycopg
import pytest

from tests.conftest import ApiProcess, Services, start_api
from wds.runtime import free_port, port_open

REDIS_APT = "apt-get install -y redis-server"


def this_month() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m")


def next_month() -> tuple[str, str]:
    """(month key, ISO date of its first day) of the calendar month after this one."""
    now = datetime.now(timezone.utc)
    year, month = (now.year + 1, 1) if now.month == 12 else (now.year, now.month + 1)
    return f"{year:04d}-{month:02d}", f"{year:04d}-{month:02d}-01T00:00:00+00:00"


@pytest.fixture(scope="session")
def db(services: Services, api: ApiProcess) -> Iterator[psycopg.Connection]:
    """Autocommit connection to the test database (migrated: the session API has started)."""
    with psycopg.connect(services.pg.dsn, autocommit=True) as conn:
        yield conn


def seed_counter(db: psycopg.Connection, workspace_id: int, kind: str, used: int, month: str | None = None) -> None:
    """Set a workspace's monthly counter (as if ``used`` units had been spent)."""
    db.execute(
        "INSERT INTO wds.quota_counters (workspace_id, month, kind, used) VALUES (%s, %s, %s, %s)"
        " ON CONFLICT (workspace_id, month, kind) DO UPDATE SET used = excluded.used",
        (workspace_id, month or this_month(), kind, used),
    )


def counter(db: psycopg.Connection, workspace_id: int, kind: str, month: str | None = None) -> int:
    row = db.execute(
        "SELECT used FROM wds.quota_counters WHERE workspace_id = %s AND month = %s AND kind = %s",
        (workspace_id, month or this_month(), kind),
    ).fetchone()
    return int(row[0]) if row else 0


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


@pytest.fixture
def extra_api(services: Services) -> Iterator[Callable[..., ApiProcess]]:
    """Start more API processes on the same database (stopped after the test)."""
    started: list[ApiProcess] = []

    def start(**env: str) -> ApiProcess:
        proc = start_api(services, name=f"api-extra{len(started)}", **env)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


@pytest.fixture(scope="session")
def redis_url(services: Services) -> Iterator[str]:
    """A real Redis server (Debian's ``redis-server``), or a visible skip without one."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip(f"redis-server is not installed (install it with: {REDIS_APT})")
    port = free_port()
    workdir = services.tmp / "redis"
    workdir.mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(workdir)],
        stdout=(workdir / "redis.log").open("wb"), stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 10
        while not port_open("127.0.0.1", port):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"redis-server did not start: {(workdir / 'redis.log').read_text()[-2000:]}")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def rest_client(base_url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=f"{base_url}/functions/v1/rest-api",
                        headers={"Authorization": f"Bearer {token}"}, timeout=60)
