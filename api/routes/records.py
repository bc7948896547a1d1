"""Records: list (filters, order, paging, select/expand, counts), get, create, patch,
delete and batch create. Writes run the table's computed columns before answering."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import APIRouter, Query, Request
from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus
from starlette.responses import Response

from api.deps import RestPrincipal, StateDep, require, require_writable, table_or_404
from api.pipelines import (
    Computed,
    InsertFirst,
    await_pipeline,
    can_precompute,
    create_computed,
    queue_pipeline,
    refresh_embeddings,
    will_run,
)
from api.responses import JSON
from api.routes.tables import ERRORS
from api.routes.views import view_query
from api.schemas import BatchIn, BatchOut, Deleted, RecordIn, RecordList, RecordOut
from api.state import AppState
from storage import objects
from storage import records as rec
from storage.access import Action, Principal
from storage.errors import Forbidden, NotFound, ServiceError
from storage.plans import BATCH_MAX
from storage import jsontext
from storage.query import list_page, parse_params, parse_record_params, plan_query
from storage.query.listing import CountMode
from storage.query.plan import QueryPlan
from storage.query.render import (
    LIST_MEMO,
    PreparedList,
    list_records_json,
    memoised_list,
    prepared_or_plan,
)
from storage.schema import TableMeta

router = APIRouter(prefix="/functions/v1/rest-api/tables/{table_id}/records", tags=["records"])
MAX_BATCH = BATCH_MAX


async def _table(state: AppState, principal: Principal, table_id: int, action: Action) -> TableMeta:
    schema = await state.schema(principal.workspace_id)
    table = table_or_404(schema, table_id)
    require(principal, table, action)
    return table


def _fields_of(body: RecordIn) -> dict[str, Any]:
    if body.fields is not None and body.row_data is not None:
        raise ServiceError("send either fields or row_data, not both")
    fields = body.fields if body.fields is not None else body.row_data
    if fields is None:
        raise ServiceError("the body needs a fields object keyed by column name")
    return fields


async def _files(state: AppState, principal: Principal, table: TableMeta, prepared: rec.PreparedRow) -> None:
    """Resolve file-column object references (bucket of this workspace, object exists, and
    the writer may read it: the cell reads back as a signed URL)."""
    base = state.settings.public_base_url
    if objects.has_object_refs(table, prepared.values, base):
        async with state.db.connection() as conn:
            await objects.resolve_file_refs(conn, table=table, values=prepared.values, base_url=base,
                                            may_read=principal.may_read_object)


async def _write(
    state: AppState,
    principal: Principal,
    table: TableMeta,
    write: Callable[[AsyncConnection[Any]], Awaitable[list[dict[str, Any]]]],
    *,
    mode: str,
    changed: list[str] | None,
    enabled: bool,
    charged: bool = False,
    start: bool = True,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Run ``write`` and then the table's pipeline for the rows it wrote.

    Without computed columns to run, the write is one autocommit statement. With them,
    the write and its outbox row commit together, so a Temporal outage loses nothing.
    ``charged``: the automation runs are paid already (a staged create that fell back);
    ``start=False``: Temporal just refused to start its run, so it is only queued.
    """
    levels = will_run(table, mode=mode, changed=changed, enabled=enabled)
    if not levels:
        async with state.db.connection() as conn:
            rows = await write(conn)
        return await refresh_embeddings(state, table, rows, None, mode=mode, changed=changed)
    async with state.db.transaction() as conn:
        rows = await write(conn)
        pending = await queue_pipeline(state, principal, table, conn, rows, mode=mode, levels=levels,
                                       charged=charged)
    final, outcome = await await_pipeline(state, table, rows, pending, start=start)
    return await refresh_embeddings(state, table, final, outcome, mode=mode, changed=changed)


def _with_pipeline(record: dict[str, Any], outcome: dict[str, Any] | None) -> dict[str, Any]:
    if outcome is not None:
        record["pipeline"] = outcome
    return record


def _plain(table: TableMeta, *, enabled: bool) -> bool:
    """A create that nothing follows (no computed column to run, no embeddings to refresh)
    on a table PostgreSQL can render records of."""
    return not table.semantic and rec.insert_renderable(table) and not will_run(
        table, mode="create", changed=None, enabled=enabled)


def _record_id(record_id: str) -> int:
    # ids are bigints; anything else cannot name a record (404, like an unknown id)
    if not (record_id.isascii() and record_id.isdigit()) or len(record_id) > 18:
        raise NotFound(f"record {record_id} not found")
    return int(record_id)


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
    count: str | None = Query(None, description="`exact`: as `Prefer: count=exact`"),
    or_: str | None = Query(None, alias="or",
                            description="`(A.eq.1,and(B.gt.2,C.is.null))`: any of the conditions;"
                                        " also `and=(...)`, `not.or=(...)`, `not.and=(...)`"),
) -> Response:
    """List records. Filters are query parameters `<Column>=<op>.<value>` (eq, neq, gt, gte,
    lt, lte, like, ilike, in, cs, is, and `not.<op>`), or `filter[<Column>][<op>]=<value>`,
    and boolean groups `or=(...)` / `and=(...)`. A single-valued parameter given twice is
    `REPEATED_PARAMETER`. `Prefer: count=exact` (or `count=exact`) adds `X-Total-Count`
    and `Content-Range`; `Prefer: count=planned` gives the planner's estimate instead (reads
    no rows) and `count=estimated` is exact below 100,000 estimated matches, planned above.
    Every page carries `next`, a cursor to pass as `after` for the page after it (null on
    the last page); a deep page by cursor costs what the first page does."""
    return await list_response(state, principal, table_id, list(request.query_params.multi_items()),
                               prefer=request.headers.get("prefer", ""), view=view)


async def list_response(
    state: AppState, principal: Principal, table_id: int, params: list[tuple[str, str]], *,
    prefer: str, view: str | None,
) -> Response:
    """The list route's answer (shared with :mod:`api.fastpath`)."""
    schema = await state.schema(principal.workspace_id)
    table = table_or_404(schema, table_id)
    require(principal, table, Action.READ)
    want_count = prefer_count(prefer)
    if want_count is None and any(k == "count" for k, _ in params):
        # a memo hit means these exact parameters parsed before: a count parameter is count=exact
        want_count = CountMode.EXACT
    headers: dict[str, str] = {}
    if view is None and not any(k == "after" for k, _ in params):
        found = memoised_list(schema, ("rest", table.id, tuple(params)), lambda: plan_query(
            parse_params(params), table, can_read=principal.can_read, get_table=schema.tables.get))
    elif view is None:  # each cursor is another statement: not memoised
        found = prepared_or_plan(plan_query(
            parse_params(params), table, can_read=principal.can_read, get_table=schema.tables.get))
    else:  # a view's filters are read from the database: not memoised
        query = await view_query(state, principal, table, view, parse_params(params))
        found = prepared_or_plan(plan_query(query, table, can_read=principal.can_read, get_table=schema.tables.get))
    prepared = found if isinstance(found, PreparedList) else None
    if prepared is not None:
        # PostgreSQL renders the page as JSON: no row is decoded in Python
        async with state.db.connection() as conn:
            page, n, total, after = await list_records_json(conn, prepared, count=want_count)
        _count_headers(headers, prepared.offset, n, total)
        body = b'{"records":%s,"limit":%d,"offset":%d,"next":%s}' % (
            jsontext.compact(page) if prepared.compact else page.encode(), prepared.limit, prepared.offset,
            orjson.dumps(after))
        return Response(body, media_type="application/json", headers=headers)
    assert isinstance(found, QueryPlan)
    async with state.db.connection() as conn:
        records, total, after = await list_page(conn, found, count=want_count)
    _count_headers(headers, found.offset, len(records), total)
    return JSON({"records": records, "limit": found.limit, "offset": found.offset, "next": after}, headers=headers)


_PREFER_COUNT = re.compile(r"(?:^|[\s,;])count=(exact|planned|estimated)(?![\w-])")


def prefer_count(prefer: str) -> CountMode | None:
    """The count a ``Prefer`` header asks for (``count=exact|planned|estimated``), if any."""
    found = _PREFER_COUNT.search(prefer)
    return CountMode(found[1]) if found else None


def _count_headers(headers: dict[str, str], offset: int, n: int, total: int | None) -> None:
    """``X-Total-Count`` and ``Content-Range: first-last/total`` (``*/total`` when empty)."""
    if total is None:
        return
    headers["X-Total-Count"] = str(total)
    headers["Content-Range"] = f"{offset}-{offset + n - 1}/{total}" if n else f"*/{total}"


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


async def record_response(state: AppState, principal: Principal, table_id: int, record_id: str,
                          params: list[tuple[str, str]] | None = None) -> Response:
    """The get route's answer (shared with :mod:`api.fastpath`)."""
    if params:
        return await _shaped_record(state, principal, table_id, record_id, params)
    table = await _table(state, principal, table_id, Action.READ)
    row = await state.reader.get(table, _record_id(record_id))
    if row is None:
        raise NotFound(f"record {record_id} not found")
    return JSON(_with_pipeline(rec.row_to_record(table, row), rec.pipeline_of(row)))


async def _shaped_record(state: AppState, principal: Principal, table_id: int, record_id: str,
                         params: list[tuple[str, str]]) -> Response:
    """``GET …/records/{id}?select=…&expand=…``: the list's plan for the same select and
    expand, the record shaped from it exactly as the list shapes its records (same fields,
    order and embedded records; no pipeline outcome). The plan and its statement are
    memoised per table and query string for this schema version."""
    schema = await state.schema(principal.workspace_id)
    table = table_or_404(schema, table_id)
    require(principal, table, Action.READ)
    query = parse_record_params(params)
    rid = _record_id(record_id)
    memo: dict[Any, QueryPlan] = schema.derived.setdefault("record_plans", {})
    key = (table.id, tuple(params))
    plan = memo.get(key)
    if plan is None:
        plan = plan_query(dataclasses.replace(query, limit=1), table, can_read=principal.can_read,
                          get_table=schema.tables.get)
        if len(memo) >= LIST_MEMO:
            memo.clear()
        memo[key] = plan
    for embed in plan.embeds:  # the plan is shared: the read check on related tables is per caller
        if not principal.can_read(embed.table.id):
            raise Forbidden(f"no read permission on the table related by {embed.column.name!r}")
    # the row, and each embedded one, through the coalescing reader a plain GET uses: the
    # concurrent reads of a table share one query (one statement per request with the
    # embeds as subqueries measured 43 % of the plain GET at 16 clients, this 66 %)
    row = await state.reader.get(table, rid)
    if row is not None:
        record = rec.row_to_record(table, row, plan.fields)
        if plan.embeds:
            fields = record["fields"]
            for embed in plan.embeds:
                ref = row.get(embed.column.physical)
                related = None if ref is None else await state.reader.get(embed.table, int(ref))
                fields[embed.column.name] = (None if related is None
                                             else rec.row_to_record(embed.table, related, embed.fields))
            record["fields"] = {c.name: fields[c.name] for c in plan.output}  # the list's field order
        return JSON(record)
    raise NotFound(f"record {record_id} not found")
    for embed in plan.embeds:  # the plan is shared: the read check on related tables is per caller
        if not principal.can_read(embed.table.id):
            raise Forbidden(f"no read permission on the table related by {embed.column.name!r}")
    # the record and its embedded records in one statement (the same text for every id)
    async with state.db.connection() as conn:
        cur = await conn.cursor(row_factory=tuple_row).execute(text_sql, (*values, rid))
        got = await cur.fetchone()
    if got is not None:
        return JSON(decode_row(plan, got))
    raise NotFound(f"record {record_id} not found")


@router.post("", status_code=201, response_model=RecordOut, responses=ERRORS)
async def create(
    table_id: int,
    body: RecordIn,
    principal: RestPrincipal,
    state: StateDep,
    run_pipeline: bool = Query(True, description="false skips computed columns"),
) -> JSON:
    """Create a record (`fields` or `row_data`); computed columns run before the answer."""
    return await create_response(state, principal, table_id, body, run_pipeline=run_pipeline)


async def create_response(state: AppState, principal: Principal, table_id: int, body: RecordIn | dict[str, Any], *,
                          run_pipeline: bool) -> JSON:
    """The create route's answer (shared with :mod:`api.fastpath`, which passes the
    ``fields`` object of a body it has checked itself)."""
    require_writable(principal)
    table = await _table(state, principal, table_id, Action.CREATE)
    fields = _fields_of(body) if isinstance(body, RecordIn) else body
    prepared = rec.prepare_fields(table, fields, creating=True)
    await _files(state, principal, table, prepared)

    async def write(conn: AsyncConnection[Any]) -> list[dict[str, Any]]:
        return [await rec.insert_record(conn, table=table, row=prepared)]

    rows, outcome = await _write(state, principal, table, write, mode="create", changed=None, enabled=run_pipeline)
    return JSON(_with_pipeline(rec.row_to_record(table, rows[0]), outcome), status_code=201)


@router.patch("/{record_id}", response_model=RecordOut, responses=ERRORS)
async def update(
    table_id: int,
    record_id: str,
    body: RecordIn,
    principal: RestPrincipal,
    state: StateDep,
    run_pipeline: bool = Query(True, description="false skips computed columns"),
) -> JSON:
    """Change only the sent fields; computed columns depending on them run."""
    require_writable(principal)
    table = await _table(state, principal, table_id, Action.UPDATE)
    fields = _fields_of(body)
    prepared = rec.prepare_fields(table, fields, creating=False)
    await _files(state, principal, table, prepared)
    rid = _record_id(record_id)

    async def write(conn: AsyncConnection[Any]) -> list[dict[str, Any]]:
        row = await rec.update_record(conn, table=table, record_id=rid, row=prepared)
        return [] if row is None else [row]

    rows, outcome = await _write(state, principal, table, write, mode="edit", changed=list(fields),
                                 enabled=run_pipeline)
    if not rows:
        raise NotFound(f"record {record_id} not found")
    return JSON(_with_pipeline(rec.row_to_record(table, rows[0]), outcome))


@router.delete("/{record_id}", response_model=Deleted, responses=ERRORS)
async def delete(table_id: int, record_id: str, principal: RestPrincipal, state: StateDep) -> JSON:
    require_writable(principal)
    table = await _table(state, principal, table_id, Action.DELETE)
    async with state.db.connection() as conn:
        row = await rec.delete_record(conn, table=table, record_id=_record_id(record_id))
    if row is None:
        raise NotFound(f"record {record_id} not found")
    return JSON({"id": row["id"], "deleted": True})


@router.post("/batch", response_model=BatchOut, responses=ERRORS)
async def batch(table_id: int, body: BatchIn, principal: RestPrincipal, state: StateDep) -> JSON:
    """Create up to 500 records; one result per row in input order. A failing row does
    not abort the others; valid rows are inserted together in one statement."""
    require_writable(principal)
    if len(body.rows) > MAX_BATCH:
        raise ServiceError(f"a batch holds at most {MAX_BATCH} rows, got {len(body.rows)}", code="BATCH_TOO_LARGE")
    table = await _table(state, principal, table_id, Action.CREATE)
    results: list[dict[str, Any]] = [{} for _ in body.rows]
    valid: list[tuple[int, rec.PreparedRow]] = []
    for i, raw in enumerate(body.rows):
        fields = raw.get("fields", raw.get("row_data", raw)) if isinstance(raw, dict) else raw
        if isinstance(raw, dict) and ("fields" in raw or "row_data" in raw) and len(raw) != 1:
            results[i] = {"index": i, "error": "a row is {fields: {...}} or a plain object of fields", "code": "VALIDATION_ERROR"}
            continue
        try:
            prepared = rec.prepare_fields(table, fields, creating=True)
            await _files(state, principal, table, prepared)
            valid.append((i, prepared))
        except ServiceError as exc:
            results[i] = {"index": i, "error": exc.message, "code": exc.code}
    fallback = InsertFirst(charged=False)
    if valid and body.run_pipeline:
        levels = will_run(table, mode="create", changed=None, enabled=True)
        if can_precompute(state, table, levels, len(valid)):
            # the run computes the columns first; the records go in once, with their values
            done = await create_computed(state, principal, table, [p for _, p in valid], levels)
            if isinstance(done, Computed):
                for (i, _), stored in zip(valid, done.records):
                    results[i] = ({"index": i, "error": stored.message, "code": stored.code}
                                  if isinstance(stored, ServiceError) else {"index": i,
                                     "record": orjson.Fragment(jsontext.compact(stored))})
                out: dict[str, Any] = {"results": results}
                if done.outcome is not None:
                    out["pipeline"] = done.outcome
                return JSON(out)
            fallback = done
    if valid and _plain(table, enabled=body.run_pipeline):
        # nothing runs after the insert: PostgreSQL renders the new records (one statement,
        # no row decoded in Python); a failing row falls to the isolating path below
        try:
            async with state.db.connection() as conn:
                texts = await rec.insert_records_json(conn, table=table, rows=[p for _, p in valid])
        except ServiceError:
            pass
        else:
            for (i, _), text in zip(valid, texts):
                results[i] = {"index": i, "record": orjson.Fragment(jsontext.compact(text))}
            return JSON({"results": results})
    inserted: list[tuple[int, dict[str, Any]]] = []

    async def write(conn: AsyncConnection[Any]) -> list[dict[str, Any]]:
        inserted.clear()
        try:
            if conn.info.transaction_status == TransactionStatus.IDLE:
                # autocommit: the insert is one statement, atomic by itself
                rows = await rec.insert_records(conn, table=table, rows=[p for _, p in valid])
            else:
                async with conn.transaction():  # a savepoint inside the pipeline's transaction
                    rows = await rec.insert_records(conn, table=table, rows=[p for _, p in valid])
            inserted.extend(zip([i for i, _ in valid], rows))
        except ServiceError:
            # a row failed in the database (e.g. a relation to a missing record):
            # isolate it by inserting row by row, each under its own savepoint
            for i, prepared in valid:
                try:
                    async with conn.transaction():
                        inserted.append((i, await rec.insert_record(conn, table=table, row=prepared)))
                except ServiceError as exc:
                    results[i] = {"index": i, "error": exc.message, "code": exc.code}
        return [r for _, r in inserted]

    rows_after: list[dict[str, Any]] = []
    outcome: dict[str, Any] | None = None
    if valid:
        rows_after, outcome = await _write(state, principal, table, write, mode="create", changed=None,
                                           enabled=body.run_pipeline, charged=fallback.charged,
                                           start=fallback.start)
    per_row = (outcome or {}).get("per_record", {})
    for (i, _), row in zip(inserted, rows_after):
        record = rec.row_to_record(table, row)
        if per_row.get(str(row["id"])) is not None:
            record["pipeline"] = per_row[str(row["id"])]
        results[i] = {"index": i, "record": record}
    out = {"results": results}
    if outcome is not None:
        out["pipeline"] = {k: v for k, v in outcome.items() if k != "per_record"}
    return JSON(out)
