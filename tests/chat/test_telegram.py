"""The Telegram channel: a real Bot API Update in, ``sendMessage`` out (to the local fake)."""

from __future__ import annotations

import secrets
import time
from typing import Any

from tests.chat.fakes import FakeServices
from tests.chat.support import make_agent, post
from tests.conftest import ApiProcess, Workspace

BOT_TOKEN = "123456:ABC-fake-bot-token"


def _update(chat_id: int, text: str | None = None, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"message_id": secrets.randbelow(10_000), "date": int(time.time()),
                               "from": {"id": chat_id, "is_bot": False, "first_name": "Ada"},
                               "chat": {"id": chat_id, "type": "private", "first_name": "Ada"}}
    if text is not None:
        message["text"] = text
    return {"update_id": secrets.randbelow(10**9), "message": message, **extra}


def _telegram_bot(ws: Workspace, *, credential: bool = True) -> dict[str, Any]:
    if not credential:
        return make_agent(ws, [], channel="telegram")
    name = f"tg-{secrets.token_hex(3)}"
    r = ws.admin.post(f"/workspaces/{ws.id}/credentials", json={"name": name, "type": "bearer", "secret": BOT_TOKEN,
                                                                      "hosts": ["api.telegram.org"]})
    assert r.status_code == 201, r.text
    return make_agent(ws, [], channel="telegram", channel_config={"credential": name})


def _sent_to(fake: FakeServices, chat_id: int) -> list[dict[str, Any]]:
    return [m for m in fake.telegram if m["chat_id"] == chat_id]


def test_a_telegram_message_is_answered_with_send_message(cws: Workspace, ai_api: ApiProcess, fake: FakeServices) -> None:
    bot = _telegram_bot(cws)
    chat_id = 700_000 + secrets.randbelow(10_000)
    r = post(ai_api.base_url, bot["token"], _update(chat_id, "hello bot"), type="telegram")
    assert r.status_code == 200, r.text
    assert r.json()["ok"] is True and isinstance(r.json()["message_id"], int)
    sent = _sent_to(fake, chat_id)
    assert sent == [{"token": BOT_TOKEN, "chat_id": chat_id, "text": "You said: hello bot (history 0)"}]
    # the chat is the session: the second message sees the first exchange
    post(ai_api.base_url, bot["token"], _update(chat_id, "and again"), type="telegram")
    assert _sent_to(fake, chat_id)[-1]["text"] == "You said: and again (history 2)"


def test_updates_without_text_are_acknowledged_and_ignored(cws: Workspace, ai_api: ApiProcess, fake: FakeServices) -> None:
    bot = _telegram_bot(cws)
    chat_id = 800_000 + secrets.randbelow(10_000)
    for update in (_update(chat_id), {"update_id": 1, "edited_message": {"chat": {"id": chat_id}, "text": "x"}}):
        r = post(ai_api.base_url, bot["token"], update, type="telegram")
        assert r.status_code == 200 and r.json() == {"ok": True, "ignored": True}
    assert _sent_to(fake, chat_id) == []


def test_refusals_are_told_in_the_chat_and_acknowledged(cws: Workspace, ai_api: ApiProcess, fake: FakeServices) -> None:
    bot = _telegram_bot(cws)
    chat_id = 900_000 + secrets.randbelow(10_000)
    r = post(ai_api.base_url, bot["token"], _update(chat_id, "x" * 9000), type="telegram")
    assert r.status_code == 200
    assert "8,000" in _sent_to(fake, chat_id)[-1]["text"]
    r = post(ai_api.base_url, bot["token"], _update(chat_id, "FAIL"), type="telegram")
    assert r.status_code == 200 and _sent_to(fake, chat_id)[-1]["text"].startswith("Sorry")


def test_a_telegram_channel_without_credential_is_503(cws: Workspace, ai_api: ApiProcess) -> None:
    bot = _telegram_bot(cws, credential=False)
    r = post(ai_api.base_url, bot["token"], _update(1, "hi"), type="telegram")
    assert (r.status_code, r.json()["code"]) == (503, "NOT_CONFIGURED")


def test_telegram_token_errors(cws: Workspace, ai_api: ApiProcess) -> None:
    r = post(ai_api.base_url, "wds_chan_unknown", _update(1, "hi"), type="telegram")
    assert (r.status_code, r.json()["code"]) == (401, "UNAUTHORIZED")
    web = make_agent(cws, [])
    r = post(ai_api.base_url, web["token"], _update(1, "hi"), type="telegram")
    assert (r.status_code, r.json()["code"]) == (400, "CHANNEL_TYPE_MISMATCH")
