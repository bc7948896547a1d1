"""Semantic search and the embeddings' life cycle, for every door (REST
``POST {rest}/tables/{id}/search``, the MCP tool, the agent chat's tool).

* Enabling (``semantic_search: {columns}`` on ``POST``/``PATCH {rest}/tables``):
  :func:`prepare_semantic` checks a provider can serve (503 ``NOT_CONFIGURED`` otherwise)
  and records ``{columns, provider, model, dim}``; :func:`apply_semantic` makes the
  embeddings table with its HNSW index in the same schema transaction; a table that
  already has records gets a backfill run (:func:`start_backfill`, progress at
  ``GET {rest}/runs/{run_id}``), whose id the PATCH answers in ``backfill``.
* Writes: :func:`refresh_after_write` (called by ``api.pipelines.run_after_write`` after
  the computed columns ran) embeds the written records whose embedded text changed.
  A provider failure never fails the write: it shows as ``pipeline.errors._embedding``
  when a pipeline outcome is reported, and the backfill repairs it later.
* Search (REST, the MCP tool and the agent tool): :func:`search_records`.

Decision (documented): the embedding calls of writes and the backfill run in the API
process (the backfill as a tracked task), not in a Temporal activity: a write waits for
its own embeddings so the next search finds it, and a backfill interrupted by a restart
is resumed, idempotently, by sending the PATCH again.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import psycopg

from activities.embeddings import backfill, refresh_rows
from api.aiclient import http_client
from api.ops.access import table_for
from api.state import AppState
from storage import ddl, runs
from storage import semantic as sem
from storage.access import Action, Principal
from storage.embeddings import (
    LOCAL_DIM,
    Embedder,
    LocalEmbedder,
    NotConfigured,
    OpenAIEmbedder,
    check_query,
    choose_provider,
    embedded_columns,
)
from storage.errors import ServiceError
from storage.query import Query, parse_filter_list, parse_filter_object, plan_query
from storage.schema import TableMeta

log = logging.getLogger("wds.search")
DEFAULT_LIMIT = 10


# --------------------------------------------------------------------------- provider


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


def _same_model(table: TableMeta, emb: Embedder) -> bool:
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
        if not _same_model(table, emb):
            return "embeddings were made with another model; send semantic_search again to re-embed"
        await refresh_rows(state.db, emb, table, rows)
    except ServiceError as exc:
        log.warning("embeddings of table %s not refreshed: %s", table.id, exc.message)
        return exc.message
    except psycopg.errors.UndefinedTable:
        return "the embeddings index is missing; send semantic_search again to rebuild it"
    return None


async def start_backfill(state: AppState, table: TableMeta) -> dict[str, Any] | None:
    """Start embedding every record of ``table`` (nothing to do: ``None``)."""
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

    async def run() -> None:
        try:
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


def _filters(raw: Any) -> tuple[Any, ...]:
    if raw is None:
        return ()
    if isinstance(raw, dict):
        return parse_filter_object(raw)
    return parse_filter_list(raw)


async def search_records(state: AppState, principal: Principal, table_ref: int | str, query: Any, *,
                         limit: int = DEFAULT_LIMIT, filters: Any = None) -> dict[str, Any]:
    """``{results: [{record, score}]}`` for ``principal`` (who must be able to read the table).

    Raises:
        ServiceError: 400 ``NOT_CONFIGURED`` (search not enabled on the table), filter
            errors as on list queries; NotConfigured: 503 (no provider, or embeddings of
            another model); Forbidden/NotFound as on REST.
    """
    table = await table_for(state, principal, table_ref, Action.READ)
    if not table.semantic:
        raise ServiceError(f"semantic search is not enabled for table {table.name!r}; enable it with"
                           " semantic_search: {columns: [...]} on the table", code="NOT_CONFIGURED")
    text = check_query(query)
    if not 1 <= int(limit) <= sem.SEARCH_MAX_LIMIT:
        raise ServiceError(f"limit must be between 1 and {sem.SEARCH_MAX_LIMIT}", code="LIMIT_TOO_LARGE")
    schema = await state.schema(principal.workspace_id)
    plan = plan_query(Query(filters=_filters(filters), limit=int(limit)), table,
                      can_read=principal.can_read, get_table=schema.tables.get)
    emb = embedder(state)
    if not _same_model(table, emb):
        raise NotConfigured(f"this table's embeddings were made with {table.semantic.get('model')!r} but the"
                            f" server now embeds with {emb.model!r}; send semantic_search again to re-embed")
    vector = (await emb.embed([text]))[0]
    try:
        async with state.db.connection() as conn:
            hits = await sem.search(conn, plan, vector)
    except psycopg.errors.UndefinedTable:
        raise NotConfigured("the embeddings index of this table is missing; send semantic_search again") from None
    return {"results": [{"record": r, "score": round(s, 6)} for r, s in hits]}
