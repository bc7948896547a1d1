"""Stage 1 of the SQL endpoint: text → :class:`ParsedQuery`, knowing nothing of tables.

sqlglot (postgres dialect) does the parsing; this module then walks the tree with an
allow-list: every node type must be one the grammar needs, and every node may only carry
the arguments the grammar gives it. Anything else — another statement, a function, a
subquery, a join, OR, a cast — is refused with :class:`InvalidSQL` naming the construct.
Nothing here executes or resolves names; comments are dropped because the physical query
is rebuilt from scratch and never echoes the client's text.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from enum import Enum

import sqlglot
from sqlglot import TokenType, exp
from sqlglot.errors import ParseError, TokenError

from storage.errors import InvalidSQL, PayloadTooLarge

MAX_QUERY_CHARS = 10_000
# A number literal's length. Python's int() refuses more than 4,300 digits (a ValueError,
# which was a 500), a double holds at most 309 integer digits and PostgreSQL's numeric
# more than anyone writes: a longer literal is a mistake or an attack, refused up front.
MAX_NUMBER_CHARS = 1_000

# The grammar's node types; anything else anywhere in the tree is refused.
_ALLOWED_NODES: tuple[type[exp.Expression], ...] = (
    exp.Select, exp.Star, exp.Count, exp.Column, exp.Identifier, exp.From, exp.Table,
    exp.Where, exp.And, exp.Paren, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE,
    exp.Like, exp.Not, exp.In, exp.Is, exp.Null, exp.Literal, exp.Boolean, exp.Neg,
    exp.Order, exp.Ordered, exp.Limit, exp.Offset,
)

# Friendlier names for refused constructs (checked in order; first isinstance wins).
_REFUSED_NAMES: tuple[tuple[type[exp.Expression], str], ...] = (
    (exp.Or, "OR is not supported: conditions combine with AND only (use IN (...) for alternatives)"),
    (exp.Subquery, "subqueries are not allowed"),
    (exp.Select, "subqueries are not allowed"),
    (exp.Join, "joins are not allowed: query one table at a time"),
    (exp.Union, "UNION is not allowed"),
    (exp.Intersect, "INTERSECT is not allowed"),
    (exp.Except, "EXCEPT is not allowed"),
    (exp.With, "WITH (common table expressions) is not allowed"),
    (exp.CTE, "WITH (common table expressions) is not allowed"),
    (exp.Alias, "aliases (AS) are not allowed"),
    (exp.TableAlias, "table aliases are not allowed"),
    (exp.Distinct, "DISTINCT is not allowed"),
    (exp.Group, "GROUP BY is not allowed"),
    (exp.Having, "HAVING is not allowed"),
    (exp.Window, "window functions are not allowed"),
    (exp.Lock, "FOR UPDATE / FOR SHARE is not allowed"),
    (exp.Into, "SELECT INTO is not allowed"),
    (exp.Cast, "casts are not allowed: write a plain literal"),
    (exp.Between, "BETWEEN is not supported: use >= ... AND <= ..."),
    (exp.ILike, "ILIKE is not supported: use LIKE"),
    (exp.Escape, "LIKE ... ESCAPE is not supported"),
    (exp.NullSafeEQ, "IS [NOT] DISTINCT FROM is not supported"),
    (exp.NullSafeNEQ, "IS [NOT] DISTINCT FROM is not supported"),
    (exp.Placeholder, "parameters are not allowed: write literal values"),
    (exp.Parameter, "parameters are not allowed: write literal values"),
    (exp.Fetch, "FETCH is not supported: use LIMIT"),
    (exp.Case, "CASE expressions are not allowed"),
)


class Op(Enum):
    """Condition operators of the grammar (negation is a flag on the condition)."""

    EQ = "="
    NEQ = "!="
    GT = ">"
    GTE = ">="
    LT = "<"
    LTE = "<="
    LIKE = "LIKE"
    IN = "IN"
    IS_NULL = "IS NULL"


_COMPARISONS: dict[type[exp.Expression], Op] = {
    exp.EQ: Op.EQ, exp.NEQ: Op.NEQ, exp.GT: Op.GT, exp.GTE: Op.GTE, exp.LT: Op.LT, exp.LTE: Op.LTE,
}


@dataclass(frozen=True, slots=True)
class Name:
    """An identifier as written; ``quoted`` when it was in double quotes."""

    text: str
    quoted: bool


@dataclass(frozen=True, slots=True)
class ColumnRef:
    name: Name
    qualifier: Name | None = None  # ``"Tasks"."Name"``: must name the FROM table


@dataclass(frozen=True, slots=True)
class Lit:
    """A literal value: ``str`` (single-quoted), ``int``/``float`` (numeric) or ``bool``."""

    value: str | int | float | bool


@dataclass(frozen=True, slots=True)
class Cond:
    column: ColumnRef
    op: Op
    values: tuple[Lit, ...] = ()
    negate: bool = False


@dataclass(frozen=True, slots=True)
class OrderTerm:
    column: ColumnRef
    desc: bool
    nulls_first: bool


@dataclass(frozen=True, slots=True)
class ParsedQuery:
    """The grammar's parts, names unresolved. ``fields`` is ``None`` for ``*``."""

    table: Name
    count: bool
    fields: tuple[ColumnRef, ...] | None
    star_qualifier: Name | None
    where: tuple[Cond, ...]
    order: tuple[OrderTerm, ...]
    limit: int | None
    offset: int | None


def parse_query(query: str) -> ParsedQuery:
    """Parse one read-only query of the SQL endpoint's grammar.

    >>> q = parse_query('SELECT "Due Date" FROM Tasks WHERE Done = true LIMIT 5')
    >>> (q.table.text, q.fields[0].name.text, q.where[0].op.value, q.limit)
    ('Tasks', 'Due Date', '=', 5)

    Raises:
        InvalidSQL: the text is not one statement of the grammar.
        PayloadTooLarge: the text is longer than ``MAX_QUERY_CHARS``.
    """
    check_text(query)
    return _parse_cached(query)


def check_text(query: str) -> None:
    """The checks on the text itself, before any parsing (shared with the analytic path).

    Raises:
        InvalidSQL: empty, or not text.
        PayloadTooLarge: longer than ``MAX_QUERY_CHARS``.
    """
    if not isinstance(query, str) or not query.strip():
        raise InvalidSQL("query is empty")
    if len(query) > MAX_QUERY_CHARS:
        raise PayloadTooLarge(f"query is longer than {MAX_QUERY_CHARS} characters")
    if not query.isascii():
        try:
            query.encode()
        except UnicodeEncodeError as exc:  # JSON can carry "\ud800"; UTF-8 (and PostgreSQL) cannot
            raise InvalidSQL(f"the query holds a character that is not text (position {exc.start})") from None


@functools.lru_cache(maxsize=512)
def _parse_cached(query: str) -> ParsedQuery:
    # Parsing is pure and its result immutable: clients repeat the same texts, and sqlglot's
    # tokenizer and parser are most of a request's time (~0.5 ms). Refusals are not cached.
    _check_tokens(query)
    try:
        statements = [s for s in sqlglot.parse(query, read="postgres") if s is not None]
        if len(statements) != 1:
            raise InvalidSQL("exactly one statement is allowed")
        root = statements[0]
        for node in root.walk():
            if not isinstance(node, _ALLOWED_NODES) or (isinstance(node, exp.Select) and node is not root):
                raise InvalidSQL(_refusal(node))
        if not isinstance(root, exp.Select):
            raise InvalidSQL(_refusal(root))
        return _select(root)
    except ParseError as exc:
        raise InvalidSQL(f"could not parse query: {_parse_error_text(exc)}") from None
    except TokenError as exc:
        raise InvalidSQL(f"could not parse query: {exc}") from None
    except RecursionError:
        # e.g. thousands of nested parentheses: sqlglot's parser is recursive
        raise InvalidSQL("query is nested too deeply") from None


def _check_tokens(query: str) -> None:
    """Refuse non-SELECT statements and statement chains before the parser sees them.

    Checking tokens first also keeps sqlglot from falling back to its permissive
    ``Command`` parse (and logging a warning) for statements it does not model.
    """
    try:
        tokens = sqlglot.tokenize(query, read="postgres")
    except TokenError as exc:
        raise InvalidSQL(f"could not parse query: {exc}") from None
    if not tokens:
        raise InvalidSQL("query is empty")
    first = tokens[0]
    if first.token_type is TokenType.WITH:
        raise InvalidSQL("WITH (common table expressions) is not allowed")
    if first.token_type is not TokenType.SELECT:
        raise InvalidSQL(f"only SELECT statements are allowed, not {first.text.upper()!r}")
    # Trailing semicolons are tolerated; any other one separates statements.
    last = max(i for i, t in enumerate(tokens) if t.token_type is not TokenType.SEMICOLON)
    if any(t.token_type is TokenType.SEMICOLON for t in tokens[:last]):
        raise InvalidSQL("only one statement is allowed (found ';' followed by more text)")


def _parse_error_text(exc: ParseError) -> str:
    if exc.errors:
        err = exc.errors[0]
        return f"unexpected {err.get('highlight')!r} (line {err.get('line')}, column {err.get('col')})"
    return str(exc).splitlines()[0]


def _refusal(node: exp.Expr) -> str:
    for cls, text in _REFUSED_NAMES:
        if isinstance(node, cls):
            return text
    if isinstance(node, exp.Binary):
        return (
            f"{_snippet(node)!r} is not allowed: conditions are <column> <operator> <literal>"
            " with =, !=, <>, <, >, <=, >=, [NOT] LIKE, [NOT] IN, IS [NOT] NULL"
        )
    if isinstance(node, exp.Func):
        return f"functions are not allowed: {_snippet(node)}"
    if isinstance(node, (exp.ByteString, exp.RawString, exp.HexString, exp.National, exp.BitString)):
        return "only plain 'single-quoted' string literals are allowed"
    if isinstance(node, (exp.Command, exp.Insert, exp.Update, exp.Delete, exp.Drop, exp.Create)):
        return f"only SELECT statements are allowed, not {node.key.upper()}"
    return f"{node.key.upper()} is not supported by the SQL endpoint"


def _snippet(node: exp.Expr, limit: int = 60) -> str:
    try:
        text = node.sql(dialect="postgres")
    except Exception:  # generation is best effort; the node type still names the problem
        text = node.key.upper()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_args(node: exp.Expression, allowed: set[str], what: str) -> None:
    """Refuse any argument the grammar does not give ``node`` (e.g. ``FROM ONLY t``)."""
    for key, value in node.args.items():
        if key in allowed or value is None or value is False or value == []:
            continue
        raise InvalidSQL(f"{key.replace('_', ' ').strip().upper()} is not allowed in {what}")


def _select(node: exp.Select) -> ParsedQuery:
    _check_args(node, {"expressions", "from_", "where", "order", "limit", "offset"}, "SELECT")
    from_ = node.args.get("from_")
    if from_ is None:
        raise InvalidSQL("FROM <table> is required")
    _check_args(from_, {"this"}, "FROM")
    table = from_.this
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        raise InvalidSQL("FROM must name one table")
    if table.args.get("db") is not None or table.args.get("catalog") is not None:
        raise InvalidSQL("schema-qualified table names are not allowed: use the table's name")
    _check_args(table, {"this"}, "FROM")
    count, fields, star_qualifier = _select_list(node.expressions)
    where = node.args.get("where")
    return ParsedQuery(
        table=_name(table.this),
        count=count,
        fields=fields,
        star_qualifier=star_qualifier,
        where=tuple(_conditions(where.this)) if where is not None else (),
        order=_order(node.args.get("order")),
        limit=_int_clause(node.args.get("limit"), "LIMIT"),
        offset=_int_clause(node.args.get("offset"), "OFFSET"),
    )


def _name(ident: exp.Identifier) -> Name:
    return Name(text=str(ident.this), quoted=bool(ident.args.get("quoted")))


def _column(node: exp.Expression, where: str) -> ColumnRef:
    if not isinstance(node, exp.Column) or not isinstance(node.this, exp.Identifier):
        raise InvalidSQL(f"{where} must be a column name")
    if node.args.get("db") is not None or node.args.get("catalog") is not None:
        raise InvalidSQL("schema-qualified column names are not allowed")
    _check_args(node, {"this", "table"}, where)
    qualifier = node.args.get("table")
    return ColumnRef(_name(node.this), _name(qualifier) if qualifier is not None else None)


def _select_list(
    items: list[exp.Expression],
) -> tuple[bool, tuple[ColumnRef, ...] | None, Name | None]:
    """``(count, fields, star_qualifier)``; ``fields`` is ``None`` for ``*`` and COUNT(*)."""
    if not items:
        raise InvalidSQL("SELECT needs *, COUNT(*) or a list of fields")
    if any(isinstance(i, exp.Count) for i in items):
        count = items[0]
        if len(items) != 1 or not isinstance(count.this, exp.Star) or count.expressions:
            raise InvalidSQL("only COUNT(*), alone in the select list, is allowed")
        return True, None, None
    if any(_is_star(i) for i in items):
        if len(items) != 1:
            raise InvalidSQL("* cannot be combined with other fields")
        star = items[0]
        if isinstance(star, exp.Column):  # "Tasks".*: the qualifier is checked when resolving
            _check_args(star, {"this", "table"}, "the select list")
            qualifier = star.args.get("table")
            return False, None, _name(qualifier) if qualifier is not None else None
        return False, None, None
    return False, tuple(_column(i, "each selected item") for i in items), None


def _is_star(node: exp.Expression) -> bool:
    return isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star))


def _conditions(node: exp.Expression) -> list[Cond]:
    """Flatten ``a AND (b AND c)`` into conditions, in order; parentheses only group ANDs."""
    out: list[Cond] = []
    stack = [node]  # iterative: a long AND chain is a deep left-leaning tree
    while stack:
        item = stack.pop()
        if isinstance(item, exp.And):
            stack.extend((item.expression, item.this))
        elif isinstance(item, exp.Paren):
            stack.append(item.this)
        else:
            out.append(_condition(item))
    return out


def _condition(node: exp.Expression) -> Cond:
    negate = False
    if isinstance(node, exp.Not):
        inner = node.this
        # The grammar's NOT is NOT LIKE / NOT IN only (IS NOT NULL parses as Is(negate)).
        if not isinstance(inner, (exp.Like, exp.In)):
            raise InvalidSQL("NOT is only allowed as NOT LIKE, NOT IN or IS NOT NULL")
        negate, node = True, inner
    if isinstance(node, exp.Is):
        _check_args(node, {"this", "expression", "negate"}, "IS")
        if not isinstance(node.expression, exp.Null):
            raise InvalidSQL("IS is only allowed as IS NULL or IS NOT NULL")
        col = _column(node.this, "the left side of IS NULL")
        return Cond(col, Op.IS_NULL, negate=negate != bool(node.args.get("negate")))
    if isinstance(node, exp.Like):
        _check_args(node, {"this", "expression", "negate"}, "LIKE")
        col = _column(node.this, "the left side of LIKE")
        lit = _literal(node.expression, "LIKE")
        return Cond(col, Op.LIKE, (lit,), negate=negate != bool(node.args.get("negate")))
    if isinstance(node, exp.In):
        _check_args(node, {"this", "expressions"}, "IN")
        col = _column(node.this, "the left side of IN")
        if not node.expressions:
            raise InvalidSQL("IN (...) needs at least one value")
        return Cond(col, Op.IN, tuple(_literal(v, "IN (...)") for v in node.expressions), negate)
    op = _COMPARISONS.get(type(node))
    if op is None:
        raise InvalidSQL(f"a condition must be <column> <operator> <value>, not {node.key.upper()}")
    _check_args(node, {"this", "expression"}, op.value)
    if isinstance(node.this, exp.Literal) and isinstance(node.expression, exp.Column):
        raise InvalidSQL("write conditions as <column> <operator> <value>, column first")
    col = _column(node.this, f"the left side of {op.value}")
    return Cond(col, op, (_literal(node.expression, op.value),))


def _literal(node: exp.Expression, where: str) -> Lit:
    if isinstance(node, exp.Null):
        raise InvalidSQL(f"NULL cannot be used with {where}: use IS NULL / IS NOT NULL")
    if isinstance(node, exp.Boolean):
        return Lit(bool(node.this))
    if isinstance(node, exp.Column):
        raise InvalidSQL(
            f"the value in {where} must be a literal, not the column {node.name!r}"
            " (string literals use single quotes)"
        )
    sign = 1
    if isinstance(node, exp.Neg):
        sign, node = -1, node.this
        if not (isinstance(node, exp.Literal) and not node.is_string):
            raise InvalidSQL(f"the value in {where} must be a literal")
    if not isinstance(node, exp.Literal):
        raise InvalidSQL(f"the value in {where} must be a literal")
    _check_args(node, {"this", "is_string"}, where)
    if node.is_string:
        return Lit(str(node.this))
    return Lit(sign * _number(str(node.this)))


def check_number_text(text: str) -> None:
    """Refuse a number literal longer than :data:`MAX_NUMBER_CHARS` (``INVALID_SQL``)."""
    if len(text) > MAX_NUMBER_CHARS:
        raise InvalidSQL(f"a number literal is at most {MAX_NUMBER_CHARS:,} characters long"
                         f" ({text[:20]}… has {len(text):,})")


def whole_number(text: str) -> int | None:
    """The value of a literal written as ASCII digits only (a whole number), else ``None``.

    Raises:
        InvalidSQL: more than :data:`MAX_NUMBER_CHARS` digits.
    """
    if not (text.isascii() and text.isdigit()):  # "²".isdigit() is true, int("²") fails
        return None
    check_number_text(text)
    return int(text)


def _number(text: str) -> int | float:
    check_number_text(text)
    try:
        whole = whole_number(text)
        if whole is not None:
            return whole
        num = float(text)
    except ValueError:
        raise InvalidSQL(f"{text!r} is not a number") from None
    if not math.isfinite(num):
        raise InvalidSQL(f"{text!r} is not a finite number")
    return num


def _order(node: exp.Order | None) -> tuple[OrderTerm, ...]:
    if node is None:
        return ()
    _check_args(node, {"expressions"}, "ORDER BY")
    terms: list[OrderTerm] = []
    for item in node.expressions:
        _check_args(item, {"this", "desc", "nulls_first"}, "ORDER BY")
        col = _column(item.this, "each ORDER BY item")
        terms.append(OrderTerm(col, bool(item.args.get("desc")), bool(item.args.get("nulls_first"))))
    return tuple(terms)


def _int_clause(node: exp.Limit | exp.Offset | None, what: str) -> int | None:
    if node is None:
        return None
    _check_args(node, {"expression"}, what)
    value = node.expression
    n = whole_number(str(value.this)) if isinstance(value, exp.Literal) and not value.is_string else None
    if n is None:
        raise InvalidSQL(f"{what} must be a non-negative whole number")
    if n > 2**63 - 1:
        raise InvalidSQL(f"{what} is too large")
    return n


# shared with the analytic path (storage.sqlquery.analytic)
check_tokens = _check_tokens
parse_error_text = _parse_error_text
snippet = _snippet
