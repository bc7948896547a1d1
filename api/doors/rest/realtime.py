"""``{base_url}/realtime/v1`` — the WebSocket change feed (DESIGN §4 "Realtime").

Protocol (JSON text messages):

* auth: ``?token=<token>`` on the URL, or a first message ``{"type":"auth","token":...}``
  (within 10 s). rest_api and vibe_mcp tokens and app-user access tokens work; failures
  close the socket with 1008 after an ``error`` message.
* ``{"type":"subscribe","table":<id or name>,"events"?:[...],"filter"?:{col:"op.value"},
  "since"?:<seq>}`` → ``{"type":"subscribed","table_id","table","events","since","seq"}``
  (``seq``: the workspace's latest event seq at subscription), then
  ``{"type":"change","event","table_id","table","record","old_record","seq"}``. ``since``
  (also a ``since`` query parameter, applied to every subscription) replays the retained
  events with a greater seq first. One subscription per table; subscribing again replaces it.
* ``{"type":"unsubscribe","table":...}`` → ``{"type":"unsubscribed","table_id"}``;
  ``{"type":"ping"}`` → ``{"type":"pong"}``; ``{"type":"heartbeat"}`` comes from the server
  after ~15 s without traffic.
* errors: ``{"type":"error","code","error"}`` (the socket stays open); a slow consumer is
  closed with code 4000 and a reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import orjson
from fastapi import APIRouter, FastAPI, WebSocket, WebSocketDisconnect

from api.services.realtime import EVENTS, POLICY, Client, Hub, Subscription, plan_subscription
from api.state import AppState
from storage.errors import NotFound, ServiceError, ValidationError

MAX_MESSAGE = 64 * 1024
AUTH_TIMEOUT_S = 10.0
TRY_AGAIN_LATER = 1013  # RFC 6455 close code: the server is overloaded for this client


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    state: AppState = app.state.wds
    hub = Hub(state)
    state.extras["realtime"] = hub
    hub.start()
    try:
        yield
    finally:
        await hub.stop()


router = APIRouter(tags=["realtime"], lifespan=lifespan)


def _hub(ws: WebSocket) -> Hub:
    return ws.app.state.wds.extras["realtime"]  # type: ignore[no-any-return]


async def _error(ws: WebSocket, exc: ServiceError, **extra: Any) -> None:
    await ws.send_text(orjson.dumps({"type": "error", "code": exc.code, "error": exc.message, **extra}).decode())


def _since(value: Any) -> int | None:
    if value is None:
        return None
    # at most 19 digits (a bigint): int() of a longer text can fail (past 4,300 digits, a
    # ValueError that dropped the socket and logged a stack trace) or cost quadratic time
    text = str(value) if isinstance(value, str) else None
    if isinstance(value, bool) or not isinstance(value, (int, str)) or (
            text is not None and not (len(text) <= 20 and text.isascii() and text.lstrip("-").isdigit())):
        raise ValidationError("since must be an integer seq")
    seq = int(value)
    if seq >= 2**63:
        raise ValidationError("since must be an integer seq")
    return max(0, seq)


async def _receive_text(ws: WebSocket) -> str | None:
    """The next message's text; ``None`` for a binary frame (``ws.receive_text`` fails on
    one with a KeyError, which dropped the socket without a word).

    Raises:
        WebSocketDisconnect: the client left.
    """
    message = await ws.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000), message.get("reason"))
    text = message.get("text")
    return text if isinstance(text, str) else None


async def _authenticate(ws: WebSocket, hub: Hub) -> tuple[str, Any] | None:
    token = ws.query_params.get("token")
    if not token:
        try:
            raw = await asyncio.wait_for(_receive_text(ws), timeout=AUTH_TIMEOUT_S)
            msg = orjson.loads(raw) if raw is not None and len(raw) <= MAX_MESSAGE else None
        except (asyncio.TimeoutError, orjson.JSONDecodeError):
            msg = None
        if not isinstance(msg, dict) or msg.get("type") != "auth" or not isinstance(msg.get("token"), str):
            await _error(ws, ServiceError("send the token as ?token= or a first {type: auth, token} message", code="UNAUTHORIZED"))
            await ws.close(code=POLICY, reason="unauthorized")
            return None
        token = msg["token"]
    if len(token) > 4096:
        token = ""
    try:
        principal = await hub.principal(token)
    except ServiceError as exc:
        await _error(ws, exc)
        await ws.close(code=POLICY, reason=exc.code.lower())
        return None
    return token, principal


_SUBSCRIBE_KEYS = frozenset({"type", "table", "events", "filter", "filters", "since"})


async def _subscribe(client: Client, msg: dict[str, Any], default_since: int | None) -> None:
    unknown = sorted(set(msg) - _SUBSCRIBE_KEYS)
    if unknown:
        # a subscription cannot honour select, order, limit and the like: say so (docs/query.md)
        raise ServiceError(f"subscribe does not take {unknown[0]!r}; it takes table, events, filter and since",
                           code="UNKNOWN_PARAMETER")
    hub = client.hub
    principal = await hub.principal(client.secret)
    client.principal = principal
    ref = msg.get("table")
    if not isinstance(ref, (int, str)) or isinstance(ref, bool):
        raise ValidationError("subscribe needs table: a table id or name")
    schema = await hub.state.schema(principal.workspace_id)
    table = schema.table(ref)
    if table is None:
        raise NotFound(f"table {ref} not found")
    if not principal.can_read(table.id):
        raise ServiceError(f"this token has no read permission on table {table.name!r}", code="FORBIDDEN", status=403)
    events = msg.get("events") or sorted(EVENTS)
    if events == "*" or events == ["*"]:
        events = sorted(EVENTS)
    if not isinstance(events, list) or not all(isinstance(e, str) and e.upper() in EVENTS for e in events):
        raise ValidationError("events is a list of INSERT, UPDATE, DELETE")
    if msg.get("filter") is not None and msg.get("filters") is not None:
        # one would be ignored (an empty "filter" let "filters" through unseen)
        raise ValidationError("subscribe takes filter or filters (the same thing), not both")
    raw_filter = msg.get("filter") if msg.get("filter") is not None else msg.get("filters") or {}
    # either form views, run-actions and MCP take: {column: "op.value"} or [{column, op, value}]
    filters, stored = plan_subscription(raw_filter, table)
    since = _since(msg.get("since")) if "since" in msg else default_since
    sub = Subscription(table.id, frozenset(e.upper() for e in events), filters, buffering=since is not None,
                       refs=stored, planned_for=table)
    client.attach(sub)
    # the workspace's current seq: a client that has seen no event yet resumes from here
    current = await hub.current_seq(principal.workspace_id)
    ack = {"type": "subscribed", "table_id": table.id, "table": table.name, "events": sorted(sub.events),
           "since": since, "seq": current}
    if since is None:
        client.put(ack)
        return
    try:
        changes, truncated, purged = await hub.replay(principal.workspace_id, table.id, since)
        await hub.judge(principal.workspace_id, changes, [sub])
    except BaseException:
        if client.subs.get(table.id) is sub:
            client.detach(table.id)
        raise
    batch: list[Any] = [ack]
    if since < purged:
        batch.append({"type": "error", "code": "EVENTS_PURGED", "table_id": table.id, "purged_through": purged,
                      "error": "events up to this seq are past retention; reload the table"})
    replayed = {c.seq for c in changes}
    batch.extend(c for c in changes if sub.wants(c))
    if truncated:
        last = changes[-1].seq if changes else since
        batch.append({"type": "error", "code": "REPLAY_TRUNCATED", "table_id": table.id, "last_seq": last,
                      "error": "too many events, or too much data, to replay at once; subscribe again with"
                               " since=last_seq"})
    batch.extend(c for c in client.release(sub) if c.seq not in replayed)
    client.put(batch)


async def _handle(client: Client, raw: str, default_since: int | None) -> None:
    if len(raw) > MAX_MESSAGE:
        raise ValidationError(f"messages are at most {MAX_MESSAGE} bytes")
    try:
        msg = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ValidationError("messages are JSON objects") from None
    if not isinstance(msg, dict):
        raise ValidationError("messages are JSON objects")
    kind = msg.get("type")
    if kind == "subscribe":
        await _subscribe(client, msg, default_since)
    elif kind == "unsubscribe":
        schema = await client.hub.state.schema(client.workspace_id)
        table = schema.table(msg.get("table")) if isinstance(msg.get("table"), (int, str)) else None
        if table is None or client.detach(table.id) is None:
            raise NotFound("no subscription for that table")
        client.put({"type": "unsubscribed", "table_id": table.id})
    elif kind == "ping":
        client.put({"type": "pong"})
    elif kind == "auth":
        raise ValidationError("already authenticated")
    else:
        raise ValidationError("unknown message type; use subscribe, unsubscribe or ping")


@router.websocket("/realtime/v1")
async def realtime(ws: WebSocket) -> None:
    await ws.accept()
    hub = _hub(ws)
    settings = hub.state.settings
    try:
        default_since = _since(ws.query_params.get("since"))
    except ServiceError as exc:
        await _error(ws, exc)
        await ws.close(code=POLICY, reason="bad since")
        return
    auth = await _authenticate(ws, hub)
    if auth is None:
        return
    cap = settings.realtime_connections_per_workspace
    if cap and hub.connections(auth[1].workspace_id) >= cap:
        # every socket gets every change of its workspace's tables, framed and sent on this
        # process's event loop: one tenant's thousands of sockets were another's stall
        await _error(ws, ServiceError(
            f"this workspace already has {cap} realtime connections open here; close one or retry later",
            code="WORKSPACE_BUSY", status=503))
        await ws.close(code=TRY_AGAIN_LATER, reason="workspace_busy")
        return
    client = Client(hub, ws, auth[0], auth[1], settings.realtime_queue_max)
    hub.add(client)
    client.sender = asyncio.create_task(client.send_loop(settings.realtime_heartbeat_s))
    try:
        while not client.closed:
            receive = asyncio.ensure_future(_receive_text(ws))
            done, _ = await asyncio.wait({receive, client.sender}, return_when=asyncio.FIRST_COMPLETED)
            if receive not in done:  # the sender ended (socket error or killed)
                receive.cancel()
                break
            raw = receive.result()
            try:
                if raw is None:
                    raise ValidationError("binary frames are not read here: send each message as JSON text")
                await _handle(client, raw, default_since)
            except ServiceError as exc:
                client.put({"type": "error", "code": exc.code, "error": exc.message})
    except (WebSocketDisconnect, RuntimeError):
        pass
    finally:
        hub.remove(client)
        client.closed = True
        if client.sender is not None and not client.sender.done():
            client.sender.cancel()
        if client.sender is not None:
            with suppress(asyncio.CancelledError, Exception):
                await client.sender
