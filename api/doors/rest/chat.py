"""Agent chat: the webhook ``POST /functions/v1/agent-webhook`` and the web chat page.

``?type=web&token=<PUBLIC_CHANNEL_TOKEN>`` with ``{message, session_id?, session_key?, stream?}``:

* non-streaming → ``{reply, session_id, session_key, message_id, tool_calls: [{name,
  arguments, result_summary}]}``;
* ``stream: true`` or ``Accept: text/event-stream`` → server-sent events ``token``,
  ``tool_call``, ``tool_result``, ``error`` and last ``done`` (:mod:`api.doors.chat.engine`); a
  client that disconnects stops the generation (the upstream request is closed).

Sessions are issued by the server: omit ``session_id`` to start one; the answer carries
``session_id`` and ``session_key`` (also in the ``done`` event and the ``X-Chat-Session-Id``
/ ``X-Chat-Session-Key`` response headers), and every later message of that session sends
both (the key as ``session_key`` or the ``X-Chat-Session-Key`` header). Errors (``{error,
code}``, before any event is sent): 401 ``UNAUTHORIZED`` unknown token; 404 ``NOT_FOUND``
disabled channel; 403 ``CHAT_SESSION_INVALID`` a session id without its key (or an id the
server never issued); 400 ``CHANNEL_TYPE_MISMATCH``, ``VALIDATION_ERROR``; 413
``PAYLOAD_TOO_LARGE``;
429 ``CHAT_RATE_LIMIT`` / ``PLAN_RATE_LIMIT_API``; 402 ``PLAN_LIMIT_*``; 503 ``UNAVAILABLE``
(no AI provider configured); 503 ``AI_PROVIDER_ERROR`` (the provider failed or answered
something that is not a chat completion before anything was answered; streaming: an
``error`` event). Other ``type`` values: see :mod:`api.services.messaging`.

``GET /chat/<token>`` serves the web chat page of a web channel.
"""

from __future__ import annotations

import logging
import secrets
from pathlib import Path
from typing import Any

import orjson
from fastapi import APIRouter, Query, Request
from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.responses import HTMLResponse

from api.deps import StateDep
from api.doors.chat import engine, guard
from api.doors.chat.provider import require_provider
from api.doors.chat.tools import agent_principal
from api.responses import JSON
from api.schemas import ErrorOut
from api.services import messaging
from api.services.limits import check_ai_credits, enforce_limits
from api.state import AppState
from storage import chat as store
from storage import jsontext
from storage.errors import ServiceError, ValidationError

router = APIRouter(tags=["chat"])
log = logging.getLogger("wds.chat")
_TEMPLATES = Environment(loader=FileSystemLoader(Path(__file__).resolve().parents[2] / "templates"),
                         autoescape=select_autoescape(["html"]))
ERRORS: dict[int | str, dict[str, Any]] = {s: {"model": ErrorOut} for s in (400, 401, 402, 403, 404, 413, 429, 501, 503)}
PING_S = 15


class ChatIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message: str = Field(description="the user's message (at most 8,000 characters)")
    session_id: str | None = Field(None, description="the conversation, as issued by an earlier answer; omitted: a new one")
    session_key: str | None = Field(None, description="the key issued with session_id (or the X-Chat-Session-Key header)")
    stream: bool = Field(False, description="answer as server-sent events")


class ToolCallOut(BaseModel):
    name: str
    arguments: Any
    result_summary: str | None


class ChatOut(BaseModel):
    reply: str
    session_id: str
    session_key: str = Field(description="send it with session_id on the session's next messages")
    message_id: int | None
    tool_calls: list[ToolCallOut]
    error: ErrorOut | None = Field(None, description="set when the turn ended early (after some work)")


async def _channel(state: AppState, token: str | None, kind: str) -> Any:
    token = guard.check_token(token)
    async with state.db.connection() as conn:
        row = await store.channel_for_token(conn, token=token)
    return guard.check_channel(row, kind)


async def _json_body(request: Request) -> Any:
    try:
        return orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        raise ValidationError("the request body is not valid JSON") from None


def _sse(events: Any) -> Any:
    async def gen() -> Any:
        async for name, data in events:
            yield ServerSentEvent(data=jsontext.dumps(data).decode(), event=name)
    return gen()


@router.post("/functions/v1/agent-webhook", response_model=ChatOut, responses=ERRORS,
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/json": {"schema": ChatIn.model_json_schema()}}}})
async def agent_webhook(
    request: Request,
    state: StateDep,
    type: str = Query("web", description="web, telegram, slack or whatsapp"),
    token: str | None = Query(None, description="the channel's public token"),
) -> Any:
    """Talk to an agent through one of its channels (see the module docstring)."""
    if type == "telegram":
        return await _telegram(request, state, token)
    if type in ("slack", "whatsapp"):
        await _channel(state, token, type)
        raise messaging.NotImplementedChannel(f"{type} channels are not available yet; use web or telegram")
    if type != "web":
        raise ValidationError("type must be web, telegram, slack or whatsapp")
    channel = await _channel(state, token, "web")
    principal = agent_principal(channel)
    await enforce_limits(state, principal, "chat", scope=request.scope)
    try:
        body = ChatIn.model_validate(await _json_body(request))
    except ValueError as exc:
        raise ValidationError(f"body must be {{message, session_id?, session_key?, stream?}}:"
                              f" {str(exc).splitlines()[0]}") from None
    message = guard.check_message(body.message, state.settings.chat_max_message_chars)
    if body.session_id is None:
        session_id, session_key = guard.new_session(state, int(channel["id"]))
    else:
        session_id = guard.check_session(body.session_id)
        session_key = guard.check_session_key(
            state, int(channel["id"]), session_id,
            request.headers.get(guard.SESSION_KEY_HEADER) or body.session_key)
    await guard.rate_limit(state, int(channel["id"]), session_id)
    require_provider(state)
    await check_ai_credits(state, principal)
    turn = engine.Turn(channel=channel, principal=principal, session_id=session_id, message=message,
                       session_key=session_key)
    issued = {"X-Chat-Session-Id": session_id, guard.SESSION_KEY_HEADER: session_key, "Cache-Control": "no-store"}
    if body.stream or "text/event-stream" in request.headers.get("accept", ""):
        return EventSourceResponse(_sse(engine.converse(state, turn)), ping=PING_S,
                                   headers={**issued, "X-Accel-Buffering": "no"})
    out = await engine.collect(engine.converse(state, turn))
    if out.error is not None and not out.reply and not out.tool_calls:
        raise ServiceError(out.error["error"], code=out.error["code"], status=503)
    answer: dict[str, Any] = {"reply": out.reply, "session_id": session_id, "session_key": session_key,
                              "message_id": out.message_id, "tool_calls": out.tool_calls}
    if out.error is not None:
        answer["error"] = out.error  # the turn ended early; what happened until then is above
    return JSON(answer, headers=issued)


async def _telegram(request: Request, state: AppState, token: str | None) -> JSON:
    channel = await _channel(state, token, "telegram")
    messaging.require_credential(channel)  # 503 NOT_CONFIGURED: Telegram shows it to the operator
    # only Telegram knows the secret registered with setWebhook: nothing else is processed
    messaging.check_webhook_secret(channel, request.headers.get(messaging.SECRET_HEADER))
    bot = await messaging.bot_token(state, channel)
    found = messaging.telegram_text(await _json_body(request))
    if found is None:
        return JSON({"ok": True, "ignored": True})
    chat_id, text = found
    principal = agent_principal(channel)
    session_id = f"telegram:{chat_id}"[:128]
    try:
        await enforce_limits(state, principal, "chat", scope=request.scope)
        message = guard.check_message(text, state.settings.chat_max_message_chars)
        await guard.rate_limit(state, int(channel["id"]), session_id)
        require_provider(state)
        await check_ai_credits(state, principal)
        turn = engine.Turn(channel=channel, principal=principal, session_id=session_id, message=message)
        out = await engine.collect(engine.converse(state, turn))
        reply = out.reply or messaging.SORRY
    except ServiceError as exc:
        # acknowledged either way: Telegram would re-deliver a refused update forever
        log.info("telegram turn on channel %s refused: %s", channel["id"], exc.code)
        reply, out = (exc.message if exc.status in (413, 429) else messaging.SORRY), None
    await messaging.telegram_send(state, bot, chat_id, reply)
    return JSON({"ok": True, "message_id": out.message_id if out else None})


@router.get("/chat/{token}", response_class=HTMLResponse, include_in_schema=False)
async def chat_page(token: str, state: StateDep) -> HTMLResponse:
    """The web chat of a web channel: streams replies, keeps the session in local storage."""
    try:
        channel = await _channel(state, token, "web")
    except ServiceError:
        html = _TEMPLATES.get_template("chat_missing.html").render()
        return HTMLResponse(html, status_code=404, headers={"Cache-Control": "no-store"})
    nonce = secrets.token_urlsafe(16)
    html = _TEMPLATES.get_template("chat.html").render(
        agent_name=channel["agent_name"], token=token, webhook="/functions/v1/agent-webhook", nonce=nonce,
        max_chars=state.settings.chat_max_message_chars,
    )
    csp = (f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; connect-src 'self';"
           " img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors *")
    return HTMLResponse(html, headers={"Content-Security-Policy": csp, "Cache-Control": "no-store",
                                       "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff"})
