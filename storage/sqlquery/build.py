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

import orjson
from psycopg import sql

from storage.ddl import text_key_expr
from storage.query.render import value_json  # one rendering for REST lists and SQL
from storage.schema import ColumnMeta, ColumnType
from storage.sqlquery import budget
from storage.sqlquery.parse import Op

# Kinds of values a field holds; data columns use their ColumnType value.
KIND_ID = "id"
KIND_TIMESTAMP = "timestamp"
KIND_COMPUTED = "computed"

_SQL_OPS = {Op.EQ: "=", Op.NEQ: "<>", Op.GT: ">", Op.GTE: ">=", Op.LT: "<", Op.LTE: "<="}
# JSON strings that read as numbers compare numerically, as in REST filters.
_NUMERIC_TEXT_RE = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"

MAX_ANSWER_BYTES = 16 * 1024**2  # a page's rows as JSON; WDS_SQL_MAX_ANSWER_BYTES overrides it

# How an output column's bytes are counted before its row is rendered (see guarded_page):
SIZE_TEXT = "text"  # its text's bytes, read from the value's header (free on a TOASTed text) + 2 quotes
SIZE_RENDER = "render"  # its text form's bytes (jsonb, arrays: rendered once per row and distinct value)
SIZE_FIXED = "fixed"  # a number, boolean, date or id: counted as 1 byte (it is at least that)


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


def condition_copies(field: Field, op: Op, values: tuple[Any, ...]) -> int:
    """What :func:`condition` copies of a row's long values (storage/sqlquery/budget.py):
    LIKE reads a text's characters (a stored text is copied first); a computed column
    compared as text builds its text from the jsonb, as a number reads it several times;
    comparing a text (``left()`` reads only its first characters) and IS NULL copy nothing."""
    if op is Op.IS_NULL:
        return 0
    if field.kind == KIND_COMPUTED:
        numeric = any(isinstance(v, JsonOperand) and v.number is not None for v in values)
        text = op in (Op.EQ, Op.NEQ, Op.IN) or not numeric
        return budget.COMPUTED_TEXT * text + budget.COMPUTED_NUMBER * numeric
    if field.kind == ColumnType.TEXT and op is Op.LIKE:
        return budget.DETOAST
    return 0


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
        # one IN per form, not one comparison per value: each form reads the value again
        # (a long computed text is copied each time), so 200 values made 200 × 6 copies
        # of a row's value (1.15 GB per row); OR-ing the "=" above over every value is
        # the same test (number = any number, or text = any text)
        numbers = tuple(o.number for o in values if o.number is not None)
        texts = tuple(o.text for o in values)
        test: sql.Composable = sql.SQL("({} IN ({}))").format(
            text, sql.SQL(", ").join(sql.SQL("%s::text") for _ in texts))
        if numbers:
            test = sql.SQL("(coalesce({} IN ({}), false) OR {})").format(
                number, sql.SQL(", ").join(sql.SQL("%s::numeric") for _ in numbers), test)
        return Fragment(sql.SQL("NOT {}").format(test) if negate else test, (*numbers, *texts))
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
    max_bytes: int = MAX_ANSWER_BYTES,
) -> Statement:
    """One statement answering a page: its rows rendered as a JSON array text (see
    :func:`_page_rows`) and a number, the page at most ``max_bytes`` (:func:`guarded_page`).
    With ``count`` the number is the exact count of every match. Without it, the page is
    read with one row more (``LIMIT limit + 1``), which is left out of the array, and the
    number is how many rows were read: more than ``limit`` means more rows match."""
    columns = tuple(Measured(f.name, field_size(f), f.physical) for f in fields)
    if count:
        rows, params = _page_rows(schema, table, fields, where, order, limit, offset)
        where_params = tuple(p for f in where for p in f.params)
        number = sql.SQL("(SELECT count(*) FROM {src}{where})").format(
            src=sql.Identifier(schema, table), where=_where_sql(where))
        query = guarded_page(rows, columns, limit=limit, max_bytes=max_bytes, count=number)
        return Statement(query, (*where_params, *params))  # the count comes first in the text
    rows, params = _page_rows(schema, table, fields, where, order, limit + 1, offset)
    return Statement(guarded_page(rows, columns, limit=limit, max_bytes=max_bytes), params)


_ALIAS = sql.Identifier("r")


def _page_rows(
    schema: str, table: str, fields: tuple[Field, ...], where: tuple[Fragment, ...], order: tuple[Fragment, ...],
    limit: int, offset: int,
) -> tuple[sql.Composed, tuple[Any, ...]]:
    """``SELECT …``: the page's rows in order, with one column per field named by its
    human name and holding the value REST shows (:func:`storage.query.render.value_json`),
    so that PostgreSQL renders each row as the flat object of the answer (``r.*`` to
    JSON: PostgREST's approach). The page is read and ordered over the physical columns
    first; the rows keep that order through the renaming subquery into the aggregate
    (an ordered subquery feeding an aggregate, as PostgreSQL documents for this use)."""
    columns = sql.SQL(", ").join(
        sql.SQL("{} AS {}").format(_json_value(f), sql.Identifier(f.name)) for f in fields
    )
    query = sql.SQL(
        "SELECT {columns} FROM (SELECT * FROM {src} AS {a}{where} ORDER BY {order} LIMIT %s OFFSET %s) AS {a}"
    ).format(columns=columns, src=sql.Identifier(schema, table), a=_ALIAS, where=_where_sql(where),
             order=sql.SQL(", ").join(o.sql for o in order))
    params = (*(p for f in where for p in f.params), *(p for o in order for p in o.params), limit, offset)
    return query, params


def _json_value(field: Field) -> sql.Composable:
    col = sql.Identifier(field.physical)
    if field.meta is not None:
        return value_json(field.meta, col)
    return col  # id, and the timestamps in PostgreSQL's JSON form (as storage.values.iso_text)


# --------------------------------------------------------------------------- the answer's size

_GUARD = sql.Identifier("wds_sql", "answer_too_large")  # storage/ddl.py ANSWER_GUARD_FUNCTION


@dataclass(frozen=True, slots=True)
class Measured:
    """One output column of a page: its name (the row's key), how its bytes are counted
    and ``key``: columns with the same key hold the same value (``T AS a, T AS b``) and
    are measured once."""

    name: str
    size: str
    key: str


def _unused(names: set[str], base: str) -> str:
    while base in names:
        base = "_" + base
    return base


def row_size(columns: tuple[Measured, ...] | list[Measured], alias: sql.Identifier) -> sql.Composable:
    """A lower bound of the bytes one row of ``alias`` adds to the page rendered as JSON:
    its keys exactly (``"name":``, commas, braces), a text's bytes and quotes (escapes
    only add), a rendered value's text, 1 byte for any other value (4 for a null text).
    Reading a text's length does not read the text: ``octet_length`` takes it from the
    value's header, also when the value is TOASTed (``pg_column_size`` would give the
    compressed size, far smaller)."""
    fixed = 2 + 1 + max(len(columns) - 1, 0)  # braces, the comma after the row, the commas between keys
    measured: dict[str, tuple[Measured, int]] = {}
    for c in columns:
        fixed += len(orjson.dumps(c.name)) + 1  # "name": (PostgreSQL escapes a key as orjson does, or less)
        if c.size == SIZE_FIXED:
            fixed += 1
            continue
        first, times = measured.get(c.key, (c, 0))
        measured[c.key] = (first, times + 1)
    terms: list[sql.Composable] = [sql.Literal(fixed)]
    for c, times in measured.values():
        value = sql.SQL("({}.{})::text").format(alias, sql.Identifier(c.name))
        extra = 2 if c.size == SIZE_TEXT else 0
        term = sql.SQL("coalesce(octet_length({})::bigint + {}, 4)").format(value, sql.Literal(extra))
        terms.append(term if times == 1 else sql.SQL("{} * {}").format(term, sql.Literal(times)))
    return sql.SQL(" + ").join(terms)


def guarded_page(
    rows: sql.Composable, columns: tuple[Measured, ...] | list[Measured], *, limit: int, max_bytes: int,
    count: sql.Composable | None = None,
) -> sql.Composed:
    """The statement answering a page as ``(JSON array text, number)``, bounded in bytes.

    ``rows`` is a subquery (no alias) giving the page's rows in order, one column per
    entry of ``columns`` named after it, and at most ``limit + 1`` rows (the row past the
    page only tells that more rows match: it is counted, never rendered). The number is
    ``count`` (an expression: the exact count) or, without it, how many rows were read.

    Each row is measured as it comes (:func:`row_size`) and a running sum (a window over
    the rows already read) is checked before the row goes further: the first row that
    takes the page past ``max_bytes`` calls ``wds_sql.answer_too_large``, which ends the
    statement (SQLSTATE 54W01) before any later row is read and before anything is
    rendered. The rendered page is measured again, exactly, before it is sent.
    """
    names = {c.name for c in columns}
    size, number = sql.Identifier(_unused(names, "wds size")), sql.Identifier(_unused(names, "wds row"))
    x, p = sql.Identifier("x"), sql.Identifier("p")
    keep = sql.SQL(", ").join(
        sql.SQL("{}.{} AS {}").format(x, sql.Identifier(c.name), sql.Identifier(c.name)) for c in columns)
    cap, lim = sql.Literal(max_bytes), sql.Literal(limit)
    page = sql.SQL(
        "SELECT coalesce(array_to_json(array_agg({p}.*) FILTER (WHERE {x}.{n} <= {lim})), '[]')::text AS t,"
        " {number} AS n"
        " FROM (SELECT {x}.*, sum({measure}) OVER w AS {s}, row_number() OVER w AS {n}"
        " FROM ({rows}) AS {x} WINDOW w AS (ROWS UNBOUNDED PRECEDING)) AS {x},"
        " LATERAL (SELECT {keep}) AS {p}"
        " WHERE CASE WHEN {x}.{s} > {cap} AND {x}.{n} <= {lim} THEN {guard}(({x}.{s})::bigint, {cap}) ELSE true END"
    ).format(p=p, x=x, n=number, lim=lim, number=count if count is not None else sql.SQL("count(*)"),
             measure=row_size(columns, x), s=size, rows=rows, keep=keep, cap=cap, guard=_GUARD)
    return sql.SQL(
        "SELECT CASE WHEN octet_length(a.t) > {cap} AND {guard}(octet_length(a.t), {cap}) THEN NULL ELSE a.t END,"
        " a.n FROM ({page}) AS a"
    ).format(cap=cap, guard=_GUARD, page=page)


def guarded_rows(
    rows: sql.Composable, columns: tuple[Measured, ...], physical: tuple[str, ...], *, limit: int, max_bytes: int,
) -> sql.Composed:
    """``rows`` (a subquery of the physical columns ``physical``, in order) bounded as
    :func:`guarded_page` bounds a page, for the plans whose rows Python renders (file
    columns, long names): ``columns`` say how each is measured, under its human name;
    the row past the page comes back with its values null."""
    x = sql.Identifier("x")
    renamed = sql.SQL(", ").join(
        sql.SQL("{}.{} AS {}").format(x, sql.Identifier(ph), sql.Identifier(c.name)) for ph, c in zip(physical, columns,
                                                                                                  strict=True))
    names = {c.name for c in columns}
    size, number = sql.Identifier(_unused(names, "wds size")), sql.Identifier(_unused(names, "wds row"))
    cap, lim = sql.Literal(max_bytes), sql.Literal(limit)
    out = sql.SQL(", ").join(
        sql.SQL("CASE WHEN {x}.{n} <= {lim} THEN {x}.{c} END").format(x=x, n=number, lim=lim, c=sql.Identifier(c.name))
        for c in columns)
    return sql.SQL(
        "SELECT {out} FROM (SELECT {x}.*, sum({measure}) OVER w AS {s}, row_number() OVER w AS {n}"
        " FROM (SELECT {renamed} FROM ({rows}) AS {x}) AS {x} WINDOW w AS (ROWS UNBOUNDED PRECEDING)) AS {x}"
        " WHERE CASE WHEN {x}.{s} > {cap} AND {x}.{n} <= {lim} THEN {guard}(({x}.{s})::bigint, {cap}) ELSE true END"
    ).format(out=out, x=x, measure=row_size(columns, x), s=size, n=number, renamed=renamed, rows=rows,
             cap=cap, lim=lim, guard=_GUARD)


def field_size(field: Field) -> str:
    """How :func:`row_size` counts a field's value, as the page shows it."""
    if field.meta is None:
        return SIZE_FIXED  # id, created_at, updated_at
    if field.kind == KIND_COMPUTED or field.kind in (ColumnType.MULTI_SELECT, ColumnType.FILE):
        return SIZE_RENDER
    if field.kind in (ColumnType.TEXT, ColumnType.SINGLE_SELECT):
        return SIZE_TEXT
    return SIZE_FIXED
