"""The embeddings' life cycle (semantic search): enabling it on a table, refreshing the
embeddings of written records, and the backfill of a table's existing records.

* Enabling (``semantic_search: {columns}`` on ``POST``/``PATCH {rest}/tables``):
  :func:`prepare_semantic` checks a provider can serve (503 ``NOT_CONFIGURED`` otherwise)
  and records ``{columns, provider, model, dim}``; :func:`apply_semantic` makes the
  embeddings table with its HNSW index in the same schema transaction; a table that
  already has records gets a backfill run (:func:`start_backfill`, progress at
  ``GET {rest}/runs/{run_id}``), whose id the PATCH answers in ``backfill``.
* Writes: :func:`refresh_after_write` (called by :func:`api.services.pipelines.run_after_write`
  after the computed columns ran) embeds the written records whose embedded text changed.
  A provider failure never fails the write: it shows as ``pipeline.errors._embedding``
  when a pipeline outcome is reported, and the keeper repairs it.
* Every other writer (a pipeline's record steps, run-actions and backfills of embedded
  computed columns, type changes, app-user sign-ups, a write whose refresh failed):
  :func:`run_keeper` follows each workspace's change log (``wds.events``, which every
  writer's statements feed) and refreshes the records written there, from
  ``wds.embedding_marks`` on. Records already current cost a hash comparison, no
  provider call. Writes the log no longer shows (a workspace met for the first time,
  or events retention deleted before the keeper read them) get a backfill of each
  embedded table (:func:`_unread_writes`).

Decision (documented): the embedding calls of writes and the backfill run in the API
process (the backfill as a tracked task), not in a Temporal activity: a write waits for
its own embeddings so the next search finds it, and a backfill interrupted by a restart
is resumed, idempotently, by sending the PATCH again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any

import psycopg

from activities.embeddings import BACKFILL_PAGE, backfill, refresh_rows
from api.services.aiclient import http_client
from api.state import AppState
from storage import ddl, runs
from storage import records as rec
from storage import semantic as sem
from storage.embeddings import (
    LOCAL_DIM,
    Embedder,
    LocalEmbedder,
    OpenAIEmbedder,
    choose_provider,
    embedded_columns,
)
from storage.errors import ServiceError, Unavailable
from storage.schema import ColumnMeta, TableMeta

log = logging.getLogger("wds.search")


def embedder(state: AppState) -> Embedder:
    """This process's embeddings provider (``WDS_EMBEDDINGS``; see storage.embeddings).

    Raises:
        NotConfigured: 503 ``NOT_CONFIGURED`` when no provider can serve.
    """
    s = state.settings
    name = choose_provider(s.embeddings, ai_base_url=s.ai_base_url)
    key = (name, s.embeddings_model if name == "openai" else "", s.ai_base_url or "")
    cached = state.extras.get("embedder")
    if cached is not None and cached[0] == key:
        return cached[1]  # type: ignore[no-any-return]
    made: Embedder
    if name == "local":
        made = LocalEmbedder()
    else:
        made = OpenAIEmbedder(http_client(state), (s.ai_base_url or "").rstrip("/"), s.ai_api_key,
                              s.embeddings_model)
    state.extras["embedder"] = (key, made)
    return made


async def prepare_semantic(state: AppState, semantic: dict[str, Any]) -> dict[str, Any]:
    """Complete a checked ``{columns}`` with the provider, model and vector size.

    An OpenAI-compatible provider is asked once for a probe vector (its size is the
    model's); so enabling fails fast, with 503, when the provider does not answer.
    """
    emb = embedder(state)
    dim = LOCAL_DIM if emb.name == "local" else len((await emb.embed(["dimension probe"]))[0])
    if emb.name == "local":  # load the model now, off the request: the backfill needs it next
        task = asyncio.create_task(_warm(emb))
        state.extras.setdefault("embedding_tasks", set()).add(task)
        task.add_done_callback(state.extras["embedding_tasks"].discard)
    return {**semantic, "provider": emb.name, "model": emb.model, "dim": dim}


async def _warm(emb: Embedder) -> None:
    try:
        if isinstance(emb, LocalEmbedder):
            await emb.ready()
    except ServiceError as exc:
        log.warning("local embeddings model not loaded: %s", exc.message)


async def apply_semantic(conn: psycopg.AsyncConnection[Any], workspace_id: int, table_id: int,
                         semantic: dict[str, Any] | None) -> None:
    """Create (or resize) the embeddings table, or drop it when search is turned off."""
    if semantic is None:
        await ddl.drop_embedding_table(conn, workspace_id, table_id)
    else:
        await ddl.create_embedding_table(conn, workspace_id, table_id, int(semantic["dim"]))
        # the keeper follows the workspace's writes from here on (the backfill does those before)
        await sem.start_mark(conn, workspace_id=workspace_id, embedder=f"{semantic['provider']}/{semantic['model']}")


def same_model(table: TableMeta, emb: Embedder) -> bool:
    cfg = table.semantic or {}
    return (cfg.get("provider"), cfg.get("model")) == (emb.name, emb.model)


# --------------------------------------------------------------------------- refresh


def _touches(table: TableMeta, mode: str, changed: list[str] | None) -> bool:
    cols = embedded_columns(table)
    if not cols:
        return False
    if mode != "edit" or changed is None:
        return True
    # computed columns may have re-run from the change, so they count as touched
    return any(c.name in changed or c.computed for c in cols)


async def refresh_after_write(state: AppState, table: TableMeta, rows: list[dict[str, Any]], *,
                              mode: str, changed: list[str] | None) -> str | None:
    """Re-embed freshly written rows of a semantic table; returns an error message or None."""
    if not table.semantic or not rows or not _touches(table, mode, changed):
        return None
    try:
        emb = embedder(state)
        if not same_model(table, emb):
            return "embeddings were made with another model; send semantic_search again to re-embed"
        await refresh_rows(state.db, emb, table, rows)
    except ServiceError as exc:
        log.warning("embeddings of table %s not refreshed: %s", table.id, exc.message)
        return exc.message
    except psycopg.errors.UndefinedTable:
        return "the embeddings index is missing; send semantic_search again to rebuild it"
    return None


# --------------------------------------------------------------------------- the keeper

KEEP_EVERY_S = 1.0  # how often each API process reads the change logs
KEEP_EVENTS = 2_000  # events of one workspace read at a time
KEEP_ROUNDS = 50  # reads of one workspace's log per pass at most (then the next workspace's turn)
KEEP_SLICE_S = 1.0  # no further read of one workspace's log in a pass after this long on it
KEEP_ROWS = BACKFILL_PAGE  # records loaded and refreshed at a time
KEEP_BACKOFF_MAX_S = 60.0  # a workspace whose provider failed is retried after at most this
KEEP_BACKFILLS = 2  # backfills the keeper starts run this many at a time per process (the rest wait)
_LOCK_CLASS = 0x57454D42  # "WEMB": pg_try_advisory_lock(class, workspace and model), one process each


async def run_keeper(state: AppState, *, interval_s: float = KEEP_EVERY_S) -> None:
    """Keep every writer's records embedded, forever (until cancelled); survives database
    and provider outages (a workspace whose provider fails waits, doubling up to a minute)."""
    backoff: dict[int, tuple[float, float]] = {}
    while True:
        await asyncio.sleep(interval_s)
        try:
            await keep_once(state, backoff)
        except Unavailable:
            pass  # the database is down; try again next round
        except Exception:
            log.exception("embeddings keeper pass failed")


async def keep_once(state: AppState, backoff: dict[int, tuple[float, float]] | None = None) -> int:
    """One pass over every workspace with semantic search; the events read."""
    try:
        emb = embedder(state)
    except ServiceError:
        return 0  # no provider here: no table can have embeddings of this process's making
    async with state.db.connection() as conn:  # an idle pass is this one statement
        workspaces = await sem.workspaces_behind(conn, embedder=f"{emb.name}/{emb.model}")
    read = 0
    for ws in workspaces:
        now = time.monotonic()
        if backoff is not None and backoff.get(ws, (0.0, 0.0))[0] > now:
            continue
        try:
            read += await keep_workspace(state, ws, emb)
        except Unavailable:
            raise  # the database is down: the whole pass waits
        except Exception as exc:  # the provider failed: the mark stays, the events are read again later
            if backoff is not None:
                delay = min(KEEP_BACKOFF_MAX_S, 2 * backoff.get(ws, (0.0, 0.5))[1])
                backoff[ws] = (now + delay, delay)
            if isinstance(exc, ServiceError):
                log.warning("embeddings of workspace %s not kept current yet: %s", ws, exc.message)
            else:
                log.exception("embeddings of workspace %s not kept current yet", ws)
        else:
            if backoff is not None:
                backoff.pop(ws, None)
    return read


async def keep_workspace(state: AppState, workspace_id: int, emb: Embedder) -> int:
    """Refresh the embeddings ``emb`` made of the records the workspace's change log wrote
    after its mark for ``emb``'s model (another model's tables are the processes'
    configured for it), :data:`KEEP_EVENTS` events at a time (at most :data:`KEEP_ROUNDS`
    times, and no new read after :data:`KEEP_SLICE_S` on it: the other workspaces' turn),
    moving the mark past each lot once its records are current; the events read (0:
    nothing new, or another process holds the workspace).

    Raises:
        ServiceError: the provider failed or is not configured (nothing moves).
    """
    schema = await state.schema(workspace_id)
    tables = {t.id: t for t in schema.tables.values() if t.semantic and embedded_columns(t) and same_model(t, emb)}
    if not tables:
        return 0
    model = f"{emb.name}/{emb.model}"
    lock_key = f"{workspace_id}/{model}"
    async with state.db.connection() as lock:
        got = await (await lock.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s)) AS got",
                                        (_LOCK_CLASS, lock_key))).fetchone()
        if not got or not got["got"]:
            return 0
        try:
            read = 0
            began = time.monotonic()
            async with state.db.connection() as conn:
                start = await sem.start_mark(conn, workspace_id=workspace_id, embedder=model)
            mark = start.seq
            if start.first or start.purged > mark:
                mark = await _unread_writes(state, workspace_id, model, tables, start)
            for _ in range(KEEP_ROUNDS):  # a busy log is read on in the same pass, for a while
                async with state.db.connection() as conn:
                    events = await sem.written_after(conn, workspace_id=workspace_id, after=mark,
                                                     table_ids=list(tables), limit=KEEP_EVENTS)
                if not events:
                    break
                written: dict[int, set[int]] = {}
                for _, table_id, record_id in events:
                    if record_id is not None:
                        written.setdefault(table_id, set()).add(record_id)
                if written:
                    for table_id, ids in written.items():
                        await _keep_table(state, emb, tables[table_id], sorted(ids))
                mark = events[-1][0]
                async with state.db.connection() as conn:
                    await sem.set_mark(conn, workspace_id=workspace_id, embedder=model, seq=mark)
                read += len(events)
                if len(events) < KEEP_EVENTS or time.monotonic() - began > KEEP_SLICE_S:
                    break
            return read
        finally:
            try:
                await lock.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", (_LOCK_CLASS, lock_key))
            except BaseException:
                await lock.close()  # its session ends, and the lock with it: never back in the pool held
                raise


async def _unread_writes(state: AppState, workspace_id: int, model: str, tables: dict[int, TableMeta],
                         start: sem.Mark) -> int:
    """Writes the keeper can no longer read: the workspace's tables were embedded before
    the keeper first met it (records other writers wrote then were never refreshed), or
    retention deleted events past its mark (it was behind longer than
    ``WDS_REALTIME_RETENTION_S``, e.g. through a long provider outage). Which records they
    wrote is unknown, so each embedded table gets a backfill run (``GET /runs/{id}``;
    records whose text is unchanged cost a hash, no provider call) and the mark moves past
    the deleted events; the new mark."""
    why = ("first met" if start.first
           else f"events {start.seq + 1}..{start.purged} deleted by retention before they were read")
    started = {table.id: await start_backfill(state, table, queued=True) for table in tables.values()}
    log.warning("embeddings of workspace %s: %s; backfilling %d table(s): %s", workspace_id, why, len(tables),
                ", ".join(f"table {tid} run {run['run_id'] if run else '- (no records)'}"
                          for tid, run in started.items()))
    if start.purged <= start.seq:
        return start.seq
    async with state.db.connection() as conn:
        await sem.set_mark(conn, workspace_id=workspace_id, embedder=model, seq=start.purged)
    return start.purged


async def _keep_table(state: AppState, emb: Embedder, table: TableMeta, ids: list[int]) -> None:
    for i in range(0, len(ids), KEEP_ROWS):
        async with state.db.connection() as conn:
            rows = await rec.get_record_rows(conn, table=table, record_ids=ids[i:i + KEEP_ROWS])
        try:
            await refresh_rows(state.db, emb, table, rows)
        except psycopg.errors.UndefinedTable:
            return  # search was turned off meanwhile


async def after_column_change(state: AppState, table: TableMeta, before: ColumnMeta,
                              after: ColumnMeta) -> dict[str, Any] | None:
    """Bring the embeddings of ``table`` (as it was before the change: its embedded
    columns are kept by id) current when a column it embeds changed how its values read:
    its type (converted in place by ``ALTER ... USING``, which fires no row trigger, so
    the keeper sees no write), its options (a relabelled option) or its name (the label of
    each line when several columns are embedded). Returns the backfill run started, or
    ``None``."""
    columns = embedded_columns(table) if table.semantic else []
    if after.id not in {c.id for c in columns}:
        return None
    renamed = before.name != after.name and len(columns) > 1  # one column's text has no label
    if (before.type, before.options) != (after.type, after.options) or renamed:
        return await embed_again(state, table.workspace_id, table.id)
    return None


async def embed_again(state: AppState, workspace_id: int, table_id: int) -> dict[str, Any] | None:
    """A backfill run of the table's embeddings, as the table now is, after a schema
    change rewrote what its records say (:func:`after_column_change`; an embedded column
    deleted with ``force``); nothing when search is off or this process cannot embed with
    the table's model (the process configured for it does, when something next writes
    the records). Returns the run started (:func:`start_backfill`), or ``None``."""
    table = (await state.schema(workspace_id)).tables.get(table_id)
    if table is None or not table.semantic or not embedded_columns(table):
        return None
    try:
        if not same_model(table, embedder(state)):
            return None
    except ServiceError:
        return None
    return await start_backfill(state, table)


async def start_backfill(state: AppState, table: TableMeta, *, queued: bool = False) -> dict[str, Any] | None:
    """Start embedding every record of ``table`` (nothing to do: ``None``). ``queued``
    (the keeper's): wait for one of :data:`KEEP_BACKFILLS` turns, so a first pass over
    many workspaces after an upgrade does not scan every table at once (the run shows
    ``running`` with nothing done meanwhile)."""
    async with state.db.connection() as conn:
        total = await sem.count_rows(conn, workspace_id=table.workspace_id, table_id=table.id)
    if total == 0:
        return None
    emb = embedder(state)
    run_id = f"run-{uuid.uuid4().hex[:16]}"
    where = f"api-task/embeddings/ws{table.workspace_id}/t{table.id}/{run_id}"
    async with state.db.connection() as conn:
        await runs.create_run(conn, run_id=run_id, workspace_id=table.workspace_id, table_id=table.id,
                              total=total, workflow_id=where, kind="embeddings")
    tasks: dict[int, asyncio.Task[Any]] = state.extras.setdefault("backfills", {})
    previous = tasks.get(table.id)
    if previous is not None and not previous.done():
        previous.cancel()  # the new configuration supersedes it

    gate: asyncio.Semaphore | None = (
        state.extras.setdefault("keeper_backfills", asyncio.Semaphore(KEEP_BACKFILLS)) if queued else None)

    async def run() -> None:
        try:
            async with gate or contextlib.nullcontext():
                await backfill(state.db, emb, table, run_id=run_id)
        except asyncio.CancelledError:
            async with state.db.connection() as conn:
                await runs.set_progress(conn, run_id=run_id, done=0, failed=0, status="cancelled")
            raise
        except Exception:
            log.exception("embedding backfill %s failed", run_id)
            async with state.db.connection() as conn:
                await runs.set_progress(conn, run_id=run_id, done=0, failed=0, status="failed")

    tasks[table.id] = asyncio.create_task(run(), name=f"wds-backfill-{run_id}")
    return {"run_id": run_id, "status": "running", "total": total, "done": 0, "failed": 0, "workflow_id": where}


# --------------------------------------------------------------------------- search
