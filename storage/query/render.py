"""Render a page of records as JSON inside PostgreSQL (the PostgREST way).

For plain lists (no embedded relations, no file columns, at most 50 fields) the page is
aggregated with ``string_agg`` into one compact JSON text (:func:`record_text`), which
the API splices into its response without decoding a single row in Python. Values render exactly as
:func:`storage.values.decode_value` does (checked by tests that compare both paths):
checkbox NULL → false, multi_select NULL → [], integral numbers as integers below 2^53,
timestamps as ISO-8601 in UTC (the pool's sessions run with ``timezone=UTC``) without
trailing fraction zeros, as :func:`storage.values.iso_text` writes them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import orjson
import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from storage.db import bound_once
from storage.ddl import in_double_range
from storage.query.build import (
    TABLE_ALIAS,
    _order_by,
    build_count,
    build_counter,
    build_estimate,
    computed_keys,
    order_keys,
    page_offset,
    page_source,
    size_floor,
)
from storage.query.listing import (
    PAGE_MAX_BYTES,
    CountMode,
    CountQueries,
    check_page_size,
    count_mode,
    fetch_page,
    next_cursor,
    page_and_total,
    snapshot,
)
from storage.query.plan import QueryPlan
from storage.query.targets import Kind
from storage.schema import ColumnMeta, ColumnType, WorkspaceSchema

MAX_FIELDS = 50  # wider records are decoded in Python (the limit of the json_build_object renderer, kept)
_SAFE_INT = 9007199254740992  # 2^53


def renderable(plan: QueryPlan) -> bool:
    """Whether the page can be rendered in SQL (else decode in Python)."""
    return not plan.embeds and record_json_renderable(plan.output)


def computed_number(col: ColumnMeta) -> bool:
    """A computed column of value type ``number``: its jsonb values are numbers (or NULL),
    rendered as a number column's are. jsonb keeps a number as ``numeric``, whose text
    never has an exponent: 1e307 read as 308 digits."""
    return col.computed and col.value_type == "number"


def value_json(col: ColumnMeta, c: sql.Composable) -> sql.Composable:
    """``col``'s value ``c`` rendered as :func:`storage.values.decode_value` decodes it
    (not for file columns)."""
    if col.type is ColumnType.CHECKBOX:
        return sql.SQL("coalesce({}, false)").format(c)
    if col.type is ColumnType.MULTI_SELECT:
        return sql.SQL("coalesce({}, '{{}}'::text[])").format(c)
    if col.type is ColumnType.NUMBER:
        return _number(c, "to_json({}::bigint)", "to_json({})")
    if computed_number(col):
        return sql.SQL("CASE WHEN {d} THEN {n}::jsonb ELSE {c} END").format(
            c=c, d=_double(c), n=_number(sql.SQL("({})::float8").format(c), "to_json({}::bigint)", "to_json({})"))
    return c  # timestamps: PostgreSQL's JSON form, which storage.values.iso_text writes too


def value_text(col: ColumnMeta, c: sql.Composable) -> sql.Composable:
    """:func:`value_json` as JSON text (NULL for a NULL value). A number is written from
    its bigint or its own ``to_json`` directly: one conversion, not ``to_json`` of a
    ``json`` value, which measured ~10 % of a 100-record page's statement."""
    if col.type is ColumnType.NUMBER:
        return _number(c, "({}::bigint)::text", "to_json({})::text")
    if computed_number(col):
        return sql.SQL("CASE WHEN {d} THEN {n} ELSE {c}::text END").format(
            c=c, d=_double(c), n=_number(sql.SQL("({})::float8").format(c), "({}::bigint)::text", "to_json({})::text"))
    return sql.SQL("to_json({})::text").format(value_json(col, c))


def _double(c: sql.Composable) -> sql.Composable:
    """Whether the jsonb ``c`` is a number a double holds (storage/ddl.py
    ``computed_value_expr``); one that is not (1e400, written by no step of ours but
    storable in jsonb) is written as jsonb's text of it, as :func:`storage.values.decode_value`
    writes it, rather than failing the page on the cast."""
    return sql.SQL("jsonb_typeof({c}) = 'number' AND ({r} OR ({c})::numeric = 0)").format(c=c, r=in_double_range(c))


def _number(c: sql.Composable, integral: str, other: str) -> sql.Composable:
    """A number column's value ``c`` as ``integral`` (a template of ``c``) when it is an
    integer below 2^53, as the Python decoder writes it (3, not 3.0 or 3e+00), else as
    ``other``."""
    return sql.SQL("CASE WHEN {c} = trunc({c}) AND abs({c}) < {m} THEN {i} ELSE {o} END").format(
        c=c, m=sql.Literal(_SAFE_INT), i=sql.SQL(integral).format(c), o=sql.SQL(other).format(c))


def record_json_renderable(columns: tuple[ColumnMeta, ...] | list[ColumnMeta]) -> bool:
    """Whether a record with these columns can be rendered by :func:`record_text`."""
    return len(columns) <= MAX_FIELDS and all(c.type is not ColumnType.FILE for c in columns)


def record_text(columns: tuple[ColumnMeta, ...] | list[ColumnMeta], alias: str, *,
                pipeline: sql.Composable | None = None) -> sql.Composed:
    """One API record over the row ``alias`` as *compact* JSON text, the bytes orjson
    writes (``json_build_object`` writes ``{"id" : 1, "f" : 2}``), assembled from each
    value's ``to_json`` text; takes per column its JSON-encoded name and a colon as a
    parameter (``%s`` each, :func:`field_keys`). A computed column's value is jsonb, whose
    text is not always compact (``{"a": 1}``): such records are compacted afterwards
    (:func:`record_text_spaced` tells which). ``pipeline``: the text of
    the record's pipeline outcome, added last as ``"pipeline"`` (write responses)."""
    pairs = [sql.SQL("%s::text || coalesce({}, 'null')").format(
        value_text(col, sql.Identifier(alias, col.physical))) for col in columns]
    fields = sql.SQL(" || ',' || ").join(pairs) if pairs else sql.SQL("''")
    tail = sql.SQL(" || ',\"pipeline\":' || {}").format(pipeline) if pipeline is not None else sql.SQL("")
    return sql.SQL(
        "('{{\"id\":' || {a}.id::text || ',\"fields\":{{' || {fields} || '}},\"created_at\":'"
        " || to_json({a}.created_at)::text || ',\"updated_at\":' || to_json({a}.updated_at)::text{tail} || '}}')"
    ).format(a=sql.Identifier(alias), fields=fields, tail=tail)


def record_text_spaced(columns: tuple[ColumnMeta, ...] | list[ColumnMeta], alias: str, *,
                       page: bool = False) -> sql.Composable:
    """Whether :func:`record_text` of the row ``alias`` is *not* the bytes orjson writes,
    row by row: a computed column holds an object or array (jsonb's text has blanks) or a
    fractional number (jsonb writes ``0.0000001`` where orjson writes ``1e-7``). Integers,
    strings, booleans and nulls are written alike by both (a string escaped as ``to_json``
    escapes it, as for a text column). FALSE when no column is computed. A record for
    which it is true is compacted afterwards (:func:`storage.jsontext.compact`).
    ``page``: whether any row of the query is (``bool_or``), for a whole page."""
    tests = [sql.SQL("jsonb_typeof({c}) IN ('object', 'array') OR (jsonb_typeof({c}) = 'number'"
                     " AND scale(({c})::numeric) > 0)").format(c=sql.Identifier(alias, col.physical))
             for col in columns if col.computed and not computed_number(col)]
    if not tests:
        return sql.SQL("false")
    spaced = sql.SQL("coalesce({}, false)").format(sql.SQL(" OR ").join(tests))
    return sql.SQL("bool_or({})").format(spaced) if page else spaced


def field_keys(columns: tuple[ColumnMeta, ...] | list[ColumnMeta]) -> list[str]:
    """The parameters of :func:`record_text`: ``"<name>":`` per column, JSON-encoded."""
    return [orjson.dumps(col.name).decode() + ":" for col in columns]


SEPARATOR = "\x1e"  # between the records of build_list_json's text: never inside JSON text


def build_list_json(plan: QueryPlan, row_max: int | None = None) -> tuple[sql.Composed, list[Any]]:
    """One statement returning the records read as JSON texts joined by :data:`SEPARATOR`
    (NULL when none), the number of rows read (``limit + 1`` are read: one more than
    ``limit`` means there is a next page), the order keys of the page's last row then
    (:func:`order_keys`), whether any record read is spaced (:func:`record_text_spaced`:
    the page is compacted) and how many records were left out for being longer than
    ``row_max`` bytes (default: :data:`PAGE_MAX_BYTES` shared by the rows read, so the
    joined text never passes it; see :func:`list_records_json` for what happens then).
    :func:`page_text` cuts the extra record and makes the array.

    The separator is U+001E, which every JSON writer escapes inside a string (``to_json``,
    jsonb's output, orjson for the field names), so it only ever stands between records.
    ``string_agg`` in the page's order (presorted: no sort is added) measured ~30 % less
    of PostgreSQL's time than the ``array_agg``, slice and ``array_to_string`` it replaced.
    A record whose stored text alone passes its share (:func:`~storage.query.build.size_floor`,
    read from the values' headers) is not rendered at all. Each record is rendered once,
    in a subquery (``OFFSET 0`` keeps PostgreSQL from
    folding it into the aggregate, which would render it twice); its ``ORDER BY`` is the
    order the rows arrive in, which keeps the aggregates presorted (without it each one
    sorted its rows again: +20 % of the statement's time)."""
    if row_max is None:
        row_max = PAGE_MAX_BYTES // (plan.limit + 1)
    a = sql.Identifier(TABLE_ALIAS)
    params: list[Any] = [SEPARATOR]
    outer_order, outer_params = _order_by(plan.order, keyed=True)
    params.extend(outer_params)
    params.append(row_max)
    keys, key_params = order_keys(plan)
    params.extend(key_params)
    key_order, key_order_params = _order_by(plan.order, keyed=True)
    params.extend(key_order_params)
    params.extend([plan.limit, row_max, row_max])
    params.extend(field_keys(plan.output))
    obj = record_text(plan.output, TABLE_ALIAS)
    source, source_params = page_source(plan)
    inner_order, inner_params = _order_by(plan.order)
    params.extend(source_params)
    params.extend(inner_params)
    params.extend([plan.limit + 1, page_offset(plan)])
    mid_order, mid_params = _order_by(plan.order, keyed=True)
    params.extend(mid_params)
    query = sql.SQL(
        "SELECT string_agg({a}._rec, %s::text ORDER BY {outer_order}) FILTER (WHERE octet_length({a}._rec) <= %s),"
        " count(*), ((array_agg({keys} ORDER BY {key_order}))[%s::int])::text, {spaced},"
        " count(*) FILTER (WHERE (octet_length({a}._rec) <= %s) IS NOT TRUE)"
        " FROM (SELECT {a}.*, CASE WHEN {floor} <= %s THEN {obj} END AS _rec"
        " FROM (SELECT *{computed} FROM {source} ORDER BY {inner_order} LIMIT %s OFFSET %s) AS {a}"
        " ORDER BY {mid_order} OFFSET 0) AS {a}"
    ).format(
        obj=obj, outer_order=outer_order, keys=keys, key_order=key_order, computed=computed_keys(plan.order),
        spaced=record_text_spaced(plan.output, TABLE_ALIAS, page=True), floor=size_floor(plan),
        source=source, a=a, inner_order=inner_order, mid_order=mid_order,
    )
    return query, params


def record_size(plan: QueryPlan) -> tuple[sql.Composable, list[Any]]:
    """A row's size as :func:`build_list_json` writes it: its record's JSON in bytes."""
    return (sql.SQL("octet_length({})").format(record_text(plan.output, TABLE_ALIAS)),
            field_keys(plan.output))


@dataclass(frozen=True, slots=True)
class PreparedList:
    """A renderable plan's statements as text, built once: the API memoises these per
    query string and schema version (composing them is most of a list's Python work)."""

    limit: int
    offset: int
    page_sql: bytes
    page_params: tuple[Any, ...]
    count_sql: bytes
    count_params: tuple[Any, ...]
    estimate_sql: bytes = b""  # EXPLAIN of the counted rows (count=planned / estimated)
    estimate_params: tuple[Any, ...] = ()
    counter_sql: bytes | None = None  # an unfiltered table's row-counter read
    counter_params: tuple[Any, ...] = ()
    fingerprint: str = ""  # what the page's next cursor is tied to (QueryPlan.fingerprint)
    cursor_kinds: tuple[Kind, ...] | None = None  # QueryPlan.cursor_kinds
    # the plan, for a page holding a record longer than its share of PAGE_MAX_BYTES
    plan: QueryPlan | None = field(default=None, compare=False, repr=False)
    # the statements with their values bound (storage.db.bound_once), as list_records_json sends them
    bound: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)


LIST_MEMO = 256  # prepared lists kept per workspace schema version and door


def prepared_or_plan(plan: QueryPlan) -> PreparedList | QueryPlan:
    """The plan's statements as text when PostgreSQL can render its page, else the plan."""
    return prepare_list_json(plan) if renderable(plan) else plan


def memoised_list(schema: WorkspaceSchema, key: Hashable, make_plan: Callable[[], QueryPlan]) -> PreparedList | QueryPlan:
    """:func:`prepared_or_plan`, memoised under ``key`` for this schema version (a schema
    change replaces ``schema`` and its ``derived`` memos). Only renderable plans are kept:
    they embed no relation, so nothing in them depends on the caller beyond the read check
    the caller has made; ``key`` must name the table and everything the plan is built from."""
    memo: dict[Hashable, PreparedList] = schema.derived.setdefault("lists", {})
    found = memo.get(key)
    if found is not None:
        return found
    result = prepared_or_plan(make_plan())
    if isinstance(result, PreparedList):
        if len(memo) >= LIST_MEMO:
            memo.clear()
        memo[key] = result
    return result


def prepare_list_json(plan: QueryPlan) -> PreparedList:
    """:func:`build_list_json` and :func:`build_count` of a renderable plan, as text.
    Every value is a bound parameter, so the text needs no connection to render."""
    page_sql, page_params = build_list_json(plan)
    count_sql, count_params = build_count(plan)
    estimate_sql, estimate_params = build_estimate(plan)
    counter = build_counter(plan)
    return PreparedList(plan.limit, plan.offset, page_sql.as_bytes(None), tuple(page_params),
                        count_sql.as_bytes(None), tuple(count_params),
                        estimate_sql.as_bytes(None), tuple(estimate_params),
                        counter[0].as_bytes(None) if counter else None, tuple(counter[1]) if counter else (),
                        fingerprint=plan.fingerprint, cursor_kinds=plan.cursor_kinds, plan=plan)


async def list_records_json(
    conn: psycopg.AsyncConnection[Any], plan: QueryPlan | PreparedList, *,
    count: bool | str | CountMode | None,
) -> tuple[str, int, int | None, str | None, bool]:
    """The page as JSON text, the number of records on it, the total if asked (``count``:
    ``True`` or a :class:`~storage.query.listing.CountMode`; ``True`` is exact), the
    ``next`` cursor (``None`` on the last page) and whether the text is spaced (to be
    compacted, :func:`record_text_spaced`); else it is compact, as orjson writes it."""
    prepared = plan if isinstance(plan, PreparedList) else prepare_list_json(plan)
    page_sql = bound_once(conn, prepared.bound, "page", prepared.page_sql, prepared.page_params)
    mode = count_mode(count)
    if mode is None:
        rows, total = await fetch_page(conn, page_sql, None, None)
    else:
        def bound(key: str, text: bytes, params: tuple[Any, ...]) -> tuple[bytes, None]:
            return bound_once(conn, prepared.bound, key, text, params), None

        counts = CountQueries(
            bound("count", prepared.count_sql, prepared.count_params),
            bound("counter", prepared.counter_sql, prepared.counter_params) if prepared.counter_sql else None,
            bound("estimate", prepared.estimate_sql, prepared.estimate_params),
        )
        rows, total = await page_and_total(conn, page_sql, None, mode, counts)
    page = rows[0] if rows else None
    if page is not None and page[4]:
        # a record longer than its share of the cap: measured, then read in one snapshot
        assert prepared.plan is not None
        async with snapshot(conn):
            await check_page_size(conn, prepared.plan, *record_size(prepared.plan))
            query, params = build_list_json(prepared.plan, row_max=PAGE_MAX_BYTES)
            page = await (await conn.cursor(row_factory=tuple_row).execute(query, params)).fetchone()
    if page is None or page[0] is None:
        return "[]", 0, total, None, False
    read = int(page[1])
    more = read > prepared.limit
    keys = orjson.loads(page[2]) if more and page[2] is not None else None
    # the text holds the rows read but those left out (past the page only: it was measured)
    cut = read - int(page[4]) > prepared.limit
    return (page_text(page[0], cut), min(read, prepared.limit), total,
            next_cursor(prepared.fingerprint, prepared.cursor_kinds, keys), bool(page[3]))


def page_text(records: str, cut: bool) -> str:
    """The JSON array of :func:`build_list_json`'s records (``cut``: the last one read is
    the next page's first, left out)."""
    if cut:
        cut = records.rfind(SEPARATOR)
        records = records[:cut] if cut >= 0 else ""  # none left: the page's limit is 0
    return "[" + records.replace(SEPARATOR, ",") + "]"

