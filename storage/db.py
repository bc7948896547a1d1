"""The PostgreSQL connection pool and the few helpers every storage module uses."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import re
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from time import monotonic
from types import TracebackType
from typing import Any

import orjson
import psycopg
from psycopg import AsyncClientCursor, sql
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from storage.errors import Conflict, LimitExceeded, QueryTimeout, Unavailable
from storage.slots import KeyedSlots

META = "wds"  # schema of our own metadata tables
STATEMENT_TIMEOUT_MS = 5_000  # default deadline of every statement (the smallest plan's SQL timeout)
CONNECTIONS_PER_WORKSPACE = 8  # default cap of one workspace's concurrent checkouts

# The workspace a request acts for (set once its principal is known): its connection
# checkouts count against its cap. ``_holding`` marks a task that holds a slot already, so
# a nested checkout (a query inside a transaction's scope) never waits on its own workspace.
current_workspace: contextvars.ContextVar[int | None] = contextvars.ContextVar("wds_workspace", default=None)
_holding: contextvars.ContextVar[bool] = contextvars.ContextVar("wds_holding_slot", default=False)


_LONG_DIGITS = re.compile(rb"\d{16}")


def json_loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Decode a ``json``/``jsonb`` value from PostgreSQL: orjson, ~5x faster than the
    standard library (a 500-row batch of computed columns decodes 2,000 values), with the
    standard library's exact result. orjson turns integers beyond 64 bits into floats, so
    any run of 16+ digits (big integers, full-precision floats) goes to :func:`json.loads`,
    as does anything orjson refuses (lone surrogates); jsonb never prints NaN, exponents
    or duplicate keys. Below 16 digits both parsers are exact.
    """
    if isinstance(data, memoryview):
        data = bytes(data)
    raw = data.encode() if isinstance(data, str) else data
    if _LONG_DIGITS.search(raw) is None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw)


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    set_json_loads(json_loads, conn)


_LIMITS = {
    "54001": "the request is too complex for the database (too deeply nested); simplify it",
    "54011": "the table would have more columns than the database allows",
    "54023": "the request passes more values than the database accepts in one statement; send fewer",
}


def limit_message(sqlstate: str) -> str:
    """The client's message for a statement that failed on a program limit (class 54)."""
    return _LIMITS.get(sqlstate, "a value or list in the request is larger than the database can store or"
                                 " compare; send a smaller one")


# psycopg_pool's state the quick checkout reads (LifoPool.getconn / putconn; its _lock as well,
# made when the pool opens)
_POOL_STATE = ("_waiting", "_closed", "_check", "_reset", "_drained_at", "_nconns_min", "_stats",
               "_REQUESTS_NUM", "_pool_full_event")


class LifoPool(AsyncConnectionPool):
    """A pool that hands out the connection returned last (LIFO, as SQLAlchemy's
    ``pool_use_lifo``); psycopg_pool's own order is FIFO, which cycles every request
    through every idle connection. Under light or sequential load a few warm backends then
    serve everything (their caches and prepared statements hot), and the connections a
    burst opened stay unused, so the pool's shrinking (one per ``max_idle`` in which some
    went unused) closes them, from the least recently used end. On the bench's SQL call
    after a 16-client phase had grown the pool to 20 connections, FIFO made the call
    ~0.2 ms slower (p50 0.91 vs 0.70 ms). ``tests/storage/test_db_pool.py`` checks the
    order, so a psycopg_pool that changes how it keeps idle connections is noticed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # the quick checkout below reads these psycopg_pool internals; a release without any
        # of them leaves every checkout to the library (tests/storage/test_db_pool.py fails
        # then, so the loss is noticed)
        self.quick = isinstance(getattr(self, "_pool", None), deque) and all(
            hasattr(self, name) for name in _POOL_STATE)

    async def _get_ready_connection(self, timeout: float | None) -> Any:
        idle = getattr(self, "_pool", None)
        if isinstance(idle, deque) and len(idle) > 1:
            idle.rotate(1)  # the newest (right end) first: psycopg_pool takes the left end
        return await super()._get_ready_connection(timeout)

    async def getconn(self, timeout: float | None = None) -> Any:
        """The library's ``getconn``, with a quick path for the common case: an idle
        connection, nobody waiting, no checkout or return in its critical section (its
        lock free) and no ``check`` callback. Then it does what the library's critical
        section does (the newest idle connection, the pool's low-water mark and request
        count, the connection marked as the pool's) without taking the lock, which no
        other task can hold between these lines: nothing here awaits."""
        idle = self._pool
        if (self.quick and idle and not self._closed and not self._waiting and self._check is None
                and not self._lock.locked()):
            conn = idle.pop()
            if len(idle) < self._nconns_min:
                self._nconns_min = len(idle)
            self._stats[self._REQUESTS_NUM] += 1
            conn._pool = self
            return conn
        return await super().getconn(timeout)

    async def putconn(self, conn: Any) -> None:
        """The library's ``putconn``, with a quick path for a connection given back idle
        (no transaction open, the library would do nothing to it), neither expired nor
        drained, to a pool with nobody waiting and no ``reset`` callback: it goes back on
        the idle deque as the library's ``_add_to_pool`` puts it. Anything else (a
        transaction left open, a broken or expired connection, a waiting client, a closed
        pool) takes the library's path."""
        if (self.quick and getattr(conn, "_pool", None) is self and not self._closed and self._reset is None
                and not self._waiting and self._pool_full_event is None and not self._lock.locked()
                and conn.pgconn.transaction_status == TransactionStatus.IDLE
                and conn._created_at > self._drained_at and conn._expire_at > monotonic()):
            conn._pool = None
            self._pool.append(conn)
            return
        await super().putconn(conn)


def bound_once(conn: psycopg.AsyncConnection[Any], memo: dict[str, bytes], key: str,
               query: bytes | sql.Composable, params: tuple[Any, ...]) -> bytes:
    """A memoised statement with its values bound into the text, once per ``memo`` (the
    memoised plan's own dict). psycopg's client-side binding quotes each value as a literal
    of its type; the client's text never reaches the statement. A memoised plan's values
    never change, and a statement without parameters is prepared by psycopg after a few
    calls with PostgreSQL keeping its plan; with bound parameters PostgreSQL planned it
    again on every call (``LIMIT $n`` keeps it on custom plans, ~0.1 ms a call)."""
    text = memo.get(key)
    if text is None:
        text = memo[key] = AsyncClientCursor(conn).mogrify(query, params).encode()
    return text


class Checkout:
    """One use of a pooled connection: ``async with db.connection() as conn``.

    On entry it takes one of the current workspace's slots (none outside a request, or when
    this task holds one already: a query inside a transaction's scope never waits on its
    own workspace), then a connection from the pool; on exit it gives both back. A
    connection left inside a transaction gets psycopg's own exit first (commit, or roll
    back after an error), as ``AsyncConnectionPool.connection()`` does. Database failures
    leave as service errors (:meth:`Database.translated`).

    A class rather than nested ``@asynccontextmanager`` generators (the workspace slot,
    then the pool's ``connection()``): every query of every request checks a connection
    out, and the three generator frames with their ``async with conn`` cost ~15 µs of the
    ~55 µs a checkout and one small query took (bench/RESULTS-hotpath.md, session 20).
    """

    __slots__ = ("db", "conn", "release", "token")

    def __init__(self, db: Database) -> None:
        self.db = db
        self.conn: psycopg.AsyncConnection[dict[str, Any]] | None = None
        self.release: Callable[[], None] | None = None
        self.token: contextvars.Token[bool] | None = None

    async def __aenter__(self) -> psycopg.AsyncConnection[dict[str, Any]]:
        db = self.db
        ws = current_workspace.get()
        if ws is not None and db.per_workspace > 0 and not _holding.get():
            try:
                self.release = await db._slots.take(ws, db.timeout_s)
            except TimeoutError:
                raise Unavailable(
                    f"this workspace already has {db.per_workspace} database queries running; retry shortly",
                    code="WORKSPACE_BUSY", headers={"Retry-After": "1"}) from None
            self.token = _holding.set(True)
        try:
            self.conn = await db.pool.getconn()
        except BaseException as exc:
            self._free()
            service = db.translated(exc)
            if service is not None:
                raise service from exc
            raise
        return self.conn

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        conn = self.conn
        assert conn is not None
        failed: BaseException | None = None
        try:
            try:
                if conn.pgconn.transaction_status != TransactionStatus.IDLE:
                    await conn.__aexit__(exc_type, exc, tb)
            finally:
                await self.db.pool.putconn(conn)
        except BaseException as exit_exc:  # the exit's own failure replaces the body's, as in the pool's
            failed = exc = exit_exc
        finally:
            self._free()
        if exc is not None:
            service = self.db.translated(exc)
            if service is not None:
                raise service from exc
            if failed is not None:
                raise failed

    def _free(self) -> None:
        if self.token is not None:
            _holding.reset(self.token)
            self.token = None
        if self.release is not None:
            self.release()
            self.release = None


class Database:
    """An async connection pool with autocommit connections.

    Transactions are explicit (``async with db.transaction() as conn``); single statements
    run in autocommit so a read costs exactly one round trip. A database outage surfaces
    as :class:`Unavailable` (503) after ``timeout_s`` instead of a hang.
    """

    def __init__(self, dsn: str, *, min_size: int = 2, max_size: int = 20, timeout_s: float = 5.0,
                 statement_timeout_ms: int = STATEMENT_TIMEOUT_MS,
                 per_workspace: int = CONNECTIONS_PER_WORKSPACE) -> None:
        self.dsn = dsn
        self.timeout_s = timeout_s
        self.statement_timeout_ms = statement_timeout_ms
        # at most this many connections per workspace (never all of the pool: 0 or more
        # than max_size - 1 means max_size - 1)
        self.per_workspace = min(per_workspace, max_size - 1) if per_workspace > 0 else max_size - 1
        self._slots = KeyedSlots(self.per_workspace)
        options = "-c timezone=UTC"
        if statement_timeout_ms > 0:
            options += f" -c statement_timeout={int(statement_timeout_ms)}"
        self._checking: asyncio.Task[None] | None = None
        self.pool = LifoPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout_s,
            open=False,
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                "connect_timeout": max(1, int(timeout_s)),
                # timestamps render in UTC whatever the server's default; every statement
                # has a deadline (a transaction may lower or raise it with SET LOCAL)
                "options": options,
            },
            # no per-checkout health check: it would double the round trips of every
            # request; a broken connection surfaces as Unavailable and is discarded
            reconnect_timeout=3600,
            configure=_configure,
        )

    def _check_soon(self) -> None:
        if self._checking is None or self._checking.done():
            self._checking = asyncio.get_running_loop().create_task(self._check())

    async def _check(self) -> None:
        with contextlib.suppress(Exception):
            await self.pool.check()

    async def open(self) -> None:
        await self.pool.open(wait=True, timeout=30)

    async def close(self) -> None:
        await self.pool.close()

    def connection(self) -> Checkout:
        """``async with db.connection() as conn``: a pooled autocommit connection, counted
        against the current workspace's slots (:class:`Checkout`)."""
        return Checkout(self)

    def translated(self, exc: BaseException) -> Exception | None:
        """The service error a database failure inside a checkout becomes (None: raise it
        as it is)."""
        if isinstance(exc, psycopg.errors.QueryCanceled):
            # statement_timeout (a client's cancel arrives as CancelledError instead)
            return QueryTimeout(
                f"the query ran longer than its {self.statement_timeout_ms / 1000:g} s statement timeout;"
                " narrow it with a filter or a smaller page")
        if isinstance(exc, PoolTimeout):
            return Unavailable("the database is not reachable right now")
        if isinstance(exc, psycopg.Error) and (exc.sqlstate or "").startswith("40"):
            # SQLSTATE class 40 (a deadlock, a serialization failure): PostgreSQL ended this
            # transaction in favour of a concurrent one; the connection is fine (it read as a
            # lost connection, and the pool's idle connections were checked for nothing)
            return Conflict("this request's transaction conflicted with a concurrent one and the database ended it"
                            f" ({(exc.diag.message_primary if exc.diag else None) or exc.sqlstate}); nothing was"
                            " written by it: retry the request", headers={"Retry-After": "1"})
        if isinstance(exc, psycopg.OperationalError):
            if (exc.sqlstate or "").startswith("54"):
                # a program limit (psycopg files class 54 under OperationalError): the
                # connection is fine and a retry fails the same way
                return LimitExceeded(limit_message(exc.sqlstate or ""))
            # connection lost mid-request (e.g. a server restart): the pool discards it, and
            # the idle ones, likely dead too, are checked at once instead of failing one by one
            self._check_soon()
            return Unavailable("the database connection was lost; retry the request")
        return None

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[dict[str, Any]]]:
        async with self.connection() as conn:
            async with conn.transaction():
                yield conn

    async def fetchrow(self, query: Any, params: Any = None) -> dict[str, Any] | None:
        async with self.connection() as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchone()

    async def fetch(self, query: Any, params: Any = None) -> list[dict[str, Any]]:
        async with self.connection() as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchall()

    async def execute(self, query: Any, params: Any = None) -> None:
        async with self.connection() as conn:
            await conn.execute(query, params)
