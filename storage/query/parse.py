"""Stage 1 of the record query compiler: query parameters → frozen dataclasses.

The parser knows nothing of tables. It turns the REST query string (already URL-decoded,
as ``(key, value)`` pairs), the MCP/SDK/view filter object ``{column: "op.value"}`` and
the run-actions filter list ``[{column, op, value}]`` into :class:`Query` and
:class:`Filter` values; :mod:`storage.query.plan` resolves the names and types the values.

Grammar (PostgREST style)::

    <Column>=<op>.<value>             eq neq gt gte lt lte like ilike is
    <Column>=in.(<v1>,"v,2",...)      double quotes allow commas, backslash escapes
    <Column>=cs.{<v1>,<v2>}           contains all (multi_select, JSON arrays)
    <Column>=not.<op>.<value>         negation of any operator
    filter[<Column>][<op>]=<value>    legacy form; <op> may be ``not.eq`` etc.
    order=<Col>.asc,<Col>.desc.nullslast   sort=-<Col>,<Col>
    limit=<n>  offset=<n>  select=a,b,Rel(X,Y),*  expand=Rel1,Rel2

Every other parameter name that is not reserved (:data:`RESERVED_PARAMS`) is a column
filter; repeated keys are all kept and AND together. Names in ``order``, ``sort``,
``select`` and ``expand`` may be double-quoted to hold commas, dots or parentheses.
For repeated ``limit``/``offset`` the last one wins.

>>> q = parse_params([("Status", "eq.Done"), ("Score", "not.gt.5"), ("order", "Score.desc")])
>>> q.filters[0]
Filter(column='Status', op=<Op.EQ: 'eq'>, value='Done', negate=False)
>>> q.filters[1].negate, q.filters[1].op.value, q.filters[1].value
(True, 'gt', '5')
>>> q.order
(OrderTerm(column='Score', desc=True, nulls=None),)
>>> parse_params([("Tag", 'in.("a,b",c)')]).filters[0].value
('a,b', 'c')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from storage.errors import InvalidValue, UnknownOperator, ValidationError
from storage.plans import IN_MAX, PAGE_DEFAULT, PAGE_MAX
from storage.query.lexer import (
    name_and_rest,
    parse_list,
    partition_unquoted,
    split_top,
    unquote_name,
)

DEFAULT_LIMIT = PAGE_DEFAULT  # fixed on every plan: storage/plans.py
MAX_LIMIT = PAGE_MAX
MAX_IN_VALUES = IN_MAX
MAX_OFFSET = 2**63 - 1  # beyond bigint PostgreSQL would fail at run time

# Parameters that are never column filters; the API layer handles view/run_pipeline/count.
RESERVED_PARAMS = frozenset(
    {"order", "sort", "limit", "offset", "select", "expand", "view", "run_pipeline", "count"}
)


class Op(StrEnum):
    """The closed set of filter operators; anything else is ``UNKNOWN_OPERATOR``."""

    EQ = "eq"
    NEQ = "neq"
    GT = "gt"
    GTE = "gte"
    LT = "lt"
    LTE = "lte"
    LIKE = "like"
    ILIKE = "ilike"
    IN = "in"
    CS = "cs"
    IS = "is"


FilterValue = str | tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Filter:
    """One condition: ``column <op> value``, negated when ``negate``.

    ``value`` is the raw text (``is`` values are lower-cased ``null``/``true``/``false``);
    for ``in`` and ``cs`` it is a tuple of texts.
    """

    column: str
    op: Op
    value: FilterValue
    negate: bool = False


@dataclass(frozen=True, slots=True)
class OrderTerm:
    column: str
    desc: bool = False
    nulls: Literal["first", "last"] | None = None  # None: PostgreSQL's default


@dataclass(frozen=True, slots=True)
class SelectItem:
    """A selected field (``fields is None``) or an embedded relation with its fields.

    ``name == "*"`` selects every field; ``fields == ("*",)`` embeds every related field.
    """

    name: str
    fields: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Query:
    filters: tuple[Filter, ...] = ()
    order: tuple[OrderTerm, ...] = ()
    limit: int = DEFAULT_LIMIT
    offset: int = 0
    select: tuple[SelectItem, ...] | None = None  # None: every field
    expand: tuple[str, ...] = ()


_OPS = {op.value: op for op in Op}
_IS_VALUES = frozenset({"null", "true", "false"})


def parse_params(params: Sequence[tuple[str, str]]) -> Query:
    """Parse REST query parameters into a :class:`Query`.

    Raises:
        UnknownOperator: a filter names an operator outside :class:`Op`.
        InvalidValue: a malformed value (bad ``is`` value, unbalanced quotes in a list).
        ValidationError: malformed ``limit``/``offset``/``order``/``select``.

    >>> parse_params([("filter[Name][not.eq]", "x"), ("limit", "5")])
    Query(filters=(Filter(column='Name', op=<Op.EQ: 'eq'>, value='x', negate=True),), order=(), limit=5, offset=0, select=None, expand=())
    >>> parse_params([("sort", "-created_at,Name")]).order
    (OrderTerm(column='created_at', desc=True, nulls=None), OrderTerm(column='Name', desc=False, nulls=None))
    >>> parse_params([("select", "Name,Owner(Email,Team)")]).select
    (SelectItem(name='Name', fields=None), SelectItem(name='Owner', fields=('Email', 'Team')))
    """
    filters: list[Filter] = []
    order: list[OrderTerm] = []
    select: list[SelectItem] | None = None
    expand: list[str] = []
    limit, offset = DEFAULT_LIMIT, 0
    for key, value in params:
        legacy = _legacy_key(key)
        if legacy is not None:
            filters.append(parse_legacy(legacy[0], legacy[1], value))
        elif key == "order":
            order.extend(parse_order(value))
        elif key == "sort":
            order.extend(parse_sort(value))
        elif key == "limit":
            limit = _parse_int("limit", value)
        elif key == "offset":
            offset = _parse_int("offset", value)
        elif key == "select":
            select = (select or []) + list(parse_select(value))
        elif key == "expand":
            expand.extend(unquote_name(p) for p in split_top(value) if p.strip())
        elif key in RESERVED_PARAMS:
            continue
        else:
            filters.append(parse_filter(key, value))
    return Query(
        filters=tuple(filters),
        order=tuple(order),
        limit=limit,
        offset=offset,
        select=None if select is None else tuple(select),
        expand=tuple(expand),
    )


def parse_filter(column: str, expr: str) -> Filter:
    """Parse ``<op>.<value>`` (optionally ``not.``-prefixed) for ``column``.

    >>> parse_filter("Done", "is.TRUE")
    Filter(column='Done', op=<Op.IS: 'is'>, value='true', negate=False)
    >>> parse_filter("Tags", "not.cs.{a,b}")
    Filter(column='Tags', op=<Op.CS: 'cs'>, value=('a', 'b'), negate=True)
    """
    negate = False
    if expr.startswith("not."):
        negate, expr = True, expr[4:]
    name, dot, raw = expr.partition(".")
    op = _OPS.get(name)
    if op is None:
        raise UnknownOperator(f"unknown operator {name!r} for column {column!r}")
    if not dot:
        raise InvalidValue(f"filter on {column!r} has no value: expected {name}.<value>")
    return Filter(column, op, _op_value(column, op, raw, bracketed=True), negate)


def parse_legacy(column: str, op_text: str | None, raw: str) -> Filter:
    """Parse the legacy ``filter[<column>][<op>]=<value>`` form (no op means ``eq``).

    ``in`` and ``cs`` lists may be written bare (``a,b``) or bracketed (``(a,b)``).

    >>> parse_legacy("Score", "gte", "3")
    Filter(column='Score', op=<Op.GTE: 'gte'>, value='3', negate=False)
    >>> parse_legacy("Tag", "in", "a,b")
    Filter(column='Tag', op=<Op.IN: 'in'>, value=('a', 'b'), negate=False)
    """
    negate = False
    op_name = "eq" if op_text is None else op_text
    for prefix in ("not.", "not_"):
        if op_name.startswith(prefix):
            negate, op_name = True, op_name[len(prefix):]
            break
    op = _OPS.get(op_name)
    if op is None:
        raise UnknownOperator(f"unknown operator {op_name!r} for column {column!r}")
    return Filter(column, op, _op_value(column, op, raw, bracketed=False), negate)


def parse_filter_object(obj: Mapping[str, Any]) -> tuple[Filter, ...]:
    """Parse the MCP/SDK/view form ``{column: "op.value"}``.

    Non-string values are accepted for convenience: ``None`` means ``is.null``, a boolean
    ``is.true``/``is.false``, a number ``eq.<n>`` and a list ``in.(...)``. A list of
    expressions under one column ANDs them (``{"Score": ["gt.1", "lt.5"]}`` is not that:
    a list is ``in``; use the REST form twice or :func:`parse_filter_list` for ranges).

    >>> parse_filter_object({"Score": "gte.3", "Tag": ["a", "b"], "Owner": None})
    (Filter(column='Score', op=<Op.GTE: 'gte'>, value='3', negate=False), Filter(column='Tag', op=<Op.IN: 'in'>, value=('a', 'b'), negate=False), Filter(column='Owner', op=<Op.IS: 'is'>, value='null', negate=False))
    """
    if not isinstance(obj, Mapping):
        raise ValidationError("filters must be an object {column: \"op.value\"}")
    out: list[Filter] = []
    for column, expr in obj.items():
        if isinstance(expr, str):
            out.append(parse_filter(str(column), expr))
        else:
            out.append(_filter_from_json(str(column), None, expr))
    return tuple(out)


def parse_filter_list(items: Sequence[Mapping[str, Any]]) -> tuple[Filter, ...]:
    """Parse a list of ``{column, op, value}`` objects (run-actions, write-by-filter).

    ``op`` may carry ``not.`` (``"not.eq"``) or the item may set ``"negate": true``;
    ``value`` may be text, a number, a boolean, ``null`` or a list (for ``in``/``cs``).

    >>> parse_filter_list([{"column": "Score", "op": "not.lt", "value": 2}])
    (Filter(column='Score', op=<Op.LT: 'lt'>, value='2', negate=True),)
    """
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise ValidationError("filters must be a list of {column, op, value} objects")
    out: list[Filter] = []
    for item in items:
        if not isinstance(item, Mapping) or not isinstance(item.get("column"), str):
            raise ValidationError("each filter needs a string 'column'")
        op_text = item.get("op", "eq")
        if not isinstance(op_text, str):
            raise UnknownOperator(f"unknown operator {op_text!r}")
        f = _filter_from_json(item["column"], op_text, item.get("value"))
        if item.get("negate") is True:
            f = Filter(f.column, f.op, f.value, not f.negate)
        out.append(f)
    return tuple(out)


def parse_order(text: str) -> tuple[OrderTerm, ...]:
    """Parse ``Col.asc,Col2.desc.nullslast`` (dots inside names are kept).

    >>> parse_order('My.Col.desc,"a,b".nullsfirst')
    (OrderTerm(column='My.Col', desc=True, nulls=None), OrderTerm(column='a,b', desc=False, nulls='first'))
    """
    terms: list[OrderTerm] = []
    for part in split_top(text):
        if not part.strip():
            continue
        name, suffixes = name_and_rest(part)
        desc = False
        nulls: Literal["first", "last"] | None = None
        # peel PostgREST suffixes from the right: [.asc|.desc][.nullsfirst|.nullslast]
        if suffixes and suffixes[-1] in ("nullsfirst", "nullslast"):
            nulls = "first" if suffixes.pop() == "nullsfirst" else "last"
        if suffixes and suffixes[-1] in ("asc", "desc"):
            desc = suffixes.pop() == "desc"
        if suffixes:
            if name is None:
                name = ".".join(suffixes)
            else:
                raise ValidationError(f"bad order term {part!r}")
        if not name:
            raise ValidationError(f"bad order term {part!r}")
        terms.append(OrderTerm(name, desc, nulls))
    return tuple(terms)


def parse_sort(text: str) -> tuple[OrderTerm, ...]:
    """Parse the alternative ``sort=-Col,Col2`` (``-`` means descending).

    >>> parse_sort('-Score,"-odd"')
    (OrderTerm(column='Score', desc=True, nulls=None), OrderTerm(column='-odd', desc=False, nulls=None))
    """
    terms: list[OrderTerm] = []
    for part in split_top(text):
        part = part.strip()
        if not part:
            continue
        desc = part.startswith("-")
        if desc:
            part = part[1:]
        name = unquote_name(part)
        if not name:
            raise ValidationError("bad sort term")
        terms.append(OrderTerm(name, desc))
    return tuple(terms)


def parse_select(text: str) -> tuple[SelectItem, ...]:
    """Parse ``a,b,Rel(X,Y),*``; one level of embedding only.

    >>> parse_select('*,"Odd, name",Rel(*)')
    (SelectItem(name='*', fields=None), SelectItem(name='Odd, name', fields=None), SelectItem(name='Rel', fields=('*',)))
    """
    items: list[SelectItem] = []
    for part in split_top(text):
        if not part.strip():
            continue
        head, paren, rest = partition_unquoted(part, "(")
        if not paren:
            items.append(SelectItem(unquote_name(part)))
            continue
        if not rest.rstrip().endswith(")"):
            raise ValidationError(f"bad select item {part!r}")
        inner = rest.rstrip()[:-1]
        if partition_unquoted(inner, "(")[1]:
            raise ValidationError("nested embedding is not supported")
        fields = tuple(unquote_name(p) for p in split_top(inner) if p.strip())
        if not fields or not head.strip():
            raise ValidationError(f"bad select item {part!r}")
        items.append(SelectItem(unquote_name(head), fields))
    return tuple(items)


def _op_value(column: str, op: Op, raw: str, *, bracketed: bool) -> FilterValue:
    if op is Op.IN:
        return parse_list(raw, "(", ")", required=bracketed)
    if op is Op.CS:
        return parse_list(raw, "{", "}", required=False)
    if op is Op.IS:
        value = raw.strip().lower()
        if value not in _IS_VALUES:
            raise InvalidValue(f"is.{raw} on {column!r}: expected null, true or false")
        return value
    return raw


def _filter_from_json(column: str, op_text: str | None, value: Any) -> Filter:
    """A filter from a JSON value, with ``op_text`` or an op implied by the value type."""
    negate = False
    if op_text is not None and op_text.startswith("not."):
        negate, op_text = True, op_text[4:]
    if op_text is None:
        if value is None or isinstance(value, bool):
            op_text = "is"
        elif isinstance(value, list):
            op_text = "in"
        else:
            op_text = "eq"
    op = _OPS.get(op_text)
    if op is None:
        raise UnknownOperator(f"unknown operator {op_text!r} for column {column!r}")
    if op in (Op.EQ, Op.NEQ) and value is None:
        # eq null reads naturally as "is empty"; neq null as "is not empty"
        return Filter(column, Op.IS, "null", negate != (op is Op.NEQ))
    if op in (Op.IN, Op.CS):
        if isinstance(value, list):
            return Filter(column, op, tuple(_json_text(v) for v in value), negate)
        if isinstance(value, str):
            return Filter(column, op, _op_value(column, op, value, bracketed=False), negate)
        return Filter(column, op, (_json_text(value),), negate)
    if isinstance(value, (list, dict)):
        raise InvalidValue(f"filter on {column!r}: {op.value} takes a single value")
    text = _json_text(value)
    return Filter(column, op, _op_value(column, op, text, bracketed=False), negate)


def _json_text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    if isinstance(value, (str, int, float)):
        return str(value)
    raise InvalidValue(f"unsupported filter value {value!r}")


def _parse_int(name: str, text: str) -> int:
    t = text.strip()
    if not t.isascii() or not t.isdigit():
        raise ValidationError(f"{name} must be a non-negative integer")
    # bound the length first: int() refuses very long digit strings, and anything this
    # long is out of range anyway (limit → LIMIT_TOO_LARGE in the planner)
    value = int(t) if len(t) <= 19 else MAX_OFFSET + 1
    if name == "offset" and value > MAX_OFFSET:
        raise ValidationError("offset is too large")
    return value


def _legacy_key(key: str) -> tuple[str, str | None] | None:
    """``filter[Col][op]`` → ``("Col", "op")``; ``filter[Col]`` → ``("Col", None)``."""
    if not (key.startswith("filter[") and key.endswith("]")) or len(key) < 9:
        return None
    inner = key[len("filter["):-1]
    # the operator is the last bracket group, so column names may contain "]["
    col, sep, op = inner.rpartition("][")
    if sep and op and "[" not in op and "]" not in op:
        return col, op
    return inner, None
