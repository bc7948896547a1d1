"""Analytic queries of the SQL endpoint: aggregates, grouping, joins along relations,
boolean logic and a curated set of functions (issue #25).

A query the simple grammar (:mod:`storage.sqlquery.parse`) does not cover comes here.
sqlglot parses it; :class:`_Translator` then walks the tree once and *rebuilds* the
statement with :mod:`psycopg.sql` from an allow-list: every node type it meets must be one
it knows how to emit, every table is resolved by its human name in the caller's
workspace and checked against the token's read grants (joins and subqueries included),
every column becomes an expression over a physical column, every value a quoted literal.
The client's text never reaches the database, and a node this module does not handle is
refused with ``INVALID_SQL`` naming it, so no other function, catalog, schema-qualified
name or statement can get through. Execution (read-only transaction, read-only role,
timeout) is :func:`storage.sqlquery.run.run_sql`'s.

Values in analytic queries (documented in ``docs/sql.md``):

- text, number, date (timestamptz) and the system columns keep their types;
- a checkbox reads ``false`` when unset;
- a single-select reads its option's *label* (and compares by label; an option id or
  label that the column does not have is ``INVALID_OPTION``);
- a multi-select reads the list of its labels; ``= 'x'`` means "has x", ``IN (...)``
  "has any of", ``IS NULL`` "has none";
- a relation reads the related record's id; ``label("Company")`` reads the related
  record's label (its table's label column), and a join reads any of its fields;
- a computed column reads its JSON value; it compares as text, and as a number in
  arithmetic and in ``SUM``/``AVG``; a boolean formula (``result_type`` boolean) reads
  as a boolean;
- file columns are not available.

What one query costs is bounded: select labels are written once per statement (a JSON
map per column in a ``WITH``, :meth:`_Translator.labels`), ``a || b`` is
``wds_sql.concat_text`` (storage/ddl.py), refusing a text over 1,000,000 characters, and
what one row may copy of long values (every expression's ``cost``) is added up and
refused past :data:`storage.sqlquery.budget.MAX_COPIES` before anything runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson
import sqlglot
from psycopg import sql
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from storage.ddl import CONCAT_FUNCTION, computed_value_expr
from storage.errors import InvalidSQL, ServiceError
from storage.plans import IN_MAX, page_size
from storage.schema import SYSTEM_COLUMNS, ColumnMeta, ColumnType, TableMeta
from storage.sqlquery import budget
from storage.sqlquery.build import (
    MAX_ANSWER_BYTES,
    SIZE_FIXED,
    SIZE_RENDER,
    SIZE_TEXT,
    Measured,
    guarded_page,
)
from storage.sqlquery.parse import (
    check_number_text,
    check_text,
    check_tokens,
    parse_error_text,
    snippet,
    whole_number,
)
from storage.values import invalid_option

# Result column types reported in ``columns``.
TEXT = "text"
NUMBER = "number"
BOOLEAN = "boolean"
DATE = "date"
ID = "id"
LIST = "list"  # a multi-select's labels
JSON = "json"  # a computed column's value
INTERVAL = "interval"
UNKNOWN = "unknown"  # NULL, or a string literal not yet typed by its context

MAX_NAME = 63  # bytes: PostgreSQL's identifier length, an output column's key

DATE_UNITS = frozenset({
    "microseconds", "milliseconds", "second", "minute", "hour", "day", "week", "month", "quarter",
    "year", "decade", "century", "millennium",
})
EXTRACT_UNITS = frozenset({
    "year", "quarter", "month", "week", "day", "hour", "minute", "second", "dow", "isodow", "doy",
    "epoch", "isoyear", "decade", "century", "millennium",
})
INTERVAL_UNITS = frozenset({
    "second", "seconds", "minute", "minutes", "hour", "hours", "day", "days", "week", "weeks",
    "month", "months", "year", "years",
})
# The curated function list, as documented (docs/sql.md).
FUNCTIONS = (
    "count", "sum", "avg", "min", "max", "lower", "upper", "length", "trim", "coalesce", "nullif",
    "round", "abs", "date_trunc", "extract", "now", "current_date", "label",
)
_AGGREGATES: dict[type[exp.Expression], str] = {
    exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max",
}
_COMPARISONS: dict[type[exp.Expression], str] = {
    exp.EQ: "=", exp.NEQ: "<>", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<=",
}
_ARITHMETIC: dict[type[exp.Expression], str] = {
    exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%",
}
_CONCAT = sql.Identifier(*CONCAT_FUNCTION.split("."))
_NUMERIC_TEXT_RE = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"
_UNIT_RE = re.compile(r"[a-z]+")
# ILIKE's operands, lowered by Unicode's simple case mapping (the builtin C.UTF-8 collation,
# PostgreSQL 17+), as REST's ilike (storage/query/build.py ``_like``); under the database's
# C collation ILIKE would fold ASCII letters only
_FOLD = sql.SQL('lower({} COLLATE "pg_c_utf8")')
# how a result column's bytes are counted before its row is rendered (build.row_size)
_SIZES = {TEXT: SIZE_TEXT, UNKNOWN: SIZE_TEXT, JSON: SIZE_RENDER, LIST: SIZE_RENDER}


@dataclass(frozen=True, slots=True)
class OutColumn:
    name: str
    type: str


@dataclass(frozen=True, slots=True)
class AnalyticPlan:
    """A validated analytic query, ready for :func:`storage.sqlquery.run_sql`.

    ``probe`` renders the page (read with one row more) as a JSON array text and the
    number of rows read; ``counted`` renders the page and the exact number of result
    rows. ``table`` is the one table of a query without joins or aggregates (its answer
    names it), else ``None``."""

    workspace_id: int
    tables: tuple[TableMeta, ...]
    table: TableMeta | None
    columns: tuple[OutColumn, ...]
    probe: sql.Composed
    counted: sql.Composed
    limit: int
    offset: int
    max_bytes: int = MAX_ANSWER_BYTES  # the page's rows as JSON, at most (else RESULT_TOO_LARGE)
    bound: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)

    @property
    def table_ids(self) -> tuple[int, ...]:
        return tuple(t.id for t in self.tables)


@dataclass(frozen=True, slots=True)
class _E:
    """An emitted expression: its SQL, result type, the columns it reads outside any
    aggregate (for the GROUP BY check) and whether it holds an aggregate.
    ``number``/``raw`` are a computed column's numeric and JSON forms."""

    sql: sql.Composable
    type: str
    loose: tuple[str, ...] = ()
    agg: bool = False
    column: ColumnMeta | None = None  # a bare data column
    number: sql.Composable | None = None
    raw: sql.Composable | None = None
    # what evaluating ``sql`` once copies of long values (storage/sqlquery/budget.py);
    # ``long``: it may be a text of up to 1,000,000 characters; ``toasted``: it may be a
    # stored (TOASTed) value, which a function reading its characters copies first
    cost: int = 0
    long: bool = False
    toasted: bool = False

    @property
    def key(self) -> str:
        return repr(self.sql)


@dataclass(slots=True)
class _Source:
    name: str  # the alias, or the table's name
    table: TableMeta
    alias: str  # physical alias, s<n>


@dataclass(slots=True)
class _Item:
    name: str
    e: _E
    node: exp.Expression | None = None  # None for the columns of a *


@dataclass(slots=True)
class _Ctx:
    sources: list[_Source]
    group_keys: set[str] | None = None  # grouped query: keys of the GROUP BY expressions
    in_agg: bool = False
    allow_agg: bool = False
    clause: str = "WHERE"


def translate_analytic(
    query: str,
    *,
    resolve_table: Callable[[str], TableMeta | None],
    can_read: Callable[[int], bool],
    max_bytes: int = MAX_ANSWER_BYTES,
) -> AnalyticPlan:
    """Parse, check and translate an analytic query. Pure. ``max_bytes``: the most the
    page's rows may take as JSON (:func:`storage.sqlquery.build.guarded_page`).

    Raises:
        InvalidSQL: anything outside the allow-list, an unknown or unreadable table, an
            unknown or ambiguous column, a join that does not follow a relation.
        ServiceError: ``INVALID_OPTION``, ``LIMIT_TOO_LARGE``, ``TOO_MANY_VALUES``.
        PayloadTooLarge: the text is longer than 10,000 characters.
    """
    check_text(query)
    check_tokens(query)
    try:
        statements = [s for s in sqlglot.parse(query, read="postgres") if s is not None]
    except ParseError as exc:
        raise InvalidSQL(f"could not parse query: {parse_error_text(exc)}") from None
    except TokenError as exc:
        raise InvalidSQL(f"could not parse query: {exc}") from None
    except RecursionError:
        raise InvalidSQL("query is nested too deeply") from None
    if len(statements) != 1:
        raise InvalidSQL("exactly one statement is allowed")
    root = statements[0]
    if not isinstance(root, exp.Select):
        raise InvalidSQL(_refusal(root))
    tr = _Translator(resolve_table, can_read)
    try:
        return tr.top(root, max_bytes)
    except RecursionError:
        raise InvalidSQL("query is nested too deeply") from None


def _refusal(node: exp.Expression) -> str:
    if isinstance(node, (exp.Union, exp.Intersect, exp.Except)):
        return f"{node.key.upper()} is not allowed"
    if isinstance(node, (exp.With, exp.CTE)):
        return "WITH (common table expressions) is not allowed"
    if isinstance(node, (exp.Placeholder, exp.Parameter)):
        return "parameters are not allowed: write literal values"
    if isinstance(node, exp.Cast):
        return "casts are not allowed"
    if isinstance(node, exp.Window):
        return "window functions are not allowed"
    if isinstance(node, (exp.ByteString, exp.RawString, exp.HexString, exp.National, exp.BitString)):
        return "only plain 'single-quoted' string literals are allowed"
    if isinstance(node, exp.Exists):
        return "EXISTS is not supported: use <column> IN (SELECT …)"
    if isinstance(node, (exp.Select, exp.Subquery)):
        return "subqueries are only allowed in IN (SELECT …)"
    if isinstance(node, exp.Func):
        return (f"function not allowed: {snippet(node)} (allowed: {', '.join(FUNCTIONS)};"
                " see the SQL documentation)")
    if isinstance(node, (exp.Command, exp.Insert, exp.Update, exp.Delete, exp.Drop, exp.Create)):
        return f"only SELECT statements are allowed, not {node.key.upper()}"
    return f"{node.key.upper()} is not supported by the SQL endpoint ({snippet(node)})"


def _check_args(node: exp.Expression, allowed: set[str], what: str) -> None:
    for key, value in node.args.items():
        if key in allowed or value is None or value is False or value == []:
            continue
        raise InvalidSQL(f"{key.replace('_', ' ').strip().upper()} is not allowed in {what}")


def _match(name: str, items: list[Any], key: Callable[[Any], str]) -> list[Any]:
    exact = [i for i in items if key(i) == name]
    if exact:
        return exact
    folded = name.casefold()
    return [i for i in items if key(i).casefold() == folded]


class _Translator:
    def __init__(self, resolve_table: Callable[[str], TableMeta | None], can_read: Callable[[int], bool]) -> None:
        self.resolve_table = resolve_table
        self.can_read = can_read
        self.tables: dict[int, TableMeta] = {}
        self.aliases = 0
        self.label_aliases: dict[int, str] = {}
        # one option map per select column read, written once before the statement
        # (:meth:`labels`): the CTE's name and the column
        self.label_maps: dict[int, tuple[str, ColumnMeta]] = {}

    # ------------------------------------------------------------------ statements

    def top(self, node: exp.Select, max_bytes: int = MAX_ANSWER_BYTES) -> AnalyticPlan:
        core, order, items, sources, grouped, limit, offset, copies = self.select(node, top=True)
        # what one row may copy of long values is bounded before anything runs (budget.py)
        budget.check_copies(copies)
        limit = page_size(limit, word="LIMIT")
        offset = offset or 0
        names: dict[str, None] = {}
        for item in items:
            if item.name in names:
                raise InvalidSQL(f"two result columns are named {item.name!r}: name them apart with AS")
            if len(item.name.encode()) > MAX_NAME:
                raise InvalidSQL(f"result column name {item.name[:40]!r}… is longer than {MAX_NAME} bytes: use AS")
            names[item.name] = None
        ordered = core + order
        maps = self.maps_sql()
        # the page is measured row by row and refused past max_bytes (RESULT_TOO_LARGE)
        # before it is rendered; the same expression twice is measured once
        measured = [Measured(i.name, _SIZES.get(i.e.type, SIZE_FIXED), repr(self.output(i.e))) for i in items]
        probe = maps + guarded_page(
            sql.SQL("{q} LIMIT {n1} OFFSET {o}").format(q=ordered, n1=sql.Literal(limit + 1), o=sql.Literal(offset)),
            measured, limit=limit, max_bytes=max_bytes)
        counted = maps + guarded_page(
            sql.SQL("{q} LIMIT {n} OFFSET {o}").format(q=ordered, n=sql.Literal(limit), o=sql.Literal(offset)),
            measured, limit=limit, max_bytes=max_bytes,
            count=sql.SQL("(SELECT count(*) FROM ({core}) AS q)").format(core=core))
        tables = tuple(self.tables.values())
        single = sources[0].table if len(sources) == 1 and len(tables) == 1 and not grouped else None
        return AnalyticPlan(
            workspace_id=tables[0].workspace_id,
            tables=tables,
            table=single,
            columns=tuple(OutColumn(i.name, i.e.type if i.e.type != UNKNOWN else TEXT) for i in items),
            probe=probe,
            counted=counted,
            limit=limit,
            offset=offset,
            max_bytes=max_bytes,
        )

    def labels(self, col: ColumnMeta, value: sql.Composable) -> sql.Composable:
        """A select column's option id ``value`` read as its label.

        The column's options are written once per statement, as a JSON object ``{id:
        label}`` in a ``WITH`` of the statement (:meth:`maps_sql`), and every reference
        looks the id up in it: an uncorrelated scalar subquery, evaluated once. Writing the
        options at every reference (a ``CASE`` over all of them) made a query of 916
        references to a column of 1,000 options a 30 MB statement that took ~20 s to
        compose, with the event loop blocked."""
        if not col.options:
            return sql.SQL("NULL::text")
        found = self.label_maps.get(col.id)
        if found is None:
            found = self.label_maps[col.id] = (f"o{len(self.label_maps) + 1}", col)
        return sql.SQL("((SELECT m FROM {}) ->> ({}))").format(sql.Identifier(found[0]), value)

    def maps_sql(self) -> sql.Composable:
        """The ``WITH`` holding the option maps :meth:`labels` reads (or nothing)."""
        if not self.label_maps:
            return sql.SQL("")
        maps = [
            sql.SQL("{}(m) AS (VALUES ({}::jsonb))").format(
                sql.Identifier(name), sql.Literal(orjson.dumps({o.id: o.label for o in col.options}).decode()))
            for name, col in self.label_maps.values()
        ]
        return sql.SQL("WITH {} ").format(sql.SQL(", ").join(maps))

    def select(
        self, node: exp.Select, *, top: bool = False,
    ) -> tuple[sql.Composed, sql.Composable, list[_Item], list[_Source], bool, int | None, int | None, int]:
        """``(core, order, items, sources, grouped, limit, offset, copies)``: ``core`` is the
        statement without ORDER BY/LIMIT/OFFSET, ``order`` the ORDER BY clause (or empty),
        ``copies`` what one row may copy of long values (:mod:`storage.sqlquery.budget`):
        the select list, WHERE, GROUP BY, HAVING and ORDER BY added up. An expression that
        PostgreSQL provably evaluates once — a GROUP BY or ORDER BY term equal to a result
        column or to another term, or one written as a position or a name — counts once."""
        _check_args(node, {"expressions", "from_", "joins", "where", "group", "having", "order", "limit",
                           "offset", "distinct"}, "SELECT")
        distinct = node.args.get("distinct")
        if distinct is not None:
            _check_args(distinct, set(), "DISTINCT")
        from_ = node.args.get("from_")
        if from_ is None:
            raise InvalidSQL("FROM <table> is required")
        _check_args(from_, {"this"}, "FROM")
        sources = [self.source(from_.this)]
        joins: list[sql.Composable] = []
        for join in node.args.get("joins") or []:
            joins.append(self.join(join, sources))
        ctx = _Ctx(sources=sources)

        # select list
        items: list[_Item] = []
        for expr in node.expressions:
            items.extend(self.select_item(expr, ctx))
        if not items:
            raise InvalidSQL("SELECT needs at least one column")

        copies = 0
        # the result columns' expressions: a GROUP BY or ORDER BY term equal to one of them
        # (or to an earlier term) is the same target entry to PostgreSQL, evaluated once
        evaluated = {repr(self.output(i.e)) for i in items}
        where = node.args.get("where")
        where_sql: sql.Composable = sql.SQL("")
        if where is not None:
            _check_args(where, {"this"}, "WHERE")
            w = _condition(self.expr(where.this, _Ctx(sources=sources, clause="WHERE")), "WHERE")
            where_sql = sql.SQL(" WHERE {}").format(w.sql)
            copies += w.cost

        group = node.args.get("group")
        group_sql: sql.Composable = sql.SQL("")
        group_keys: set[str] = set()
        if group is not None:
            _check_args(group, {"expressions"}, "GROUP BY")
            parts: list[sql.Composable] = []
            for g in group.expressions:
                e = self.group_item(g, items, sources)
                if e.type == LIST:
                    raise InvalidSQL("GROUP BY a multi-select is not supported")
                if e.agg:
                    raise InvalidSQL("aggregate functions are not allowed in GROUP BY")
                # a bare single-select groups by its option id (its label is computed per
                # group, not per row) and a bare computed column by its JSON value
                out = self.group_value(e)
                group_keys.update((e.key, repr(out)))
                parts.append(out)
                if repr(out) not in evaluated and _ordinal(g, len(items), "GROUP BY") is None:
                    evaluated.add(repr(out))
                    copies += 0 if out is e.raw else e.cost
            group_sql = sql.SQL(" GROUP BY {}").format(sql.SQL(", ").join(parts))
        having = node.args.get("having")
        grouped = group is not None or having is not None or any(i.e.agg for i in items)
        if grouped:
            # again, knowing the groups: an expression that is a GROUP BY expression may
            # read any column; every other column must be inside an aggregate
            gctx = _Ctx(sources=sources, group_keys=group_keys, allow_agg=True, clause="the select list")
            for item in items:
                if item.node is not None:
                    item.e = self.expr(item.node, gctx)
                self.check_grouped(item.e)
        having_sql: sql.Composable = sql.SQL("")
        if having is not None:
            _check_args(having, {"this"}, "HAVING")
            h = _condition(self.expr(having.this, _Ctx(sources=sources, group_keys=group_keys, allow_agg=True,
                                                       clause="HAVING")), "HAVING")
            self.check_grouped(h)
            having_sql = sql.SQL(" HAVING {}").format(h.sql)
            copies += h.cost

        order_sql: sql.Composable = sql.SQL("")
        order = node.args.get("order")
        if order is not None:
            _check_args(order, {"expressions"}, "ORDER BY")
            terms = [self.order_item(o, items, sources, grouped, group_keys) for o in order.expressions]
            order_sql = sql.SQL(" ORDER BY {}").format(sql.SQL(", ").join(t for t, _, _ in terms))
            for _, target, cost in terms:
                if repr(target) not in evaluated:
                    evaluated.add(repr(target))
                    copies += cost

        limit = _int_clause(node.args.get("limit"), "LIMIT")
        offset = _int_clause(node.args.get("offset"), "OFFSET")
        columns = sql.SQL(", ").join(
            sql.SQL("{} AS {}").format(self.output(i.e), sql.Identifier(i.name)) for i in items
        )
        copies += sum(self.output_cost(i.e) for i in items)
        core = sql.SQL("SELECT {distinct}{columns} FROM {src}{joins}{where}{group}{having}").format(
            distinct=sql.SQL("DISTINCT " if distinct is not None else ""),
            columns=columns,
            src=self.source_sql(sources[0]),
            joins=sql.SQL("").join(joins),
            where=where_sql,
            group=group_sql,
            having=having_sql,
        )
        return core, order_sql, items, sources, grouped, limit, offset, copies

    def subquery(self, node: exp.Expression) -> tuple[sql.Composable, _E, int]:
        if not isinstance(node, exp.Subquery) or not isinstance(node.this, exp.Select):
            raise InvalidSQL(_refusal(node))
        _check_args(node, {"this"}, "a subquery")
        core, order, items, _, _, limit, offset, copies = self.select(node.this)
        if len(items) != 1:
            raise InvalidSQL("a subquery in IN (SELECT …) must select exactly one column")
        text = core + order
        if limit is not None:
            text = text + sql.SQL(" LIMIT {}").format(sql.Literal(limit))
        if offset is not None:
            text = text + sql.SQL(" OFFSET {}").format(sql.Literal(offset))
        return text, items[0].e, copies

    # ------------------------------------------------------------------ sources and joins

    def source(self, node: exp.Expression) -> _Source:
        if isinstance(node, exp.Subquery):
            raise InvalidSQL("subqueries are only allowed in IN (SELECT …)")
        if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
            raise InvalidSQL("FROM and JOIN must name tables")
        if node.args.get("db") is not None or node.args.get("catalog") is not None:
            raise InvalidSQL("schema-qualified table names are not allowed: use the table's name")
        _check_args(node, {"this", "alias"}, "FROM")
        name = str(node.this.this)
        table = self.resolve_table(name)
        if table is None:
            raise InvalidSQL(f"unknown table {name!r}")
        if not self.can_read(table.id):
            raise InvalidSQL(f"no read access to table {name!r} with this token")
        self.tables.setdefault(table.id, table)
        alias = node.args.get("alias")
        shown = table.name
        if alias is not None:
            _check_args(alias, {"this"}, "a table alias")
            if not isinstance(alias.this, exp.Identifier):
                raise InvalidSQL("a table alias must be a name")
            shown = str(alias.this.this)
        self.aliases += 1
        return _Source(shown, table, f"s{self.aliases}")

    def source_sql(self, src: _Source) -> sql.Composable:
        t = src.table
        return sql.SQL("{} AS {}").format(sql.Identifier(f"ws_{t.workspace_id}", f"t_{t.id}"), sql.Identifier(src.alias))

    def join(self, node: exp.Expression, sources: list[_Source]) -> sql.Composable:
        if not isinstance(node, exp.Join):
            raise InvalidSQL(_refusal(node))
        _check_args(node, {"this", "on", "side", "kind", "pivots"}, "JOIN")
        if "pivots" not in node.args and not any(node.args.get(k) for k in ("on", "side", "kind")):
            # sqlglot parses "FROM a, b" as a join without ON (only JOIN sets "pivots")
            raise InvalidSQL("comma-separated tables are not allowed: JOIN them along a relation column")
        side = str(node.args.get("side") or "").upper()
        kind = str(node.args.get("kind") or "").upper()
        if side not in ("", "LEFT") or kind not in ("", "INNER", "OUTER") or (kind == "OUTER" and side != "LEFT"):
            raise InvalidSQL("only JOIN (INNER) and LEFT JOIN along a relation column are allowed")
        new = self.source(node.this)
        if any(s.name.casefold() == new.name.casefold() for s in sources):
            raise InvalidSQL(f"the table name {new.name!r} appears twice: give one of them an alias (AS)")
        on = node.args.get("on")
        if on is None:
            link = self.shorthand_link(new, sources)
        else:
            link = self.on_link(on, new, sources)
        sources.append(new)
        rel_src, rel_col, target_src = link
        cond = sql.SQL("{} = {}").format(sql.Identifier(rel_src.alias, rel_col.physical),
                                         sql.Identifier(target_src.alias, "id"))
        word = "LEFT JOIN" if side == "LEFT" else "JOIN"
        return sql.SQL(" " + word + " {} ON {}").format(self.source_sql(new), cond)

    def shorthand_link(self, new: _Source, sources: list[_Source]) -> tuple[_Source, ColumnMeta, _Source]:
        """``A JOIN B`` with no ON: the one relation column linking B to a table before it."""
        links: list[tuple[_Source, ColumnMeta, _Source]] = []
        for src in sources:
            for col in src.table.columns:
                if col.type is ColumnType.RELATION and col.relation_table_id == new.table.id:
                    links.append((src, col, new))
            for col in new.table.columns:
                if col.type is ColumnType.RELATION and col.relation_table_id == src.table.id:
                    links.append((new, col, src))
        if len(links) != 1:
            what = "no relation column links" if not links else "several relation columns link"
            raise InvalidSQL(f"{what} {new.name!r} to the tables before it: write JOIN … ON"
                             f" <table>.<relation column> = <related table>.id")
        return links[0]

    def on_link(self, on: exp.Expression, new: _Source, sources: list[_Source]) -> tuple[_Source, ColumnMeta, _Source]:
        """ON must be ``<relation column> = <related table>.id`` (either order)."""
        bad = InvalidSQL("a JOIN's ON must follow a relation: <table>.<relation column> = <related table>.id")
        while isinstance(on, exp.Paren):
            on = on.this
        if not isinstance(on, exp.EQ) or not isinstance(on.this, exp.Column) or not isinstance(on.expression, exp.Column):
            raise bad
        scope = [*sources, new]
        left = self.resolve_column(on.this, scope)
        right = self.resolve_column(on.expression, scope)
        for (a_src, a_col), (b_src, b_col) in ((left, right), (right, left)):
            if (isinstance(a_col, ColumnMeta) and a_col.type is ColumnType.RELATION and b_col == "id"
                    and a_col.relation_table_id == b_src.table.id and new in (a_src, b_src) and a_src is not b_src):
                return a_src, a_col, b_src
        raise bad

    # ------------------------------------------------------------------ columns

    def resolve_column(self, node: exp.Column, sources: list[_Source]) -> tuple[_Source, ColumnMeta | str]:
        if not isinstance(node.this, exp.Identifier):
            raise InvalidSQL("* is only allowed alone in the select list")
        if node.args.get("db") is not None or node.args.get("catalog") is not None:
            raise InvalidSQL("schema-qualified column names are not allowed")
        _check_args(node, {"this", "table"}, "a column name")
        name = str(node.this.this)
        qualifier = node.args.get("table")
        scope = sources
        if qualifier is not None:
            qname = str(qualifier.this)
            scope = _match(qname, sources, lambda s: s.name)
            if not scope:
                raise InvalidSQL(f"{qname!r} is not a table of this query's FROM or JOIN")
            if len(scope) > 1:
                raise InvalidSQL(f"table name {qname!r} is ambiguous: write it exactly, in double quotes")
        hits: list[tuple[_Source, ColumnMeta | str]] = []
        for src in scope:
            if name in SYSTEM_COLUMNS:
                hits.append((src, name))
                continue
            found = _match(name, [*src.table.columns, *SYSTEM_COLUMNS], lambda c: c if isinstance(c, str) else c.name)
            if len(found) > 1:
                raise InvalidSQL(f"column name {name!r} is ambiguous: write it exactly, in double quotes")
            if found:
                hits.append((src, found[0]))
        if not hits:
            where = f"table {scope[0].table.name!r}" if len(scope) == 1 else "the tables of this query"
            raise InvalidSQL(f"unknown column {name!r} in {where}")
        if len(hits) > 1:
            raise InvalidSQL(f"column {name!r} is in several tables of this query: qualify it (\"Table\".\"{name}\")")
        return hits[0]

    def column(self, node: exp.Column, ctx: _Ctx) -> _E:
        src, col = self.resolve_column(node, ctx.sources)
        label = col if isinstance(col, str) else col.name
        loose = (label,)
        if isinstance(col, str):
            ident = sql.Identifier(src.alias, col)
            return _E(ident, ID if col == "id" else DATE, loose)
        ident = sql.Identifier(src.alias, col.physical)
        t = col.type
        if t is ColumnType.TEXT:  # up to 1,000,000 characters, stored TOASTed
            return _E(ident, TEXT, loose, column=col, long=True, toasted=True)
        if t is ColumnType.NUMBER:
            return _E(ident, NUMBER, loose, column=col)
        if t is ColumnType.DATE:
            return _E(ident, DATE, loose, column=col)
        if t is ColumnType.RELATION:
            return _E(ident, ID, loose, column=col)
        if t is ColumnType.CHECKBOX:
            return _E(sql.SQL("coalesce({}, false)").format(ident), BOOLEAN, loose, column=col)
        if t is ColumnType.SINGLE_SELECT:
            return _E(self.labels(col, ident), TEXT, loose, column=col, raw=ident)
        if t is ColumnType.MULTI_SELECT:
            labels = sql.SQL(
                "ARRAY(SELECT {case} FROM unnest({c}) WITH ORDINALITY AS u(v, n) ORDER BY u.n)"
            ).format(case=self.labels(col, sql.SQL("u.v")), c=ident)
            return _E(labels, LIST, loose, column=col, raw=ident)
        if col.computed and col.scalar_value_type == "boolean":
            # a boolean formula reads as a boolean (a value that is not one: NULL, as its
            # index and REST read it), so `= true`, `NOT` and `IS NULL` work as on a checkbox
            return _E(computed_value_expr(ident, "boolean"), BOOLEAN, loose, column=col,
                      cost=budget.COMPUTED_BOOLEAN)
        if col.computed:
            text = sql.SQL("({} #>> '{{}}')").format(ident)
            number = sql.SQL(
                "(CASE WHEN jsonb_typeof({c}) = 'number' THEN ({c})::numeric"
                " WHEN jsonb_typeof({c}) = 'string' AND {t} ~ {re} THEN {t}::numeric END)"
            ).format(c=ident, t=text, re=sql.Literal(_NUMERIC_TEXT_RE))
            # any computed value may be a long text (a value not of the column's result_type
            # is kept): read as text, the jsonb is detoasted and its text built
            return _E(text, JSON, loose, column=col, number=number, raw=ident, cost=budget.COMPUTED_TEXT,
                      long=True)
        raise InvalidSQL(f"file column {col.name!r} cannot be used in an analytic query")

    def group_value(self, e: _E) -> sql.Composable:
        if e.column is not None and e.raw is not None and e.type in (TEXT, JSON):
            return e.raw
        return e.sql

    def output(self, e: _E) -> sql.Composable:
        if e.type == JSON and e.raw is not None and e.column is not None:
            return e.raw  # a bare computed column: its JSON value as it is
        return e.sql

    def output_cost(self, e: _E) -> int:
        """What a result column copies per row: its expression's copies, and a long value
        it built is copied again into the result row and the page's window (a stored
        value, a bare column, passes as a pointer; the answer's cap bounds the page)."""
        if e.type == JSON and e.raw is not None and e.column is not None:
            return 0
        return e.cost + (budget.OUTPUT_BUILT if e.long and not e.toasted else 0)

    def select_item(self, node: exp.Expression, ctx: _Ctx) -> list[_Item]:
        star = node if isinstance(node, exp.Star) else None
        if isinstance(node, exp.Column) and isinstance(node.this, exp.Star):
            star = node
        if star is not None:
            return self.star(star, ctx)
        name: str | None = None
        if isinstance(node, exp.Alias):
            _check_args(node, {"this", "alias"}, "AS")
            alias = node.args.get("alias")
            if not isinstance(alias, exp.Identifier):
                raise InvalidSQL("AS must be followed by a name")
            name = str(alias.this)
            node = node.this
        e = self.expr(node, _Ctx(sources=ctx.sources, allow_agg=True, clause="the select list"))
        if name is None:
            name = _default_name(node)
        return [_Item(name, e, node)]

    def star(self, node: exp.Expression, ctx: _Ctx) -> list[_Item]:
        sources = ctx.sources
        if isinstance(node, exp.Column):
            _check_args(node, {"this", "table"}, "the select list")
            qualifier = node.args.get("table")
            if qualifier is not None:
                sources = _match(str(qualifier.this), ctx.sources, lambda s: s.name)
                if len(sources) != 1:
                    raise InvalidSQL(f"{qualifier.this!r} is not a table of this query's FROM or JOIN")
        elif node.args:
            _check_args(node, set(), "*")
        items: list[_Item] = []
        for src in sources:
            names = [*SYSTEM_COLUMNS, *(c.name for c in sorted(src.table.columns, key=lambda c: (c.position, c.id))
                                        if c.type is not ColumnType.FILE)]
            for n in names:
                ref = exp.Column(this=exp.Identifier(this=n, quoted=True),
                                 table=exp.Identifier(this=src.name, quoted=True))
                items.append(_Item(n, self.column(ref, _Ctx(sources=[src]))))
        return items

    # ------------------------------------------------------------------ GROUP BY / ORDER BY

    def group_item(self, node: exp.Expression, items: list[_Item], sources: list[_Source]) -> _E:
        ordinal = _ordinal(node, len(items), "GROUP BY")
        if ordinal is not None:
            return items[ordinal].e
        if isinstance(node, exp.Column) and node.args.get("table") is None and isinstance(node.this, exp.Identifier):
            try:
                return self.expr(node, _Ctx(sources=sources, clause="GROUP BY"))
            except InvalidSQL:  # not a column of the tables: an output name (as PostgreSQL allows)
                hits = _match(str(node.this.this), items, lambda i: i.name)
                if len(hits) != 1:
                    raise
                return hits[0].e
        e = self.expr(node, _Ctx(sources=sources, clause="GROUP BY"))
        return e

    def order_item(self, node: exp.Expression, items: list[_Item], sources: list[_Source], grouped: bool,
                   group_keys: set[str] | None) -> tuple[sql.Composable, sql.Composable, int]:
        """``(term, target, copies)``: the ORDER BY term, the expression it sorts by and
        what evaluating it copies (nothing for a result column named or numbered)."""
        if not isinstance(node, exp.Ordered):
            raise InvalidSQL(_refusal(node))
        _check_args(node, {"this", "desc", "nulls_first"}, "ORDER BY")
        this = node.this
        direction = sql.SQL(" DESC" if node.args.get("desc") else " ASC")
        # PostgreSQL's default: NULLS LAST ascending, NULLS FIRST descending
        nulls_first = node.args.get("nulls_first")
        nulls = sql.SQL(" NULLS FIRST" if nulls_first else " NULLS LAST")
        ordinal = _ordinal(this, len(items), "ORDER BY")
        target: sql.Composable | None = None
        cost = 0
        if ordinal is not None:
            target = sql.Identifier(items[ordinal].name)
        elif isinstance(this, exp.Column) and this.args.get("table") is None and isinstance(this.this, exp.Identifier):
            hits = _match(str(this.this.this), items, lambda i: i.name)
            if len(hits) == 1:
                target = sql.Identifier(hits[0].name)
        if target is None:
            e = self.expr(this, _Ctx(sources=sources, allow_agg=grouped,
                                     group_keys=group_keys if grouped else None, clause="ORDER BY"))
            if grouped:
                self.check_grouped(e)
            target, cost = e.sql, e.cost
        return target + direction + nulls, target, cost

    def check_grouped(self, e: _E) -> None:
        if e.loose:
            raise InvalidSQL(f"column {e.loose[0]!r} must be in GROUP BY or used in an aggregate function")

    # ------------------------------------------------------------------ expressions

    def expr(self, node: exp.Expression, ctx: _Ctx) -> _E:
        e = self._expr(node, ctx)
        if ctx.group_keys is not None and e.key in ctx.group_keys:
            return replace(e, loose=())
        return e

    def _expr(self, node: exp.Expression, ctx: _Ctx) -> _E:  # noqa: C901 - one dispatch over the allow-list
        if isinstance(node, exp.Column):
            if isinstance(node.this, exp.Star):
                raise InvalidSQL("* is only allowed alone in the select list")
            return self.column(node, ctx)
        if isinstance(node, exp.Literal):
            return _literal(node)
        if isinstance(node, exp.Boolean):
            return _E(sql.SQL("true" if node.this else "false"), BOOLEAN)
        if isinstance(node, exp.Null):
            return _E(sql.SQL("NULL"), UNKNOWN)
        if isinstance(node, exp.Paren):
            _check_args(node, {"this"}, "parentheses")
            inner = self.expr(node.this, ctx)
            return _E(sql.SQL("({})").format(inner.sql), inner.type, inner.loose, inner.agg, cost=inner.cost,
                      long=inner.long, toasted=inner.toasted)
        if isinstance(node, exp.Neg):
            inner = self.expr(node.this, ctx)
            if inner.type not in (NUMBER, JSON, INTERVAL):
                raise InvalidSQL(f"minus takes a number, not {snippet(node.this)}")
            return _E(sql.SQL("(- {})").format(self.numeric(inner)), NUMBER, inner.loose, inner.agg,
                      cost=self.numeric_cost(inner))
        if isinstance(node, (exp.And, exp.Or)):
            _check_args(node, {"this", "expression"}, node.key.upper())
            # iterative over long chains (a left-leaning tree)
            parts: list[exp.Expression] = []
            stack = [node]
            cls = type(node)
            while stack:
                item = stack.pop()
                if type(item) is cls:
                    _check_args(item, {"this", "expression"}, item.key.upper())
                    stack.extend((item.expression, item.this))
                else:
                    parts.append(item)
            emitted = [self.expr(p, ctx) for p in parts]
            word = " AND " if cls is exp.And else " OR "
            return _E(sql.SQL("({})").format(sql.SQL(word).join(sql.SQL("({})").format(p.sql) for p in emitted)),
                      BOOLEAN, _loose(*emitted), any(p.agg for p in emitted), cost=_cost(*emitted))
        if isinstance(node, exp.Not):
            _check_args(node, {"this"}, "NOT")
            inner = self.expr(node.this, ctx)
            return _E(sql.SQL("(NOT {})").format(inner.sql), BOOLEAN, inner.loose, inner.agg, cost=inner.cost)
        if type(node) in _COMPARISONS:
            return self.comparison(node, _COMPARISONS[type(node)], ctx)
        if isinstance(node, (exp.Like, exp.ILike)):
            _check_args(node, {"this", "expression", "negate"}, node.key.upper())
            left, right = self.expr(node.this, ctx), self.expr(node.expression, ctx)
            self.refuse_list(left, node.key.upper())
            ilike = isinstance(node, exp.ILike)
            word = ("NOT " if node.args.get("negate") else "") + "LIKE"
            # each operand's characters are read (a stored text is copied first); ILIKE
            # lowers both (a copy each) under a multibyte encoding
            cost = _cost(left, right) + sum(budget.DETOAST * o.toasted + budget.BUILD * (ilike and o.long)
                                            for o in (left, right))
            operands = (self.text(left), self.text(right))
            if ilike:  # both sides lowered by Unicode's simple case mapping, as REST's ilike
                operands = tuple(_FOLD.format(o) for o in operands)
            return _E(sql.SQL("({} " + word + " {})").format(*operands), BOOLEAN,
                      _loose(left, right), left.agg or right.agg, cost=cost)
        if isinstance(node, exp.In):
            return self.in_(node, ctx)
        if isinstance(node, exp.Is):
            return self.is_(node, ctx)
        if isinstance(node, exp.Between):
            _check_args(node, {"this", "low", "high"}, "BETWEEN")
            v, lo, hi = (self.expr(node.args[k], ctx) for k in ("this", "low", "high"))
            self.refuse_list(v, "BETWEEN")
            v_sql, v_cost = (self.numeric(v), self.numeric_cost(v)) if v.type == JSON else (v.sql, v.cost)
            return _E(sql.SQL("({} BETWEEN {} AND {})").format(v_sql, lo.sql, hi.sql), BOOLEAN,
                      _loose(v, lo, hi), v.agg or lo.agg or hi.agg, cost=v_cost + _cost(lo, hi))
        if type(node) in _ARITHMETIC:
            _check_args(node, {"this", "expression", "typed", "safe"}, "arithmetic")
            left, right = self.expr(node.this, ctx), self.expr(node.expression, ctx)
            return self.arithmetic(_ARITHMETIC[type(node)], left, right)
        if isinstance(node, exp.DPipe):
            _check_args(node, {"this", "expression", "safe"}, "||")
            left, right = self.expr(node.this, ctx), self.expr(node.expression, ctx)
            # bounded: a result longer than a text may be (1,000,000 characters) is an error;
            # its operands are read inside the function (freed there), its result is a copy
            built = left.long or right.long
            return _E(sql.SQL("{}({}, {})").format(_CONCAT, self.text(left), self.text(right)), TEXT,
                      _loose(left, right), left.agg or right.agg, cost=_cost(left, right) + budget.BUILD * built,
                      long=built)
        if isinstance(node, exp.Case):
            return self.case(node, ctx)
        if isinstance(node, exp.Interval):
            return _interval(node)
        if isinstance(node, exp.Filter):
            return self.filtered(node, ctx)
        if type(node) in _AGGREGATES:
            return self.aggregate(node, ctx)
        if isinstance(node, exp.Anonymous) and str(node.this).lower() == "label":
            return self.label(node, ctx)
        if isinstance(node, exp.Func):
            return self.function(node, ctx)
        raise InvalidSQL(_refusal(node))

    def refuse_list(self, e: _E, what: str) -> None:
        if e.type == LIST:
            raise InvalidSQL(f"{what} does not apply to a multi-select: compare it with =, !=, IN (…) or IS NULL")

    def numeric_cost(self, e: _E) -> int:
        """What :meth:`numeric` of ``e`` copies per row: a computed column's number form
        reads its value several times."""
        if e.type == JSON and e.number is not None:
            return e.cost - budget.COMPUTED_TEXT + budget.COMPUTED_NUMBER
        return e.cost

    def numeric(self, e: _E) -> sql.Composable:
        """``e`` where a number is expected: a computed column's numeric form."""
        self.refuse_list(e, "arithmetic")
        if e.type == JSON and e.number is not None:
            return e.number
        if e.type == JSON:
            return sql.SQL("({})::numeric").format(e.sql)
        return e.sql

    def text(self, e: _E) -> sql.Composable:
        if e.type in (TEXT, UNKNOWN, JSON):
            return e.sql
        return sql.SQL("({})::text").format(e.sql)

    def arithmetic(self, op: str, left: _E, right: _E) -> _E:
        types = {left.type, right.type}
        if DATE in types or INTERVAL in types:
            if op not in ("+", "-"):
                raise InvalidSQL(f"{op} does not apply to dates: add or subtract an INTERVAL")
            out = INTERVAL if left.type == DATE and right.type == DATE else (
                DATE if DATE in types else INTERVAL)
            return _E(sql.SQL("({} " + op + " {})").format(left.sql, right.sql), out, _loose(left, right),
                      left.agg or right.agg, cost=_cost(left, right))
        cost = self.numeric_cost(left) + self.numeric_cost(right)
        if op == "%":  # PostgreSQL has no % for double precision (number columns): mod over numeric
            return _E(sql.SQL("mod(({})::numeric, ({})::numeric)").format(self.numeric(left), self.numeric(right)),
                      NUMBER, _loose(left, right), left.agg or right.agg, cost=cost)
        return _E(sql.SQL("({} " + op + " {})").format(self.numeric(left), self.numeric(right)), NUMBER,
                  _loose(left, right), left.agg or right.agg, cost=cost)

    def comparison(self, node: exp.Expression, op: str, ctx: _Ctx) -> _E:
        _check_args(node, {"this", "expression"}, op)
        if isinstance(node.this, exp.Null) or isinstance(node.expression, exp.Null):
            raise InvalidSQL(f"NULL cannot be compared with {op}: use IS NULL / IS NOT NULL")
        left, right = self.expr(node.this, ctx), self.expr(node.expression, ctx)
        if left.type == LIST or right.type == LIST:
            if op not in ("=", "<>") or right.type == LIST or not isinstance(node.expression, exp.Literal):
                raise InvalidSQL("a multi-select compares with =, != or IN against option labels,"
                                 " or with IS [NOT] NULL")
            assert left.column is not None and left.raw is not None
            opt = _option(left.column, node.expression)
            test = sql.SQL("coalesce({} @> ARRAY[{}]::text[], false)").format(left.raw, sql.Literal(opt))
            return _E(sql.SQL("(NOT {})").format(test) if op == "<>" else test, BOOLEAN, left.loose, left.agg)
        _comparable(left, right, node)
        # comparing texts copies nothing that outlives the comparison (PostgreSQL frees it)
        l_sql, r_sql = left.sql, right.sql
        l_cost, r_cost = left.cost, right.cost
        if left.column is not None and left.column.type is ColumnType.SINGLE_SELECT:
            r_sql = self.option_label(left.column, node.expression, right)
        elif right.column is not None and right.column.type is ColumnType.SINGLE_SELECT:
            l_sql = self.option_label(right.column, node.this, left)
        if left.type == JSON and right.type == NUMBER:
            l_sql, l_cost = self.numeric(left), self.numeric_cost(left)
        elif right.type == JSON and left.type == NUMBER:
            r_sql, r_cost = self.numeric(right), self.numeric_cost(right)
        return _E(sql.SQL("({} " + op + " {})").format(l_sql, r_sql), BOOLEAN, _loose(left, right),
                  left.agg or right.agg, cost=l_cost + r_cost)

    def option_label(self, col: ColumnMeta, node: exp.Expression, e: _E) -> sql.Composable:
        """A literal compared with a single-select: an option id or label, as its label."""
        if isinstance(node, exp.Literal) and node.is_string:
            return sql.Literal(_option_label(col, str(node.this)))
        return e.sql

    def in_(self, node: exp.In, ctx: _Ctx) -> _E:
        _check_args(node, {"this", "expressions", "query"}, "IN")
        left = self.expr(node.this, ctx)
        query = node.args.get("query")
        if query is not None:
            self.refuse_list(left, "IN (SELECT …)")
            sub, out, sub_cost = self.subquery(query)
            return _E(sql.SQL("({} IN ({}))").format(left.sql, sub), BOOLEAN, left.loose, left.agg,
                      cost=left.cost + sub_cost)
        if not node.expressions:
            raise InvalidSQL("IN (...) needs at least one value")
        if len(node.expressions) > IN_MAX:
            raise ServiceError(f"IN takes at most {IN_MAX} values", code="TOO_MANY_VALUES")
        if left.type == LIST:
            assert left.column is not None and left.raw is not None
            opts = [_option(left.column, v) for v in node.expressions]
            marks = sql.SQL(", ").join(sql.Literal(o) for o in opts)
            return _E(sql.SQL("coalesce({} && ARRAY[{}]::text[], false)").format(left.raw, marks), BOOLEAN,
                      left.loose, left.agg)
        if any(isinstance(v, exp.Null) for v in node.expressions):
            raise InvalidSQL("NULL cannot be a value of IN (...): use IS NULL / IS NOT NULL")
        values = [self.expr(v, ctx) for v in node.expressions]
        for v, e in zip(node.expressions, values, strict=True):
            _comparable(left, e, v)
        parts: list[sql.Composable] = []
        for v, e in zip(node.expressions, values, strict=True):
            if left.column is not None and left.column.type is ColumnType.SINGLE_SELECT:
                parts.append(self.option_label(left.column, v, e))
            else:
                parts.append(e.sql)
        as_number = left.type == JSON and all(v.type == NUMBER for v in values)
        l_sql = self.numeric(left) if as_number else left.sql
        cost = (self.numeric_cost(left) if as_number else left.cost) + _cost(*values)
        return _E(sql.SQL("({} IN ({}))").format(l_sql, sql.SQL(", ").join(parts)), BOOLEAN,
                  _loose(left, *values), left.agg or any(v.agg for v in values), cost=cost)

    def is_(self, node: exp.Is, ctx: _Ctx) -> _E:
        _check_args(node, {"this", "expression", "negate"}, "IS")
        left = self.expr(node.this, ctx)
        negate = bool(node.args.get("negate"))
        right = node.expression
        if isinstance(right, exp.Null):
            if left.type == LIST:
                assert left.raw is not None
                test = "(cardinality(coalesce({}, '{{}}'::text[])) {} 0)"
                return _E(sql.SQL(test).format(left.raw, sql.SQL(">" if negate else "=")), BOOLEAN,
                          left.loose, left.agg)
            if left.type == JSON and left.raw is not None:
                empty = sql.SQL("({c} IS NULL OR {c} = 'null'::jsonb)").format(c=left.raw)
                return _E(sql.SQL("(NOT {})").format(empty) if negate else empty, BOOLEAN, left.loose, left.agg)
            return _E(sql.SQL("({} IS NOT NULL)" if negate else "({} IS NULL)").format(left.sql), BOOLEAN,
                      left.loose, left.agg, cost=left.cost)
        if isinstance(right, exp.Boolean):
            if left.type not in (BOOLEAN, UNKNOWN):
                raise InvalidSQL(f"IS TRUE / IS FALSE takes a condition, not {snippet(node.this)}")
            word = ("IS NOT " if negate else "IS ") + ("TRUE" if right.this else "FALSE")
            return _E(sql.SQL("({} " + word + ")").format(left.sql), BOOLEAN, left.loose, left.agg, cost=left.cost)
        raise InvalidSQL("IS is only allowed as IS [NOT] NULL, IS [NOT] TRUE or IS [NOT] FALSE")

    def case(self, node: exp.Case, ctx: _Ctx) -> _E:
        _check_args(node, {"ifs", "default", "this"}, "CASE")
        if node.args.get("this") is not None:
            raise InvalidSQL("write CASE WHEN <condition> THEN … (the simple CASE <value> WHEN form is not supported)")
        parts: list[sql.Composable] = []
        emitted: list[_E] = []
        values: list[_E] = []
        out_type = UNKNOWN
        for branch in node.args.get("ifs") or []:
            if not isinstance(branch, exp.If):
                raise InvalidSQL(_refusal(branch))
            _check_args(branch, {"this", "true"}, "CASE WHEN")
            cond, value = self.expr(branch.this, ctx), self.expr(branch.args["true"], ctx)
            emitted += [cond, value]
            values.append(value)
            out_type = value.type if out_type == UNKNOWN else out_type
            parts.append(sql.SQL(" WHEN {} THEN {}").format(cond.sql, self.output_value(value)))
        default = node.args.get("default")
        if default is not None:
            d = self.expr(default, ctx)
            emitted.append(d)
            values.append(d)
            out_type = d.type if out_type == UNKNOWN else out_type
            parts.append(sql.SQL(" ELSE {}").format(self.output_value(d)))
        if not parts:
            raise InvalidSQL("CASE needs WHEN … THEN …")
        # a value passes through as it is (a stored text stays a pointer)
        cost = sum(e.cost for e in emitted if all(e is not v for v in values))
        cost += sum(self.output_value_cost(v) for v in values)
        return _E(sql.SQL("(CASE{} END)").format(sql.SQL("").join(parts)), out_type, _loose(*emitted),
                  any(e.agg for e in emitted), cost=cost, long=any(v.long and v.type != JSON for v in values),
                  toasted=any(v.toasted for v in values))

    def output_value(self, e: _E) -> sql.Composable:
        return self.numeric(e) if e.type == JSON else e.sql

    def output_value_cost(self, e: _E) -> int:
        return self.numeric_cost(e) if e.type == JSON else e.cost

    def label(self, node: exp.Anonymous, ctx: _Ctx) -> _E:
        """``label(<relation column>)``: the related record's label (its table's label
        column), read with a subquery on the related table, which the token must read."""
        _check_args(node, {"this", "expressions"}, "LABEL")
        bad = InvalidSQL('label() takes one relation column: label("Company")')
        if len(node.expressions) != 1 or not isinstance(node.expressions[0], exp.Column):
            raise bad
        rel = self.expr(node.expressions[0], ctx)
        col = rel.column
        if col is None or col.type is not ColumnType.RELATION or col.relation_table_id is None:
            raise bad
        by_id: dict[int, TableMeta] = getattr(self.resolve_table, "by_id", {})
        target = by_id.get(col.relation_table_id)
        if target is None:
            raise InvalidSQL(f"the table related by {col.name!r} is unknown")
        if not self.can_read(target.id):
            raise InvalidSQL(f"no read access to table {target.name!r} with this token")
        shown = target.column_by_id(col.relation_label_column_id) if col.relation_label_column_id else None
        if shown is None or shown.type is ColumnType.FILE:
            raise InvalidSQL(f"{target.name!r} has no label column: JOIN it to read its fields")
        self.tables.setdefault(target.id, target)
        alias = self.label_aliases.get(id(node))
        if alias is None:  # one alias per label() written: emitted again (GROUP BY check), it is the same
            self.aliases += 1
            alias = self.label_aliases[id(node)] = f"s{self.aliases}"
        src = _Source(target.name, target, alias)
        ref = exp.Column(this=exp.Identifier(this=shown.name, quoted=True),
                         table=exp.Identifier(this=src.name, quoted=True))
        value = self.column(ref, _Ctx(sources=[src]))
        text = sql.SQL("(SELECT {} FROM {} WHERE {} = {})").format(
            self.output(value), self.source_sql(src), sql.Identifier(src.alias, "id"), rel.sql)
        # the related record's stored value, as a pointer (a computed label: its jsonb)
        long = value.long or value.type == JSON
        return _E(text, value.type, rel.loose, rel.agg, cost=rel.cost, long=long, toasted=long)

    def filtered(self, node: exp.Filter, ctx: _Ctx) -> _E:
        _check_args(node, {"this", "expression"}, "FILTER")
        where = node.expression
        if type(node.this) not in _AGGREGATES or not isinstance(where, exp.Where):
            raise InvalidSQL("FILTER (WHERE …) follows an aggregate function")
        agg = self.aggregate(node.this, ctx)
        cond = self.expr(where.this, _Ctx(sources=ctx.sources, clause="FILTER"))
        return _E(sql.SQL("{} FILTER (WHERE {})").format(agg.sql, cond.sql), agg.type, (), True,
                  cost=agg.cost + cond.cost, long=agg.long, toasted=agg.toasted)

    def aggregate(self, node: exp.Expression, ctx: _Ctx) -> _E:
        name = _AGGREGATES[type(node)]
        if ctx.in_agg:
            raise InvalidSQL("aggregate functions cannot be nested")
        if not ctx.allow_agg:
            where = "use HAVING" if ctx.clause == "WHERE" else "not here"
            raise InvalidSQL(f"aggregate functions are not allowed in {ctx.clause} ({where})")
        allowed = {"this", "big_int"} if isinstance(node, exp.Count) else {"this"}
        _check_args(node, allowed, name.upper())
        if isinstance(node, exp.Count) and node.expressions:
            raise InvalidSQL("COUNT takes one argument")
        arg = node.this
        inner = _Ctx(sources=ctx.sources, in_agg=True, clause=f"{name.upper()}()")
        if isinstance(node, exp.Count) and (arg is None or isinstance(arg, exp.Star)):
            return _E(sql.SQL("count(*)"), NUMBER, (), True)
        distinct = False
        if isinstance(arg, exp.Distinct):
            _check_args(arg, {"expressions"}, "DISTINCT")
            if len(arg.expressions) != 1:
                raise InvalidSQL(f"{name.upper()}(DISTINCT …) takes one expression")
            distinct, arg = True, arg.expressions[0]
        if arg is None:
            raise InvalidSQL(f"{name.upper()} needs an argument")
        e = self.expr(arg, inner)
        long = toasted = False
        if name in ("sum", "avg"):
            value, out, cost = self.numeric(e), NUMBER, self.numeric_cost(e)
        elif name == "count":
            value, out, cost = e.sql, NUMBER, e.cost
        else:
            self.refuse_list(e, name.upper())
            value, out, cost = self.output_value(e), (NUMBER if e.type == JSON else e.type), self.output_value_cost(e)
            long = toasted = e.long and e.type != JSON
            if long:  # MIN/MAX of texts read both values' characters and keep the current one
                cost += budget.DETOAST * e.toasted + budget.AGGREGATE_KEEP
        text = sql.SQL(name + "(" + ("DISTINCT " if distinct else "") + "{})").format(value)
        return _E(text, out, (), True, cost=cost, long=long, toasted=toasted)

    def function(self, node: exp.Func, ctx: _Ctx) -> _E:  # noqa: C901 - the curated list
        args: list[_E]
        if isinstance(node, (exp.Lower, exp.Upper, exp.Length)):
            _check_args(node, {"this", "binary"} if isinstance(node, exp.Length) else {"this"}, node.key.upper())
            if isinstance(node, exp.Length) and node.args.get("binary"):
                raise InvalidSQL("LENGTH takes text")
            a = self.expr(node.this, ctx)
            self.refuse_list(a, node.key.upper())
            fn = {exp.Lower: "lower", exp.Upper: "upper", exp.Length: "length"}[type(node)]
            # the argument's characters are read (a stored text copied first); lower and
            # upper build a new text as long as it
            if fn == "length":
                return _E(sql.SQL("length({})").format(self.text(a)), NUMBER, a.loose, a.agg,
                          cost=a.cost + budget.DETOAST * a.toasted)
            # Unicode's simple case mapping (the database's own collation maps ASCII only),
            # the result back under the default collation for what compares or sorts it
            return _E(sql.SQL("(" + fn + '({} COLLATE "pg_c_utf8") COLLATE "default")').format(self.text(a)), TEXT,
                      a.loose, a.agg, long=a.long, cost=a.cost + budget.DETOAST * a.toasted + budget.BUILD * a.long)
        if isinstance(node, exp.Trim):
            _check_args(node, {"this"}, "TRIM")
            a = self.expr(node.this, ctx)
            self.refuse_list(a, "TRIM")
            return _E(sql.SQL("btrim({})").format(self.text(a)), TEXT, a.loose, a.agg, long=a.long,
                      cost=a.cost + budget.DETOAST * a.toasted + budget.BUILD * a.long)
        if isinstance(node, exp.Coalesce):
            _check_args(node, {"this", "expressions"}, "COALESCE")
            args = [self.expr(a, ctx) for a in (node.this, *node.expressions)]
            for a in args:
                self.refuse_list(a, "COALESCE")
            out = next((a.type for a in args if a.type != UNKNOWN), UNKNOWN)
            values = [self.numeric(a) if a.type == JSON and out == NUMBER else a.sql for a in args]
            cost = sum(self.numeric_cost(a) if a.type == JSON and out == NUMBER else a.cost for a in args)
            long = out != NUMBER and any(a.long for a in args)
            return _E(sql.SQL("coalesce({})").format(sql.SQL(", ").join(values)), out, _loose(*args),
                      any(a.agg for a in args), cost=cost, long=long, toasted=long and any(a.toasted for a in args))
        if isinstance(node, exp.Nullif):
            _check_args(node, {"this", "expression"}, "NULLIF")
            a, b = self.expr(node.this, ctx), self.expr(node.expression, ctx)
            self.refuse_list(a, "NULLIF")
            return _E(sql.SQL("nullif({}, {})").format(a.sql, b.sql), a.type, _loose(a, b), a.agg or b.agg,
                      cost=_cost(a, b), long=a.long, toasted=a.toasted)
        if isinstance(node, exp.Round):
            _check_args(node, {"this", "decimals"}, "ROUND")
            a = self.expr(node.this, ctx)
            decimals = node.args.get("decimals")
            if decimals is None:
                return _E(sql.SQL("round({})").format(self.numeric(a)), NUMBER, a.loose, a.agg,
                          cost=self.numeric_cost(a))
            d = _ordinal_value(decimals)
            if d is None or d > 20:
                raise InvalidSQL("ROUND's second argument is a whole number of decimals (0 to 20)")
            return _E(sql.SQL("round(({})::numeric, {})").format(self.numeric(a), sql.Literal(d)), NUMBER,
                      a.loose, a.agg, cost=self.numeric_cost(a))
        if isinstance(node, exp.Abs):
            _check_args(node, {"this"}, "ABS")
            a = self.expr(node.this, ctx)
            return _E(sql.SQL("abs({})").format(self.numeric(a)), NUMBER, a.loose, a.agg, cost=self.numeric_cost(a))
        if isinstance(node, (exp.TimestampTrunc, exp.DateTrunc)):
            _check_args(node, {"this", "unit", "zone"}, "DATE_TRUNC")
            if node.args.get("zone") is not None:
                raise InvalidSQL("DATE_TRUNC takes a unit and a date (no time zone)")
            unit = _unit(node.args.get("unit"), DATE_UNITS, "DATE_TRUNC")
            a = self.expr(node.this, ctx)
            if a.type not in (DATE, UNKNOWN):
                raise InvalidSQL("DATE_TRUNC takes a date")
            return _E(sql.SQL("date_trunc({}, {})").format(sql.Literal(unit), _dated(a)), DATE, a.loose, a.agg,
                      cost=a.cost)
        if isinstance(node, exp.Extract):
            _check_args(node, {"this", "expression"}, "EXTRACT")
            unit = _unit(node.this, EXTRACT_UNITS, "EXTRACT")
            a = self.expr(node.expression, ctx)
            if a.type not in (DATE, INTERVAL, UNKNOWN):
                raise InvalidSQL("EXTRACT takes a date or an interval")
            return _E(sql.SQL("extract(" + unit + " FROM {})").format(_dated(a)), NUMBER, a.loose, a.agg,
                      cost=a.cost)
        if isinstance(node, exp.CurrentTimestamp):
            _check_args(node, set(), "NOW")
            return _E(sql.SQL("now()"), DATE)
        if isinstance(node, exp.CurrentDate):
            _check_args(node, set(), "CURRENT_DATE")
            return _E(sql.SQL("CURRENT_DATE::timestamptz"), DATE)
        raise InvalidSQL(_refusal(node))


# ---------------------------------------------------------------------- helpers


def _loose(*es: _E) -> tuple[str, ...]:
    return tuple(n for e in es for n in e.loose)


def _cost(*es: _E) -> int:
    return sum(e.cost for e in es)


def _condition(e: _E, where: str) -> _E:
    if e.type not in (BOOLEAN, UNKNOWN):
        raise InvalidSQL(f"{where} needs a condition (a comparison, IS NULL, a checkbox…), not a {e.type} value")
    return e


_COMPARABLE = {(ID, NUMBER), (NUMBER, ID), (JSON, TEXT), (TEXT, JSON), (JSON, NUMBER), (NUMBER, JSON),
               (JSON, BOOLEAN), (BOOLEAN, JSON), (JSON, ID), (ID, JSON)}


def _comparable(left: _E, right: _E, node: exp.Expression) -> None:
    a, b = left.type, right.type
    if a == b or UNKNOWN in (a, b) or (a, b) in _COMPARABLE:
        return
    raise InvalidSQL(f"cannot compare a {a} value with a {b} value ({snippet(node.parent or node)})")


def _dated(e: _E) -> sql.Composable:
    """A date argument: a string literal reads as a timestamp (``date_trunc('month', '2024-05-03')``)."""
    return sql.SQL("({})::timestamptz").format(e.sql) if e.type == UNKNOWN else e.sql


def _option_label(col: ColumnMeta, value: str) -> str:
    opt = col.option_by_id_or_label(value)
    if opt is None:
        raise invalid_option(col, value)
    return opt.label


def _option(col: ColumnMeta, node: exp.Expression) -> str:
    """A multi-select's option id for a literal label or id."""
    if not (isinstance(node, exp.Literal) and node.is_string):
        raise InvalidSQL(f"multi-select {col.name!r} compares with option labels in single quotes")
    opt = col.option_by_id_or_label(str(node.this))
    if opt is None:
        raise invalid_option(col, str(node.this))
    return opt.id


def _literal(node: exp.Literal) -> _E:
    _check_args(node, {"this", "is_string"}, "a literal")
    text = str(node.this)
    if node.is_string:
        return _E(sql.Literal(text), UNKNOWN)
    check_number_text(text)
    value: Any = whole_number(text)
    if value is None:
        try:
            value = Decimal(text)
        except InvalidOperation:
            raise InvalidSQL(f"{text!r} is not a number") from None
        if not value.is_finite():
            raise InvalidSQL(f"{text!r} is not a finite number")
    return _E(sql.Literal(value), NUMBER)


def _interval(node: exp.Interval) -> _E:
    _check_args(node, {"this", "unit"}, "INTERVAL")
    this = node.this
    if not (isinstance(this, exp.Literal) and this.is_string):
        raise InvalidSQL("write an interval as INTERVAL '3 days'")
    text = str(this.this).strip()
    unit = node.args.get("unit")
    if unit is not None:
        text = f"{text} {_unit(unit, INTERVAL_UNITS, 'INTERVAL')}"
    if not re.fullmatch(r"[-+0-9. a-zA-Z:]{1,100}", text):
        raise InvalidSQL("write an interval as INTERVAL '3 days'")
    return _E(sql.SQL("{}::interval").format(sql.Literal(text)), INTERVAL)


def _unit(node: Any, allowed: frozenset[str], what: str) -> str:
    if isinstance(node, exp.Literal) and node.is_string:
        text = str(node.this)
    elif isinstance(node, (exp.Var, exp.Identifier)):
        text = str(node.this)
    else:
        raise InvalidSQL(f"{what} takes a unit such as 'month'")
    unit = text.strip().lower()
    if unit not in allowed or not _UNIT_RE.fullmatch(unit):
        raise InvalidSQL(f"{what} unit {text!r} is not one of: {', '.join(sorted(allowed))}")
    return unit


def _ordinal_value(node: exp.Expression) -> int | None:
    if isinstance(node, exp.Literal) and not node.is_string:
        return whole_number(str(node.this))
    return None


def _ordinal(node: exp.Expression, count: int, what: str) -> int | None:
    if isinstance(node, exp.Literal):
        n = _ordinal_value(node)
        if n is None or not 1 <= n <= count:
            raise InvalidSQL(f"{what} position {str(node.this)[:20]} is not in the select list")
        return n - 1
    return None


def _default_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Column) and isinstance(node.this, exp.Identifier):
        return str(node.this.this)
    if isinstance(node, exp.Filter):
        node = node.this
    if type(node) in _AGGREGATES:
        return _AGGREGATES[type(node)]
    names = {exp.Lower: "lower", exp.Upper: "upper", exp.Length: "length", exp.Trim: "btrim",
             exp.Coalesce: "coalesce", exp.Nullif: "nullif", exp.Round: "round", exp.Abs: "abs",
             exp.TimestampTrunc: "date_trunc", exp.DateTrunc: "date_trunc", exp.Extract: "extract",
             exp.CurrentTimestamp: "now", exp.CurrentDate: "current_date", exp.Case: "case"}
    if isinstance(node, exp.Anonymous) and str(node.this).lower() == "label":
        return "label"
    return names.get(type(node), "?column?")


def _int_clause(node: exp.Expression | None, what: str) -> int | None:
    if node is None:
        return None
    _check_args(node, {"expression"}, what)
    n = _ordinal_value(node.expression)
    if n is None:
        raise InvalidSQL(f"{what} must be a non-negative whole number")
    if n > 2**63 - 1:
        raise InvalidSQL(f"{what} is too large")
    return n
