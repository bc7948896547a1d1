"""Semantic search, for every door (REST ``POST {rest}/tables/{id}/search``, the MCP tool,
the agent chat's tool): :func:`search_records`. The embeddings' life cycle (enabling,
refreshing after writes, backfills) is :mod:`api.services.embeddings`."""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from api.ops.access import table_for
from api.services.embeddings import embedder, same_model
from api.state import AppState
from storage import semantic as sem
from storage.access import Action, Principal
from storage.embeddings import (
    NotConfigured,
    check_query,
)
from storage.errors import ServiceError
from storage.query import Query, parse_filters, plan_query

log = logging.getLogger("wds.search")
DEFAULT_LIMIT = 10


# --------------------------------------------------------------------------- provider


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
    plan = plan_query(Query(filters=parse_filters(filters), limit=int(limit)), table,
                      can_read=principal.can_read, get_table=schema.tables.get)
    emb = embedder(state)
    if not same_model(table, emb):
        raise NotConfigured(f"this table's embeddings were made with {table.semantic.get('model')!r} but the"
                            f" server now embeds with {emb.model!r}; send semantic_search again to re-embed")
    vector = (await emb.embed([text]))[0]
    try:
        async with state.db.connection() as conn:
            hits = await sem.search(conn, plan, vector)
    except psycopg.errors.UndefinedTable:
        raise NotConfigured("the embeddings index of this table is missing; send semantic_search again") from None
    return {"results": [{"record": r, "score": round(s, 6)} for r, s in hits]}
