"""Checks every chat message passes before it reaches a model.

* the channel: unknown token → 401 ``UNAUTHORIZED``; a channel switched off → 404
  ``NOT_FOUND`` (as if it did not exist: a disabled public token reveals nothing); a
  token used with another ``type`` than its channel's → 400 ``CHANNEL_TYPE_MISMATCH``;
* the message: a non-empty string of at most ``chat_max_message_chars`` (8,000) characters
  (longer → 413 ``PAYLOAD_TOO_LARGE``); the session id: 1–128 characters of
  ``[A-Za-z0-9_.:-]`` (else 400 ``VALIDATION_ERROR``);
* web sessions are issued by the server and bound to the visitor: a message without
  ``session_id`` starts a new session, and the answer carries its ``session_id`` and a
  ``session_key`` (HMAC-SHA256 under a key derived from ``WDS_SECRET_KEY``, over the channel
  id and session id). A later message must present that key (``X-Chat-Session-Key`` header
  or ``session_key`` field); a session id with a missing or wrong key → 403
  ``CHAT_SESSION_INVALID``, the same answer whether or not the session exists, so another
  visitor's id is worth nothing without its key. No ``WDS_SECRET_KEY`` → 503
  ``NOT_CONFIGURED``. Telegram sessions are keyed by the chat id Telegram sends, behind the
  webhook secret, and need no key;
* per-channel rate limits (moving 60-second windows, in the same store as the plan's
  limits, so shared across API processes with Redis): ``chat_session_per_minute`` (30)
  per channel and session, ``chat_channel_per_minute`` (300) per channel → 429
  ``CHAT_RATE_LIMIT`` with ``Retry-After``. The plan's own limits (per-minute requests,
  monthly quota) apply on top through :func:`api.services.limits.enforce_limits`, and AI credits
  through :func:`api.services.limits.check_ai_credits`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import re
import secrets
import time
from collections.abc import Mapping
from typing import Any

from limits import RateLimitItemPerMinute

from api.services import limits
from api.state import AppState
from storage.errors import (
    Forbidden,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ServiceError,
    Unauthorized,
    Unavailable,
    ValidationError,
)

SESSION_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")
TOKEN_MAX = 256


def check_token(token: str | None) -> str:
    if not token or len(token) > TOKEN_MAX:
        raise Unauthorized("a chat channel token is required: ?token=<PUBLIC_CHANNEL_TOKEN>")
    return token


def check_channel(channel: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any]:
    """The channel if it answers on this webhook type (see the module docstring)."""
    if channel is None:
        raise Unauthorized("unknown chat channel token")
    if not channel["enabled"]:
        raise NotFound("this chat channel is not available")
    if channel["type"] != kind:
        raise ServiceError(f"this token belongs to a {channel['type']} channel; call the webhook with"
                           f" type={channel['type']}", code="CHANNEL_TYPE_MISMATCH")
    return channel


def check_message(message: Any, max_chars: int) -> str:
    if not isinstance(message, str) or not message.strip():
        raise ValidationError("message must be a non-empty string")
    if len(message) > max_chars:
        raise PayloadTooLarge(f"a message may be at most {max_chars:,} characters")
    return message


def check_session(session_id: Any) -> str:
    if not isinstance(session_id, str) or not SESSION_RE.match(session_id):
        raise ValidationError("session_id must be 1-128 characters of letters, digits, '_', '-', '.' or ':'")
    return session_id


SESSION_KEY_HEADER = "X-Chat-Session-Key"


def _session_mac(state: AppState, channel_id: int, session_id: str) -> str:
    secret = state.settings.secret_key
    if not secret:
        raise Unavailable("web chat sessions need WDS_SECRET_KEY", code="NOT_CONFIGURED")
    key = hmac.new(secret.encode(), b"wds-chat-session-v1", hashlib.sha256).digest()
    mac = hmac.new(key, f"{channel_id}:{session_id}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def new_session(state: AppState, channel_id: int) -> tuple[str, str]:
    """A fresh server-issued web session: ``(session_id, session_key)``."""
    session_id = "w-" + secrets.token_urlsafe(18)
    return session_id, _session_mac(state, channel_id, session_id)


def check_session_key(state: AppState, channel_id: int, session_id: str, key: str | None) -> str:
    """The session's key if ``key`` is it (constant-time compare).

    Raises:
        Forbidden: 403 ``CHAT_SESSION_INVALID`` — missing or wrong key (nothing says whether
            the session exists).
        Unavailable: 503 ``NOT_CONFIGURED`` — no ``WDS_SECRET_KEY``.
    """
    expected = _session_mac(state, channel_id, session_id)
    if not key or not hmac.compare_digest(key.encode(), expected.encode()):
        raise Forbidden("unknown chat session or wrong session key: send the session_key issued with the"
                        " session_id (X-Chat-Session-Key), or omit session_id to start a new session",
                        code="CHAT_SESSION_INVALID")
    return expected


async def rate_limit(state: AppState, channel_id: int, session_id: str) -> None:
    """Count one message on the channel and its session.

    Raises:
        RateLimited: 429 ``CHAT_RATE_LIMIT`` with ``Retry-After``.
    """
    limiter = limits.runtime(state).limiter
    if not limiter.enabled:
        return
    s = state.settings
    windows = (
        (RateLimitItemPerMinute(s.chat_session_per_minute), ("chat-session", str(channel_id), session_id),
         f"at most {s.chat_session_per_minute} messages per minute in one chat session"),
        (RateLimitItemPerMinute(s.chat_channel_per_minute), ("chat-channel", str(channel_id)),
         f"at most {s.chat_channel_per_minute} messages per minute on this channel"),
    )
    for item, ident, what in windows:
        try:
            allowed = await limiter.strategy.hit(item, *ident)
        except Exception:  # noqa: BLE001 - the store is down: let it through, as the plan limits do
            return
        if not allowed:
            stats = await limiter.strategy.get_window_stats(item, *ident)
            wait = max(1, math.ceil(stats.reset_time - time.time()))
            raise RateLimited(f"{what}; retry after the Retry-After seconds", code="CHAT_RATE_LIMIT",
                              headers={"Retry-After": str(wait)})
