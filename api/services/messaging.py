"""Messaging channels: Telegram complete; Slack and WhatsApp refused until built.

**Telegram.** The channel's ``config.credential`` names a stored credential
(``POST /admin/workspaces/{ws}/credentials``, any type) whose secret is the bot token.
When a telegram channel is enabled with a credential (created so, or a PATCH that sets
its credential or enables it, or a token rotation), the service registers its webhook
itself: it generates a fresh ``secret_token``, calls ``setWebhook`` with
``{WDS_PUBLIC_BASE_URL}/functions/v1/agent-webhook?type=telegram&token=<channel token>``
and that secret, and keeps only its SHA-256. If Telegram refuses, nothing is changed
(503 ``CHANNEL_DELIVERY_FAILED``). Telegram sends the secret back in the
``X-Telegram-Bot-Api-Secret-Token`` header of every update; an update without the
matching header is refused 401 ``WEBHOOK_SECRET_INVALID`` and nothing is processed — so
knowing the channel token alone (it is in the URL) does not let anyone talk to the bot
as one of its users. Telegram posts an ``Update``; a text ``message`` becomes one chat turn
in session ``telegram:<chat id>`` and the reply goes back with ``sendMessage`` to
``{WDS_TELEGRAM_API_BASE}/bot<token>/sendMessage`` (split at Telegram's 4,096
characters). Other updates (edits, stickers, joins) are acknowledged and ignored.

Telegram re-delivers an update until it gets a 2xx, so once the channel is known every
outcome — a too-long message, a rate limit, a provider failure — is told to the user in
the chat and acknowledged with 200; only a misconfigured channel answers 503
``NOT_CONFIGURED``, which the operator sees in ``getWebhookInfo``.

**Slack, WhatsApp**: 501 ``NOT_IMPLEMENTED`` (after the token is checked).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from typing import Any

import httpx
from psycopg import AsyncConnection

from api.services.aiclient import http_client
from api.state import AppState
from storage.agents import set_webhook_secret
from storage.errors import ServiceError, Unauthorized, Unavailable
from storage.secrets import SecretBox, load_secret

TELEGRAM_MAX_TEXT = 4096
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
WEBHOOK_PATH = "/functions/v1/agent-webhook"
SORRY = "Sorry, I cannot answer right now. Please try again later."


class NotConfigured(Unavailable):
    code = "NOT_CONFIGURED"


class NotImplementedChannel(ServiceError):
    status = 501
    code = "NOT_IMPLEMENTED"


def telegram_text(update: Any) -> tuple[int | str, str] | None:
    """``(chat id, text)`` of an Update carrying a new text message, else ``None``.

    >>> telegram_text({"update_id": 1, "message": {"message_id": 2, "chat": {"id": 42}, "text": "hi"}})
    (42, 'hi')
    >>> telegram_text({"update_id": 1, "edited_message": {"chat": {"id": 42}, "text": "hi"}}) is None
    True
    """
    if not isinstance(update, dict):
        return None
    msg = update.get("message")
    if not isinstance(msg, dict):
        return None
    chat = msg.get("chat")
    text = msg.get("text")
    if not isinstance(chat, dict) or not isinstance(text, str) or not text.strip():
        return None
    chat_id = chat.get("id")
    if not isinstance(chat_id, (int, str)) or isinstance(chat_id, bool):
        return None
    return chat_id, text


def split_text(text: str, size: int = TELEGRAM_MAX_TEXT) -> list[str]:
    """``text`` in pieces of at most ``size`` characters (at a newline when there is one).

    >>> split_text("ab\\ncd", 3)
    ['ab', 'cd']
    """
    pieces: list[str] = []
    rest = text
    while len(rest) > size:
        cut = rest.rfind("\n", 0, size)
        cut = cut if cut > 0 else size
        pieces.append(rest[:cut])
        rest = rest[cut:].lstrip("\n")
    if rest:
        pieces.append(rest)
    return pieces


def require_credential(channel: Mapping[str, Any]) -> str:
    """The name of the channel's bot-token credential.

    Raises:
        NotConfigured: 503 when ``config.credential`` is missing.
    """
    name = (channel.get("config") or {}).get("credential")
    if not isinstance(name, str) or not name:
        raise NotConfigured("this telegram channel has no credential: set config.credential to the name of"
                            " a stored credential holding the bot token")
    return name


async def bot_token(state: AppState, channel: Mapping[str, Any]) -> str:
    """The channel's bot token from its stored credential.

    Raises:
        NotConfigured: 503 when ``config.credential`` is missing or names no credential.
    """
    name = require_credential(channel)
    async with state.db.connection() as conn:
        row = await load_secret(conn, workspace_id=int(channel["workspace_id"]), name=name)
    if row is None:
        raise NotConfigured(f"the credential {name!r} of this telegram channel does not exist")
    return SecretBox(state.settings.secret_key).decrypt(row["secret_enc"])


async def telegram_send(state: AppState, token: str, chat_id: int | str, text: str) -> None:
    """Send ``text`` to a Telegram chat with ``sendMessage``.

    Raises:
        Unavailable: ``CHANNEL_DELIVERY_FAILED`` when Telegram refuses or is unreachable.
    """
    for piece in split_text(text or "…"):
        await _bot_call(state, token, "sendMessage", {"chat_id": chat_id, "text": piece})


async def _bot_call(state: AppState, token: str, method: str, body: dict[str, Any], *, hint: str = "") -> None:
    """One Bot API call that must answer ``{"ok": true}``.

    Raises:
        Unavailable: ``CHANNEL_DELIVERY_FAILED`` when Telegram refuses or is unreachable.
    """
    base = state.settings.telegram_api_base.rstrip("/")
    try:
        resp = await http_client(state).post(f"{base}/bot{token}/{method}", json=body, timeout=30.0)
        ok = resp.status_code < 300 and resp.json().get("ok") is True
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        # never put the URL in the message: it holds the bot token
        raise Unavailable(f"telegram is not reachable for {method} ({type(exc).__name__})",
                          code="CHANNEL_DELIVERY_FAILED") from None
    if not ok:
        raise Unavailable(f"telegram refused {method} (HTTP {resp.status_code}){hint}",
                          code="CHANNEL_DELIVERY_FAILED")


def secret_hash(secret: str) -> str:
    """How a webhook secret is kept: its SHA-256, hex (the secret is random, 256 bits)."""
    return hashlib.sha256(secret.encode()).hexdigest()


def needs_webhook(channel: Mapping[str, Any]) -> bool:
    """Whether the service registers a webhook for this channel: telegram, enabled, with a credential."""
    return (channel.get("type") == "telegram" and bool(channel.get("enabled"))
            and bool((channel.get("config") or {}).get("credential")))


async def register_telegram_webhook(
    state: AppState, conn: AsyncConnection[Any], *, workspace_id: int, channel: Mapping[str, Any]
) -> None:
    """Give the channel a fresh secret, register it with ``setWebhook`` and keep its hash.

    Run inside the transaction that created or changed the channel: when Telegram refuses
    or cannot be reached the caller's change is rolled back with the new secret.

    Raises:
        NotConfigured: the channel's credential does not exist.
        Unavailable: ``CHANNEL_DELIVERY_FAILED`` when ``setWebhook`` fails.
    """
    token = await bot_token(state, {"workspace_id": workspace_id, "config": channel.get("config")})
    secret = secrets.token_urlsafe(32)  # Telegram allows 1-256 characters of A-Z a-z 0-9 _ -
    url = f"{state.settings.public_base_url.rstrip('/')}{WEBHOOK_PATH}?type=telegram&token={channel['token']}"
    await _bot_call(state, token, "setWebhook",
                    {"url": url, "secret_token": secret, "allowed_updates": ["message"]}, hint="; check the bot token")
    await set_webhook_secret(conn, workspace_id=workspace_id, channel_id=int(channel["id"]),
                             secret_hash=secret_hash(secret))


def check_webhook_secret(channel: Mapping[str, Any], given: str | None) -> None:
    """Refuse an update that does not carry the secret registered with ``setWebhook``.

    Raises:
        Unauthorized: ``WEBHOOK_SECRET_INVALID`` (no secret registered, none sent, or another).
    """
    expected = channel.get("webhook_secret_hash")
    if not expected or not given or not hmac.compare_digest(secret_hash(given), str(expected)):
        raise Unauthorized(f"this update does not carry the channel's {SECRET_HEADER}", code="WEBHOOK_SECRET_INVALID")
