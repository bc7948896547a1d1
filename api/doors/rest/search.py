"""``POST {rest}/tables/{id}/search``: semantic search (the operation and the embeddings'
life cycle are in :mod:`api.ops.search`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from api.deps import RestPrincipal, StateDep
from api.ops import search as ops
from api.responses import JSON
from api.schemas import ErrorOut, RecordOut
from storage import semantic as sem

router = APIRouter(prefix="/functions/v1/rest-api", tags=["search"])
ERRORS: dict[int | str, dict[str, Any]] = {s: {"model": ErrorOut} for s in (400, 401, 402, 403, 404, 413, 429, 503)}


class SearchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(description="what to look for, in plain words")
    # the maximum is checked by the operation (400 LIMIT_TOO_LARGE, as a list's limit), not here
    limit: int = Field(ops.DEFAULT_LIMIT, ge=1, description=f"results, at most {sem.SEARCH_MAX_LIMIT}")
    filters: dict[str, Any] | list[dict[str, Any]] | None = Field(
        None, description="{column: \"op.value\"} or [{column, op, value}], ANDed, as on list queries")


class SearchHit(BaseModel):
    record: RecordOut
    score: float = Field(description="cosine similarity, 1 = same meaning")


class SearchOut(BaseModel):
    results: list[SearchHit]


@router.post("/tables/{table_id}/search", response_model=SearchOut, responses=ERRORS)
async def search(table_id: int, body: SearchIn, principal: RestPrincipal, state: StateDep) -> JSON:
    """Records closest in meaning to `query`, best first, with `filters` (the list-query
    grammar) applied in the same SQL. `score` is the cosine similarity."""
    return JSON(await ops.search_records(state, principal, table_id, body.query, limit=body.limit,
                                         filters=body.filters))
