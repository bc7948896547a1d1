"""Stage 3 of the record query compiler: a :class:`QueryPlan` → SQL.

Every name is a ``psycopg.sql.Identifier`` built from ids (``ws_<w>.t_<t>``, ``c_<c>``)
and every value — including human column names used as JSON keys — is a bound
parameter, so nothing a client sends is ever part of the SQL text.

Rows of :func:`build_list` have the columns, in this order:

1. ``id``, ``created_at``, ``updated_at``;
2. one raw column per entry of ``plan.fields`` (``c_<id>``, in plan order);
3. one jsonb column per entry of ``plan.embeds``: the related record as
   ``{"id", "created_at", "updated_at", "fields": {<human name>: <to_jsonb(value)>}}``,
   or NULL when the relation is empty or dangling;
4. the row's order keys (:func:`order_keys`) as one JSON array: the ``next`` cursor's
   values when the row is the page's last.

The page reads ``limit + 1`` rows: a row past the page says there is a next page.

:func:`build_count` counts with the same WHERE clause; :mod:`storage.query.listing`
sends both statements in one pipeline (one round trip).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from storage.ddl import (
    COMPUTED_TEXT_PREFIX,
    checkbox_key_expr,
    computed_key_expr,
    computed_value_expr,
    search_expr,
    text_key_expr,
)
from storage.ddl import prefix_keyed as ddl_prefix_keyed
from storage.query.cursor import truncated_text
from storage.query.parse import Op
from storage.query.plan import Embed, JsonOperand, Kind, PlannedFilter, PlannedGroup, PlannedOrder, QueryPlan
from storage.query.targets import Target
from storage.schema import ColumnType

TABLE_ALIAS = "t"
_EMBED_ALIAS = "r"
# jsonb_build_object takes at most 100 arguments; build wide objects in chunks and merge
_PAIRS_PER_CALL = 40

_COMPARE = {Op.EQ: "=", Op.GT: ">", Op.GTE: ">=", Op.LT: "<", Op.LTE: "<="}
_PG_TYPE = {
    Kind.TEXT: "text",
    Kind.SELECT: "text",
    Kind.NUMBER: "float8",
    Kind.DATE: "timestamptz",
    Kind.INT: "bigint",
    Kind.BOOL: "boolean",
}
# Guards the text → numeric cast of JSON strings: bounded digits and exponent can never
# overflow numeric, so a filter can never raise a run-time cast error (a 500).
_NUMERIC_TEXT_RE = r"^\s*[-+]?([0-9]{1,100}(\.[0-9]{0,100})?|\.[0-9]{1,100})([eE][-+]?[0-9]{1,3})?\s*$"

Fragment = tuple[sql.Composable, list[Any]]
_NOT_NULL = frozenset({"id", "created_at", "updated_at"})  # system columns


def build_where(
    filters: Sequence[PlannedFilter | PlannedGroup], alias: str = TABLE_ALIAS
) -> Fragment:
    """The AND of ``filters`` as a boolean SQL expression over ``alias``, and its params.

    No filters give ``TRUE``. Negated filters and groups match where the condition is
    false or NULL.
    """
    if not filters:
        return sql.SQL("TRUE"), []
    return _junction(filters, " AND ", alias)


def _junction(filters: Sequence[PlannedFilter | PlannedGroup], glue: str, alias: str) -> Fragment:
    parts: list[sql.Composable] = []
    params: list[Any] = []
    for f in filters:
        if isinstance(f, PlannedGroup):
            cond, p = _junction(f.items, " OR " if f.kind == "or" else " AND ", alias)
        else:
            cond, p = _condition(f, value_expr(f.target, alias))
        if f.negate:
            cond = sql.SQL("({}) IS NOT TRUE").format(cond)
        else:
            cond = sql.SQL("({})").format(cond)
        parts.append(cond)
        params.extend(p)
    return sql.SQL(glue).join(parts), params


def build_list(plan: QueryPlan) -> tuple[sql.Composed, list[Any]]:
    """The page query for ``plan`` (row layout in the module docstring)."""
    params: list[Any] = []
    columns: list[sql.Composable] = [
        sql.Identifier(TABLE_ALIAS, name) for name in ("id", "created_at", "updated_at")
    ]
    columns.extend(sql.Identifier(TABLE_ALIAS, col.physical) for col in plan.fields)
    for i, embed in enumerate(plan.embeds):
        expr, p = _embed_expr(embed)
        columns.append(sql.SQL("{} AS {}").format(expr, sql.Identifier(f"e_{i}")))
        params.extend(p)
    keys, key_params = order_keys(plan)
    columns.append(keys)
    params.extend(key_params)
    source, source_params = page_source(plan)
    params.extend(source_params)
    order, order_params = _order_by(plan.order)
    params.extend(order_params)
    params.extend([plan.limit + 1, page_offset(plan)])
    query = sql.SQL("SELECT {} FROM {} ORDER BY {} LIMIT %s OFFSET %s").format(
        sql.SQL(", ").join(columns),
        source,
        order,
    )
    return query, params


def build_page_sizes(plan: QueryPlan, size: sql.Composable, size_params: list[Any], cap: int) -> tuple[sql.Composed, list[Any]]:
    """How many of the page's rows fit in ``cap`` bytes, and how many it reads: one row
    ``(fit, read)``. ``size`` is a row's size over the row ``t`` (its JSON, or an estimate
    of it) and ``fit`` counts the rows, in the page's order, whose running total of sizes
    stays within ``cap``. Every row is measured as it is read and none is kept (window
    functions over the page's ``limit + 1`` rows). A row is measured by ``size`` only
    while the rows before it may still fit by :func:`size_floor` (their stored text's
    length, read from each value's header without reading the value): past that, its
    floor stands in, so a page far past the cap costs the rendering of about the cap, not
    of the page."""
    floor = size_floor(plan)
    params: list[Any] = [cap, cap, *size_params]
    order, order_params = _order_by(plan.order, keyed=True)
    params.extend(order_params)
    params.extend(order_params)
    source, source_params = page_source(plan)
    inner_order, inner_params = _order_by(plan.order)
    params.extend(source_params)
    params.extend(inner_params)
    params.extend([plan.limit + 1, page_offset(plan)])
    query = sql.SQL(
        "SELECT count(*) FILTER (WHERE w._upto <= %s), count(*) FROM (SELECT"
        " sum(CASE WHEN {a}._floor_before <= %s THEN {size} ELSE {a}._floor END)"
        " OVER (ORDER BY {order} ROWS UNBOUNDED PRECEDING) AS _upto"
        " FROM (SELECT {a}.*, {floor} AS _floor, coalesce(sum({floor})"
        " OVER (ORDER BY {order} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS _floor_before"
        " FROM (SELECT *{computed} FROM {source} ORDER BY {inner_order} LIMIT %s OFFSET %s) AS {a}) AS {a}) AS w"
    ).format(size=size, floor=floor, order=order, computed=computed_keys(plan.order), source=source,
             inner_order=inner_order, a=sql.Identifier(TABLE_ALIAS))
    return query, params


def size_floor(plan: QueryPlan) -> sql.Composable:
    """A row's size at least: the bytes of its stored text values (text and select
    columns), which their JSON only lengthens. ``octet_length`` of a stored text reads the
    value's header, not the value (a TOASTed text is not fetched)."""
    parts: list[sql.Composable] = [sql.SQL("0")]
    for col in plan.fields:
        if col.type in (ColumnType.TEXT, ColumnType.SINGLE_SELECT):
            parts.append(sql.SQL("coalesce(octet_length({}), 0)").format(sql.Identifier(TABLE_ALIAS, col.physical)))
    return sql.SQL("(") + sql.SQL(" + ").join(parts) + sql.SQL(")::bigint")


def decoded_size(plan: QueryPlan) -> Fragment:
    """A row's size as :func:`build_list` reads it, estimated by its values' JSON: each
    raw field's ``to_json`` text and each embedded record's (the bytes the API writes, to
    within the keys' names)."""
    parts: list[sql.Composable] = [sql.SQL("100")]  # id, timestamps, keys
    params: list[Any] = []
    for col in plan.fields:
        parts.append(sql.SQL("coalesce(octet_length(to_json({})::text), 4)").format(
            sql.Identifier(TABLE_ALIAS, col.physical)))
    for embed in plan.embeds:
        expr, p = _embed_expr(embed)
        parts.append(sql.SQL("coalesce(octet_length(({})::text), 4)").format(expr))
        params.extend(p)
    return sql.SQL("(") + sql.SQL(" + ").join(parts) + sql.SQL(")::bigint"), params


def page_source(plan: QueryPlan) -> Fragment:
    """The page's rows before ORDER BY: ``<table> AS t WHERE <filters>`` and, with
    ``after``, the keyset condition. When the rows after the cursor are two ranges of the
    column's (value, id) btree (ascending, NULLs last: the values after ``v``, then the
    NULLs) each range is read by its own bounded index scan (``ORDER BY … LIMIT
    limit + 1``) and the page is cut from the UNION ALL of both: at most twice
    ``limit + 1`` rows are read and sorted, however deep the page. (One scan with
    ``(c, id) > (v, i) OR c IS NULL`` would be filtered from the start of the index, and
    PostgreSQL does not merge a UNION ALL of filtered scans in order.)"""
    table = _table(plan.table.workspace_id, plan.table.id)
    alias = sql.Identifier(TABLE_ALIAS)
    if ranked(plan):  # no filter: the rows from the id the row counter places
        start, start_params = rank_start(plan)
        return sql.SQL("{} AS {} WHERE {} {} ({})").format(
            table, alias, sql.Identifier(TABLE_ALIAS, "id"), sql.SQL("<=" if plan.order[0].desc else ">="),
            start), start_params
    where, params = build_where(plan.filters)
    if plan.after is None:
        return sql.SQL("{} AS {} WHERE {}").format(table, alias, where), params
    parts = _after(plan.order, plan.after, table)
    if len(parts) == 1:
        (cond, p), = parts
        return sql.SQL("{} AS {} WHERE ({}) AND ({})").format(table, alias, where, cond), params + p
    branches: list[sql.Composable] = []
    out: list[Any] = []
    for cond, p in parts:
        order, order_params = _order_by(plan.order)
        branches.append(sql.SQL("(SELECT * FROM {} AS {} WHERE ({}) AND ({}) ORDER BY {} LIMIT %s)").format(
            table, alias, where, cond, order))
        out.extend([*params, *p, *order_params, plan.offset + plan.limit + 1])
    return sql.SQL("({}) AS {}").format(sql.SQL(" UNION ALL ").join(branches), alias), out


# ---------------------------------------------------------------------------- deep offsets
# An unfiltered page ordered by id alone, deeper than RANK_MIN_OFFSET, starts at the row
# the row counter's blocks place at that offset (migration m0018): the same rows as
# OFFSET, without reading the rows before them. Shallower pages skip their rows as usual.
RANK_MIN_OFFSET = 2048
_SUPER, _BLOCK = 16, 10  # the counter's two granularities: id >> 16 and id >> 10
_RANK_SQL = """(WITH sup AS (
  SELECT block, sum(n) AS n FROM wds.row_counts
  WHERE table_id = %s AND workspace_id = %s AND shift = {super} AND block IS NOT NULL GROUP BY block),
s1 AS (
  SELECT block, (%s - (upto - n))::bigint AS skip
  FROM (SELECT block, n, sum(n) OVER (ORDER BY block {dir}) AS upto FROM sup) AS w
  WHERE upto > %s ORDER BY block {dir} LIMIT 1),
blk AS (
  SELECT block, sum(n) AS n FROM wds.row_counts
  WHERE table_id = %s AND workspace_id = %s AND shift = {block}
    AND block >= (SELECT block << {fan} FROM s1) AND block < (SELECT (block + 1) << {fan} FROM s1)
  GROUP BY block),
s2 AS (
  SELECT block, ((SELECT skip FROM s1) - (upto - n))::bigint AS skip
  FROM (SELECT block, n, sum(n) OVER (ORDER BY block {dir}) AS upto FROM blk) AS w
  WHERE upto > (SELECT skip FROM s1) ORDER BY block {dir} LIMIT 1)
SELECT r.id FROM {table} AS r WHERE r.id {cmp} (SELECT {edge} FROM s2)
ORDER BY r.id {dir} OFFSET (SELECT skip FROM s2) LIMIT 1)"""


def ranked(plan: QueryPlan) -> bool:
    """Whether the page starts at a row the row counter places (:func:`rank_start`): no
    filter, no cursor, an order on id alone and an offset of at least RANK_MIN_OFFSET."""
    return (plan.offset >= RANK_MIN_OFFSET and not plan.filters and plan.after is None
            and len(plan.order) == 1 and plan.order[0].target.physical == "id" and plan.order[0].nulls is None)


def page_offset(plan: QueryPlan) -> int:
    """The OFFSET of the page's statement: 0 when :func:`rank_start` found its first row."""
    return 0 if ranked(plan) else plan.offset


def rank_start(plan: QueryPlan) -> Fragment:
    """A scalar subquery: the id of the row at ``plan.offset`` in id order (descending
    with ``order=id.desc``), NULL past the last row. The superblocks' running sum names
    the superblock holding it, that superblock's blocks' running sum the block, and at
    most 1,023 ids of the block are skipped, all under the statement's snapshot: the
    counter rows a write adds commit with its rows."""
    desc = plan.order[0].desc
    text = _RANK_SQL.format(
        super=_SUPER, block=_BLOCK, fan=_SUPER - _BLOCK, dir="DESC" if desc else "ASC",
        cmp="<=" if desc else ">=", table="{table}",
        # the block's first id in the page's direction
        edge=f"((block + 1) << {_BLOCK}) - 1" if desc else f"block << {_BLOCK}")
    query = sql.SQL(text).format(table=_table(plan.table.workspace_id, plan.table.id))
    t, w, o = plan.table.id, plan.table.workspace_id, plan.offset
    return query, [t, w, o, o, t, w]


def order_keys(plan: QueryPlan, alias: str = TABLE_ALIAS) -> Fragment:
    """``json_build_array`` of the row's raw value of each order term (a single_select's
    option id, not its position): what a ``next`` cursor carries."""
    if plan.cursor_kinds is None:
        return sql.SQL("NULL::json"), []
    return sql.SQL("json_build_array({})").format(
        sql.SQL(", ").join(key_expr(t.target, alias) for t in plan.order)), []


def _after(order: Sequence[PlannedOrder], values: Sequence[Any], table: sql.Composable) -> list[Fragment]:
    """Rows strictly after the row whose order keys are ``values``, in ``order``: one
    condition, or two whose rows follow each other in that order (:func:`page_source`).

    A one-column order (the column, then id the same way) is a row comparison
    ``(c, id) > (v, i)`` — the bound of a range scan on the column's (value, id) btree —
    when the NULLs of the column sort before ``v`` (so none of them follows); that and
    then ``c IS NULL`` when they sort after it; and ``c IS NULL AND id > i`` when ``v`` is
    NULL and NULLs sort last. Every other case is the exact expansion
    ``OR_k (t_1 = v_1 AND … AND t_k-1 = v_k-1 AND t_k after v_k)`` with each term's
    direction and NULL placement (NULLs are equal to each other).

    A data text column's btree holds the text's first characters (storage/ddl.py
    ``text_key_expr``): its one-column condition also bounds that prefix, the bound of the
    range scan, and its NULL tests are on the prefix (NULL exactly when the text is). A
    long text value reaches the cursor as its first characters and a digest
    (:func:`storage.query.cursor.truncated_text`): the value compared with is the cursor
    row's text, read back by id while it still has that digest, else those first
    characters — which sort before the text, so a changed row can make rows repeat on
    the next page but never be skipped.
    """
    row_id = next((v for term, v in zip(order, values, strict=True) if term.target.physical == "id"), None)
    exprs: list[tuple[sql.Composable, list[Any]]] = []
    vals: list[Any] = []
    for term, v in zip(order, values, strict=True):
        expr: sql.Composable = key_expr(term.target)
        eparams: list[Any] = []
        kind: sql.Composable = _typed_param(term.target.kind)
        cut = truncated_text(v) if term.target.kind is Kind.TEXT else None
        if cut is not None:
            head, digest = cut
            if row_id is None:  # no id to read the row back by: the head (sorts before the text)
                v = head
            else:
                kind = sql.SQL("coalesce((SELECT {x}.{c} FROM {tbl} AS {x} WHERE {x}.id = %s::bigint"
                               " AND md5({x}.{c}) = %s::text), %s::text)").format(
                    x=sql.Identifier("_cursor_row"), c=sql.Identifier(term.target.physical), tbl=table)
                v = _Bound((row_id, digest, head))
        if term.option_ids is not None:
            expr = sql.SQL("array_position(%s::text[], {})").format(expr)
            eparams = [list(term.option_ids)]
            # the position of the cursor's option (NULL for a NULL or a removed option)
            v = term.option_ids.index(v) + 1 if v in term.option_ids else None
            kind = _typed_param(Kind.INT)
        exprs.append((expr, eparams))
        vals.append((v, kind))
    # NOT NULL columns (id and the timestamps) hold no NULL to place: as if they came first
    nulls_first = [t.target.physical in _NOT_NULL or (t.nulls == "first" if t.nulls is not None else t.desc)
                   for t in order]
    if (len(order) == 2 and order[1].target.physical == "id" and order[0].desc == order[1].desc
            and order[1].nulls is None):
        (e, ep), ((v, kind), (i, _)) = exprs[0], vals
        cmp = "<" if order[0].desc else ">"
        # a data text column: its btree's first key is the text's prefix
        indexed = text_key_expr(e) if prefix_keyed(order[0].target) else e
        if v is not None:
            values_after = (sql.SQL("({}, {}) " + cmp + " ({}, %s::bigint)").format(
                e, sql.Identifier(TABLE_ALIAS, "id"), kind), [*ep, *_bind(v), i])
            if indexed is not e:
                values_after = (sql.SQL("{} " + cmp + "= {} AND {}").format(
                    indexed, text_key_expr(kind), values_after[0]), [*ep, *_bind(v), *values_after[1]])
            if nulls_first[0]:
                return [values_after]
            return [values_after, (sql.SQL("{} IS NULL").format(indexed), list(ep))]
        if not nulls_first[0]:
            return [(sql.SQL("{} IS NULL AND {} " + cmp + " %s::bigint").format(
                indexed, sql.Identifier(TABLE_ALIAS, "id")), [*ep, i])]
    ors: list[sql.Composable] = []
    params: list[Any] = []
    for k in range(len(order)):
        ands: list[sql.Composable] = []
        p: list[Any] = []
        for j in range(k):
            (e, ep), (v, kind) = exprs[j], vals[j]
            if v is None:
                ands.append(sql.SQL("{} IS NULL").format(e))
                p.extend(ep)
            else:
                ands.append(sql.SQL("{} = {}").format(e, kind))
                p.extend([*ep, *_bind(v)])
        (e, ep), (v, kind) = exprs[k], vals[k]
        cmp = "<" if order[k].desc else ">"
        if v is None:
            if not nulls_first[k]:
                continue  # nothing sorts after NULL on this term
            ands.append(sql.SQL("{} IS NOT NULL").format(e))
            p.extend(ep)
        elif nulls_first[k]:
            ands.append(sql.SQL("{} " + cmp + " {}").format(e, kind))
            p.extend([*ep, *_bind(v)])
        else:
            ands.append(sql.SQL("({} " + cmp + " {} OR {} IS NULL)").format(e, kind, e))
            p.extend([*ep, *_bind(v), *ep])
        ors.append(sql.SQL("({})").format(sql.SQL(" AND ").join(ands)))
        params.extend(p)
    if not ors:
        return [(sql.SQL("FALSE"), [])]
    return [(sql.SQL(" OR ").join(ors), params)]


class _Bound(tuple):
    """The parameters of a cursor value read back by id (:func:`_after`)."""


def _bind(v: Any) -> list[Any]:
    return list(v) if isinstance(v, _Bound) else [v]


def prefix_keyed(target: Target) -> bool:
    """Whether ``target`` is a data text column, whose btree's first key is the text's
    prefix (storage/ddl.py ``prefix_keyed``)."""
    return target.kind is Kind.TEXT and target.column is not None and ddl_prefix_keyed(target.column)


def build_count(plan: QueryPlan) -> tuple[sql.Composed, list[Any]]:
    """``SELECT count(*)`` over the same WHERE clause as :func:`build_list`."""
    where, params = build_where(plan.filters)
    query = sql.SQL("SELECT count(*) FROM {} AS {} WHERE {}").format(
        _table(plan.table.workspace_id, plan.table.id), sql.Identifier(TABLE_ALIAS), where
    )
    return query, params


def build_counter(plan: QueryPlan) -> tuple[sql.Composed, list[Any]] | None:
    """For an unfiltered plan, the exact count read from the table's row counter
    (``wds.row_counts``, migrations m0013 and m0018: the sum of its superblocks;
    ``count(*)`` when the table has no counter row),
    else ``None``. Needs ``wds.row_counts`` to exist (:func:`storage.query.listing.has_row_counter`)."""
    if plan.filters:
        return None
    query = sql.SQL(
        "SELECT coalesce((SELECT sum(n) FROM wds.row_counts WHERE table_id = %s AND workspace_id = %s AND shift = 16),"
        " (SELECT count(*) FROM {}))::bigint"
    ).format(_table(plan.table.workspace_id, plan.table.id))
    return query, [plan.table.id, plan.table.workspace_id]


def build_estimate(plan: QueryPlan) -> tuple[sql.Composed, list[Any]]:
    """``EXPLAIN (FORMAT JSON)`` of the rows :func:`build_count` counts: the planner's
    estimate of their number is the top node's ``Plan Rows`` (``Prefer: count=planned``)."""
    where, params = build_where(plan.filters)
    query = sql.SQL("EXPLAIN (FORMAT JSON) SELECT 1 FROM {} AS {} WHERE {}").format(
        _table(plan.table.workspace_id, plan.table.id), sql.Identifier(TABLE_ALIAS), where
    )
    return query, params


def _table(workspace_id: int, table_id: int) -> sql.Composable:
    return sql.Identifier(f"ws_{int(workspace_id)}", f"t_{int(table_id)}")


def _typed_param(kind: Kind, array: bool = False) -> sql.Composable:
    return sql.SQL("%s::" + _PG_TYPE[kind] + ("[]" if array else ""))


def value_expr(target: Target, alias: str = TABLE_ALIAS) -> sql.Composable:
    """The SQL a filter compares: the column, or a typed computed column's value read as
    its type — the very expression its indexes are built on (storage/ddl.py)."""
    column = sql.Identifier(alias, target.physical)
    if target.value_type is not None:
        return computed_value_expr(column, target.value_type)
    return column


def key_expr(target: Target, alias: str = TABLE_ALIAS) -> sql.Composable:
    """The SQL a list sorts on (and a cursor carries): the column, a typed computed
    column's btree key (text: its first characters, storage/ddl.py ``computed_key_expr``),
    or a data checkbox's ``coalesce(c, false)`` (a box never set is false, in order too)."""
    column = sql.Identifier(alias, target.physical)
    if target.value_type is not None:
        return computed_key_expr(column, target.value_type)
    if target.kind is Kind.BOOL:
        return checkbox_key_expr(column)
    return column


def _json_text(c: sql.Composable) -> sql.Composable:
    return sql.SQL("({} #>> '{{}}')").format(c)


def _json_number(c: sql.Composable) -> sql.Composable:
    """The numeric value of a JSON number or numeric-looking string, else NULL."""
    return sql.SQL(
        "(CASE WHEN jsonb_typeof({c}) = 'number' THEN ({c})::numeric"
        " WHEN jsonb_typeof({c}) = 'string' AND {t} ~ {re} THEN {t}::numeric END)"
    ).format(c=c, t=_json_text(c), re=sql.Literal(_NUMERIC_TEXT_RE))


def _condition(f: PlannedFilter, c: sql.Composable) -> Fragment:
    """The positive condition of one filter (may evaluate to NULL)."""
    kind, op, value = f.target.kind, f.op, f.value
    if op is Op.IS:
        if kind is Kind.BOOL and value == "null" and f.target.value_type is None:
            # a checkbox is never blank: never set, it reads (and filters) as false
            return sql.SQL("FALSE"), []
        return _is(kind, value, c), []
    if kind is Kind.JSON:
        return _json_condition(op, value, c)
    if kind is Kind.MULTI:
        # eq and cs: contains (all of) the option ids; in: overlaps any of them
        if op is not Op.IN and not value:
            # every set contains the empty one, a never-set cell (NULL, read as []) too
            return sql.SQL("TRUE"), []
        template = "{} && %s::text[]" if op is Op.IN else "{} @> %s::text[]"
        return sql.SQL(template).format(c), [list(value)]
    if kind is Kind.BOOL:
        # a checkbox never set reads as false (a data checkbox's btree key)
        c = checkbox_key_expr(c)
    if op in (Op.LIKE, Op.ILIKE):
        return _like(op, c, value)
    target = f.target
    if target.value_type == "text" or prefix_keyed(target):
        # the btree holds the text's first characters: bound them (exact under the C
        # collation: a string is after another only if its prefix is not before), then
        # compare the whole text
        prefix = text_key_expr(c)
        if op is Op.IN:
            return (sql.SQL("({} = ANY(%s::text[]) AND {} = ANY(%s::text[]))").format(prefix, c),
                    [sorted({v[:COMPUTED_TEXT_PREFIX] for v in value}), list(value)])
        bound = {Op.EQ: "=", Op.GT: ">=", Op.GTE: ">=", Op.LT: "<=", Op.LTE: "<="}[op]
        return (sql.SQL("({} " + bound + " {} AND {} " + _COMPARE[op] + " %s::text)").format(
            prefix, text_key_expr(sql.SQL("%s::text")), c), [value, value])
    if op is Op.IN:
        return sql.SQL("{} = ANY({})").format(c, _typed_param(target.kind, array=True)), [list(value)]
    return sql.SQL("{} " + _COMPARE[op] + " {}").format(c, _typed_param(target.kind)), [value]


def _like(op: Op, c: sql.Composable, value: Any) -> tuple[sql.Composable, list[Any]]:
    """``ilike``: both sides lower-cased under the ``pg_c_utf8`` collation, then ``LIKE``.

    The database runs with ``--locale=C``, where ILIKE folds ASCII letters only ('É'
    would not match 'é'); PostgreSQL's builtin C.UTF-8 collation (17+) applies Unicode's
    simple case mapping (docs/query.md). ``lower(c COLLATE "pg_c_utf8")`` is also the
    expression each text column's trigram index is built on (:func:`storage.ddl.search_expr`),
    so a leading-wildcard pattern reads the index: the index's own case folding (the
    database's, ASCII only) then sees the same already-lowered text on both sides, which
    keeps its answers exact. ``like`` (case-sensitive) uses the same index as a superset
    and checks the exact pattern beside it.
    """
    folded = sql.SQL('{} LIKE lower(%s::text COLLATE "pg_c_utf8")').format(search_expr(c))
    if op is Op.ILIKE:
        return folded, [value]
    return sql.SQL("({} AND {} LIKE %s::text)").format(folded, c), [value, value]


def _is(kind: Kind, value: str, c: sql.Composable) -> sql.Composable:
    if value == "null":
        empty = {
            Kind.FILE: "({c} IS NULL OR {c} = '[]'::jsonb)",
            Kind.MULTI: "({c} IS NULL OR cardinality({c}) = 0)",
            Kind.JSON: "({c} IS NULL OR {c} = 'null'::jsonb)",
        }.get(kind, "{c} IS NULL")
        return sql.SQL(empty).format(c=c)
    if kind is Kind.BOOL:
        return sql.SQL("{} IS TRUE" if value == "true" else "{} IS NOT TRUE").format(c)
    return sql.SQL("{} = {}::jsonb").format(c, sql.Literal(value))  # JSON true/false


def _json_condition(op: Op, value: Any, c: sql.Composable) -> Fragment:
    text = _json_text(c)
    if op in (Op.LIKE, Op.ILIKE):
        return _like(op, text, value)
    if op is Op.IN:
        operands: tuple[JsonOperand, ...] = value
        numbers = [o.number for o in operands if o.number is not None]
        return (
            sql.SQL("(coalesce({} = ANY(%s::numeric[]), false) OR {} = ANY(%s::text[]))").format(
                _json_number(c), text
            ),
            [numbers, [o.text for o in operands]],
        )
    if op is Op.CS:
        # a JSON array contains each value, as a number or as a string
        parts: list[sql.Composable] = []
        params: list[Any] = []
        for o in value:
            candidates = [Jsonb([o.text])] + ([Jsonb([float(o.number)])] if o.number is not None else [])
            parts.append(
                sql.SQL("({})").format(
                    sql.SQL(" OR ").join(sql.SQL("{} @> %s::jsonb").format(c) for _ in candidates)
                )
            )
            params.extend(candidates)
        if not parts:
            return sql.SQL("jsonb_typeof({}) = 'array'").format(c), []
        return sql.SQL(" AND ").join(parts), params
    operand: JsonOperand = value
    symbol = _COMPARE[op]
    if operand.number is None:
        return sql.SQL("{} " + symbol + " %s::text").format(text), [operand.text]
    if op is Op.EQ:
        return (
            sql.SQL("(coalesce({} = %s::numeric, false) OR {} = %s::text)").format(_json_number(c), text),
            [operand.number, operand.text],
        )
    return sql.SQL("{} " + symbol + " %s::numeric").format(_json_number(c)), [operand.number]


def computed_keys(order: Sequence[PlannedOrder]) -> sql.Composable:
    """``, <key> AS _k<i>`` for each typed computed order term: a page subquery selects
    them so the query around it orders by a column known to be sorted already
    (:func:`_order_by` with ``keyed``), as it does a data column."""
    return sql.SQL("").join(
        sql.SQL(", {} AS {}").format(
            text_key_expr(key_expr(term.target)) if prefix_keyed(term.target) else key_expr(term.target),
            sql.Identifier(f"_k{i}"))
        for i, term in enumerate(order) if term.target.value_type is not None or prefix_keyed(term.target)
    )


def _order_by(order: Sequence[PlannedOrder], keyed: bool = False) -> Fragment:
    parts: list[sql.Composable] = []
    params: list[Any] = []
    for i, term in enumerate(order):
        expr: sql.Composable = key_expr(term.target)
        if keyed and term.target.value_type is not None:
            expr = sql.Identifier(TABLE_ALIAS, f"_k{i}")
        if term.option_ids is not None:
            # single_select sorts by the options' order, not by their random ids
            expr = sql.SQL("array_position(%s::text[], {})").format(expr)
            params.append(list(term.option_ids))
        suffix = " DESC" if term.desc else " ASC"
        if term.nulls is not None:
            suffix += " NULLS FIRST" if term.nulls == "first" else " NULLS LAST"
        if prefix_keyed(term.target):
            # the btree's first key, then the whole text: the same order as the text
            # alone (C collation), read from the index with at most an Incremental Sort
            # of the rows sharing a prefix (``keyed``: the prefix the subquery selected)
            prefix = sql.Identifier(TABLE_ALIAS, f"_k{i}") if keyed else text_key_expr(expr)
            parts.append(sql.SQL("{}" + suffix).format(prefix))
        parts.append(sql.SQL("{}" + suffix).format(expr))
    return sql.SQL(", ").join(parts), params


def _embed_expr(embed: Embed) -> Fragment:
    """A scalar subquery yielding the related record as jsonb (NULL when absent)."""
    r = _EMBED_ALIAS
    params: list[Any] = []
    chunks: list[sql.Composable] = []
    for start in range(0, len(embed.fields), _PAIRS_PER_CALL):
        pairs: list[sql.Composable] = []
        for col in embed.fields[start : start + _PAIRS_PER_CALL]:
            pairs.append(sql.SQL("%s::text, to_jsonb({})").format(sql.Identifier(r, col.physical)))
            params.append(col.name)
        chunks.append(sql.SQL("jsonb_build_object({})").format(sql.SQL(", ").join(pairs)))
    fields = sql.SQL(" || ").join(chunks) if chunks else sql.SQL("'{}'::jsonb")
    expr = sql.SQL(
        "(SELECT jsonb_build_object('id', {rid}, 'created_at', {rc}, 'updated_at', {ru}, 'fields', {f})"
        " FROM {tbl} AS {ra} WHERE {rid} = {link})"
    ).format(
        rid=sql.Identifier(r, "id"),
        rc=sql.Identifier(r, "created_at"),
        ru=sql.Identifier(r, "updated_at"),
        f=fields,
        tbl=_table(embed.table.workspace_id, embed.table.id),
        ra=sql.Identifier(r),
        link=sql.Identifier(TABLE_ALIAS, embed.column.physical),
    )
    return expr, params
