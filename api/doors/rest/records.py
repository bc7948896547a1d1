"""Records: list (filters, order, paging, select/expand, counts), get, create, patch,
delete and batch create. Writes run the table's computed columns before answering."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from api.deps import RestPrincipal, StateDep
from api.doors.rest_reads import batch_response, list_response, record_response
from api.ops import records as ops
from api.responses import JSON
from api.schemas import ERRORS, BatchIn, BatchOut, Deleted, RecordIn, RecordList, RecordOut
from storage.query.parse import check_write_params

router = APIRouter(prefix="/functions/v1/rest-api/tables/{table_id}/records", tags=["records"])
_PIPELINE = frozenset({"run_pipeline"})


def _only(allowed: frozenset[str], what: str, hint: str = "") -> Any:
    """A dependency refusing any query parameter of a write but ``allowed`` (each once):
    ``UNKNOWN_PARAMETER`` / ``REPEATED_PARAMETER`` before anything is written. Declared
    after the principal, so a caller without a token still gets 401 first."""

    async def check(request: Request) -> None:
        check_write_params(request.query_params.multi_items(), allowed, what, hint)

    return Depends(check)


@router.get("", response_model=RecordList, responses=ERRORS)
async def list_(
    table_id: int,
    request: Request,
    principal: RestPrincipal,
    state: StateDep,
    # limit and offset are read as text: the query parser checks them with one message
    # on every door (docs/query.md), not FastAPI's integer validation
    limit: str | None = Query(None, description="page size, default 100, at most 1000"),
    offset: str | None = Query(None, description="rows to skip"),
    after: str | None = Query(None, description="a page's `next` cursor: the page after it (not with offset)"),
    order: str | None = Query(None, description="`Col.asc,Col.desc`; any column incl. id, created_at"),
    select: str | None = Query(None, description="`a,b` or `Rel(Name,Score)` to embed"),
    expand: str | None = Query(None, description="relation column(s) to embed whole"),
    view: str | None = Query(None, description="a saved view's id: its filters AND the query's; `order` overrides its sort"),
    count: str | None = Query(None, description="`exact`, `planned` or `estimated`: as `Prefer: count=...`"),
    or_: str | None = Query(None, alias="or",
                            description="`(A.eq.1,and(B.gt.2,C.is.null))`: any of the conditions;"
                                        " also `and=(...)`, `not.or=(...)`, `not.and=(...)`"),
) -> Response:
    """List records. Filters are query parameters `<Column>=<op>.<value>` (eq, neq, gt, gte,
    lt, lte, like, ilike, in, cs, is, and `not.<op>`), or `filter[<Column>][<op>]=<value>`,
    and boolean groups `or=(...)` / `and=(...)`. A single-valued parameter given twice is
    `REPEATED_PARAMETER`. `Prefer: count=exact` (or `count=exact`; `Prefer` wins) adds `X-Total-Count`
    and `Content-Range`; `Prefer: count=planned` gives the planner's estimate instead (reads
    no rows) and `count=estimated` is exact below 100,000 estimated matches, planned above.
    Every page carries `next`, a cursor to pass as `after` for the page after it (null on
    the last page); a deep page by cursor costs what the first page does, and so does a
    deep page by `offset` of an unfiltered list ordered by id (the default order)."""
    return await list_response(state, principal, table_id, list(request.query_params.multi_items()),
                               prefer=request.headers.get("prefer", ""), view=view)


@router.get("/{record_id}", response_model=RecordOut, responses=ERRORS)
async def get_(
    table_id: int,
    record_id: str,
    request: Request,
    principal: RestPrincipal,
    state: StateDep,
    select: str | None = Query(None, description="`a,b` or `Rel(Name,Score)` to embed, as on the list"),
    expand: str | None = Query(None, description="relation column(s) to embed whole, as on the list"),
) -> Response:
    """One record, with its last pipeline outcome when computed columns ran. With `select`
    or `expand` the record is shaped exactly as the list shapes it; any other query
    parameter is `UNKNOWN_PARAMETER`."""
    params = list(request.query_params.multi_items())
    return await record_response(state, principal, table_id, record_id, params)


@router.post("", status_code=201, response_model=RecordOut, responses=ERRORS)
async def create(
    table_id: int,
    body: RecordIn,
    principal: RestPrincipal,
    state: StateDep,
    run_pipeline: bool = Query(True, description="false skips computed columns"),
    _query: None = _only(_PIPELINE, "creating a record"),
) -> JSON:
    """Create a record (`fields` or `row_data`); computed columns run before the answer."""
    return JSON(await ops.create_record(state, principal, table_id, body.fields, row_data=body.row_data,
                                        run_pipeline=run_pipeline), status_code=201)


@router.patch("/{record_id}", response_model=RecordOut, responses=ERRORS)
async def update(
    table_id: int,
    record_id: str,
    body: RecordIn,
    principal: RestPrincipal,
    state: StateDep,
    run_pipeline: bool = Query(True, description="false skips computed columns"),
    _query: None = _only(_PIPELINE, "updating a record"),
) -> JSON:
    """Change only the sent fields; computed columns depending on them run."""
    return JSON(await ops.update_record(state, principal, table_id, record_id, body.fields, row_data=body.row_data,
                                        run_pipeline=run_pipeline))


@router.delete("/{record_id}", response_model=Deleted, responses=ERRORS)
async def delete(table_id: int, record_id: str, principal: RestPrincipal, state: StateDep,
                 _query: None = _only(frozenset(), "deleting a record")) -> JSON:
    """Delete a record. Relation cells pointing at it are cleared; the records whose cell
    was cleared run the computed columns that read it, as an update of the relation would,
    before the answer."""
    return JSON(await ops.delete_record(state, principal, table_id, record_id))


@router.post("/batch", response_model=BatchOut, responses=ERRORS)
async def batch(table_id: int, body: BatchIn, principal: RestPrincipal, state: StateDep,
                _query: None = _only(frozenset(), "a batch", " (send run_pipeline in the body)")) -> Response:
    """Create up to 500 records; one result per row in input order. A failing row does
    not abort the others; valid rows are inserted together in one statement."""
    return await batch_response(state, principal, table_id, body.rows, run_pipeline=body.run_pipeline)
