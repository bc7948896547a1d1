"""Stored embeddings (``ws_<w>.e_<t>``, see :mod:`storage.ddl`) and the search query.

The search is one statement: the HNSW index orders by cosine distance to the query
vector, the shared filter grammar (:func:`storage.query.build_where`) narrows the joined
records in the same SQL, and pgvector's iterative index scan keeps reading the index
until ``limit`` rows pass the filters (so a selective filter does not starve the page).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.rows import tuple_row

from storage.ddl import embedding_table, qualified
from storage.query import QueryPlan, build_where, decode_row
from storage.query.build import decoded_size
from storage.query.listing import PAGE_MAX_BYTES, page_too_large
from storage.records import row_list
from storage.schema import TableMeta

Conn = AsyncConnection[Any]
SEARCH_MAX_LIMIT = 100


def vector_text(vector: Sequence[float]) -> str:
    """pgvector's text form of a vector (bound as a parameter and cast, never inlined).

    >>> vector_text([0.5, -1.0])
    '[0.5,-1.0]'
    """
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


async def stored_hashes(conn: Conn, *, workspace_id: int, table_id: int, ids: Sequence[int]) -> dict[int, str]:
    """``record id → source_hash`` of the stored embeddings among ``ids``."""
    cur = await conn.execute(
        sql.SQL("SELECT id, source_hash FROM {} WHERE id = ANY(%s)").format(embedding_table(workspace_id, table_id)),
        (list(ids),),
    )
    return {r["id"]: r["source_hash"] for r in await cur.fetchall()}


async def upsert_embeddings(
    conn: Conn, *, workspace_id: int, table_id: int, items: Sequence[tuple[int, str, Sequence[float]]]
) -> int:
    """Store ``(record id, source hash, vector)`` items; records deleted meanwhile are
    skipped. Returns how many were written."""
    if not items:
        return 0
    query = sql.SQL(
        "INSERT INTO {e} (id, source_hash, embedding, updated_at)"
        " SELECT x.id, x.h, x.v::vector, now() FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS x(id, h, v)"
        " JOIN {t} AS t ON t.id = x.id"
        " ON CONFLICT (id) DO UPDATE SET source_hash = excluded.source_hash, embedding = excluded.embedding,"
        " updated_at = now()"
    ).format(e=embedding_table(workspace_id, table_id), t=qualified(workspace_id, table_id))
    params = ([i for i, _, _ in items], [h for _, h, _ in items], [vector_text(v) for _, _, v in items])
    try:
        cur = await conn.execute(query, params)
    except psycopg.errors.ForeignKeyViolation:
        # a record was deleted between the join and the insert: its embedding is moot
        return 0
    return cur.rowcount


async def delete_embeddings(conn: Conn, *, workspace_id: int, table_id: int, ids: Sequence[int]) -> None:
    """Forget the embeddings of ``ids`` (their embedded text became empty)."""
    if ids:
        await conn.execute(
            sql.SQL("DELETE FROM {} WHERE id = ANY(%s)").format(embedding_table(workspace_id, table_id)), (list(ids),)
        )


async def rows_after(conn: Conn, *, table: TableMeta, after_id: int, limit: int) -> list[dict[str, Any]]:
    """Whole stored rows with ``id > after_id``, ascending (the backfill pages with this);
    the columns listed from ``table`` (never ``*``: see :func:`storage.records.row_list`)."""
    cur = await conn.execute(
        sql.SQL("SELECT {} FROM {} WHERE id > %s ORDER BY id LIMIT %s").format(
            row_list(table), qualified(table.workspace_id, table.id)),
        (after_id, limit),
    )
    return await cur.fetchall()


# ----------------------------------------------------------------- the keeper's change log


async def workspaces_behind(conn: Conn, *, embedder: str) -> list[int]:
    """Workspaces with a table embedded by ``embedder`` (``provider/model``) whose change
    log has events past their mark for it, or deleted past it by retention, or that have
    no mark yet: one statement, an index probe per workspace (``wds.events`` is keyed by
    workspace and seq, ``wds.event_horizon`` by workspace)."""
    cur = await conn.execute(
        "SELECT w.workspace_id AS w FROM (SELECT DISTINCT workspace_id FROM wds.tables"
        " WHERE (semantic->>'provider') || '/' || (semantic->>'model') = %s) AS w"
        " LEFT JOIN wds.embedding_marks AS m ON m.workspace_id = w.workspace_id AND m.embedder = %s"
        " LEFT JOIN wds.event_horizon AS h ON h.workspace_id = w.workspace_id"
        " WHERE m.seq IS NULL OR h.purged_through > m.seq OR EXISTS (SELECT 1 FROM wds.events AS e"
        " WHERE e.workspace_id = w.workspace_id AND e.seq > m.seq) ORDER BY 1",
        (embedder, embedder))
    return [int(r["w"]) for r in await cur.fetchall()]


class Mark(NamedTuple):
    """Where the keeper stands in a workspace's change log for one model."""

    seq: int  # the events up to here have their records' embeddings current
    first: bool  # the mark was made now: at the log's end, what was written before is unread
    purged: int  # the highest seq retention deleted (``wds.event_horizon``; 0: none)


async def start_mark(conn: Conn, *, workspace_id: int, embedder: str) -> Mark:
    """The workspace's :class:`Mark` for ``embedder`` (``provider/model``), made at the
    log's end when it has none yet: one statement (the CTE's insert is not visible to the
    statement's own reads, so the new row's seq comes from its ``RETURNING``)."""
    cur = await conn.execute(
        "WITH made AS (INSERT INTO wds.embedding_marks (workspace_id, embedder, seq)"
        " SELECT %(w)s, %(e)s, coalesce(max(seq), 0) FROM wds.events WHERE workspace_id = %(w)s"
        " ON CONFLICT DO NOTHING RETURNING seq)"
        " SELECT coalesce((SELECT seq FROM made), (SELECT seq FROM wds.embedding_marks"
        " WHERE workspace_id = %(w)s AND embedder = %(e)s), 0) AS seq, EXISTS (SELECT 1 FROM made) AS first,"
        " coalesce((SELECT purged_through FROM wds.event_horizon WHERE workspace_id = %(w)s), 0) AS purged",
        {"w": workspace_id, "e": embedder})
    row = await cur.fetchone()
    assert row is not None
    return Mark(int(row["seq"]), bool(row["first"]), int(row["purged"]))


async def set_mark(conn: Conn, *, workspace_id: int, embedder: str, seq: int) -> None:
    await conn.execute("UPDATE wds.embedding_marks SET seq = greatest(seq, %s) WHERE workspace_id = %s"
                       " AND embedder = %s", (seq, workspace_id, embedder))


async def written_after(conn: Conn, *, workspace_id: int, after: int, table_ids: Sequence[int],
                        limit: int) -> list[tuple[int, int, int | None]]:
    """The next ``limit`` events of the workspace's change log after seq ``after``:
    ``(seq, table id, record id)``, the record id only for an insert or update of one of
    ``table_ids`` (the record's JSON is read for nothing else)."""
    cur = await conn.execute(
        "SELECT seq, table_id, CASE WHEN table_id = ANY(%s) AND event <> 'DELETE'"
        " THEN (record->>'id')::bigint END AS rid"
        " FROM wds.events WHERE workspace_id = %s AND seq > %s ORDER BY seq LIMIT %s",
        (list(table_ids), workspace_id, after, limit))
    return [(int(r["seq"]), int(r["table_id"]), None if r["rid"] is None else int(r["rid"]))
            for r in await cur.fetchall()]


async def count_rows(conn: Conn, *, workspace_id: int, table_id: int) -> int:
    cur = await conn.execute(sql.SQL("SELECT count(*) AS n FROM {}").format(qualified(workspace_id, table_id)))
    row = await cur.fetchone()
    return int(row["n"]) if row else 0


async def search(conn: Conn, plan: QueryPlan, vector: Sequence[float]) -> list[tuple[dict[str, Any], float]]:
    """Records of ``plan.table`` closest to ``vector`` that pass ``plan.filters``.

    Returns ``(record, score)`` pairs, best first; ``score`` is the cosine similarity
    (1 = same direction). ``plan.limit`` bounds the results; ``plan.fields`` are the
    columns read (no embeds).
    """
    table = plan.table
    columns: list[sql.Composable] = [sql.Identifier("t", n) for n in ("id", "created_at", "updated_at")]
    columns.extend(sql.Identifier("t", c.physical) for c in plan.fields)
    where, params = build_where(plan.filters, alias="t")
    distance = sql.SQL("(e.embedding <=> %s::vector)")
    closest = sql.SQL(
        "SELECT {cols}, {dist} AS distance FROM {e} AS e JOIN {t} AS t ON t.id = e.id"
        " WHERE {where} ORDER BY {dist} LIMIT %s"
    ).format(cols=sql.SQL(", ").join(columns), dist=distance, e=embedding_table(table.workspace_id, table.id),
             t=qualified(table.workspace_id, table.id), where=where)
    # the results hold at most PAGE_MAX_BYTES, as a list's page: measured in the same
    # statement, the values of the rows past it are not read (NULL), and the answer refused
    size, size_params = decoded_size(plan)
    kept = [sql.SQL("CASE WHEN w._fits THEN {} END").format(sql.Identifier("w", c.physical)) for c in plan.fields]
    query = sql.SQL(
        "SELECT w.id, w.created_at, w.updated_at{kept}, w.distance, w._fits FROM (SELECT t.*,"
        " sum({size}) OVER (ORDER BY t.distance ROWS UNBOUNDED PRECEDING) <= %s AS _fits"
        " FROM ({closest}) AS t) AS w ORDER BY w.distance"
    ).format(kept=sql.SQL("").join(sql.SQL(", ") + k for k in kept), size=size, closest=closest)
    text = vector_text(vector)
    async with conn.transaction():
        # relaxed_order: keep scanning the index until LIMIT rows pass the filters; the
        # slight reordering it allows is undone by sorting on the distance below
        await conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        await conn.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(max(40, plan.limit * 2))))
        cur = conn.cursor(row_factory=tuple_row)
        rows = await (await cur.execute(query, [*size_params, PAGE_MAX_BYTES, text, *params, text,
                                                plan.limit])).fetchall()
    fit = sum(1 for row in rows if row[-1])
    if fit < len(rows):
        raise page_too_large(fit)
    out = [(decode_row(plan, row[:-2]), 1.0 - float(row[-2])) for row in rows]
    out.sort(key=lambda pair: -pair[1])
    return out
