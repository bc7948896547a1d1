"""Fixtures for pipelines that reach outside: local receiver servers, a second API process
under production settings (SSRF guard on, an AI provider configured, its own task queue),
and helpers for credentials and waiting on runs."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import ApiProcess, Services, Workspace, start_api
from tests.outside.servers import ServerThread, chat_server, echo_server

AI_KEY = "sk-test-" + secrets.token_hex(8)


@pytest.fixture(scope="session")
def echo() -> Iterator[ServerThread]:
    server = echo_server()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def chat() -> Iterator[ServerThread]:
    server = chat_server()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def prod_api(services: Services, chat: ServerThread) -> Iterator[ApiProcess]:
    """``wds serve``-like settings: no dev mode, only ``localhost`` allow-listed."""
    proc = start_api(
        services, name="api-prod", WDS_DEV_MODE="false", WDS_TASK_QUEUE=f"wds-prod-{secrets.token_hex(4)}",
        WDS_AI_BASE_URL=f"{chat.url}/v1", WDS_AI_API_KEY=AI_KEY, WDS_HTTP_ALLOWED_HOSTS="localhost",
    )
    yield proc
    proc.stop()


@pytest.fixture
def prod(ws: Workspace, prod_api: ApiProcess) -> Iterator[httpx.Client]:
    """The workspace's builder client on the production-settings API process."""
    with httpx.Client(base_url=f"{prod_api.base_url}/functions/v1/rest-api",
                      headers={"Authorization": f"Bearer {ws.builder_token}"}, timeout=60) as client:
        yield client


def add_credential(ws: Workspace, name: str, type: str, secret: str, header_name: str | None = None,
                   hosts: list[str] | None = None) -> dict[str, Any]:
    """A credential bound to ``hosts`` (default: the local receivers' ``127.0.0.1``)."""
    body: dict[str, Any] = {"name": name, "type": type, "secret": secret, "hosts": hosts or ["127.0.0.1"]}
    if header_name is not None:
        body["header_name"] = header_name
    r = ws.admin.post(f"/workspaces/{ws.id}/credentials", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def wait_run(client: httpx.Client, run_id: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        r = client.get(f"/runs/{run_id}")
        if r.status_code == 200:
            body = r.json()
            if body["status"] == "completed":
                return body
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not complete: {body}")
