"""Stage 2 of the SQL endpoint: resolve human names, type literals, build the plan.

Name resolution (tables and columns alike): an exact match first, then a
case-insensitive match if exactly one name fits; quoting only matters to the parser
(names with spaces or keywords need double quotes). The system columns ``id``,
``created_at`` and ``updated_at`` are reserved: written in lower case they always mean the
system columns, as in the flat row shape.

Literals are typed by the column they are compared with (see ``_typed``); select columns
accept an option id or label and compare by option id, an unknown option is
``INVALID_OPTION`` exactly as in REST filters.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from psycopg import sql

from storage.errors import InvalidSQL, ServiceError
from storage.plans import IN_MAX, page_size
from storage.schema import SYSTEM_COLUMNS, ColumnMeta, ColumnType, TableMeta
from storage.sqlquery import budget
from storage.sqlquery.analytic import AnalyticPlan, translate_analytic
from storage.sqlquery.build import (
    KIND_COMPUTED,
    KIND_ID,
    KIND_TIMESTAMP,
    MAX_ANSWER_BYTES,
    Field,
    Fragment,
    JsonOperand,
    Measured,
    Statement,
    build_json_page,
    build_queries,
    condition,
    condition_copies,
    field_size,
    guarded_rows,
    json_renderable,
    order_item,
)
from storage.sqlquery.parse import ColumnRef, Cond, Lit, Name, Op, parse_query
from storage.values import invalid_option, parse_datetime

_MAX_BIGINT = 2**63 - 1

_COMPARE = frozenset({Op.EQ, Op.NEQ, Op.GT, Op.GTE, Op.LT, Op.LTE, Op.IN, Op.IS_NULL})
_EQUALITY = frozenset({Op.EQ, Op.NEQ, Op.IN, Op.IS_NULL})
_OPS_BY_KIND: dict[str, frozenset[Op]] = {
    ColumnType.TEXT: _COMPARE | {Op.LIKE},
    ColumnType.NUMBER: _COMPARE,
    ColumnType.DATE: _COMPARE,
    ColumnType.RELATION: _COMPARE,
    KIND_ID: _COMPARE,
    KIND_TIMESTAMP: _COMPARE,
    KIND_COMPUTED: _COMPARE,
    ColumnType.CHECKBOX: _EQUALITY,
    ColumnType.SINGLE_SELECT: _EQUALITY,
    ColumnType.MULTI_SELECT: _EQUALITY,
    ColumnType.FILE: frozenset({Op.IS_NULL}),
}
_SYSTEM_KINDS = {"id": KIND_ID, "created_at": KIND_TIMESTAMP, "updated_at": KIND_TIMESTAMP}
assert set(_SYSTEM_KINDS) == set(SYSTEM_COLUMNS)


@dataclass(frozen=True, slots=True)
class SqlPlan:
    """A validated query, ready for :func:`storage.sqlquery.run_sql`.

    ``count_query`` takes ``where_params``; ``rows_query`` (``None`` for ``COUNT(*)``)
    takes :attr:`rows_params` (the page) or :attr:`probe_rows_params` (the page and one
    row more, which tells whether more rows match). ``fields`` are the output columns in
    order; ``page_query`` is ``rows_query`` measured row by row and refused past
    ``max_bytes`` (it takes the same parameters). When PostgreSQL can render the rows as JSON, ``json_page`` answers with the
    rendered page and the exact count, and ``json_probe`` with the rendered page and the
    rows read (at most ``limit + 1``), each in one statement.
    """

    table: TableMeta
    count_only: bool
    fields: tuple[Field, ...]
    count_query: sql.Composed
    rows_query: sql.Composed | None
    where_params: tuple[Any, ...]
    order_params: tuple[Any, ...]
    limit: int
    offset: int
    json_page: Statement | None = None  # page rendered as JSON + the exact count
    json_probe: Statement | None = None  # page rendered as JSON + rows read (≤ limit + 1)
    # rows_query bounded in bytes (build.guarded_rows): what runs when the rows are read
    page_query: sql.Composed | None = None
    max_bytes: int = MAX_ANSWER_BYTES  # the page's rows as JSON, at most (else RESULT_TOO_LARGE)
    # the statements with their values bound, as :func:`storage.sqlquery.run_sql` sends them
    bound: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)

    @property
    def table_ids(self) -> tuple[int, ...]:
        return (self.table.id,)

    @property
    def rows_params(self) -> tuple[Any, ...]:
        return (*self.where_params, *self.order_params, self.limit, self.offset)

    @property
    def probe_rows_params(self) -> tuple[Any, ...]:
        return (*self.where_params, *self.order_params, self.limit + 1, self.offset)


def translate(
    query: str,
    *,
    resolve_table: Callable[[str], TableMeta | None],
    can_read: Callable[[int], bool],
    max_bytes: int = MAX_ANSWER_BYTES,
) -> SqlPlan | AnalyticPlan:
    """Parse, check and translate one query of the SQL endpoint's grammar. Pure.

    A query of the spec's simple grammar gives a :class:`SqlPlan` (answer ``{rows,
    total, table, limit, offset, has_more}`` or ``{count}``); any other SELECT is
    translated by :func:`storage.sqlquery.analytic.translate_analytic` (aggregates,
    GROUP BY, joins along relations, OR, functions…), which refuses what is outside its
    allow-list.

    Args:
        query: the client's SQL text.
        resolve_table: the table of the caller's workspace with this human name, or
            ``None``; :func:`table_resolver` builds one with the documented matching rules.
        can_read: whether the caller's token may read the table with this id.
        max_bytes: the most a page's rows may take as JSON: a page past it is refused
            (``RESULT_TOO_LARGE``) while it is being read (see
            :func:`storage.sqlquery.build.guarded_page`).

    Raises:
        InvalidSQL: anything outside the grammar, an unknown or unreadable table, an
            unknown column, an operator or literal that does not fit the column.
        ServiceError: ``INVALID_OPTION`` (unknown select option), ``LIMIT_TOO_LARGE``
            (LIMIT above 1000), ``TOO_MANY_VALUES`` (IN with more than 200 values).
        PayloadTooLarge: the query text is longer than 10,000 characters.
    """
    try:
        parsed = parse_query(query)
    except InvalidSQL:
        return translate_analytic(query, resolve_table=resolve_table, can_read=can_read, max_bytes=max_bytes)
    table = resolve_table(parsed.table.text)
    if table is None:
        raise InvalidSQL(f"unknown table {parsed.table.text!r}")
    if not can_read(table.id):
        raise InvalidSQL(f"no read access to table {parsed.table.text!r} with this token")

    if parsed.fields is None:
        _check_qualifier(table, parsed.star_qualifier)
        fields = star_fields(table)
    else:
        resolved = [_resolve(table, ref) for ref in parsed.fields]
        fields = tuple({f.physical: f for f in resolved}.values())  # repeats collapse
    where = tuple(_plan_condition(table, cond) for cond in parsed.where)
    # what one row's conditions may copy of long values, bounded before anything runs
    budget.check_copies(sum(_condition_copies(table, cond) for cond in parsed.where))

    order: list[Fragment] = []
    ordered_by_id = False
    for term in parsed.order:
        field = _resolve(table, term.column)
        ordered_by_id = ordered_by_id or field.kind == KIND_ID
        order.append(order_item(field, term.desc, term.nulls_first))
    if not ordered_by_id:
        # A unique tie-breaker makes LIMIT/OFFSET paging deterministic.
        order.append(order_item(_system_field("id"), desc=False, nulls_first=False))

    limit = page_size(parsed.limit, word="LIMIT")
    count_query, rows_query, params, order_params = build_queries(
        schema=table.schema, table=table.physical, fields=fields, where=where, order=tuple(order)
    )
    offset = parsed.offset or 0
    page_query = None if parsed.count else guarded_rows(
        rows_query, tuple(Measured(f.name, field_size(f), f.physical) for f in fields),
        tuple(f.physical for f in fields), limit=limit, max_bytes=max_bytes)
    json_page = json_probe = None
    if not parsed.count and json_renderable(fields):
        parts = {"schema": table.schema, "table": table.physical, "fields": fields, "where": where,
                 "order": tuple(order), "limit": limit, "offset": offset, "max_bytes": max_bytes}
        json_page = build_json_page(**parts, count=True)
        json_probe = build_json_page(**parts, count=False)
    return SqlPlan(
        table=table,
        count_only=parsed.count,
        fields=() if parsed.count else fields,
        count_query=count_query,
        rows_query=None if parsed.count else rows_query,
        page_query=page_query,
        where_params=params,
        order_params=() if parsed.count else order_params,
        limit=limit,
        offset=offset,
        json_page=json_page,
        json_probe=json_probe,
        max_bytes=max_bytes,
    )


def table_resolver(tables: Iterable[TableMeta]) -> Callable[[str], TableMeta | None]:
    """A ``resolve_table`` for :func:`translate` over one workspace's tables.

    Exact name first, then the one table whose name matches case-insensitively.

    Raises (from the returned callable):
        InvalidSQL: several tables match case-insensitively and none exactly.
    """
    return TableResolver(tuple(tables))


class TableResolver:
    """:func:`table_resolver`'s callable; ``by_id`` finds the table a relation column
    points to (``label()`` of analytic queries)."""

    def __init__(self, tables: tuple[TableMeta, ...]) -> None:
        self.tables = tables
        self.by_id = {t.id: t for t in tables}

    def __call__(self, name: str) -> TableMeta | None:
        found: TableMeta | None = _match(name, self.tables, lambda t: t.name, "table")
        return found


def star_fields(table: TableMeta) -> tuple[Field, ...]:
    """``*``: the system columns, then every column in position order."""
    columns = sorted(table.columns, key=lambda c: (c.position, c.id))
    return tuple(_system_field(n) for n in SYSTEM_COLUMNS) + tuple(_column_field(c) for c in columns)


def _match(name: str, items: tuple[Any, ...], key: Callable[[Any], str], what: str) -> Any:
    for item in items:
        if key(item) == name:
            return item
    folded = name.casefold()
    hits = [item for item in items if key(item).casefold() == folded]
    if len(hits) > 1:
        raise InvalidSQL(f"{what} name {name!r} is ambiguous: write it exactly, in double quotes")
    return hits[0] if hits else None


def _system_field(name: str) -> Field:
    return Field(name=name, physical=name, kind=_SYSTEM_KINDS[name])


def _column_field(col: ColumnMeta) -> Field:
    kind = KIND_COMPUTED if col.computed else col.type.value
    return Field(name=col.name, physical=col.physical, kind=kind, meta=col)


def _check_qualifier(table: TableMeta, q: Name | None) -> None:
    if q is not None and _match(q.text, (table,), lambda t: t.name, "table") is None:
        raise InvalidSQL(f"{q.text!r} is not the table in FROM ({table.name!r})")


def _resolve(table: TableMeta, ref: ColumnRef) -> Field:
    _check_qualifier(table, ref.qualifier)
    name: Name = ref.name
    if name.text in _SYSTEM_KINDS:
        return _system_field(name.text)
    items: tuple[Any, ...] = (*table.columns, *SYSTEM_COLUMNS)
    found = _match(name.text, items, lambda c: c if isinstance(c, str) else c.name, "column")
    if found is None:
        raise InvalidSQL(f"unknown column {name.text!r} in table {table.name!r}")
    return _system_field(found) if isinstance(found, str) else _column_field(found)


def _plan_condition(table: TableMeta, cond: Cond) -> Fragment:
    field = _resolve(table, cond.column)
    allowed = _OPS_BY_KIND[field.kind]
    if cond.op not in allowed:
        label = f"NOT {cond.op.value}" if cond.negate else cond.op.value
        raise InvalidSQL(f"{label} is not supported on {_kind_label(field)} column {field.name!r}")
    if cond.op is Op.IN and len(cond.values) > IN_MAX:
        raise ServiceError(f"IN takes at most {IN_MAX} values", code="TOO_MANY_VALUES")
    values = tuple(_typed(field, lit, cond.op) for lit in cond.values)
    return condition(field, cond.op, values, cond.negate)


def _condition_copies(table: TableMeta, cond: Cond) -> int:
    field = _resolve(table, cond.column)
    return condition_copies(field, cond.op, tuple(_typed(field, lit, cond.op) for lit in cond.values))


def _kind_label(field: Field) -> str:
    return {KIND_ID: "the id", KIND_TIMESTAMP: "timestamp"}.get(field.kind, field.kind.replace("_", "-"))


def _typed(field: Field, lit: Lit, op: Op) -> Any:
    """The bound parameter for ``lit`` compared with ``field`` (stored representation)."""
    value = lit.value
    kind = field.kind

    def bad(expected: str) -> InvalidSQL:
        shown = repr(value) if not isinstance(value, int) or abs(value) < 10**40 else f"a {len(str(abs(value)))}-digit integer"
        return InvalidSQL(f"column {field.name!r} is compared with {shown[:80]}, expected {expected}")

    if kind == ColumnType.TEXT:
        if not isinstance(value, str):
            raise bad("a 'single-quoted' string")
        return value
    if kind == ColumnType.NUMBER:
        try:
            return float(_number(value, bad))  # bound as double precision, like the column
        except OverflowError:  # an integer of 309+ digits
            raise bad("a number a double holds (at most ±1.8e308)") from None
    if kind in (ColumnType.DATE, KIND_TIMESTAMP):
        if not isinstance(value, str):
            raise bad("an ISO date string such as '2024-03-01'")
        try:
            return parse_datetime(value)
        except ValueError:
            raise bad("an ISO date string such as '2024-03-01'") from None
    if kind in (ColumnType.RELATION, KIND_ID):
        num = _number(value, bad)
        if abs(num) > _MAX_BIGINT or not float(num).is_integer():
            raise bad("a record id")
        return int(num)
    if kind == ColumnType.CHECKBOX:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise bad("TRUE or FALSE")
    if kind in (ColumnType.SINGLE_SELECT, ColumnType.MULTI_SELECT):
        assert field.meta is not None
        if not isinstance(value, str):
            raise bad("an option id or label in single quotes")
        opt = field.meta.option_by_id_or_label(value)
        if opt is None:
            raise invalid_option(field.meta, value)
        return opt.id
    if kind == KIND_COMPUTED:
        if isinstance(value, bool):
            return JsonOperand(None, "true" if value else "false")
        if isinstance(value, str):
            try:
                num = float(value.strip())
            except ValueError:
                return JsonOperand(None, value)
            return JsonOperand(num if math.isfinite(num) else None, value)
        try:
            as_double: float | None = float(value)
        except OverflowError:  # an integer of 309+ digits: no JSON number (a double) equals it
            as_double = None
        return JsonOperand(as_double, _number_text(value))
    raise bad("no value")  # file columns only take IS [NOT] NULL, refused before this


def _number_text(value: int | float) -> str:
    """How a JSON number prints as text (``5`` not ``5.0``), for text comparisons."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return str(value)


def _number(value: str | int | float | bool, bad: Callable[[str], InvalidSQL]) -> int | float:
    if isinstance(value, bool):
        raise bad("a number")
    if isinstance(value, str):
        try:
            num: int | float = float(value.strip())
        except ValueError:
            raise bad("a number") from None
        if not math.isfinite(num):
            raise bad("a finite number")
        return num
    return value
