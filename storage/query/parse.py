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
    limit=<n>  offset=<n>  after=<cursor>  select=a,b,Rel(X,Y),*  expand=Rel1,Rel2  count=exact  view=<id>
    or=(<cond>,<cond>,...)  and=(...)  not.or=(...)  not.and=(...)
        <cond> is <Column>.<op>.<value>, <Column>.not.<op>.<value> or a nested
        and(...) / or(...) / not.and(...) / not.or(...); a column name holding dots or
        commas is double-quoted ("My.col".eq.1), and so is a value holding commas or
        parentheses (Title.eq."a,b")

Every other parameter name that is not reserved (:data:`RESERVED_PARAMS`) is a column
filter; repeated column filters and groups are all kept and AND together. Names in
``order``, ``sort``, ``select`` and ``expand`` may be double-quoted to hold commas, dots
or parentheses. The other parameters are single-valued: giving one twice (or ``order``
and ``sort`` together) is ``REPEATED_PARAMETER``, never "the last one wins".

The JSON doors (MCP ``list_records``, run-actions, realtime, views) go through
:func:`parse_arguments` / :func:`parse_filter_object` / :func:`parse_filter_list`, which
build the same :class:`Query` with the same errors (docs/query.md).

Every door's filters hold at most :data:`MAX_CONDITIONS` conditions, those inside
``or``/``and`` groups included: the parsers count them as they read them and refuse the
first one past it (``TOO_MANY_CONDITIONS``) before it is parsed, so a 100,000-condition
filter costs what 200 do, never a planner or SQL pass over all of them.

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

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from storage.errors import InvalidValue, ServiceError, UnknownOperator, ValidationError
from storage.plans import CONDITIONS_MAX, IN_MAX, PAGE_DEFAULT, PAGE_MAX
from storage.query.lexer import (
    iter_top,
    name_and_rest,
    parse_list,
    partition_unquoted,
    read_quoted,
    split_top,
    unquote_name,
)

DEFAULT_LIMIT = PAGE_DEFAULT  # fixed on every plan: storage/plans.py
MAX_LIMIT = PAGE_MAX
MAX_IN_VALUES = IN_MAX
MAX_CONDITIONS = CONDITIONS_MAX
MAX_OFFSET = 2**63 - 1  # beyond bigint PostgreSQL would fail at run time

# Parameters that are never column filters.
RESERVED_PARAMS = frozenset(
    {"order", "sort", "limit", "offset", "after", "select", "expand", "view", "run_pipeline", "count"}
)
# Parameters naming a boolean group of conditions (PostgREST's logic trees).
GROUP_PARAMS = frozenset({"or", "and", "not.or", "not.and"})
# The parameters a single-record read accepts.
RECORD_PARAMS = frozenset({"select", "expand"})
MAX_GROUP_DEPTH = 8  # nesting of and(...)/or(...) groups


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
class Group:
    """``and``/``or`` of conditions and nested groups, negated when ``negate``.

    ``source`` is the group's text as written (``(a.eq.1,b.gt.2)``), for doors that pass
    filters on in their JSON list form (:func:`filter_items`).
    """

    kind: Literal["and", "or"]
    items: tuple[Filter | Group, ...]
    negate: bool = False
    source: str = field(default="", compare=False)

    @property
    def column(self) -> None:
        """A group names no single column (callers keyed on ``Filter.column`` skip it)."""
        return None


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
    filters: tuple[Filter | Group, ...] = ()
    order: tuple[OrderTerm, ...] = ()
    limit: int = DEFAULT_LIMIT
    offset: int = 0
    select: tuple[SelectItem, ...] | None = None  # None: every field; (): no field
    expand: tuple[str, ...] = ()
    count: bool = False  # count=exact: the exact number of matches is wanted
    view: str | None = None  # a saved view whose filters and sort apply
    after: str | None = None  # a page's ``next`` cursor: continue after its last row


_OPS = {op.value: op for op in Op}
_IS_VALUES = frozenset({"null", "true", "false"})


class Conditions:
    """The count of one query's filter conditions, taken before each is parsed.

    >>> budget = Conditions()
    >>> budget.take(MAX_CONDITIONS)
    >>> budget.take()
    Traceback (most recent call last):
    storage.errors.ServiceError: a query's filters hold at most 200 conditions (those inside or/and groups count too)
    """

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = MAX_CONDITIONS

    def take(self, n: int = 1) -> None:
        """Raises:
            ServiceError: ``TOO_MANY_CONDITIONS``, more than :data:`MAX_CONDITIONS` in all.
        """
        if n > self.left:
            raise too_many_conditions()
        self.left -= n


def too_many_conditions() -> ServiceError:
    return ServiceError(f"a query's filters hold at most {MAX_CONDITIONS} conditions (those inside or/and groups"
                        " count too)", code="TOO_MANY_CONDITIONS")


def parse_params(params: Sequence[tuple[str, str]]) -> Query:
    """Parse REST query parameters into a :class:`Query`.

    Raises:
        UnknownOperator: a filter names an operator outside :class:`Op`.
        InvalidValue: a malformed value (bad ``is`` value, unbalanced quotes in a list).
        ValidationError: malformed ``limit``/``offset``/``order``/``select``/``count``
            or group.
        ServiceError: ``REPEATED_PARAMETER`` (a single-valued parameter given twice),
            ``UNKNOWN_PARAMETER`` (``run_pipeline``, which only writes take),
            ``TOO_MANY_CONDITIONS`` (more than :data:`MAX_CONDITIONS` filter conditions).

    >>> parse_params([("filter[Name][not.eq]", "x"), ("limit", "5")])
    Query(filters=(Filter(column='Name', op=<Op.EQ: 'eq'>, value='x', negate=True),), order=(), limit=5, offset=0, select=None, expand=(), count=False, view=None, after=None)
    >>> parse_params([("sort", "-created_at,Name")]).order
    (OrderTerm(column='created_at', desc=True, nulls=None), OrderTerm(column='Name', desc=False, nulls=None))
    >>> parse_params([("select", "Name,Owner(Email,Team)")]).select
    (SelectItem(name='Name', fields=None), SelectItem(name='Owner', fields=('Email', 'Team')))
    >>> parse_params([("limit", "5"), ("limit", "7")])
    Traceback (most recent call last):
    storage.errors.ServiceError: parameter 'limit' is given more than once
    """
    filters: list[Filter | Group] = []
    single: dict[str, tuple[str, str]] = {}  # slot → (key as written, value)
    budget = Conditions()
    for key, value in params:
        legacy = _legacy_key(key)
        if legacy is not None:
            budget.take()
            filters.append(parse_legacy(legacy[0], legacy[1], value))
        elif key in GROUP_PARAMS:
            filters.append(parse_group(key, value, budget=budget))
        elif key in RESERVED_PARAMS:
            if key == "run_pipeline":
                raise ServiceError("query parameter 'run_pipeline' applies to writes only",
                                   code="UNKNOWN_PARAMETER")
            slot = "order" if key == "sort" else key
            if slot in single:
                raise _repeated(key)
            single[slot] = (key, value)
        else:
            budget.take()
            filters.append(parse_filter(key, value))
    order: tuple[OrderTerm, ...] = ()
    if "order" in single:
        key, text = single["order"]
        order = parse_order(text) if key == "order" else parse_sort(text)

    def value(slot: str) -> str | None:
        return single[slot][1] if slot in single else None

    select, expand, count = value("select"), value("expand"), value("count")
    limit, offset = value("limit"), value("offset")
    if value("after") is not None and offset is not None:
        raise _after_with_offset()
    return Query(
        filters=tuple(filters),
        order=order,
        limit=DEFAULT_LIMIT if limit is None else parse_int("limit", limit),
        offset=0 if offset is None else parse_int("offset", offset),
        select=None if select is None else parse_select(select),
        expand=() if expand is None else parse_expand(expand),
        count=False if count is None else parse_count(count),
        view=value("view"),
        after=value("after"),
    )


def _after_with_offset() -> ServiceError:
    return ServiceError("after and offset cannot be combined: a cursor already says where the page starts",
                        code="INVALID_CURSOR")


def parse_record_params(params: Sequence[tuple[str, str]]) -> Query:
    """The query of a single-record read: ``select`` and ``expand`` only, each once.

    >>> parse_record_params([("select", "Title")]).select
    (SelectItem(name='Title', fields=None),)
    >>> parse_record_params([("view", "1")])
    Traceback (most recent call last):
    storage.errors.ServiceError: query parameter 'view' does not apply to reading one record; only select and expand do
    """
    seen: set[str] = set()
    for key, _ in params:
        if key not in RECORD_PARAMS:
            raise ServiceError(f"query parameter {key!r} does not apply to reading one record;"
                               " only select and expand do", code="UNKNOWN_PARAMETER")
        if key in seen:
            raise _repeated(key)
        seen.add(key)
    return parse_params(params)


def check_write_params(params: Sequence[tuple[str, str]], allowed: frozenset[str], what: str,
                       hint: str = "") -> None:
    """The query string of a record write (create, update, delete, batch): only the
    parameters in ``allowed``, each once (``hint`` ends the refusal's message). A typo
    (``run_pipline=false``) would otherwise be ignored and the write would run as if it
    were not there.

    >>> check_write_params([("run_pipeline", "false")], frozenset({"run_pipeline"}), "creating a record")
    >>> check_write_params([("run_pipline", "false")], frozenset({"run_pipeline"}), "creating a record")
    Traceback (most recent call last):
    storage.errors.ServiceError: query parameter 'run_pipline' does not apply to creating a record; it takes only run_pipeline
    >>> check_write_params([("run_pipeline", "false")], frozenset(), "a batch", " (send run_pipeline in the body)")
    Traceback (most recent call last):
    storage.errors.ServiceError: query parameter 'run_pipeline' does not apply to a batch; it takes no query parameters (send run_pipeline in the body)

    Raises:
        ServiceError: ``UNKNOWN_PARAMETER`` for a parameter outside ``allowed``,
            ``REPEATED_PARAMETER`` for one given twice.
    """
    seen: set[str] = set()
    for key, _ in params:
        if key not in allowed:
            takes = ("it takes only " + ", ".join(sorted(allowed))) if allowed else "it takes no query parameters"
            raise ServiceError(f"query parameter {key!r} does not apply to {what}; {takes}{hint}",
                               code="UNKNOWN_PARAMETER")
        if key in seen:
            raise _repeated(key)
        seen.add(key)


def parse_arguments(args: Mapping[str, Any], *, default_limit: int = DEFAULT_LIMIT) -> Query:
    """The JSON doors' form of a list query (MCP ``list_records``, the agent chat):
    ``filters`` (object or list form), ``order``, ``select``, ``expand`` (text in the REST
    grammar or a list of terms), ``limit``, ``offset``, ``after`` (a page's ``next``
    cursor), ``count`` (boolean) and ``view``.

    Every value is checked here with the REST door's messages: ``limit: 10.0`` is ten
    (JSON has one number type), ``limit: 10.5``, ``"10"``, ``true`` or ``-1`` are
    ``VALIDATION_ERROR``; an empty ``select`` selects no field, as ``select=`` does.

    >>> parse_arguments({"filters": {"Score": "gt.1"}, "limit": 10.0, "select": ["Title", "Owner(Name)"]}).limit
    10
    """
    raw = args.get("filters")
    filters: tuple[Filter | Group, ...] = ()
    if isinstance(raw, Mapping):
        filters = parse_filter_object(raw)
    elif raw is not None:
        filters = parse_filter_list(raw)
    order = terms_text("order", args.get("order"))
    select = terms_text("select", args.get("select"))
    expand = terms_text("expand", args.get("expand"))
    view = args.get("view")
    if view is not None and (isinstance(view, bool) or not isinstance(view, (str, int))):
        raise ValidationError("view must be a view id")
    count = args.get("count")
    if count is None:
        count = False
    if isinstance(count, str) and count.strip().lower() in COUNT_MODES:
        count = True  # the door reads the mode itself (storage.query.listing.count_mode)
    if not isinstance(count, bool):
        raise ValidationError('count must be true, false, "exact", "planned" or "estimated"')
    after = args.get("after")
    if after is not None and not isinstance(after, str):
        raise ServiceError("after must be the next cursor (text) of a page of this list", code="INVALID_CURSOR")
    if after is not None and args.get("offset") is not None:
        raise _after_with_offset()
    return Query(
        filters=filters,
        order=parse_order(order) if order is not None else (),
        limit=parse_int("limit", args["limit"]) if args.get("limit") is not None else default_limit,
        offset=parse_int("offset", args["offset"]) if args.get("offset") is not None else 0,
        select=parse_select(select) if select is not None else None,
        expand=parse_expand(expand) if expand is not None else (),
        count=count,
        view=None if view is None else str(view),
        after=after,
    )


def terms_text(name: str, value: Any) -> str | None:
    """A JSON door's ``order``/``select``/``expand``: REST text, or a list of terms, each
    one term: ``"Owner(Name)"`` embeds, ``"\"a,b\""`` is quoted as in REST, and a term
    whose name holds a comma outside quotes and parentheses (``"x,y"``, ``"x,y.desc"``)
    is that column's name (it was cut in two; the SDK quotes such names itself)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ",".join(_one_term(name, v) for v in value)
    raise ValidationError(f"{name} must be text or a list of texts")


_ORDER_SUFFIX = re.compile(r"((?:\.(?:asc|desc))?(?:\.(?:nullsfirst|nullslast))?)$")


def _one_term(kind: str, term: str) -> str:
    """A list item as one REST term: a name holding a top-level comma gets quoted."""
    if term.lstrip().startswith('"') or len(split_top(term)) < 2:
        return term
    if kind == "order":
        found = _ORDER_SUFFIX.search(term)
        suffix = found.group(1) if found else ""
        bare = term[: len(term) - len(suffix)] if suffix else term
        return _quoted(bare) + suffix
    return _quoted(term)


def _quoted(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_expand(text: str) -> tuple[str, ...]:
    """``expand=Rel1,Rel2``; names may be double-quoted."""
    return tuple(unquote_name(p) for p in split_top(text) if p.strip())


COUNT_MODES = ("exact", "planned", "estimated")


def parse_count(text: str) -> bool:
    """``count=exact|planned|estimated`` (as ``Prefer: count=...``, and MCP's ``count``);
    the door reads the mode itself (:func:`count_param`)."""
    if text.strip().lower() not in COUNT_MODES:
        raise ValidationError("count must be exact, planned or estimated (count=exact)")
    return True


def count_param(params: Sequence[tuple[str, str]]) -> str | None:
    """The count mode a list's ``count`` query parameter names (lower case), if any."""
    for key, text in params:
        if key == "count":
            return text.strip().lower()
    return None


def parse_group(key: str, text: str, *, depth: int = 0, budget: Conditions | None = None) -> Group:
    """Parse ``or=(...)`` / ``and=(...)`` (``key`` may be ``not.or``/``not.and``).

    Its conditions, nested ones too, are taken from ``budget`` (the query's, or the
    group's own): the text is split only as far as the budget goes, since each part holds
    at least one condition.

    >>> g = parse_group("or", "(Score.gte.10,and(Status.eq.done,Title.ilike.*x*))")
    >>> g.kind, g.items[0], g.items[1].kind, g.items[1].items[1].value
    ('or', Filter(column='Score', op=<Op.GTE: 'gte'>, value='10', negate=False), 'and', '*x*')
    >>> parse_group("not.and", '("A.b".eq."x,y",N.not.is.null)').items
    (Filter(column='A.b', op=<Op.EQ: 'eq'>, value='x,y', negate=False), Filter(column='N', op=<Op.IS: 'is'>, value='null', negate=True))
    """
    negate = key.startswith("not.")
    kind = key[4:] if negate else key
    if kind not in ("and", "or"):
        raise ValidationError(f"unknown group {key!r}: expected and, or, not.and or not.or")
    if depth >= MAX_GROUP_DEPTH:
        raise ValidationError(f"groups nest at most {MAX_GROUP_DEPTH} deep")
    body = text.strip()
    if not (body.startswith("(") and body.endswith(")")):
        raise ValidationError(f"{key} takes a parenthesised list of conditions, e.g. {kind}=(A.eq.1,B.gt.2)")
    if budget is None:
        budget = Conditions()
    parts: list[str] = []
    for part in iter_top(body[1:-1], braces=True):
        parts.append(part)
        if len(parts) > budget.left:
            raise too_many_conditions()
    items: list[Filter | Group] = []
    for part in parts:
        part = part.strip()
        if not part:
            raise ValidationError(f"empty condition in {key}={text}")
        nested = _nested_group(part)
        if nested is not None:
            items.append(parse_group(nested[0], nested[1], depth=depth + 1, budget=budget))
        else:
            budget.take()
            items.append(_group_condition(part))
    if not items:
        raise ValidationError(f"{key}=() holds no condition")
    return Group(kind, tuple(items), negate, body)  # type: ignore[arg-type]


def _nested_group(part: str) -> tuple[str, str] | None:
    for key in ("not.and", "not.or", "and", "or"):
        if part.startswith(key + "(") and part.endswith(")"):
            return key, part[len(key):]
    return None


def _group_condition(part: str) -> Filter:
    """``<Column>.<op>.<value>`` inside a group; the first ``.<op>.`` ends the name."""
    if part.startswith('"'):
        column, rest = read_quoted(part)
        if not rest.startswith("."):
            raise ValidationError(f"bad condition {part!r}: expected \"<Column>\".<op>.<value>")
        expr = rest[1:]
    else:
        column, expr = "", ""
        for i, ch in enumerate(part):
            if ch != ".":
                continue
            rest = part[i + 1 :]
            head = rest[4:] if rest.startswith("not.") else rest
            name = head.partition(".")[0]
            if name in _OPS and "." in head:
                column, expr = part[:i], rest
                break
        if not column:
            raise ValidationError(f"bad condition {part!r}: expected <Column>.<op>.<value>")
    f = parse_filter(column, expr)
    if isinstance(f.value, str) and f.op is not Op.IS:
        value = f.value.strip()
        if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
            inner, _ = read_quoted(value)
            f = Filter(f.column, f.op, inner, f.negate)
    return f


def filter_items(filters: Sequence[Filter | Group]) -> list[dict[str, Any]]:
    """Parsed filters in the JSON list form :func:`parse_filter_list` reads back
    (``{column, op, value}``; a group as ``{"or": "(...)"}``)."""
    out: list[dict[str, Any]] = []
    for f in filters:
        if isinstance(f, Group):
            out.append({("not." if f.negate else "") + f.kind: f.source})
        else:
            out.append({"column": f.column, "op": ("not." if f.negate else "") + f.op.value,
                        "value": list(f.value) if isinstance(f.value, tuple) else f.value})
    return out


def group_key(group: Group) -> str:
    """The parameter (or JSON key) a top-level group is written under: ``or``, ``not.and``..."""
    return ("not." if group.negate else "") + group.kind


def group_text(group: Group, column: Callable[[str], str] = lambda name: name) -> str:
    """A parsed group written back in the REST grammar (``(A.eq.1,and(B.gt.2,C.is.null))``),
    with each condition's column name passed through ``column`` (views write ``@<id>``).

    Names and values are double-quoted when they hold characters of the grammar, so
    :func:`parse_group` reads the text back to the same group.

    >>> g = parse_group("or", '(Score.gte.10,not.and("A.b".eq."x,y",Tag.cs.{a,"b c"}),N.not.is.null)')
    >>> group_text(g)
    '(Score.gte.10,not.and("A.b".eq."x,y",Tag.cs.{a,b c}),N.not.is.null)'
    >>> parse_group("or", group_text(g)) == g
    True
    """
    parts: list[str] = []
    for item in group.items:
        if isinstance(item, Group):
            parts.append(group_key(item) + group_text(item, column))
            continue
        op = ("not." if item.negate else "") + item.op.value
        if isinstance(item.value, tuple):
            open_, close = ("(", ")") if item.op is Op.IN else ("{", "}")
            value = open_ + ",".join(_quoted_if_needed(v) for v in item.value) + close
        else:
            value = _quoted_if_needed(item.value)
        parts.append(f"{_quoted_if_needed(column(item.column), extra='.')}.{op}.{value}")
    return "(" + ",".join(parts) + ")"


def _quoted_if_needed(text: str, *, extra: str = "") -> str:
    if text and text == text.strip() and not any(ch in text for ch in ',"(){}\\' + extra):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _repeated(key: str) -> ServiceError:
    other = {"order": " (or together with sort)", "sort": " (or together with order)"}.get(key, "")
    return ServiceError(f"parameter {key!r} is given more than once{other}", code="REPEATED_PARAMETER")


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


def parse_filter_object(obj: Mapping[str, Any]) -> tuple[Filter | Group, ...]:
    """Parse the MCP/SDK/view form ``{column: "op.value"}``.

    Non-string values are accepted for convenience: ``None`` means ``is.null``, a boolean
    ``is.true``/``is.false``, a number ``eq.<n>`` and a list ``in.(...)``. A list of
    expressions under one column ANDs them (``{"Score": ["gt.1", "lt.5"]}`` is not that:
    a list is ``in``; use the REST form twice or :func:`parse_filter_list` for ranges).
    The keys ``or``, ``and``, ``not.or`` and ``not.and`` hold a group in the REST grammar
    (``{"or": "(Score.gte.10,Status.eq.done)"}``).

    >>> parse_filter_object({"Score": "gte.3", "Tag": ["a", "b"], "Owner": None})
    (Filter(column='Score', op=<Op.GTE: 'gte'>, value='3', negate=False), Filter(column='Tag', op=<Op.IN: 'in'>, value=('a', 'b'), negate=False), Filter(column='Owner', op=<Op.IS: 'is'>, value='null', negate=False))
    """
    if not isinstance(obj, Mapping):
        raise ValidationError("filters must be an object {column: \"op.value\"}")
    out: list[Filter | Group] = []
    budget = Conditions()
    for column, expr in obj.items():
        if column in GROUP_PARAMS:
            if not isinstance(expr, str):
                raise ValidationError(f"{column} takes the REST group text, e.g. \"(A.eq.1,B.gt.2)\"")
            out.append(parse_group(column, expr, budget=budget))
            continue
        budget.take()
        if isinstance(expr, str):
            out.append(parse_filter(str(column), expr))
        else:
            out.append(_filter_from_json(str(column), None, expr))
    return tuple(out)


def parse_filters(value: Any) -> tuple[Filter | Group, ...]:
    """Filters in either form every door takes: an object ``{column: "op.value"}``
    (:func:`parse_filter_object`) or a list of ``{column, op, value}``
    (:func:`parse_filter_list`), ``or``/``and`` groups included; ``None`` is no filter.

    Raises:
        ValidationError, UnknownOperator, InvalidValue: as those parsers do.
    """
    if value is None:
        return ()
    if isinstance(value, list):
        return parse_filter_list(value)
    if isinstance(value, Mapping):
        return parse_filter_object(value)
    raise ValidationError("filters must be an object {column: \"op.value\"} or a list of {column, op, value} objects")


_FILTER_ITEM_KEYS = frozenset({"column", "op", "value", "negate"})


def parse_filter_list(items: Sequence[Mapping[str, Any]]) -> tuple[Filter | Group, ...]:
    """Parse a list of ``{column, op, value}`` objects (run-actions, write-by-filter).

    ``op`` may carry ``not.`` (``"not.eq"``) or the item may set ``"negate": true``;
    ``value`` may be text, a number, a boolean, ``null`` or a list (for ``in``/``cs``), and
    must be there (``null`` is ``is.null``); other keys are refused. An item
    ``{"or": "(...)"}`` (or ``and``, ``not.or``, ``not.and``) is a group.

    >>> parse_filter_list([{"column": "Score", "op": "not.lt", "value": 2}])
    (Filter(column='Score', op=<Op.LT: 'lt'>, value='2', negate=True),)
    """
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise ValidationError("filters must be a list of {column, op, value} objects")
    if len(items) > MAX_CONDITIONS:  # each item is at least one condition
        raise too_many_conditions()
    out: list[Filter | Group] = []
    budget = Conditions()
    for item in items:
        if isinstance(item, Mapping) and len(item) == 1 and next(iter(item)) in GROUP_PARAMS:
            key, text = next(iter(item.items()))
            if not isinstance(text, str):
                raise ValidationError(f"{key} takes the REST group text, e.g. \"(A.eq.1,B.gt.2)\"")
            out.append(parse_group(key, text, budget=budget))
            continue
        budget.take()
        if not isinstance(item, Mapping) or not isinstance(item.get("column"), str):
            raise ValidationError("each filter needs a string 'column'")
        unknown = set(item) - _FILTER_ITEM_KEYS
        if unknown:
            raise ValidationError(f"unknown filter key(s) {', '.join(sorted(map(str, unknown)))}: a filter item is"
                                  " {column, op, value, negate}")
        if "value" not in item:  # a forgotten value never silently means "is null"
            raise ValidationError(f"the filter on {item['column']!r} needs a 'value' (null for is.null)")
        if "negate" in item and not isinstance(item["negate"], bool):
            raise ValidationError("a filter's 'negate' is true or false")
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


def parse_int(name: str, value: Any) -> int:
    """``limit``/``offset`` from any door: digits, or (JSON doors) an integral number.

    Every other value — a sign, a fraction, text, a boolean — is the one message
    ``<name> must be a non-negative integer``.
    """
    if isinstance(value, bool):
        raise ValidationError(f"{name} must be a non-negative integer")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        if value < 0:
            raise ValidationError(f"{name} must be a non-negative integer")
        number = value
    elif isinstance(value, str):
        t = value.strip()
        if not t.isascii() or not t.isdigit():
            raise ValidationError(f"{name} must be a non-negative integer")
        # bound the length first: int() refuses very long digit strings, and anything this
        # long is out of range anyway (limit → LIMIT_TOO_LARGE in the planner)
        number = int(t) if len(t) <= 19 else MAX_OFFSET + 1
    else:
        raise ValidationError(f"{name} must be a non-negative integer")
    if name == "offset" and number > MAX_OFFSET:
        raise ValidationError("offset is too large")
    return min(number, MAX_OFFSET + 1)


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
