"""Records, for every door: list (filters, order, paging, select/expand, counts), get,
create, update, delete and batch create. Writes run the table's computed columns before
answering.

REST (``api/doors/rest/records.py`` and its fast path), the MCP data and builder tools and the
agent chat call these. The list and the batch create hand back the JSON PostgreSQL
rendered as :class:`RawJson`, so a door that answers in JSON writes it as it is and no
record is decoded in Python on the way.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

import orjson
from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus

from api.deps import require, require_writable, table_or_404
from api.ops.access import table_for
from api.ops.views import view_query
from api.services.pipelines import (
    Computed,
    Pending,
    await_pipeline,
    create_computed,
    fair_turn,
    queue_pipeline,
    refresh_embeddings,
    will_run,
)
from api.state import AppState
from storage import appusers, jsontext, objects
from storage import records as rec
from storage.access import Action, Principal
from storage.errors import Forbidden, NotFound, ServiceError, ValidationError
from storage.plans import BATCH_MAX
from storage.query import (
    Query,
    list_page,
    parse_filters,
    parse_record_params,
    plan_filters,
    plan_query,
)
from storage.query.listing import CountMode
from storage.query.plan import QueryPlan
from storage.query.render import (
    LIST_MEMO,
    PreparedList,
    list_records_json,
    memoised_list,
    prepared_or_plan,
)
from storage.reads import Embedding, Step, joined_record, joined_steps
from storage.schema import TableMeta

MAX_BATCH = BATCH_MAX
# what an update by filter may read back at once for its pipeline or embeddings: a body's
# rows are bounded by the body limit, stored rows by nothing but their columns (a text
# cell holds up to a million characters)
MATCHING_READ_BYTES = 64 * 2**20


@dataclasses.dataclass(slots=True)  # not frozen: a frozen __init__ cost ~1.5 µs a record of a batch
class RawJson:
    """JSON text PostgreSQL rendered. ``spaced``: PostgreSQL's ``json`` text with blanks
    (``{"id" : 1}``), which :meth:`encoded` compacts; a door that needs the values decodes
    it once with :meth:`value`."""

    text: str
    spaced: bool = True

    def encoded(self) -> bytes:
        """Compact JSON bytes, as every body the API writes."""
        return jsontext.compact(self.text) if self.spaced else self.text.encode()

    def value(self) -> Any:
        return orjson.loads(self.text)


@dataclasses.dataclass(frozen=True, slots=True)
class ListRequest:
    """A door's list query, parsed lazily: a memoised statement skips the parse.

    ``key`` names the door and its raw arguments (the memo key, with the table's id);
    ``parse`` turns them into the one query model. ``memoise``: false for a saved view
    (its filters are read from the database) and for a cursor (each is another
    statement). ``probe_empty``: a limit of 0 reads one record, which tells whether any
    match (MCP's ``has_more``)."""

    key: Hashable
    parse: Callable[[], Query]
    memoise: bool = True
    probe_empty: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class RecordPage:
    """One page: ``records`` as PostgreSQL rendered them, or decoded rows when the plan
    is not renderable in SQL; ``n`` records on it; ``next`` the cursor of the page after
    it (``None`` on the last); ``total`` when a count was asked."""

    records: RawJson | list[dict[str, Any]]
    n: int
    limit: int
    offset: int
    next: str | None
    total: int | None


def record_id(ref: str | int) -> int:
    """A record id given as text (a path segment, a tool argument).

    Raises:
        NotFound: anything that cannot name a record (404, like an unknown id).
    """
    text = ref if isinstance(ref, str) else str(ref)
    # ids are bigints; anything else cannot name a record
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise NotFound(f"record {text} not found")
    return int(text)


async def list_records(state: AppState, principal: Principal, table_ref: int | str, req: ListRequest, *,
                       count: CountMode | None) -> RecordPage:
    """One page of the table's records for ``req``, counted as ``count`` asks.

    Raises:
        NotFound / Forbidden: the table; ServiceError: the query's faults (400).
    """
    schema = await state.schema(principal.workspace_id)
    table = table_or_404(schema, table_ref)
    require(principal, table, Action.READ)

    def plan(query: Query) -> QueryPlan:
        planned = plan_query(query, table, can_read=principal.can_read, get_table=schema.tables.get)
        return dataclasses.replace(planned, limit=1) if req.probe_empty and planned.limit == 0 else planned

    found: PreparedList | QueryPlan
    if req.memoise:
        found = memoised_list(schema, (table.id, req.key), lambda: plan(req.parse()))
    else:
        query = req.parse()
        if query.view is not None:  # a view's filters are read from the database
            query = await view_query(state, principal, table, query.view, query)
        found = prepared_or_plan(plan(query))
    if isinstance(found, PreparedList):
        # PostgreSQL renders the page as JSON: no row is decoded in Python
        async with state.db.connection() as conn:
            text, n, total, after, spaced = await list_records_json(conn, found, count=count)
        return RecordPage(RawJson(text, spaced), n, found.limit, found.offset, after, total)
    async with state.db.connection() as conn:
        records, total, after = await list_page(conn, found, count=count)
    return RecordPage(records, len(records), found.limit, found.offset, after, total)


async def get_record(state: AppState, principal: Principal, table_ref: int | str, ref: str | int,
                     params: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """One record, with its last pipeline outcome; with ``select``/``expand`` in
    ``params`` (the query string's form) shaped exactly as the list shapes it.

    Raises:
        NotFound: no such table or record; ServiceError: any other parameter (400).
    """
    if params:
        return await _shaped_record(state, principal, table_ref, ref, params)
    table = await table_for(state, principal, table_ref, Action.READ)
    row = await state.reader.get(table, record_id(ref))
    if row is None:
        raise NotFound(f"record {ref} not found")
    return _with_pipeline(rec.row_to_record(table, row), rec.pipeline_of(row))


async def _shaped_record(state: AppState, principal: Principal, table_ref: int | str, ref: str | int,
                         params: list[tuple[str, str]]) -> dict[str, Any]:
    """``GET …/records/{id}?select=…&expand=…``: the list's plan for the same select and
    expand, the record shaped from it exactly as the list shapes its records (same fields,
    order and embedded records; no pipeline outcome). The plan and its statement are
    memoised per table and query string for this schema version."""
    schema = await state.schema(principal.workspace_id)
    table = table_or_404(schema, table_ref)
    require(principal, table, Action.READ)
    memo: dict[Any, tuple[QueryPlan, tuple[Embedding, ...], tuple[Step, ...]]] = schema.derived.setdefault(
        "record_plans", {})
    key = (table.id, tuple(params))
    found = memo.get(key)
    if found is None:  # a hit means these exact parameters parsed and planned before
        query = parse_record_params(params)
        record_id(ref)  # an unknown id's 404 before the plan's faults, as before the memo
        plan = plan_query(dataclasses.replace(query, limit=1), table, can_read=principal.can_read,
                          get_table=schema.tables.get)
        if len(memo) >= LIST_MEMO:
            memo.clear()
        embeddings = tuple(Embedding(e.column, e.table, e.fields) for e in plan.embeds)
        found = memo[key] = (plan, embeddings, joined_steps(plan.fields, embeddings, plan.output))
    plan, embeddings, steps = found
    rid = record_id(ref)
    for embed in plan.embeds:  # the plan is shared: the read check on related tables is per caller
        if not principal.can_read(embed.table.id):
            raise Forbidden(f"no read permission on the table related by {embed.column.name!r}")
    if not embeddings:
        row = await state.reader.get(table, rid)
        if row is None:
            raise NotFound(f"record {ref} not found")
        return rec.row_to_record(table, row, plan.fields)
    # the row and its embedded ones in one statement (a LEFT JOIN per embed), coalesced
    # with the concurrent reads of the same table and embeds as a plain GET's reads are,
    # shaped by steps built once per plan (one statement per request with the embeds as
    # subqueries measured 43 % of the plain GET at 16 clients; the row, then each related
    # row through the reader, 51-62 %; this 85-94 %: bench/RESULTS-query.md)
    row = await state.reader.get_joined(table, rid, embeddings)
    if row is None:
        raise NotFound(f"record {ref} not found")
    return joined_record(steps, row)


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
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Run ``write`` and then the table's pipeline for the rows it wrote.

    Without computed columns to run, the write is one autocommit statement. With them,
    the write and its outbox row commit together, so a Temporal outage loses nothing.
    ``charged``: the automation runs are paid already (a computed create that fell back).
    """
    levels = will_run(table, mode=mode, changed=changed, enabled=enabled)
    if not levels:
        async with state.db.connection() as conn:
            rows = await write(conn)
        return await refresh_embeddings(state, table, rows, None, mode=mode, changed=changed)
    if not charged:  # a computed create that fell back took its turn already
        await fair_turn(state, table.workspace_id)
    async with state.db.transaction() as conn:
        rows = await write(conn)
        pending = await queue_pipeline(state, principal, table, conn, rows, mode=mode, levels=levels,
                                       charged=charged)
    final, outcome = await await_pipeline(state, table, rows, pending)
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


def _fields(fields: Any, row_data: Any) -> dict[str, Any]:
    """The record's values: ``fields``, or its alias ``row_data``."""
    if fields is not None and row_data is not None:
        raise ServiceError("send either fields or row_data, not both")
    chosen = fields if fields is not None else row_data
    if chosen is None:
        raise ServiceError("the body needs a fields object keyed by column name")
    if not isinstance(chosen, dict):
        raise ValidationError("fields must be an object keyed by column name")
    return chosen


async def create_record(state: AppState, principal: Principal, table_ref: int | str,
                        fields: dict[str, Any] | None, *, row_data: dict[str, Any] | None = None,
                        run_pipeline: bool = True) -> dict[str, Any]:
    """Create a record; computed columns run before the answer (their outcome in ``pipeline``).

    Raises:
        Forbidden: a read-only plan or no create right; ServiceError: the fields' faults.
    """
    require_writable(principal)
    table = await table_for(state, principal, table_ref, Action.CREATE)
    prepared = rec.prepare_fields(table, _fields(fields, row_data), creating=True)
    await _files(state, principal, table, prepared)
    # formulas computed first, stored once with their values (as a batch create)
    done = await create_computed(state, principal, table, [prepared], enabled=run_pipeline)
    if isinstance(done, Computed):
        stored = done.records[0]
        if isinstance(stored, ServiceError):
            raise stored
        # with its `pipeline`; the standard parser keeps integers beyond 64 bits exact
        return json.loads(stored)  # type: ignore[no-any-return]

    async def write(conn: AsyncConnection[Any]) -> list[dict[str, Any]]:
        return [await rec.insert_record(conn, table=table, row=prepared)]

    rows, outcome = await _write(state, principal, table, write, mode="create", changed=None, enabled=run_pipeline,
                                 charged=done.charged)
    return _with_pipeline(rec.row_to_record(table, rows[0]), outcome)


async def update_record(state: AppState, principal: Principal, table_ref: int | str, ref: str | int,
                        fields: dict[str, Any] | None, *, row_data: dict[str, Any] | None = None,
                        run_pipeline: bool = True) -> dict[str, Any]:
    """Change only the given fields; computed columns depending on them run.

    Raises:
        NotFound: no such record; Forbidden / ServiceError as for a create.
    """
    require_writable(principal)
    table = await table_for(state, principal, table_ref, Action.UPDATE)
    fields = _fields(fields, row_data)
    rid = record_id(ref)
    if principal.own_row_only(table.id):
        appusers.check_own_profile_row(principal, rid, fields)
    prepared = rec.prepare_fields(table, fields, creating=False)
    await _files(state, principal, table, prepared)

    async def write(conn: AsyncConnection[Any]) -> list[dict[str, Any]]:
        row = await rec.update_record(conn, table=table, record_id=rid, row=prepared)
        return [] if row is None else [row]

    rows, outcome = await _write(state, principal, table, write, mode="edit", changed=list(fields),
                                 enabled=run_pipeline)
    if not rows:
        raise NotFound(f"record {ref} not found")
    return _with_pipeline(rec.row_to_record(table, rows[0]), outcome)


async def delete_record(state: AppState, principal: Principal, table_ref: int | str,
                        ref: str | int) -> dict[str, Any]:
    """Delete a record: ``{id, deleted: true}``. Raises NotFound for an unknown record.

    Relation cells pointing at it are cleared by the database (``ON DELETE SET NULL``).
    Where computed columns depend on such a relation column, the records it cleared run
    their pipeline as an update of that column would (mode ``edit``), queued in the
    delete's transaction (so a Temporal outage loses nothing) and awaited before the
    answer; the delete's answer stays ``{id, deleted}``.
    """
    require_writable(principal)
    table = await table_for(state, principal, table_ref, Action.DELETE)
    rid = record_id(ref)
    schema = await state.schema(principal.workspace_id)
    relations = rec.relations_to(schema, table, lambda t, c: bool(will_run(t, mode="edit", changed=[c.name],
                                                                           enabled=True)))
    if not relations:  # nothing computed reads a link to it: one autocommit statement
        async with state.db.connection() as conn:
            row = await rec.delete_record(conn, table=table, record_id=rid)
        if row is None:
            raise NotFound(f"record {ref} not found")
        return {"id": row["id"], "deleted": True}
    await fair_turn(state, table.workspace_id)
    runs: list[tuple[TableMeta, list[dict[str, Any]], Pending | None]] = []
    async with state.db.transaction() as conn:
        unlinked = await rec.linked_records(conn, relations=relations, record_id=rid)
        row = await rec.delete_record(conn, table=table, record_id=rid)
        if row is None:
            raise NotFound(f"record {ref} not found")
        for group in unlinked:  # their relation cells are blank now: run what reads them
            rows = await rec.get_record_rows(conn, table=group.table, record_ids=group.record_ids)
            levels = will_run(group.table, mode="edit", changed=list(group.columns), enabled=True)
            pending = await queue_pipeline(state, principal, group.table, conn, rows, mode="edit", levels=levels)
            runs.append((group.table, rows, pending))
    for linked_table, rows, pending in runs:
        await await_pipeline(state, linked_table, rows, pending)
    return {"id": row["id"], "deleted": True}


async def create_records(state: AppState, principal: Principal, table_ref: int | str, rows: list[Any], *,
                         run_pipeline: bool = True) -> dict[str, Any]:
    """Create up to :data:`MAX_BATCH` records: ``{results, pipeline?}`` with one result per
    row in input order, ``{index, record}`` (a :class:`RawJson` when PostgreSQL rendered
    it) or ``{index, error, code}``. A failing row does not abort the others; valid rows
    are inserted together in one statement.

    Raises:
        ServiceError: ``BATCH_TOO_LARGE``; Forbidden / NotFound for the table.
    """
    require_writable(principal)
    if len(rows) > MAX_BATCH:
        raise ServiceError(f"a batch holds at most {MAX_BATCH} rows, got {len(rows)}", code="BATCH_TOO_LARGE")
    table = await table_for(state, principal, table_ref, Action.CREATE)
    results: list[dict[str, Any]] = [{} for _ in rows]
    valid: list[tuple[int, rec.PreparedRow]] = []
    for i, raw in enumerate(rows):
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
    # the columns computed first; the records go in once, with their values
    fallback = await create_computed(state, principal, table, [p for _, p in valid], enabled=run_pipeline)
    if isinstance(fallback, Computed):
        for (i, _), stored, spaced in zip(valid, fallback.records, fallback.spaced, strict=True):
            results[i] = ({"index": i, "error": stored.message, "code": stored.code}
                          if isinstance(stored, ServiceError) else {"index": i, "record": RawJson(stored, spaced)})
        out: dict[str, Any] = {"results": results}
        if fallback.outcome is not None:
            out["pipeline"] = fallback.outcome
        return out
    if valid and _plain(table, enabled=run_pipeline):
        # nothing runs after the insert: PostgreSQL renders the new records (one statement,
        # no row decoded in Python); a failing row falls to the isolating path below
        try:
            async with state.db.connection() as conn:
                texts, spaced = await rec.insert_records_json(conn, table=table, rows=[p for _, p in valid])
        except ServiceError:
            pass
        else:
            for (i, _), text, one_spaced in zip(valid, texts, spaced, strict=True):
                results[i] = {"index": i, "record": RawJson(text, one_spaced)}
            return {"results": results}
    inserted: list[tuple[int, dict[str, Any]]] = []

    async def write(conn: AsyncConnection[Any]) -> list[dict[str, Any]]:
        inserted.clear()
        try:
            if conn.info.transaction_status == TransactionStatus.IDLE:
                # autocommit: the insert is one statement, atomic by itself
                written = await rec.insert_records(conn, table=table, rows=[p for _, p in valid])
            else:
                async with conn.transaction():  # a savepoint inside the pipeline's transaction
                    written = await rec.insert_records(conn, table=table, rows=[p for _, p in valid])
            inserted.extend(zip([i for i, _ in valid], written))
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
                                           enabled=run_pipeline, charged=fallback.charged)
    per_row = (outcome or {}).get("per_record", {})
    for (i, _), row in zip(inserted, rows_after):
        record = rec.row_to_record(table, row)
        if per_row.get(str(row["id"])) is not None:
            record["pipeline"] = per_row[str(row["id"])]
        results[i] = {"index": i, "record": record}
    answer: dict[str, Any] = {"results": results}
    if outcome is not None:
        answer["pipeline"] = {k: v for k, v in outcome.items() if k != "per_record"}
    return answer


async def update_matching(state: AppState, principal: Principal, table_ref: int | str, filters: Any,
                          fields: dict[str, Any], *, run_pipeline: bool = True) -> dict[str, Any]:
    """Set the same fields on every record matching ``filters`` (``{column: "op.value"}``
    or ``[{column, op, value}]``; at most :data:`MAX_BATCH` records) in one statement, then
    run the edit pipeline over them together: ``{updated, ids, pipeline?}``.

    The write goes the way a single record's update goes (:func:`_write`): file references
    resolved and checked first, the rows and the outbox rows of their runs committed
    together, embeddings refreshed after. The rows are read back only when a pipeline or
    the embeddings need them, and then at most :data:`MATCHING_READ_BYTES` of them.

    Raises:
        ServiceError: ``BATCH_TOO_LARGE`` when more match, or when the matches hold more
        than that to read back; ValidationError: no field.
    """
    require_writable(principal)
    table = await table_for(state, principal, table_ref, Action.UPDATE)
    require(principal, table, Action.READ)
    if principal.own_row_only(table.id):
        raise Forbidden("an app user changes its row of the Users table by its id, not by filter")
    if filters is None:  # parse_filters reads None as no filter: here that must be said
        raise ValidationError("filters are required: an object {column: \"op.value\"} or a list of"
                              " {column, op, value} objects")
    planned = plan_filters(parse_filters(filters), table)
    prepared = rec.prepare_fields(table, fields, creating=False)
    if not prepared.values:
        raise ValidationError("fields is empty: nothing to change")
    await _files(state, principal, table, prepared)
    changed = list(fields)
    full = table.semantic or bool(will_run(table, mode="edit", changed=changed, enabled=run_pipeline))

    async def write(conn: AsyncConnection[Any]) -> list[dict[str, Any]]:
        if full:
            matches = await rec.matching_sizes(conn, table=table, filters=planned, limit=MAX_BATCH + 1)
        else:  # nothing reads them back: their ids are enough
            matches = [(i, 0) for i in await rec.page_ids(conn, table=table, filters=planned, after_id=0,
                                                          limit=MAX_BATCH + 1)]
        if len(matches) > MAX_BATCH:
            raise ServiceError(f"more than {MAX_BATCH} records match; narrow the filters", code="BATCH_TOO_LARGE")
        if full and sum(n for _, n in matches) > MATCHING_READ_BYTES:
            raise ServiceError(
                f"the {len(matches)} matching records hold more than {MATCHING_READ_BYTES // 2**20} MiB, which their"
                " computed columns or embeddings would read back at once; narrow the filters", code="BATCH_TOO_LARGE")
        if not matches:
            return []
        return await rec.update_records(conn, table=table, record_ids=[i for i, _ in matches], filters=planned,
                                        row=prepared, full=full)

    final, outcome = await _write(state, principal, table, write, mode="edit", changed=changed,
                                  enabled=run_pipeline)
    out: dict[str, Any] = {"updated": len(final), "ids": [r["id"] for r in final]}
    if outcome is not None:
        out["pipeline"] = {k: v for k, v in outcome.items() if k != "per_record"}
    return out


def plain_results(batch: dict[str, Any]) -> dict[str, Any]:
    """``create_records``'s answer with its :class:`RawJson` records decoded, for a door
    that hands back values rather than JSON text."""
    for result in batch["results"]:
        record = result.get("record")
        if isinstance(record, RawJson):
            result["record"] = record.value()
    return batch
