"""Stage 2 of the record query compiler: resolve names and type values against a table.

:func:`plan_filters` is the one filter planner for REST, MCP, the SDK's write-by-filter,
views, run-actions, semantic search and realtime subscriptions. Semantics per type:

* **system columns** ``id`` (integer) and ``created_at``/``updated_at`` (dates) are
  filterable and orderable; they win over a user column of the same name.
* **text**: every operator but ``cs``; ``gt``/``lt`` compare by collation.
* **number, date, relation**: ``eq neq gt gte lt lte in is.null``; values must parse as a
  finite number, an ISO date (date-only = midnight UTC, naive = UTC) or an integer id.
* **checkbox**: ``eq neq in is``; a checkbox never set counts as false, in filters
  (``eq.false`` and ``is.false`` match it, ``is.null`` matches nothing) and in order (it
  sorts with the false ones: storage/query/build.py ``key_expr``).
* **single_select**: ``eq neq in`` take option ids or labels (unknown → ``INVALID_OPTION``);
  ``like``/``ilike`` match option labels here, against metadata (an option id only whole,
  without wildcards, as ``eq`` takes it), and become an ``in`` over the matching option
  ids; ordering follows the options' order.
* **multi_select**: ``eq`` = contains this option, ``cs`` = contains all, ``in`` = overlaps
  any; ``is.null`` matches NULL and the empty list.
* **file**: only ``is.null`` (NULL or empty list); any other operator → ``UNKNOWN_OPERATOR``.
* **computed** (jsonb): every operator; a value that reads as a number compares
  numerically with JSON numbers and numeric strings, everything else compares as text
  (``#>> '{}'``); ``cs`` is JSON-array containment; ``is.true``/``is.false`` match JSON
  booleans only.

Negation (``not.<op>``, and ``neq`` which is ``not.eq``) is the exact complement of the
positive condition: rows where the condition is false *or unknown* (NULL) match, so
``count(f) + count(not f) == count(*)`` for every filter. An operator a type does not
support is ``UNKNOWN_OPERATOR``; a value that does not fit is ``INVALID_VALUE``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from storage.errors import Forbidden, InvalidValue, ServiceError, UnknownColumn, UnknownOperator
from storage.plans import page_size
from storage.query import cursor
from storage.query.parse import MAX_IN_VALUES, MAX_OFFSET, Filter, Group, Op, Query
from storage.query.targets import (
    JsonOperand,
    Kind,
    Target,
    like_matches,
    like_pattern,
    like_pieces,
    resolve_target,
    typed_value,
)
from storage.schema import SYSTEM_COLUMNS, ColumnMeta, ColumnType, TableMeta

MAX_SORTED_OFFSET = 10_000  # deeper offsets need an order by id alone (OFFSET_TOO_DEEP)

# Operators each storage kind supports; anything else is UNKNOWN_OPERATOR.
_ORDERED = {Op.EQ, Op.NEQ, Op.GT, Op.GTE, Op.LT, Op.LTE, Op.IN, Op.IS}
_OPS_BY_KIND: dict[Kind, frozenset[Op]] = {
    Kind.TEXT: frozenset(_ORDERED | {Op.LIKE, Op.ILIKE}),
    Kind.NUMBER: frozenset(_ORDERED),
    Kind.DATE: frozenset(_ORDERED),
    Kind.INT: frozenset(_ORDERED),
    Kind.BOOL: frozenset({Op.EQ, Op.NEQ, Op.IN, Op.IS}),
    Kind.SELECT: frozenset({Op.EQ, Op.NEQ, Op.IN, Op.LIKE, Op.ILIKE, Op.IS}),
    Kind.MULTI: frozenset({Op.EQ, Op.NEQ, Op.IN, Op.CS, Op.IS}),
    Kind.FILE: frozenset({Op.IS}),
    Kind.JSON: frozenset(Op),
}


@dataclass(frozen=True, slots=True)
class PlannedFilter:
    """A typed filter. ``neq`` is planned as negated ``eq`` and select ``like`` as ``in``.

    ``value`` by op: ``is`` → ``"null"|"true"|"false"``; ``in``/``cs`` and every
    multi_select op → tuple of typed values; ``like``/``ilike`` → a SQL LIKE pattern;
    otherwise one typed value (str, float, datetime, bool, int or :class:`JsonOperand`).
    """

    target: Target
    op: Op
    value: Any
    negate: bool = False


@dataclass(frozen=True, slots=True)
class PlannedGroup:
    """``and``/``or`` of planned conditions; negated like a filter (false *or* unknown)."""

    kind: Literal["and", "or"]
    items: tuple[PlannedFilter | PlannedGroup, ...]
    negate: bool = False


Planned = PlannedFilter | PlannedGroup


@dataclass(frozen=True, slots=True)
class PlannedOrder:
    target: Target
    desc: bool = False
    nulls: Literal["first", "last"] | None = None
    option_ids: tuple[str, ...] | None = None  # single_select: sort by option position


@dataclass(frozen=True, slots=True)
class Embed:
    """A relation column whose related record is embedded, with the fields to include."""

    column: ColumnMeta
    table: TableMeta
    fields: tuple[ColumnMeta, ...]


@dataclass(frozen=True, slots=True)
class QueryPlan:
    """Everything :mod:`storage.query.build` needs, names resolved and values typed.

    ``output`` lists the record's fields in response order; ``fields`` are read as raw
    columns and ``embeds`` as embedded records (a relation in ``embeds`` is not in
    ``fields``).
    """

    table: TableMeta
    filters: tuple[PlannedFilter | PlannedGroup, ...]
    order: tuple[PlannedOrder, ...]
    fields: tuple[ColumnMeta, ...]
    embeds: tuple[Embed, ...]
    output: tuple[ColumnMeta, ...]
    limit: int
    offset: int
    fingerprint: str = ""  # what a cursor of this list is tied to (storage.query.cursor)
    after: tuple[Any, ...] | None = None  # the order keys the page starts after (``after=``)

    @property
    def cursor_kinds(self) -> tuple[Kind, ...] | None:
        """The order terms' kinds when a cursor can continue this list, else ``None``."""
        kinds = tuple(o.target.kind for o in self.order)
        return kinds if all(k in cursor.CURSOR_KINDS for k in kinds) else None


def plan_filters(
    filters: Sequence[Filter | Group], table: TableMeta
) -> tuple[PlannedFilter | PlannedGroup, ...]:
    """Resolve and type parsed filters against ``table`` (see the module docstring).

    Raises:
        UnknownColumn: a filter names no column of the table.
        UnknownOperator: the operator does not apply to the column's type.
        InvalidValue: a value does not fit the column's type.
        ServiceError: code ``INVALID_OPTION`` (unknown select option) or
            ``TOO_MANY_VALUES`` (more than 200 values in ``in``/``cs``).
    """
    return tuple(_plan_one(f, table) for f in filters)


def _plan_one(f: Filter | Group, table: TableMeta) -> PlannedFilter | PlannedGroup:
    if isinstance(f, Group):
        return PlannedGroup(f.kind, tuple(_plan_one(i, table) for i in f.items), f.negate)
    return _plan_filter(f, resolve_target(table, f.column))


def plan_query(
    query: Query,
    table: TableMeta,
    *,
    can_read: Callable[[int], bool],
    get_table: Callable[[int], TableMeta | None],
) -> QueryPlan:
    """Plan a whole list query: filters, order, paging, selected and embedded fields.

    Args:
        query: the parsed query.
        table: the table being listed.
        can_read: whether the caller may read the table with this id (for embedding).
        get_table: metadata of a related table by id, ``None`` if it no longer exists.

    Raises:
        UnknownColumn, UnknownOperator, InvalidValue: as for :func:`plan_filters`, and
            for unknown names in ``order``, ``select`` and ``expand``.
        ServiceError: ``LIMIT_TOO_LARGE`` above 1000, ``OFFSET_TOO_DEEP`` for an offset
            past ``MAX_SORTED_OFFSET`` with an order on anything but id, ``VALIDATION_ERROR`` for negative
            paging or embedding a non-relation column, ``TOO_MANY_VALUES``,
            ``INVALID_OPTION``.
        Forbidden: embedding a table the caller may not read.
    """
    page_size(query.limit)
    if query.limit < 0 or query.offset < 0 or query.offset > MAX_OFFSET:
        raise ServiceError("limit and offset must be non-negative integers")
    filters = plan_filters(query.filters, table)
    order = _plan_order(query, table)
    if query.offset > MAX_SORTED_OFFSET:
        sorted_by = [o.target.name for o in order if o.target.physical != "id"]
        if sorted_by:
            # PostgreSQL must sort and skip every row before the page: refused before it runs
            raise ServiceError(
                f"offset {query.offset} is deeper than {MAX_SORTED_OFFSET:,} with an order on {sorted_by[0]!r}:"
                f" page by cursor instead (pass each page's next as after=), narrow the rows with a filter,"
                f" or order by id",
                code="OFFSET_TOO_DEEP")
    fields, embeds, output = _plan_select(query, table, can_read=can_read, get_table=get_table)
    fp = cursor.fingerprint(table.id, _order_identity(order), query.filters, query.view)
    plan = QueryPlan(table, filters, order, fields, embeds, output, query.limit, query.offset, fp)
    if query.after is None:
        return plan
    if query.offset:
        raise cursor.invalid("after and offset cannot be combined: a cursor already says where the page starts")
    kinds = plan.cursor_kinds
    if kinds is None:
        raise cursor.invalid("this order cannot be paged by cursor (it sorts on a multi_select, JSON or"
                             " file column): page it with offset")
    return dataclasses.replace(plan, after=cursor.decode(query.after, fp, kinds))


def _plan_filter(f: Filter, target: Target) -> PlannedFilter:
    if f.op not in _OPS_BY_KIND[target.kind]:
        raise UnknownOperator(f"operator {f.op.value!r} does not apply to column {target.name!r}")
    values = f.value if isinstance(f.value, tuple) else (f.value,)
    for v in values:
        if "\x00" in v:
            raise InvalidValue(f"filter values on {target.name!r} cannot contain NUL characters")
    if f.op in (Op.IN, Op.CS) and len(values) > MAX_IN_VALUES:
        raise ServiceError(
            f"at most {MAX_IN_VALUES} values in {f.op.value} on {target.name!r}", code="TOO_MANY_VALUES"
        )
    op, negate = f.op, f.negate
    if op is Op.NEQ:
        op, negate = Op.EQ, not negate
    if op is Op.IS:
        if f.value != "null" and target.kind not in (Kind.BOOL, Kind.JSON):
            raise InvalidValue(f"is.{f.value} applies to checkbox and computed columns only")
        return PlannedFilter(target, op, f.value, negate)
    if op in (Op.LIKE, Op.ILIKE):
        return _plan_like(target, op, _single(f, target), negate)
    if op in (Op.IN, Op.CS):
        typed = tuple(typed_value(target, v) for v in values)
        return PlannedFilter(target, op, _dedupe(typed), negate)
    value = typed_value(target, _single(f, target))
    if target.kind is Kind.MULTI:
        value = (value,)  # eq on multi_select: contains this option
    return PlannedFilter(target, op, value, negate)


def _plan_like(target: Target, op: Op, raw: str, negate: bool) -> PlannedFilter:
    if target.kind is not Kind.SELECT:
        return PlannedFilter(target, op, like_pattern(raw), negate)
    # Select cells store option ids; labels live in metadata, so the pattern is matched
    # here and the database filters on the resulting set of ids.
    # (not a regex: ``.*a.*a.*a…`` backtracks for exponential time on a label that fails)
    # A pattern matches labels; an option's id only as a whole, with no wildcard (as
    # ``eq`` takes an id): ids are random text, so ``*a*`` must not find the options
    # whose id happens to hold an "a".
    fold = op is Op.ILIKE
    pieces = like_pieces(raw.lower() if fold else raw)
    assert target.column is not None
    ids = tuple(o.id for o in target.column.options
                if like_matches(pieces, o.label.lower() if fold else o.label)
                or (len(pieces) == 1 and pieces[0] == (o.id.lower() if fold else o.id)))
    return PlannedFilter(target, Op.IN, ids, negate)


def _single(f: Filter, target: Target) -> str:
    if isinstance(f.value, tuple):
        raise InvalidValue(f"{f.op.value} on {target.name!r} takes a single value")
    return f.value


def _dedupe(values: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(values))


def _plan_order(query: Query, table: TableMeta) -> tuple[PlannedOrder, ...]:
    terms: list[PlannedOrder] = []
    for term in query.order:
        target = resolve_target(table, term.column)
        option_ids = None
        if target.kind is Kind.SELECT and target.column is not None:
            option_ids = tuple(o.id for o in target.column.options)
        terms.append(PlannedOrder(target, term.desc, term.nulls, option_ids))
    # id is unique, so it makes every order total and paging stable; it runs the way the
    # first term does, so a column's (value, id) btree (storage/ddl.py) serves the whole
    # ORDER BY forwards or backwards and a page costs the same on any table size
    if not any(t.target.physical == "id" for t in terms):
        desc = terms[0].desc if terms else False
        terms.append(PlannedOrder(Target("id", "id", Kind.INT), desc))
    return tuple(terms)


def _order_identity(order: tuple[PlannedOrder, ...]) -> tuple[tuple[Any, ...], ...]:
    """What a cursor's order is: each planned term's column, direction, NULL placement
    as PostgreSQL applies it (last ascending, first descending, unless written) and, for a
    single_select, its options' order. ``Score.asc``, ``Score.asc.nullslast`` and
    ``Score.asc,id.asc`` are one order, and a cursor of one continues the others. A data
    checkbox's term is marked: it has sorted a never-set box as false since m0024, so a
    cursor made before (NULL apart) is refused, not resumed in another order."""
    return tuple((t.target.physical, t.desc, t.nulls or ("first" if t.desc else "last"), t.option_ids)
                 + (("false-if-never-set",) if t.target.kind is Kind.BOOL and t.target.value_type is None else ())
                 for t in order)


def _plan_select(
    query: Query,
    table: TableMeta,
    *,
    can_read: Callable[[int], bool],
    get_table: Callable[[int], TableMeta | None],
) -> tuple[tuple[ColumnMeta, ...], tuple[Embed, ...], tuple[ColumnMeta, ...]]:
    all_columns = tuple(sorted(table.columns, key=lambda c: (c.position, c.id)))
    chosen: dict[int, ColumnMeta] = {}
    embed_fields: dict[int, tuple[str, ...]] = {}
    if query.select is None:
        chosen = {c.id: c for c in all_columns}
    else:
        for item in query.select:
            if item.name == "*" and item.fields is None:
                chosen.update((c.id, c) for c in all_columns)
            elif item.name in SYSTEM_COLUMNS and item.fields is None:
                continue  # always returned as record attributes
            else:
                col = _column(table, item.name)
                chosen[col.id] = col
                if item.fields is not None:
                    embed_fields[col.id] = item.fields
    for name in query.expand:
        col = _column(table, name)
        chosen.setdefault(col.id, col)
        embed_fields[col.id] = ("*",)
    embeds: list[Embed] = []
    for col_id, names in embed_fields.items():
        embeds.append(_plan_embed(chosen[col_id], names, can_read=can_read, get_table=get_table))
    embedded = set(embed_fields)
    output = tuple(c for c in all_columns if c.id in chosen)
    fields = tuple(c for c in output if c.id not in embedded)
    return fields, tuple(embeds), output


def _plan_embed(
    col: ColumnMeta,
    names: tuple[str, ...],
    *,
    can_read: Callable[[int], bool],
    get_table: Callable[[int], TableMeta | None],
) -> Embed:
    if col.type is not ColumnType.RELATION or col.relation_table_id is None:
        raise ServiceError(f"column {col.name!r} is not a relation and cannot be embedded")
    related = get_table(col.relation_table_id)
    if related is None:
        raise ServiceError(f"the table related by {col.name!r} no longer exists")
    if not can_read(related.id):
        raise Forbidden(f"no read permission on the table related by {col.name!r}")
    related_columns = tuple(sorted(related.columns, key=lambda c: (c.position, c.id)))
    if "*" in names:
        return Embed(col, related, related_columns)
    wanted: dict[int, ColumnMeta] = {}
    for name in names:
        if name in SYSTEM_COLUMNS:
            continue
        rc = _column(related, name)
        wanted[rc.id] = rc
    return Embed(col, related, tuple(c for c in related_columns if c.id in wanted))


def _column(table: TableMeta, name: str) -> ColumnMeta:
    col = table.column(name)
    if col is None:
        raise UnknownColumn(f"unknown column {name!r}")
    return col


__all__ = [
    "Embed",
    "JsonOperand",
    "Kind",
    "PlannedFilter",
    "PlannedGroup",
    "PlannedOrder",
    "QueryPlan",
    "Target",
    "like_pattern",
    "plan_filters",
    "plan_query",
    "resolve_target",
]
