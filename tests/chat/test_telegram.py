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


def tg_post(api: ApiProcess, fake: FakeServices, bot: dict[str, Any], update: Any,
            secret: str | None = "registered") -> Any:
    """Deliver an update as Telegram does: with the secret registered by setWebhook."""
    if secret == "registered":
        secret = fake.webhook_secret(bot["token"])
    headers = {"X-Telegram-Bot-Api-Secret-Token": secret} if secret is not None else {}
    return post(api.base_url, bot["token"], update, type="telegram", headers=headers)


def _sent_to(fake: FakeServices, chat_id: int) -> list[dict[str, Any]]:
    return [m for m in fake.telegram if m["chat_id"] == chat_id]


def test_a_telegram_message_is_answered_with_send_message(cws: Workspace, ai_api: ApiProcess, fake: FakeServices) -> None:
    bot = _telegram_bot(cws)
    chat_id = 700_000 + secrets.randbelow(10_000)
    r = tg_post(ai_api, fake, bot, _update(chat_id, "hello bot"))
    assert r.status_code == 200, r.text
    assert r.json()["ok"] is True and isinstance(r.json()["message_id"], int)
    sent = _sent_to(fake, chat_id)
    assert sent == [{"token": BOT_TOKEN, "chat_id": chat_id, "text": "You said: hello bot (history 0)"}]
    # the chat is the session: the second message sees the first exchange
    tg_post(ai_api, fake, bot, _update(chat_id, "and again"))
    assert _sent_to(fake, chat_id)[-1]["text"] == "You said: and again (history 2)"


def test_updates_without_text_are_acknowledged_and_ignored(cws: Workspace, ai_api: ApiProcess, fake: FakeServices) -> None:
    bot = _telegram_bot(cws)
    chat_id = 800_000 + secrets.randbelow(10_000)
    for update in (_update(chat_id), {"update_id": 1, "edited_message": {"chat": {"id": chat_id}, "text": "x"}}):
        r = tg_post(ai_api, fake, bot, update)
        assert r.status_code == 200 and r.json() == {"ok": True, "ignored": True}
    assert _sent_to(fake, chat_id) == []


def test_refusals_are_told_in_the_chat_and_acknowledged(cws: Workspace, ai_api: ApiProcess, fake: FakeServices) -> None:
    bot = _telegram_bot(cws)
    chat_id = 900_000 + secrets.randbelow(10_000)
    r = tg_post(ai_api, fake, bot, _update(chat_id, "x" * 9000))
    assert r.status_code == 200
    assert "8,000" in _sent_to(fake, chat_id)[-1]["text"]
    r = tg_post(ai_api, fake, bot, _update(chat_id, "FAIL"))
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


def test_creating_the_channel_registers_a_secret_with_set_webhook(cws: Workspace, ai_api: ApiProcess,
                                                                  fake: FakeServices, db: Any) -> None:
    bot = _telegram_bot(cws)
    [hook] = [w for w in fake.webhooks if w["url"].endswith(f"token={bot['token']}")]
    assert hook["token"] == BOT_TOKEN and hook["allowed_updates"] == ["message"]
    assert hook["url"] == f"{ai_api.base_url}/functions/v1/agent-webhook?type=telegram&token={bot['token']}"
    assert 32 <= len(hook["secret_token"]) <= 256
    # kept hashed, never in clear, never shown
    stored = db.execute("SELECT webhook_secret_hash FROM wds.channels WHERE id = %s",
                        (bot["channel"]["id"],)).fetchone()[0]
    assert stored and hook["secret_token"] not in stored
    assert hook["secret_token"] not in cws.api.get(f"/agents/{bot['agent']['id']}").text


def test_updates_without_the_registered_secret_are_refused_and_not_processed(
        cws: Workspace, ai_api: ApiProcess, fake: FakeServices) -> None:
    bot = _telegram_bot(cws)
    chat_id = 600_000 + secrets.randbelow(10_000)
    for secret in (None, "", "not-the-secret", fake.webhook_secret(bot["token"]) + "x"):
        r = tg_post(ai_api, fake, bot, _update(chat_id, "hello"), secret=secret)
        assert (r.status_code, r.json()["code"]) == (401, "WEBHOOK_SECRET_INVALID")
    assert _sent_to(fake, chat_id) == []
    assert tg_post(ai_api, fake, bot, _update(chat_id, "hello")).status_code == 200
    assert len(_sent_to(fake, chat_id)) == 1


def test_a_new_bot_or_token_registers_a_new_secret_and_the_old_one_stops(
        cws: Workspace, ai_api: ApiProcess, fake: FakeServices) -> None:
    bot = _telegram_bot(cws)
    first = fake.webhook_secret(bot["token"])
    r = cws.api.post(f"/agents/{bot['agent']['id']}/channels/{bot['channel']['id']}/rotate")
    assert r.status_code == 200, r.text
    rotated = {**bot, "token": r.json()["token"]}
    second = fake.webhook_secret(rotated["token"])
    assert second != first
    chat_id = 500_000 + secrets.randbelow(10_000)
    r = tg_post(ai_api, fake, rotated, _update(chat_id, "hi"), secret=first)
    assert (r.status_code, r.json()["code"]) == (401, "WEBHOOK_SECRET_INVALID")
    assert tg_post(ai_api, fake, rotated, _update(chat_id, "hi"), secret=second).status_code == 200


def test_a_refused_set_webhook_changes_nothing(cws: Workspace, ai_api: ApiProcess, fake: FakeServices) -> None:
    r = cws.admin.post(f"/workspaces/{cws.id}/credentials", json={
        "name": "revoked-bot", "type": "bearer", "secret": "999:revoked", "hosts": ["api.telegram.org"]})
    assert r.status_code == 201, r.text
    agent = cws.api.post("/agents", json={"name": f"a-{secrets.token_hex(3)}", "table_ids": []}).json()
    r = cws.api.post(f"/agents/{agent['id']}/channels", json={"type": "telegram", "config": {"credential": "revoked-bot"}})
    assert (r.status_code, r.json()["code"]) == (503, "CHANNEL_DELIVERY_FAILED")
    assert "999:revoked" not in r.text
    assert cws.api.get(f"/agents/{agent['id']}").json()["channels"] == []
