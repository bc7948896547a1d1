"""Fixtures and helpers shared by the chat and semantic-search tests.

A second API process points at the local fake provider (:mod:`tests.chat.fakes`) for
chat completions, embeddings (``WDS_EMBEDDINGS=openai``) and the Telegram Bot API, with
its own task queue. Agents and channels, with their settings (agent ``config``, channel
``enabled`` and ``config``), are set up through the REST API like a builder would.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import psycopg
import pytest

from tests.chat.fakes import FakeServices
from tests.conftest import ApiProcess, Services, Workspace, start_api

WEBHOOK = "/functions/v1/agent-webhook"
SESSION_LABEL = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")


@pytest.fixture(scope="session")
def fake() -> Iterator[FakeServices]:
    server = FakeServices().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def ai_api(services: Services, fake: FakeServices) -> Iterator[ApiProcess]:
    proc = start_api(
        services, name="api-chat", WDS_AI_BASE_URL=fake.url, WDS_AI_API_KEY="sk-fake",
        WDS_AI_MODEL="fake-model", WDS_EMBEDDINGS="openai", WDS_EMBEDDINGS_MODEL="fake-embed",
        WDS_TELEGRAM_API_BASE=fake.url, WDS_TASK_QUEUE=f"wds-chat-{secrets.token_hex(4)}",
    )
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def ai_admin(ai_api: ApiProcess, services: Services) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{ai_api.base_url}/functions/v1/admin",
                      headers={"Authorization": f"Bearer {services.admin_key}"}, timeout=60) as client:
        yield client


@pytest.fixture(scope="session")
def db(services: Services) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(services.pg.dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def cws(ai_admin: httpx.Client, ai_api: ApiProcess) -> Iterator[Workspace]:
    """A fresh pro workspace whose clients talk to the AI-enabled API process."""
    r = ai_admin.post("/workspaces", json={"name": f"chat-{secrets.token_hex(4)}", "plan": "pro"})
    assert r.status_code == 201, r.text
    ws_id = r.json()["id"]
    t = ai_admin.post(f"/workspaces/{ws_id}/tokens", json={"type": "vibe_mcp", "name": "builder"})
    assert t.status_code == 201, t.text
    ws = Workspace(ws_id, ai_api.base_url, ai_admin, t.json()["token"])
    yield ws
    ws.close()


def make_agent(ws: Workspace, table_ids: list[int], *, config: dict[str, Any] | None = None,
               instructions: str = "Be brief.", channel: str = "web",
               channel_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """An agent over ``table_ids`` with one channel; returns ``{agent, channel, token}``."""
    body: dict[str, Any] = {"name": f"agent-{secrets.token_hex(3)}", "instructions": instructions,
                            "table_ids": table_ids}
    if config is not None:
        body["config"] = config
    r = ws.api.post("/agents", json=body)
    assert r.status_code == 201, r.text
    agent = r.json()
    c = ws.api.post(f"/agents/{agent['id']}/channels", json={"type": channel, "config": channel_config or {}})
    assert c.status_code == 201, c.text
    return {"agent": agent, "channel": c.json(), "token": c.json()["token"]}


def patch_channel(ws: Workspace, bot: dict[str, Any], **body: Any) -> dict[str, Any]:
    """``PATCH`` the channel of :func:`make_agent`'s ``bot`` (``enabled``, ``config``)."""
    r = ws.api.patch(f"/agents/{bot['agent']['id']}/channels/{bot['channel']['id']}", json=body)
    assert r.status_code == 200, r.text
    return r.json()


# Web sessions are issued by the server (api/doors/chat/guard.py). Tests name their sessions
# with labels ("s-1"): the first message of a label starts a new session, and later ones
# send the issued id and key. ``raw=True`` sends the body as it is.
_SESSIONS: dict[tuple[str | None, str], tuple[str, str]] = {}


def session_of(token: str, label: str) -> str:
    """The server-issued id of the session a test calls ``label``."""
    return _SESSIONS[(token, label)][0]


def _bind(token: str | None, body: Any) -> tuple[Any, str | None]:
    if not isinstance(body, dict) or not isinstance(body.get("session_id"), str) or "session_key" in body:
        return body, None
    label = body["session_id"]
    if not SESSION_LABEL.match(label):
        return body, None  # a malformed id: sent as is (the tests of the 400)
    found = _SESSIONS.get((token, label))
    if found is None:
        return {k: v for k, v in body.items() if k != "session_id"}, label
    return {**body, "session_id": found[0], "session_key": found[1]}, None


def _remember(token: str | None, label: str | None, resp: httpx.Response) -> None:
    if label is not None and resp.status_code == 200 and "x-chat-session-key" in resp.headers:
        _SESSIONS[(token, label)] = (resp.headers["x-chat-session-id"], resp.headers["x-chat-session-key"])


def post(base_url: str, token: str | None, body: Any, *, type: str = "web",
         headers: dict[str, str] | None = None, raw: bool = False) -> httpx.Response:
    params = {"type": type}
    if token is not None:
        params["token"] = token
    label = None
    if type == "web" and not raw:
        body, label = _bind(token, body)
    resp = httpx.post(f"{base_url}{WEBHOOK}", params=params, json=body, headers=headers or {}, timeout=60)
    _remember(token, label, resp)
    return resp


def parse_sse(text: str) -> list[tuple[str, Any]]:
    """``(event, data)`` pairs of a server-sent-event body (pings and comments skipped)."""
    out: list[tuple[str, Any]] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, data = "message", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
        if data:
            out.append((name, orjson.loads("\n".join(data))))
    return out


def stream(base_url: str, token: str, body: dict[str, Any]) -> list[tuple[str, Any]]:
    body, label = _bind(token, body)
    with httpx.stream("POST", f"{base_url}{WEBHOOK}", params={"type": "web", "token": token},
                      json={**body, "stream": True}, timeout=60) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        _remember(token, label, resp)
        return parse_sse(resp.read().decode())
