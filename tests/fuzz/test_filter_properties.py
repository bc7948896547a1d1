"""Property tests of the filter/query parser (storage/query): arbitrary text never fails
with anything but a ServiceError, through parse, plan and SQL build; and filters,
orders and selects printed in the REST grammar (with proper quoting) parse back equal.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.errors import ServiceError
from storage.query import (
    RESERVED_PARAMS,
    Filter,
    Op,
    OrderTerm,
    SelectItem,
    build_count,
    build_list,
    parse_filter,
    parse_filter_list,
    parse_filter_object,
    parse_params,
    plan_filters,
    plan_query,
)
from storage.query.parse import (
    GROUP_PARAMS,
    Group,
    parse_arguments,
    parse_group,
    parse_order,
    parse_select,
    parse_sort,
)
from storage.schema import ColumnMeta, ColumnType, Option, TableMeta

C = ColumnType
PROFILE = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow])

PEOPLE = TableMeta(id=2, workspace_id=7, name="People", icon=None,
                   columns=(ColumnMeta(20, 2, "Name", C.TEXT), ColumnMeta(21, 2, "Email", C.TEXT, position=1)))
MAIN = TableMeta(id=1, workspace_id=7, name="Main", icon=None, columns=(
    ColumnMeta(1, 1, "Title", C.TEXT),
    ColumnMeta(2, 1, "Score", C.NUMBER, position=1),
    ColumnMeta(3, 1, "Due", C.DATE, position=2),
    ColumnMeta(4, 1, "Done", C.CHECKBOX, position=3),
    ColumnMeta(5, 1, "Status", C.SINGLE_SELECT, position=4,
               options=(Option("o1", "To do", "red"), Option("o2", "Done", "green"))),
    ColumnMeta(6, 1, "Tags", C.MULTI_SELECT, position=5, options=(Option("t1", "Red", "red"),)),
    ColumnMeta(7, 1, "Owner", C.RELATION, position=6, relation_table_id=2),
    ColumnMeta(8, 1, "Files", C.FILE, position=7),
    ColumnMeta(9, 1, "Calc", C.FORMULA, position=8, formula="1"),
    ColumnMeta(10, 1, "Odd, name.(x)", C.TEXT, position=9),
))
TABLES = {1: MAIN, 2: PEOPLE}
COLUMNS = [c.name for c in MAIN.columns] + ["id", "created_at", "updated_at", "Owner.Name", "Calc.a.b"]

# grammar-shaped noise: operators, quotes, brackets and separators mixed with free text
PIECES = st.sampled_from([op.value for op in Op] + [
    "not.", ".", ",", "(", ")", "{", "}", '"', "\\", "[", "]", "null", "true", "-", "asc", "desc",
    "nullsfirst", "nullslast", "*", "1e309", "-0", "2024-02-30", "%", "_", " ", "\x00", "é",
])
NOISE = st.one_of(st.text(max_size=30), st.lists(st.one_of(PIECES, st.text(max_size=4)), max_size=12).map("".join))
KEYS = st.one_of(st.sampled_from(sorted(RESERVED_PARAMS | GROUP_PARAMS) + COLUMNS), NOISE,
                 st.tuples(st.sampled_from(COLUMNS), NOISE).map(lambda kv: f"filter[{kv[0]}][{kv[1]}]"))
JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=10,
)


def _plan(params: list[tuple[str, str]]) -> None:
    """Parse, plan and build SQL for ``params`` against MAIN (what a REST list does)."""
    plan = plan_query(parse_params(params), MAIN, can_read=lambda _id: True, get_table=TABLES.get)
    build_list(plan)
    build_count(plan)


@PROFILE
@given(st.lists(st.tuples(KEYS, NOISE), max_size=6))
def test_any_query_string_parses_plans_and_builds_or_raises_a_service_error(params: list[tuple[str, str]]) -> None:
    try:
        _plan(params)
    except ServiceError:
        pass


@PROFILE
@given(st.sampled_from(COLUMNS), st.tuples(st.sampled_from([op.value for op in Op]), NOISE).map(".".join))
def test_every_operator_with_any_value_plans_or_raises_a_service_error(column: str, expr: str) -> None:
    for e in (expr, "not." + expr):
        try:
            _plan([(column, e)])
        except ServiceError:
            pass


@PROFILE
@given(st.text(max_size=20), NOISE)
def test_parse_filter_never_crashes(column: str, expr: str) -> None:
    try:
        parse_filter(column, expr)
    except ServiceError:
        pass


@PROFILE
@given(NOISE)
def test_order_sort_and_select_never_crash(text: str) -> None:
    for parse in (parse_order, parse_sort, parse_select):
        try:
            parse(text)
        except ServiceError:
            pass


@PROFILE
@given(JSONISH)
def test_json_filter_forms_never_crash(value: Any) -> None:
    for candidate in (value, {"Score": value}, {"Tags": value}, [value],
                      [{"column": "Score", "op": "in", "value": value}], [{"column": "Due", "value": value}]):
        for parse in (parse_filter_object, parse_filter_list):
            try:
                filters = parse(candidate)
                plan_filters(filters, MAIN)
            except ServiceError:
                pass


# ---------------------------------------------------------------- printing and round trips

def quote(text: str) -> str:
    r"""A double-quoted item: backslash escapes ``"`` and ``\``.

    >>> quote('a"b')
    '"a\\"b"'
    """
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_value(f: Filter) -> str:
    """The ``[not.]<op>.<value>`` text of a filter (lists quoted item by item)."""
    head = ("not." if f.negate else "") + f.op.value + "."
    if f.op is Op.IN:
        return head + "(" + ",".join(quote(v) for v in f.value) + ")"
    if f.op is Op.CS:
        return head + "{" + ",".join(quote(v) for v in f.value) + "}"
    assert isinstance(f.value, str)
    return head + f.value


def render_order(terms: tuple[OrderTerm, ...]) -> str:
    parts = []
    for t in terms:
        part = quote(t.column) + (".desc" if t.desc else ".asc")
        if t.nulls:
            part += ".nulls" + t.nulls
        parts.append(part)
    return ",".join(parts)


def render_select(items: tuple[SelectItem, ...]) -> str:
    return ",".join(quote(i.name) + ("" if i.fields is None else "(" + ",".join(map(quote, i.fields)) + ")")
                    for i in items)


column_names = st.text(min_size=1, max_size=12).filter(
    lambda s: s not in RESERVED_PARAMS and s not in GROUP_PARAMS and not s.startswith("filter["))
scalar_ops = st.sampled_from([Op.EQ, Op.NEQ, Op.GT, Op.GTE, Op.LT, Op.LTE, Op.LIKE, Op.ILIKE])
items = st.lists(st.text(max_size=8), max_size=5).map(tuple)
filters = st.one_of(
    st.builds(Filter, column_names, scalar_ops, st.text(max_size=15), st.booleans()),
    st.builds(Filter, column_names, st.just(Op.IS), st.sampled_from(["null", "true", "false"]), st.booleans()),
    st.builds(Filter, column_names, st.sampled_from([Op.IN, Op.CS]), items, st.booleans()),
)


@PROFILE
@given(st.lists(filters, min_size=1, max_size=4))
def test_filters_printed_in_the_rest_grammar_parse_back_equal(fs: list[Filter]) -> None:
    query = parse_params([(f.column, render_value(f)) for f in fs])
    assert query.filters == tuple(fs)


@PROFILE
@given(filters)
def test_the_object_and_legacy_forms_parse_back_equal(f: Filter) -> None:
    assert parse_filter_object({f.column: render_value(f)}) == (f,)
    op = ("not." if f.negate else "") + f.op.value
    legacy = render_value(Filter(f.column, f.op, f.value))[len(f.op.value) + 1:]
    if "]" not in f.column and "[" not in f.column:  # the legacy key cannot hold every name
        assert parse_params([(f"filter[{f.column}][{op}]", legacy)]).filters == (f,)


@PROFILE
@given(filters)
def test_the_list_form_with_json_lists_parses_back_equal(f: Filter) -> None:
    value: Any = list(f.value) if isinstance(f.value, tuple) else f.value
    if f.op is Op.IS:
        value = {"null": None, "true": True, "false": False}[f.value]  # JSON values, not texts
    parsed = parse_filter_list([{"column": f.column, "op": f.op.value, "value": value, "negate": f.negate}])
    assert parsed == (f,)


order_terms = st.builds(OrderTerm, st.text(min_size=1, max_size=12), st.booleans(),
                        st.sampled_from([None, "first", "last"]))


@PROFILE
@given(st.lists(order_terms, min_size=1, max_size=4).map(tuple))
def test_order_printed_parses_back_equal(terms: tuple[OrderTerm, ...]) -> None:
    assert parse_params([("order", render_order(terms))]).order == terms
    plain = tuple(OrderTerm(t.column, t.desc) for t in terms)
    assert parse_sort(",".join(("-" if t.desc else "") + quote(t.column) for t in plain)) == plain


select_items = st.one_of(
    st.builds(SelectItem, st.text(min_size=1, max_size=10)),
    st.builds(SelectItem, st.text(min_size=1, max_size=10).filter(str.strip),
              st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=3).map(tuple)),
)


@PROFILE
@given(st.lists(select_items, min_size=1, max_size=4).map(tuple))
def test_select_printed_parses_back_equal(selected: tuple[SelectItem, ...]) -> None:
    assert parse_params([("select", render_select(selected))]).select == selected


# ---------------------------------------------------------------- boolean groups and the JSON doors

def render_group(g: Group) -> str:
    """A group's ``(...)`` text: names and scalar values double-quoted."""
    parts = []
    for item in g.items:
        if isinstance(item, Group):
            parts.append(("not." if item.negate else "") + item.kind + render_group(item))
            continue
        head = quote(item.column) + "." + ("not." if item.negate else "") + item.op.value + "."
        if item.op is Op.IN:
            parts.append(head + "(" + ",".join(quote(v) for v in item.value) + ")")
        elif item.op is Op.CS:
            parts.append(head + "{" + ",".join(quote(v) for v in item.value) + "}")
        elif item.op is Op.IS:
            parts.append(head + str(item.value))
        else:
            parts.append(head + quote(str(item.value)))
    return "(" + ",".join(parts) + ")"


groups = st.recursive(
    st.builds(Group, st.sampled_from(["and", "or"]), st.lists(filters, min_size=1, max_size=3).map(tuple),
              st.booleans()),
    lambda inner: st.builds(Group, st.sampled_from(["and", "or"]),
                            st.lists(st.one_of(filters, inner), min_size=1, max_size=3).map(tuple), st.booleans()),
    max_leaves=6,
)


@PROFILE
@given(groups)
def test_groups_printed_in_the_rest_grammar_parse_back_equal(g: Group) -> None:
    key = ("not." if g.negate else "") + g.kind
    assert parse_params([(key, render_group(g))]).filters == (g,)
    assert parse_filter_object({key: render_group(g)}) == (g,)
    assert parse_filter_list([{key: render_group(g)}]) == (g,)


@PROFILE
@given(NOISE, st.sampled_from(sorted(GROUP_PARAMS)))
def test_group_noise_parses_plans_or_raises_a_service_error(text: str, key: str) -> None:
    try:
        plan_filters(parse_group(key, text), MAIN) if False else plan_filters((parse_group(key, text),), MAIN)
    except ServiceError:
        pass


@PROFILE
@given(st.dictionaries(st.sampled_from(["filters", "order", "select", "expand", "limit", "offset", "count", "view"]),
                       JSONISH, max_size=5))
def test_json_door_arguments_parse_or_raise_a_service_error(args: dict[str, Any]) -> None:
    try:
        query = parse_arguments(args)
        plan_query(query, MAIN, can_read=lambda _id: True, get_table=TABLES.get)
    except ServiceError:
        pass


@PROFILE
@given(st.lists(filters, max_size=3, unique_by=lambda f: f.column),
       st.one_of(st.none(), st.integers(min_value=0, max_value=2000), st.floats(min_value=0, max_value=2000)),
       st.one_of(st.none(), st.integers(min_value=0, max_value=10**6)),
       st.one_of(st.none(), st.text(max_size=10)))
def test_the_json_door_reads_the_same_query_as_the_query_string(fs: list[Filter], limit: Any, offset: Any,
                                                                select: str | None) -> None:
    """The same query through REST pairs and MCP arguments: equal Query, or the same error."""
    pairs = [(f.column, render_value(f)) for f in fs]
    args: dict[str, Any] = {"filters": {f.column: render_value(f) for f in fs}}
    if limit is not None:
        pairs.append(("limit", repr(limit) if isinstance(limit, float) else str(limit)))
        args["limit"] = limit
    if offset is not None:
        pairs.append(("offset", str(offset)))
        args["offset"] = offset
    if select is not None:
        pairs.append(("select", select))
        args["select"] = select

    def run(parse: Any, value: Any) -> Any:
        try:
            return parse(value)
        except ServiceError as exc:
            return (exc.code, exc.message)

    rest, mcp = run(parse_params, pairs), run(parse_arguments, args)
    if isinstance(limit, float) and limit.is_integer():
        # JSON has one number type: 10.0 is ten there, while the query string "10.0" is text
        assert isinstance(rest, tuple) and rest[0] == "VALIDATION_ERROR"
        return
    assert rest == mcp
