"""Stage 3 of the SQL endpoint: resolved fields and typed values → ``psycopg.sql``.

Every name is a :class:`psycopg.sql.Identifier` of a physical name (``ws_W.t_T``,
``c_C`` or a system column) and every value is a bound ``%s`` parameter; the client's
text never reaches the database. Values compare the way the REST API shows them: a
checkbox that was never set reads ``false`` and an unset multi-select reads ``[]``, so
those columns are compared through ``coalesce``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import sql

from storage.ddl import text_key_expr
from storage.query.render import value_json  # one rendering for REST lists and SQL
from storage.schema import ColumnMeta, ColumnType
from storage.sqlquery.parse import Op

# Kinds of values a field holds; data columns use their ColumnType value.
KIND_ID = "id"
KIND_TIMESTAMP = "timestamp"
KIND_COMPUTED = "computed"

_SQL_OPS = {Op.EQ: "=", Op.NEQ: "<>", Op.GT: ">", Op.GTE: ">=", Op.LT: "<", Op.LTE: "<="}
# JSON strings that read as numbers compare numerically, as in REST filters.
_NUMERIC_TEXT_RE = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"


@dataclass(frozen=True, slots=True)
class Field:
    """A resolved column: its human name, physical name and how its values behave."""

    name: str
    physical: str
    kind: str
    meta: ColumnMeta | None = None  # None for the system columns id/created_at/updated_at


@dataclass(frozen=True, slots=True)
class JsonOperand:
    """A literal compared with a computed (jsonb) column: numerically when it reads as a
    number, else as text."""

    number: float | None
    text: str


@dataclass(frozen=True, slots=True)
class Fragment:
    """A piece of SQL and the parameters its ``%s`` placeholders take, in order."""

    sql: sql.Composable
    params: tuple[Any, ...] = ()


def value_expr(field: Field) -> sql.Composable:
    """The expression a field is compared and ordered by (its API-visible value)."""
    col = sql.Identifier(field.physical)
    if field.kind == ColumnType.CHECKBOX:
        return sql.SQL("coalesce({}, false)").format(col)
    if field.kind == ColumnType.MULTI_SELECT:
        return sql.SQL("coalesce({}, '{{}}'::text[])").format(col)
    return col


def condition(field: Field, op: Op, values: tuple[Any, ...], negate: bool) -> Fragment:
    """SQL for one planned condition; ``values`` are already typed for the column."""
    col = sql.Identifier(field.physical)
    expr = value_expr(field)
    if op is Op.IS_NULL:
        return Fragment(_null_test(field, col, expr, negate))
    if field.kind == KIND_COMPUTED:
        return _computed(col, op, values, negate)
    if field.kind == ColumnType.MULTI_SELECT:
        return _multi_select(expr, op, values, negate)
    if op is Op.LIKE:
        return Fragment(sql.SQL("{} NOT LIKE %s" if negate else "{} LIKE %s").format(expr), values)
    if field.kind == ColumnType.TEXT and op is not Op.NEQ:
        return _text(expr, op, values, negate)
    if op is Op.IN:
        marks = sql.SQL(", ").join(sql.Placeholder() for _ in values)
        template = "{} NOT IN ({})" if negate else "{} IN ({})"
        return Fragment(sql.SQL(template).format(expr, marks), values)
    return Fragment(sql.SQL("{} " + _SQL_OPS[op] + " %s").format(expr), values)


def _text(expr: sql.Composable, op: Op, values: tuple[Any, ...], negate: bool) -> Fragment:
    """A text column's btree holds its first characters (storage/ddl.py ``text_key_expr``):
    bound them (exact under the C collation), then compare the whole text, as the REST
    filter compiler does."""
    prefix = text_key_expr(expr)
    if op is Op.IN:
        marks = sql.SQL(", ").join(sql.Placeholder() for _ in values)
        heads = sql.SQL(", ").join(text_key_expr(sql.SQL("%s::text")) for _ in values)
        test = sql.SQL("({} IN ({}) AND {} IN ({}))").format(prefix, heads, expr, marks)
        return Fragment(sql.SQL("NOT {}").format(test) if negate else test, (*values, *values))
    bound = {Op.EQ: "=", Op.GT: ">=", Op.GTE: ">=", Op.LT: "<=", Op.LTE: "<="}[op]
    test = sql.SQL("({} " + bound + " {} AND {} " + _SQL_OPS[op] + " %s)").format(
        prefix, text_key_expr(sql.SQL("%s::text")), expr)
    return Fragment(test, (*values, *values))


def _null_test(field: Field, col: sql.Identifier, expr: sql.Composable, negate: bool) -> sql.Composable:
    # "Empty" means what the API shows as empty: [] for multi-selects and files, JSON null
    # for computed outputs, alongside SQL NULL.
    if field.kind == ColumnType.MULTI_SELECT:
        return sql.SQL("cardinality({}) > 0" if negate else "cardinality({}) = 0").format(expr)
    if field.kind == ColumnType.FILE:
        empty = "({} IS NULL OR {} IN ('[]'::jsonb, 'null'::jsonb))"
        return sql.SQL(("NOT " + empty) if negate else empty).format(col, col)
    if field.kind == KIND_COMPUTED:
        empty = "({} IS NULL OR {} = 'null'::jsonb)"
        return sql.SQL(("NOT " + empty) if negate else empty).format(col, col)
    if field.kind == ColumnType.CHECKBOX:  # never blank: never set, it reads as false
        return sql.SQL("TRUE" if negate else "FALSE")
    return sql.SQL("{} IS NOT NULL" if negate else "{} IS NULL").format(col)


def _multi_select(expr: sql.Composable, op: Op, values: tuple[Any, ...], negate: bool) -> Fragment:
    # = 'x' means "has option x"; IN (...) means "has any of them"; != and NOT IN negate.
    marks = sql.SQL(", ").join(sql.Placeholder() for _ in values)
    operator = "@>" if op in (Op.EQ, Op.NEQ) else "&&"
    test = sql.SQL("{} " + operator + " ARRAY[{}]::text[]").format(expr, marks)
    if negate or op is Op.NEQ:
        test = sql.SQL("NOT ({})").format(test)
    return Fragment(test, values)


def _computed(col: sql.Identifier, op: Op, values: tuple[Any, ...], negate: bool) -> Fragment:
    # Same semantics as the REST filter compiler (storage.query) for jsonb outputs: a value
    # that reads as a number compares with JSON numbers and numeric strings numerically,
    # anything else compares with the value's text (``#>> '{}'``).
    text = sql.SQL("({} #>> '{{}}')").format(col)
    number = sql.SQL(
        "(CASE WHEN jsonb_typeof({c}) = 'number' THEN ({c})::numeric"
        " WHEN jsonb_typeof({c}) = 'string' AND {t} ~ {re} THEN {t}::numeric END)"
    ).format(c=col, t=text, re=sql.Literal(_NUMERIC_TEXT_RE))

    def compare(o: JsonOperand, symbol: str) -> Fragment:
        if o.number is None:
            return Fragment(sql.SQL("{} " + symbol + " %s::text").format(text), (o.text,))
        if symbol == "=":
            return Fragment(
                sql.SQL("(coalesce({} = %s::numeric, false) OR {} = %s::text)").format(number, text),
                (o.number, o.text),
            )
        return Fragment(sql.SQL("{} " + symbol + " %s::numeric").format(number), (o.number,))

    if op is Op.IN:
        parts = [compare(o, "=") for o in values]
        test: sql.Composable = sql.SQL("({})").format(sql.SQL(" OR ").join(f.sql for f in parts))
        params = tuple(p for f in parts for p in f.params)
        return Fragment(sql.SQL("NOT {}").format(test) if negate else test, params)
    if op is Op.NEQ:
        eq = compare(values[0], "=")
        return Fragment(sql.SQL("NOT {}").format(eq.sql), eq.params)
    return compare(values[0], _SQL_OPS[op])


def order_item(field: Field, desc: bool, nulls_first: bool) -> Fragment:
    """One ORDER BY term; a single-select sorts by its options' order, as in REST."""
    expr = value_expr(field)
    params: tuple[Any, ...] = ()
    if field.kind == ColumnType.SINGLE_SELECT and field.meta is not None:
        expr = sql.SQL("array_position(%s::text[], {})").format(sql.Identifier(field.physical))
        params = ([opt.id for opt in field.meta.options],)
    text = sql.SQL("{} {} {}").format(
        expr,
        sql.SQL("DESC" if desc else "ASC"),
        sql.SQL("NULLS FIRST" if nulls_first else "NULLS LAST"),
    )
    if field.kind == ColumnType.TEXT:
        # the btree's first key (the text's prefix), then the whole text: the text's order
        text = sql.SQL("{} {} {}, {}").format(
            text_key_expr(expr), sql.SQL("DESC" if desc else "ASC"),
            sql.SQL("NULLS FIRST" if nulls_first else "NULLS LAST"), text)
    return Fragment(text, params)


def build_queries(
    *,
    schema: str,
    table: str,
    fields: tuple[Field, ...],
    where: tuple[Fragment, ...],
    order: tuple[Fragment, ...],
) -> tuple[sql.Composed, sql.Composed, tuple[Any, ...], tuple[Any, ...]]:
    """Build the count query and the rows query (which ends in ``LIMIT %s OFFSET %s``).

    Returns:
        ``(count_query, rows_query, where_params, order_params)``; the rows query takes
        ``where_params + order_params + (limit, offset)``.
    """
    source = sql.Identifier(schema, table)
    where_sql = _where_sql(where)
    params = tuple(p for f in where for p in f.params)
    count_query = sql.SQL("SELECT count(*) FROM {}{}").format(source, where_sql)
    columns = sql.SQL(", ").join(sql.Identifier(f.physical) for f in fields) if fields else sql.SQL("1")
    rows_query = sql.SQL("SELECT {} FROM {}{} ORDER BY {} LIMIT %s OFFSET %s").format(
        columns, source, where_sql, sql.SQL(", ").join(o.sql for o in order)
    )
    return count_query, rows_query, params, tuple(p for o in order for p in o.params)


def _where_sql(where: tuple[Fragment, ...]) -> sql.Composable:
    if not where:
        return sql.SQL("")
    return sql.SQL(" WHERE ") + sql.SQL(" AND ").join(sql.SQL("({})").format(f.sql) for f in where)


MAX_JSON_NAME = 63  # bytes: PostgreSQL's identifier length (NAMEDATALEN - 1), a record's key


def json_renderable(fields: tuple[Field, ...]) -> bool:
    """Whether PostgreSQL can render these fields' rows as JSON: no file columns (their
    URLs may need signing in Python) and every name fits a column alias, which becomes the
    row's key (longer names are rendered in Python)."""
    return bool(fields) and all(
        (f.meta is None or f.meta.type is not ColumnType.FILE) and len(f.name.encode()) <= MAX_JSON_NAME
        for f in fields
    )


@dataclass(frozen=True, slots=True)
class Statement:
    query: sql.Composed
    params: tuple[Any, ...]


def build_json_page(
    *,
    schema: str,
    table: str,
    fields: tuple[Field, ...],
    where: tuple[Fragment, ...],
    order: tuple[Fragment, ...],
    limit: int,
    offset: int,
    count: bool,
) -> Statement:
    """One statement answering a page: its rows rendered as a JSON array text (see
    :func:`_page_rows`) and a number. With ``count`` the number is the exact count of every
    match. Without it, the page is read with one row more (``LIMIT limit + 1``), which is
    sliced off the array, and the number is how many rows were read: more than ``limit``
    means more rows match."""
    if count:
        rows, params = _page_rows(schema, table, fields, where, order, limit, offset)
        where_params = tuple(p for f in where for p in f.params)
        query = sql.SQL(
            "SELECT coalesce(array_to_json(array_agg({a}.*)), '[]')::text, (SELECT count(*) FROM {src}{where})"
            " FROM {rows}"
        ).format(a=_ALIAS, src=sql.Identifier(schema, table), where=_where_sql(where), rows=rows)
        return Statement(query, (*where_params, *params))  # the count comes first in the text
    rows, params = _page_rows(schema, table, fields, where, order, limit + 1, offset)
    query = sql.SQL(
        "SELECT coalesce(array_to_json((array_agg({a}.*))[1:%s]), '[]')::text, count(*) FROM {rows}"
    ).format(a=_ALIAS, rows=rows)
    return Statement(query, (limit, *params))


_ALIAS = sql.Identifier("r")


def _page_rows(
    schema: str, table: str, fields: tuple[Field, ...], where: tuple[Fragment, ...], order: tuple[Fragment, ...],
    limit: int, offset: int,
) -> tuple[sql.Composed, tuple[Any, ...]]:
    """``(…) AS r``: the page's rows in order, with one column per field named by its
    human name and holding the value REST shows (:func:`storage.query.render.value_json`),
    so that PostgreSQL renders each row as the flat object of the answer (``r.*`` to
    JSON: PostgREST's approach). The page is read and ordered over the physical columns
    first; the rows keep that order through the renaming subquery into the aggregate
    (an ordered subquery feeding an aggregate, as PostgreSQL documents for this use)."""
    columns = sql.SQL(", ").join(
        sql.SQL("{} AS {}").format(_json_value(f), sql.Identifier(f.name)) for f in fields
    )
    query = sql.SQL(
        "(SELECT {columns} FROM (SELECT * FROM {src} AS {a}{where} ORDER BY {order} LIMIT %s OFFSET %s) AS {a}) AS {a}"
    ).format(columns=columns, src=sql.Identifier(schema, table), a=_ALIAS, where=_where_sql(where),
             order=sql.SQL(", ").join(o.sql for o in order))
    params = (*(p for f in where for p in f.params), *(p for o in order for p in o.params), limit, offset)
    return query, params


def _json_value(field: Field) -> sql.Composable:
    col = sql.Identifier(field.physical)
    if field.meta is not None:
        return value_json(field.meta, col)
    return col  # id, and the timestamps in PostgreSQL's JSON form (as storage.values.iso_text)
