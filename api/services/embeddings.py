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
  when a pipeline outcome is reported, and the backfill repairs it later.

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
from api.services.aiclient import http_client
from api.state import AppState
from storage import ddl, runs
from storage import semantic as sem
from storage.embeddings import (
    LOCAL_DIM,
    Embedder,
    LocalEmbedder,
    OpenAIEmbedder,
    choose_provider,
    embedded_columns,
)
from storage.errors import ServiceError
from storage.schema import TableMeta

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
