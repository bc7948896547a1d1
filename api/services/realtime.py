"""The realtime change feed: one LISTEN connection per API process fanning out to WebSockets.

Capture happens in the database (``storage/ddl.py`` triggers → ``wds.events`` + NOTIFY
``wds_changes '<workspace>:<first seq>:<last seq>'``), so every writer is covered and every
API process hears every change. On a notification for a workspace with subscribers here,
the hub reads the statement's events from ``wds.events`` (one query), decodes each once
into the API record shape, and offers it to the clients of that workspace. Each client has
a bounded queue and one sender task: a client that falls ``realtime_queue_max`` events
behind is disconnected (close code 4000, reason given) instead of growing memory.

Bytes are bounded as well as counts (one tenant's large records must not fill the shared
process): an event whose JSON (record and old record as stored) is over
``realtime_event_max_bytes`` is cut in PostgreSQL to the records' ids and timestamps and
sent with ``"truncated": true`` (the client reads the record by id); a socket with more than
``realtime_socket_max_bytes`` of events queued, and the socket with the most queued when a
workspace's sockets in this process hold more than ``realtime_workspace_max_bytes``, are
closed as slow consumers (4000). Filters are judged in PostgreSQL on the stored events, by
seq, so a cut event is matched on its whole record.

Ordering and resume: ``seq`` comes from a per-workspace sequence at write time. A client
resumes with ``since=<last seq seen>``; events retained (``realtime_retention_s``) with a
greater seq are replayed before live ones. Retention records the highest purged seq per
workspace, so a ``since`` older than that gets an ``EVENTS_PURGED`` error, never silence.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import psycopg
from psycopg import sql
from starlette.websockets import WebSocket

from api.services.appusers import app_user_principal, is_app_token
from api.state import AppState
from storage import jsontext, refs
from storage import records as rec
from storage.access import Principal, TokenType
from storage.errors import Forbidden, ServiceError, UnknownColumn
from storage.query import filter_items, parse_filter_list, parse_filters, plan_filters
from storage.query.matching import FilterSet, match_events
from storage.schema import ColumnMeta, ColumnType, TableMeta
from storage.values import iso

log = logging.getLogger("wds.realtime")
CHANNEL = "wds_changes"
EVENTS = frozenset({"INSERT", "UPDATE", "DELETE"})
REPLAY_MAX = 10_000
# events sized per statement while a replay finds its cut: few at first (measuring renders
# each event's JSON, so a cut after a few large events wastes little), more each round
REPLAY_SIZE_FIRST, REPLAY_SIZE_MAX = 16, 1024
SLOW_CONSUMER = 4000
POLICY = 1008
_SEEN_PER_WORKSPACE = 50_000


@dataclass(slots=True)
class Change:
    """One decoded event, serialised once for every subscriber."""

    seq: int
    table_id: int
    event: str
    text: str  # the ``change`` message
    size: int  # its bytes
    sides: int  # how many of record / old record the event has (what filters are judged on)
    # id of a subscription's filter set → whether a side of this change matches it,
    # decided by PostgreSQL (:meth:`Hub.judge`); a set not judged matches nothing
    verdicts: dict[int, bool] = field(default_factory=dict)


# The events' columns as the hub reads them: an event whose record and old record, as
# stored, render to more than the limit (the first parameter) comes with each record cut to
# its id and timestamps, in PostgreSQL, so the large values never reach this process.
def _brief(col: str) -> str:
    return (f"CASE WHEN sz.big AND {col} IS NOT NULL THEN jsonb_build_object('id', {col}->'id',"
            f" 'created_at', {col}->'created_at', 'updated_at', {col}->'updated_at') ELSE {col} END")


EVENT_BYTES = "octet_length(coalesce(record::text, '')) + octet_length(coalesce(old_record::text, ''))"
EVENT_COLUMNS = (f"SELECT seq, table_id, event, sz.big AS truncated, {_brief('record')} AS record,"
                 f" {_brief('old_record')} AS old_record"
                 f" FROM wds.events CROSS JOIN LATERAL (SELECT {EVENT_BYTES} > %s AS big) sz")
BRIEF_BYTES = 256  # what a cut event counts for in a replay's budget
# Live delivery reads a workspace's notified events a statement at a time, sized from its
# recent events to about DELIVER_BYTES of messages (Hub._deliver): 16 seqs at first (at
# most 16 x 256 KiB, the largest event), up to 1,024 for small events.
DELIVER_BYTES = 4 * 1024 * 1024
DELIVER_FIRST, DELIVER_MAX = 16, 1024
MEASURE_FACTOR = 8  # a replay measures at most this many times its budget (cut events whole)


@dataclass(slots=True)
class Subscription:
    table_id: int
    events: frozenset[str]
    filters: FilterSet
    buffering: bool = False  # while a ``since`` replay is read
    buffer: list[Change] = field(default_factory=list)
    # the filter as stored (columns by id: storage.refs.filters_by_id) and the table it was
    # planned against: planned again when the table changes (:func:`replan`)
    refs: Any = None
    planned_for: TableMeta | None = None

    def wants(self, change: Change) -> bool:
        if change.table_id != self.table_id or change.event not in self.events:
            return False
        if not self.filters:
            return True
        # UPDATE matches on either side, so a client sees records leave its filter too;
        # the database decided it with the list's own WHERE clause (Hub.judge)
        return change.verdicts.get(id(self.filters), False)


def plan_subscription(raw: Any, table: TableMeta) -> tuple[FilterSet, list[dict[str, Any]] | None]:
    """A subscription's filter, either form views, run-actions and MCP take, planned
    against ``table``, and as stored for planning again (list form, columns by id, as a
    schedule's: ``None`` without a filter).

    Raises:
        ServiceError: the filter does not parse or plan (the planner's code).
    """
    parsed = parse_filters(raw)
    planned = plan_filters(parsed, table)
    return planned, (refs.filters_by_id(table, filter_items(parsed)) if planned else None)


def replan(sub: Subscription, table: TableMeta) -> str | None:
    """Plan ``sub``'s filter again if ``table`` is not the table it was planned against (a
    column renamed, converted or deleted since): ``None`` when it still applies (its plan
    replaced), else why it no longer does. A filter planned for a column's old type is
    what a list would refuse now, and its statement fails on the new one: the
    subscription must end, said, rather than go silent."""
    if sub.refs is None or table is sub.planned_for:
        return None
    try:
        sub.filters = plan_filters(parse_filter_list(refs.filters_by_name(table, sub.refs)), table)
    except UnknownColumn:  # by id, only a deleted column is unknown
        return f"a column its filter names was deleted from table {table.name!r}"
    except ServiceError as exc:
        return f"its filter no longer applies to table {table.name!r} ({exc.code}: {exc.message})"
    sub.planned_for = table
    return None


def _ts(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value)).astimezone(timezone.utc)


def typed_row(table: TableMeta, raw: dict[str, Any]) -> tuple[dict[str, Any], list[ColumnMeta]]:
    """A ``to_jsonb`` row → the Python values psycopg would return for the physical row, and
    the columns whose stored value their type cannot read now (stored before the column was
    converted: ``"abc"`` in a column that is a number now), read as NULL here."""
    out: dict[str, Any] = {"id": raw.get("id"), "created_at": _ts(raw.get("created_at")), "updated_at": _ts(raw.get("updated_at"))}
    stale: list[ColumnMeta] = []
    for col in table.columns:
        value = raw.get(col.physical)
        if value is not None and not col.computed:
            try:
                if not _fits(col, value):
                    raise ValueError(col.physical)
                if col.type is ColumnType.DATE:
                    value = _ts(value)
                elif col.type is ColumnType.NUMBER:
                    value = float(value)
            except ValueError:
                stale.append(col)
                value = None
        out[col.physical] = value
    return out, stale


# the JSON type ``to_jsonb`` gives each data column type's stored values
_JSON_TYPES: dict[ColumnType, tuple[type, ...]] = {
    ColumnType.TEXT: (str,), ColumnType.SINGLE_SELECT: (str,), ColumnType.DATE: (str,),
    ColumnType.NUMBER: (int, float), ColumnType.CHECKBOX: (bool,), ColumnType.RELATION: (int,),
    ColumnType.MULTI_SELECT: (list,), ColumnType.FILE: (list,),
}


def _fits(col: ColumnMeta, value: Any) -> bool:
    """Whether a stored (non-NULL) data value is of the JSON type the column stores now."""
    kinds = _JSON_TYPES.get(col.type)
    if kinds is None:
        return True
    if isinstance(value, bool) and col.type is not ColumnType.CHECKBOX:
        return False
    return isinstance(value, kinds) and (col.type is not ColumnType.MULTI_SELECT
                                         or all(isinstance(v, str) for v in value))


def event_record(table: TableMeta, raw: dict[str, Any]) -> dict[str, Any]:
    """A stored event's record in the API's shape, with today's column names. A value its
    column's type cannot read now (:func:`typed_row`) is shown as it was stored: the event
    is history."""
    row, stale = typed_row(table, raw)
    record = rec.row_to_record(table, row)
    for col in stale:
        if col.name in record["fields"]:
            record["fields"][col.name] = raw.get(col.physical)
    return record


def _brief_record(raw: dict[str, Any]) -> dict[str, Any]:
    return {"id": raw.get("id"), "created_at": iso(_ts(raw.get("created_at"))),
            "updated_at": iso(_ts(raw.get("updated_at")))}


def decode_change(table: TableMeta, row: dict[str, Any]) -> Change:
    """A row of :data:`EVENT_COLUMNS` → the ``change`` message. A cut event (``truncated``)
    carries each record's id and timestamps only, and says so."""
    new_raw, old_raw, cut = row["record"], row["old_record"], bool(row.get("truncated"))
    if cut:
        new = _brief_record(new_raw) if new_raw is not None else None
        old = _brief_record(old_raw) if old_raw is not None else None
    else:
        new = event_record(table, new_raw) if new_raw is not None else None
        old = event_record(table, old_raw) if old_raw is not None else None
    message: dict[str, Any] = {
        "type": "change", "event": row["event"], "table_id": table.id, "table": table.name,
        "record": new, "old_record": old, "seq": row["seq"],
    }
    if cut:
        message["truncated"] = True
    data = jsontext.dumps(message)
    sides = (new_raw is not None) + (old_raw is not None)
    return Change(row["seq"], table.id, row["event"], data.decode(), len(data), sides)


def _first_seqs(ranges: list[tuple[int, int]], seqs: int, most: int) -> tuple[list[tuple[int, int]],
                                                                            list[tuple[int, int]]]:
    """The first ``seqs`` seqs of ``ranges`` (inclusive ``(lo, hi)`` pairs, in order), in at
    most ``most`` ranges, and the ranges left.

    >>> _first_seqs([(1, 10), (20, 20), (30, 40)], 12, 50)
    ([(1, 10), (20, 20), (30, 30)], [(31, 40)])
    >>> _first_seqs([(1, 3), (5, 6)], 100, 1)
    ([(1, 3)], [(5, 6)])
    """
    take: list[tuple[int, int]] = []
    for i, (lo, hi) in enumerate(ranges):
        if seqs <= 0 or len(take) >= most:
            return take, ranges[i:]
        if hi - lo + 1 <= seqs:
            take.append((lo, hi))
            seqs -= hi - lo + 1
        else:
            take.append((lo, lo + seqs - 1))
            return take, [(lo + seqs, hi), *ranges[i + 1:]]
    return take, []


def _stale(schema: Any, rows: list[dict[str, Any]]) -> bool:
    known: dict[int, set[str]] = {}
    for r in rows:
        table = schema.tables.get(r["table_id"])
        if table is None:
            return True
        cols = known.get(table.id)
        if cols is None:
            cols = known[table.id] = {c.physical for c in table.columns}
        if any(k.startswith("c_") and k not in cols for k in (r["record"] or r["old_record"] or ())):
            return True
    return False


def _amount(n: int) -> str:
    return f"{n / 2**20:.3g} MiB" if n >= 2**20 else f"{n / 1024:.3g} KiB"


def _size(item: Any) -> int:
    """The bytes of queued events an item holds (control messages are small and counted
    by the queue's length only)."""
    if isinstance(item, Change):
        return item.size
    if isinstance(item, list):
        return sum(one.size for one in item if isinstance(one, Change))
    return 0


class Client:
    """One WebSocket: its credential, subscriptions, bounded queue and sender task."""

    def __init__(self, hub: Hub, ws: WebSocket, secret: str, principal: Principal, queue_max: int) -> None:
        self.hub = hub
        self.ws = ws
        self.secret = secret
        self.principal = principal
        self.workspace_id = principal.workspace_id
        self.subs: dict[int, Subscription] = {}
        self.queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=queue_max)
        self.queued_bytes = 0  # events' bytes queued or being sent (Hub.charge)
        self.closed = False
        self.sender: asyncio.Task[None] | None = None

    def offer(self, change: Change) -> None:
        sub = self.subs.get(change.table_id)
        if sub is None or not sub.wants(change):
            return
        if sub.buffering:
            if len(sub.buffer) >= self.queue.maxsize:
                self.kill(SLOW_CONSUMER, "slow consumer: too many events during replay")
                return
            # held in memory as the queue's events are: under the same byte bounds
            sub.buffer.append(change)
            self.hub.charge(self, change.size)
            return
        self.put(change)

    def attach(self, sub: Subscription) -> None:
        """Subscribe (replacing the table's subscription, if any)."""
        self.detach(sub.table_id)
        self.subs[sub.table_id] = sub

    def detach(self, table_id: int) -> Subscription | None:
        """Unsubscribe from a table; the events its replay buffered are no longer held."""
        sub = self.subs.pop(table_id, None)
        if sub is not None:
            self.release(sub)
        return sub

    def release(self, sub: Subscription) -> list[Change]:
        """Take the events ``sub`` buffered during its replay (no longer counted as held)."""
        held, sub.buffer, sub.buffering = sub.buffer, [], False
        self.hub.charge(self, -sum(c.size for c in held))
        return held

    def put(self, item: Any) -> None:
        if self.closed:
            return
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            self.kill(SLOW_CONSUMER, f"slow consumer: more than {self.queue.maxsize} events queued")
            return
        self.hub.charge(self, _size(item))

    def kill(self, code: int, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.hub.remove(self)
        if self.sender is not None:
            self.sender.cancel()
        asyncio.get_running_loop().create_task(self._close(code, reason))

    async def _close(self, code: int, reason: str) -> None:
        try:
            await asyncio.wait_for(self.ws.close(code=code, reason=reason[:120]), timeout=2.0)
        except Exception:  # the peer is gone or not reading: nothing more to do
            pass

    async def send_loop(self, heartbeat_s: float) -> None:
        """The one writer of this socket: queued messages, permission re-checks, heartbeats."""
        while True:
            try:
                item = await asyncio.wait_for(self.queue.get(), timeout=heartbeat_s)
            except asyncio.TimeoutError:
                await self.ws.send_text('{"type":"heartbeat"}')
                continue
            try:
                for one in item if isinstance(item, list) else (item,):
                    if isinstance(one, Change):
                        if not await self._still_allowed(one.table_id):
                            continue
                        await self.ws.send_text(one.text)
                    else:
                        await self.ws.send_text(jsontext.dumps(one).decode())
            finally:
                self.hub.charge(self, -_size(item))

    async def _still_allowed(self, table_id: int) -> bool:
        """Re-check the credential and its grant on each delivery (cached principal)."""
        try:
            self.principal = await self.hub.principal(self.secret)
        except ServiceError as exc:
            self.kill(POLICY, f"{exc.code}: {exc.message}")
            return False
        if self.principal.can_read(table_id):
            return True
        if self.detach(table_id) is not None:
            await self.ws.send_text(jsontext.dumps({
                "type": "error", "code": "FORBIDDEN", "table_id": table_id,
                "error": "this token may no longer read the table; unsubscribed",
            }).decode())
        return False


class _Seen:
    """Recently delivered seqs of one workspace (notifications' ranges may overlap)."""

    def __init__(self) -> None:
        self.set: set[int] = set()
        self.order: deque[int] = deque()

    def add(self, seq: int) -> bool:
        if seq in self.set:
            return False
        self.set.add(seq)
        self.order.append(seq)
        if len(self.order) > _SEEN_PER_WORKSPACE:
            self.set.discard(self.order.popleft())
        return True


class Hub:
    """Per-process fan-out of change notifications to WebSocket clients."""

    def __init__(self, state: AppState) -> None:
        self.state = state
        self.clients: dict[int, set[Client]] = {}
        self.seen: dict[int, _Seen] = {}
        self.pending: dict[int, list[tuple[int, int]]] = {}
        self.high: dict[int, int] = {}  # highest seq delivered per workspace
        self.wake = asyncio.Event()
        self.queued: dict[int, int] = {}  # events' bytes queued per workspace (Hub.charge)
        self.chunks: dict[int, int] = {}  # seqs per delivery statement, per workspace (Hub._deliver)
        self.tasks: list[asyncio.Task[None]] = []
        self.listening = asyncio.Event()

    def start(self) -> None:
        self.tasks = [
            asyncio.create_task(self._listen(), name="wds-realtime-listen"),
            asyncio.create_task(self._fetch_loop(), name="wds-realtime-fetch"),
            asyncio.create_task(self._retention_loop(), name="wds-realtime-retention"),
        ]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        for clients in list(self.clients.values()):
            for client in list(clients):
                client.kill(1001, "server shutting down")

    # ------------------------------------------------------------------ clients
    async def principal(self, secret: str) -> Principal:
        """Resolve a REST-door credential: service token (not user_mcp) or app-user JWT."""
        from api.deps import resolve_principal  # deps imports appusers; avoid a cycle at import

        if is_app_token(secret):
            return await app_user_principal(self.state, secret)
        principal = await resolve_principal(self.state, secret)
        if principal.type is TokenType.USER_MCP:
            raise Forbidden("user_mcp tokens work on the MCP server only", code="WRONG_PROTOCOL")
        return principal

    def add(self, client: Client) -> None:
        self.clients.setdefault(client.workspace_id, set()).add(client)
        self.seen.setdefault(client.workspace_id, _Seen())

    def connections(self, workspace_id: int) -> int:
        """The workspace's open realtime sockets in this process."""
        return len(self.clients.get(workspace_id, ()))

    def charge(self, client: Client, size: int) -> None:
        """Count ``size`` more (or, negative, fewer) bytes of events queued for ``client``.
        Past the socket's bound it is closed as a slow consumer; past the workspace's, so is
        the workspace's socket holding the most, until the rest fit."""
        if client.closed or not size:
            return
        settings = self.state.settings
        client.queued_bytes += size
        ws = client.workspace_id
        total = self.queued[ws] = self.queued.get(ws, 0) + size
        if size < 0:
            return
        cap = int(settings.realtime_socket_max_bytes)
        if client.queued_bytes > cap:
            client.kill(SLOW_CONSUMER, f"slow consumer: more than {_amount(cap)} of events queued")
            return
        cap = int(settings.realtime_workspace_max_bytes)
        while total > cap:
            group = [c for c in self.clients.get(ws, ()) if c.queued_bytes > 0]
            if not group:
                break
            slowest = max(group, key=lambda c: c.queued_bytes)
            slowest.kill(SLOW_CONSUMER, f"slow consumer: this workspace's sockets hold more than {_amount(cap)}"
                                        " of events; this one the most")
            total = self.queued.get(ws, 0)

    def remove(self, client: Client) -> None:
        if client.queued_bytes:
            left = self.queued.get(client.workspace_id, 0) - client.queued_bytes
            client.queued_bytes = 0
            if left > 0:
                self.queued[client.workspace_id] = left
            else:
                self.queued.pop(client.workspace_id, None)
        group = self.clients.get(client.workspace_id)
        if group is not None:
            group.discard(client)
            if not group:
                del self.clients[client.workspace_id]
                self.chunks.pop(client.workspace_id, None)

    async def decode(self, workspace_id: int, rows: Iterable[dict[str, Any]]) -> list[Change]:
        rows = list(rows)
        schema = await self.state.schema(workspace_id)
        if _stale(schema, rows):  # a table or column newer than our cached schema: reload once
            self.state.caches.drop_schema(workspace_id)
            schema = await self.state.schema(workspace_id)
        return [decode_change(schema.tables[r["table_id"]], r) for r in rows if r["table_id"] in schema.tables]

    # ------------------------------------------------------------------ listening
    async def _listen(self) -> None:
        dsn = self.state.settings.database_url
        first = True
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    if not first:  # catch up on what committed while we were not listening
                        for ws in list(self.clients):
                            if ws in self.high:
                                self.pending.setdefault(ws, []).append((self.high[ws] + 1, 2**62))
                        self.wake.set()
                    first = False
                    async for note in conn.notifies():
                        self._on_note(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # reconnect; clients resume with since= if they miss
                self.listening.clear()
                log.warning("realtime listener reconnecting: %s", exc)
                await asyncio.sleep(1.0)

    def _on_note(self, payload: str) -> None:
        parts = payload.split(":")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            return
        ws, lo, hi = (int(p) for p in parts)
        if ws not in self.clients:
            return
        self.pending.setdefault(ws, []).append((lo, hi))
        self.wake.set()

    async def _fetch_loop(self) -> None:
        """Deliver the pending events, one statement's worth per workspace in turn: a
        workspace whose statements wrote thousands of large events does not hold back the
        others' (each round serves every workspace with events waiting one chunk)."""
        while True:
            await self.wake.wait()
            self.wake.clear()
            pending, self.pending = self.pending, {}
            for ws, ranges in pending.items():
                try:
                    rest = await self._deliver(ws, ranges)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("realtime delivery failed for workspace %s", ws)
                    continue
                if rest:  # before what was notified meanwhile: delivered in seq order
                    self.pending[ws] = rest + self.pending.get(ws, [])
                    self.wake.set()

    async def _deliver(self, ws: int, ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Read and offer the first events of ``ranges`` (seq ranges, as notified), at most
        :meth:`_chunk` seqs in one statement; returns the ranges left. The chunk follows
        the workspace's recent event sizes so that one statement reads about
        :data:`DELIVER_BYTES` (a 500-row write of 200 KB records was read, decoded and
        offered at once: 100 MB in this process, the event loop held ~0.75 s)."""
        take, rest = _first_seqs(ranges, self._chunk(ws), 50)
        cond = " OR ".join(["seq BETWEEN %s AND %s"] * len(take))
        params: list[Any] = [ws] + [v for r in take for v in r]
        async with self.state.db.connection() as conn:
            cur = await conn.execute(
                EVENT_COLUMNS + f" WHERE workspace_id = %s AND ({cond}) ORDER BY seq",  # cond: fixed text only
                [self.state.settings.realtime_event_max_bytes, *params],
            )
            rows = await cur.fetchall()
        seen = self.seen.setdefault(ws, _Seen())
        fresh = [r for r in rows if seen.add(r["seq"])]
        if not fresh:
            return rest
        self.high[ws] = max(self.high.get(ws, 0), fresh[-1]["seq"])
        changes = await self.decode(ws, fresh)
        if changes:
            mean = sum(c.size for c in changes) / len(changes)
            self.chunks[ws] = max(DELIVER_FIRST, min(DELIVER_MAX, int(DELIVER_BYTES // max(mean, 1.0))))
        await self._replan(ws)
        subs = [sub for client in self.clients.get(ws, ()) for sub in client.subs.values()]
        await self.judge(ws, changes, subs)
        for client in list(self.clients.get(ws, ())):
            for change in changes:
                client.offer(change)
        return rest

    async def _replan(self, ws: int) -> None:
        """Plan again the filters of the workspace's subscriptions whose table changed; a
        subscription whose filter no longer applies ends with a ``SUBSCRIPTION_ENDED``
        error naming why (the client subscribes again)."""
        schema = await self.state.schema(ws)
        for client in list(self.clients.get(ws, ())):
            for table_id, sub in list(client.subs.items()):
                table = schema.tables.get(table_id)
                why = replan(sub, table) if table is not None else None
                if why is not None:
                    client.detach(table_id)
                    client.put({"type": "error", "code": "SUBSCRIPTION_ENDED", "table_id": table_id,
                                "error": f"the subscription to table {table_id} ended: {why}; subscribe again"})

    def _chunk(self, ws: int) -> int:
        """How many seqs the workspace's next delivery statement reads (:meth:`_deliver`)."""
        return self.chunks.get(ws, DELIVER_FIRST)

    async def judge(self, ws: int, changes: list[Change], subs: Iterable[Subscription]) -> None:
        """Decide, in PostgreSQL, which filtered subscriptions each change matches
        (:func:`storage.query.matching.match_events`): one statement per table, over every
        distinct filter set and both sides of every change, read from the stored events (a
        cut event is judged on its whole record)."""
        by_table: dict[int, dict[int, FilterSet]] = {}  # filter sets by identity (values hold dicts)
        for sub in subs:
            if sub.filters:
                by_table.setdefault(sub.table_id, {})[id(sub.filters)] = sub.filters
        if not by_table:
            return
        schema = await self.state.schema(ws)
        for table_id, sets in by_table.items():
            table = schema.tables.get(table_id)
            mine = [c for c in changes if c.table_id == table_id and c.sides]
            if table is None or not mine:
                continue
            filter_sets = list(sets.values())
            seqs = [c.seq for c in mine]
            try:
                groups = [(filter_sets, await self._verdicts(table, filter_sets, seqs))]
            except (psycopg.Error, ServiceError):
                # e.g. the table went away, or events written just before a column's
                # conversion no longer read as its type: each set alone, so one that cannot
                # be judged does not blind the others; the schema is read again for the next
                self.state.caches.drop_schema(ws)
                groups = []
                for filters in filter_sets:
                    try:
                        groups.append(([filters], await self._verdicts(table, [filters], seqs)))
                    except (psycopg.Error, ServiceError):
                        log.warning("a realtime filter of table %s could not be evaluated", table_id, exc_info=True)
            for change in mine:
                for judged, verdicts in groups:
                    sides = verdicts.get(change.seq, ())
                    for k, filters in enumerate(judged):
                        change.verdicts[id(filters)] = any(side[k] for side in sides)

    async def _verdicts(self, table: TableMeta, filter_sets: list[FilterSet],
                        seqs: list[int]) -> dict[int, list[list[bool]]]:
        async with self.state.db.connection() as conn:
            return await match_events(conn, table, filter_sets, seqs)

    # ------------------------------------------------------------------ replay and retention
    async def replay(self, ws: int, table_id: int, since: int) -> tuple[list[Change], bool, int]:
        """Retained events of a table after ``since``: (changes, truncated, purged_through).

        At most :data:`REPLAY_MAX` events and ``realtime_replay_max_bytes`` of their JSON
        as sent (always at least one event, so a client paging with ``since=last_seq`` moves
        on). The sizes are measured in PostgreSQL, a chunk of events at a time, before any
        record is read into this process; the cut stops at the first event past the budget.
        A cut event is sent small but measured whole, so what a replay may measure is
        bounded too (:data:`MEASURE_FACTOR` times the budget), and each chunk asks for no more
        events than that room holds at the sizes seen so far: 10,000 events of 1.8 MB would
        otherwise be rendered 1,024 at a time, past the statement timeout, on every resume.
        """
        budget = int(self.state.settings.realtime_replay_max_bytes)
        event_max = int(self.state.settings.realtime_event_max_bytes)
        room = budget * MEASURE_FACTOR
        cut, total, measured, count, truncated = since, 0, 0, 0, False
        chunk = REPLAY_SIZE_FIRST
        async with self.state.db.connection() as conn:
            while True:
                cur = await conn.execute(
                    f"SELECT seq, {EVENT_BYTES} AS size"
                    " FROM wds.events WHERE workspace_id = %s AND table_id = %s AND seq > %s ORDER BY seq LIMIT %s",
                    (ws, table_id, cut, chunk),
                )
                sized = await cur.fetchall()
                for row in sized:
                    size = int(row["size"] or 0)
                    sent = BRIEF_BYTES if size > event_max else size  # a cut event: EVENT_COLUMNS
                    if count >= REPLAY_MAX or (count and (total + sent > budget or measured + size > room)):
                        truncated = True
                        break
                    cut, total, measured, count = int(row["seq"]), total + sent, measured + size, count + 1
                if truncated or len(sized) < chunk:
                    break
                fits = (room - measured) * count // max(1, measured) + 1  # at the mean size so far
                chunk = max(1, min(chunk * 4, REPLAY_SIZE_MAX, fits))
            rows: list[dict[str, Any]] = []
            if count:
                cur = await conn.execute(
                    EVENT_COLUMNS + " WHERE workspace_id = %s AND table_id = %s AND seq > %s AND seq <= %s ORDER BY seq",
                    (event_max, ws, table_id, since, cut),
                )
                rows = await cur.fetchall()
            cur = await conn.execute("SELECT purged_through FROM wds.event_horizon WHERE workspace_id = %s", (ws,))
            horizon = await cur.fetchone()
        changes = await self.decode(ws, rows)
        return changes, truncated, int(horizon["purged_through"]) if horizon else 0

    async def current_seq(self, ws: int) -> int:
        """The workspace's latest assigned event seq (0 before the first change)."""
        async with self.state.db.connection() as conn:
            cur = await conn.execute(
                sql.SQL("SELECT CASE WHEN is_called THEN last_value ELSE 0 END AS seq FROM {}.event_seq").format(
                    sql.Identifier(f"ws_{int(ws)}")
                )
            )
            row = await cur.fetchone()
        return int(row["seq"]) if row else 0

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(min(60.0, max(1.0, self.state.settings.realtime_retention_s / 10)))
            try:
                await purge_events(self.state, self.state.settings.realtime_retention_s)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("realtime retention failed: %s", exc)


async def purge_events(state: AppState, retention_s: float, batch: int = 5_000) -> int:
    """Delete events older than the window in bounded batches; remember the purged seq."""
    total = 0
    while True:
        async with state.db.transaction() as conn:
            cur = await conn.execute(
                "WITH gone AS (DELETE FROM wds.events WHERE ctid = ANY(ARRAY("
                "   SELECT ctid FROM wds.events WHERE created_at < now() - make_interval(secs => %s)"
                "   LIMIT %s FOR UPDATE SKIP LOCKED)) RETURNING workspace_id, seq)"
                " INSERT INTO wds.event_horizon AS h (workspace_id, purged_through)"
                " SELECT workspace_id, max(seq) FROM gone GROUP BY workspace_id"
                " ON CONFLICT (workspace_id) DO UPDATE SET purged_through ="
                "   greatest(h.purged_through, excluded.purged_through)"
                " RETURNING (SELECT count(*) FROM gone) AS n",
                (float(retention_s), batch),
            )
            rows = await cur.fetchall()
        n = int(rows[0]["n"]) if rows else 0
        total += n
        if n < batch:
            return total
        await asyncio.sleep(0.05)  # let writers in between batches
