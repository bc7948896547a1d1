"""Keeping a table's embeddings current: after writes, and as a backfill job.

Both take the provider (an :class:`storage.embeddings.Embedder`) and a database from the
caller, so the same code runs in the API process (after a write, and the backfill task
that ``PATCH {rest}/tables/{id}`` starts) or, later, inside a Temporal activity.

* :func:`refresh_rows` — embed the given stored rows whose embedded text changed (the
  stored ``source_hash`` says which did not), drop embeddings whose text became empty.
* :func:`backfill` — page through the whole table by id, refreshing each page, writing
  progress into the run row (``wds.runs``, kind ``embeddings``) that
  ``GET {rest}/runs/{run_id}`` reports. Idempotent: a restarted backfill re-embeds only
  what is missing or stale.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from storage import runs
from storage import semantic as sem
from storage.db import Database
from storage.embeddings import Embedder, document_text, embedded_columns, source_hash
from storage.errors import ServiceError
from storage.schema import TableMeta

log = logging.getLogger("wds.embeddings")
BACKFILL_PAGE = 128


@dataclass
class RefreshOutcome:
    embedded: int = 0
    unchanged: int = 0
    cleared: int = 0


async def refresh_rows(db: Database, embedder: Embedder, table: TableMeta,
                       rows: Sequence[Mapping[str, Any]]) -> RefreshOutcome:
    """Bring the embeddings of ``rows`` (whole stored rows) up to date.

    Raises:
        ServiceError: the provider failed (``UNAVAILABLE``) or is not configured.
    """
    out = RefreshOutcome()
    columns = embedded_columns(table)
    if not rows or not columns:
        return out
    texts = {int(r["id"]): document_text(columns, r) for r in rows}
    async with db.connection() as conn:
        current = await sem.stored_hashes(conn, workspace_id=table.workspace_id, table_id=table.id, ids=list(texts))
    empty = [rid for rid, text in texts.items() if not text]
    todo = [(rid, text, source_hash(embedder.model, text)) for rid, text in texts.items() if text]
    changed = [(rid, text, h) for rid, text, h in todo if current.get(rid) != h]
    out.unchanged = len(todo) - len(changed)
    vectors = await embedder.embed([text for _, text, _ in changed]) if changed else []
    async with db.connection() as conn:
        out.embedded = await sem.upsert_embeddings(
            conn, workspace_id=table.workspace_id, table_id=table.id,
            items=[(rid, h, vec) for (rid, _, h), vec in zip(changed, vectors, strict=True)],
        )
        stale_empty = [rid for rid in empty if rid in current]
        await sem.delete_embeddings(conn, workspace_id=table.workspace_id, table_id=table.id, ids=stale_empty)
        out.cleared = len(stale_empty)
    return out


async def backfill(db: Database, embedder: Embedder, table: TableMeta, *, run_id: str,
                   page: int = BACKFILL_PAGE) -> dict[str, int]:
    """Embed every record of ``table``, reporting progress on run ``run_id``.

    A page the provider fails on counts as failed and the run goes on (a later backfill
    retries it); the run ends ``completed``, ``completed_with_errors`` when some page failed,
    or ``failed`` when nothing could be embedded.
    """
    done = failed = 0
    after = 0
    last_error = ""
    while True:
        async with db.connection() as conn:
            rows = await sem.rows_after(conn, table=table, after_id=after, limit=page)
        if not rows:
            break
        try:
            await refresh_rows(db, embedder, table, rows)
            done += len(rows)
        except ServiceError as exc:
            failed += len(rows)
            last_error = exc.message
            log.warning("embedding backfill of table %s: %s", table.id, exc.message)
        after = int(rows[-1]["id"])
        async with db.connection() as conn:
            await runs.set_progress(conn, run_id=run_id, done=done, failed=failed, status=None)
        if len(rows) < page:
            break
    status = "failed" if failed and not done else "completed_with_errors" if failed else "completed"
    async with db.connection() as conn:
        await runs.set_progress(conn, run_id=run_id, done=done, failed=failed, status=status)
        if last_error:
            await conn.execute(
                "UPDATE wds.runs SET errors = jsonb_build_object('_embedding', %s::text) WHERE id = %s",
                (last_error, run_id),
            )
    return {"done": done, "failed": failed}
