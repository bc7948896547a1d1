"""The query planner: names resolved and values typed against hand-built table metadata."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.errors import ServiceError
from storage.query import (
    Filter,
    JsonOperand,
    Kind,
    Op,
    Query,
    SelectItem,
    parse_filter_object,
    parse_params,
    plan_filters,
    plan_query,
    resolve_target,
)
from storage.query.plan import QueryPlan
from storage.query.targets import like_matches, like_pattern, like_pieces
from storage.schema import ColumnMeta, ColumnType, Option, TableMeta

C = ColumnType
STATUS = (Option("o1", "To do", "red"), Option("o2", "Done", "green"), Option("o3", "o1", "blue"))
TAGS = (Option("t1", "Red", "red"), Option("t2", "Blue", "blue"))

PEOPLE = TableMeta(
    id=2,
    workspace_id=7,
    name="People",
    icon=None,
    columns=(
        ColumnMeta(21, 2, "Email", C.TEXT, position=1),
        ColumnMeta(20, 2, "Name", C.TEXT, position=0),
    ),
)
SECRET = TableMeta(id=3, workspace_id=7, name="Secret", icon=None, columns=(ColumnMeta(30, 3, "X", C.TEXT),))
MAIN = TableMeta(
    id=1,
    workspace_id=7,
    name="Main",
    icon=None,
    columns=(
        ColumnMeta(1, 1, "Title", C.TEXT, position=0),
        ColumnMeta(2, 1, "Score", C.NUMBER, position=1),
        ColumnMeta(3, 1, "Due", C.DATE, position=2),
        ColumnMeta(4, 1, "Done", C.CHECKBOX, position=3),
        ColumnMeta(5, 1, "Status", C.SINGLE_SELECT, position=4, options=STATUS),
        ColumnMeta(6, 1, "Tags", C.MULTI_SELECT, position=5, options=TAGS),
        ColumnMeta(7, 1, "Owner", C.RELATION, position=6, relation_table_id=2),
        ColumnMeta(8, 1, "Files", C.FILE, position=7),
        ColumnMeta(9, 1, "Calc", C.FORMULA, position=8, formula="1"),
        ColumnMeta(10, 1, "Fetched", C.HTTP_REQUEST, position=9),
        ColumnMeta(11, 1, "Agent", C.AI_AGENT, position=10),
        ColumnMeta(12, 1, "Vault", C.RELATION, position=11, relation_table_id=3),
        ColumnMeta(13, 1, "Gone", C.RELATION, position=12, relation_table_id=99),
        ColumnMeta(15, 1, "Last", C.TEXT, position=14),
        ColumnMeta(14, 1, "Odd. \"name\" ü", C.TEXT, position=13),
    ),
)
TABLES = {1: MAIN, 2: PEOPLE, 3: SECRET}


def plan(params: list[tuple[str, str]]) -> QueryPlan:
    return plan_query(parse_params(params), MAIN, can_read=lambda tid: tid != 3, get_table=TABLES.get)


def one(column: str, expr: str) -> Any:
    (planned,) = plan_filters(parse_params([(column, expr)]).filters, MAIN)
    return planned


@pytest.mark.parametrize(
    ("name", "kind", "physical"),
    [
        ("Title", Kind.TEXT, "c_1"),
        ("Score", Kind.NUMBER, "c_2"),
        ("Due", Kind.DATE, "c_3"),
        ("Done", Kind.BOOL, "c_4"),
        ("Status", Kind.SELECT, "c_5"),
        ("Tags", Kind.MULTI, "c_6"),
        ("Owner", Kind.INT, "c_7"),
        ("Files", Kind.FILE, "c_8"),
        ("Calc", Kind.JSON, "c_9"),
        ("Fetched", Kind.JSON, "c_10"),
        ("Agent", Kind.JSON, "c_11"),
        ("id", Kind.INT, "id"),
        ("created_at", Kind.DATE, "created_at"),
        ("updated_at", Kind.DATE, "updated_at"),
        ("Odd. \"name\" ü", Kind.TEXT, "c_14"),
    ],
)
def test_names_resolve_to_physical_columns(name: str, kind: Kind, physical: str) -> None:
    target = resolve_target(MAIN, name)
    assert (target.kind, target.physical) == (kind, physical)


@pytest.mark.parametrize("name", ["title", "c_1", "1", "Nope", "", "Title "])
def test_unknown_names_are_unknown_columns(name: str) -> None:
    with pytest.raises(ServiceError) as exc:
        plan_filters([Filter(name, Op.EQ, "x")], MAIN)
    assert exc.value.code == "UNKNOWN_COLUMN"


@pytest.mark.parametrize(
    ("column", "expr"),
    [
        ("Title", "cs.{a}"),
        ("Score", "like.1*"),
        ("Score", "cs.{1}"),
        ("Due", "ilike.2026*"),
        ("Done", "gt.true"),
        ("Done", "like.t*"),
        ("Status", "gt.o1"),
        ("Status", "cs.{o1}"),
        ("Tags", "like.R*"),
        ("Tags", "lt.t1"),
        ("Owner", "like.1*"),
        ("Files", "eq.x"),
        ("Files", "not.in.(x)"),
        ("Files", "like.*"),
        ("id", "like.1*"),
        ("created_at", "cs.{x}"),
    ],
)
def test_operators_that_do_not_apply_are_unknown(column: str, expr: str) -> None:
    with pytest.raises(ServiceError) as exc:
        one(column, expr)
    assert exc.value.code == "UNKNOWN_OPERATOR"


@pytest.mark.parametrize(
    ("column", "expr", "code"),
    [
        ("Score", "eq.abc", "INVALID_VALUE"),
        ("Score", "eq.", "INVALID_VALUE"),
        ("Score", "eq.inf", "INVALID_VALUE"),
        ("Score", "eq.nan", "INVALID_VALUE"),
        ("Score", "eq.1e400", "INVALID_VALUE"),
        ("Score", "eq.1_000", "INVALID_VALUE"),
        ("Score", "in.(1,x)", "INVALID_VALUE"),
        ("Due", "eq.tomorrow", "INVALID_VALUE"),
        ("Due", "gt.2026-13-01", "INVALID_VALUE"),
        ("created_at", "gt.yesterday", "INVALID_VALUE"),
        ("Done", "eq.yes", "INVALID_VALUE"),
        ("Owner", "eq.1.5", "INVALID_VALUE"),
        ("Owner", "eq.99999999999999999999", "INVALID_VALUE"),
        ("id", "eq.abc", "INVALID_VALUE"),
        ("id", "in.(1,9223372036854775808)", "INVALID_VALUE"),
        ("Title", "is.true", "INVALID_VALUE"),
        ("Score", "is.false", "INVALID_VALUE"),
        ("Files", "is.true", "INVALID_VALUE"),
        ("Title", "eq.a\x00b", "INVALID_VALUE"),
        ("Title", "in.(a,\x00)", "INVALID_VALUE"),
        ("Status", "eq.Nope", "INVALID_OPTION"),
        ("Status", "in.(o1,Nope)", "INVALID_OPTION"),
        ("Tags", "cs.{Red,Nope}", "INVALID_OPTION"),
        ("Tags", "eq.t9", "INVALID_OPTION"),
    ],
)
def test_values_that_do_not_fit_the_column(column: str, expr: str, code: str) -> None:
    with pytest.raises(ServiceError) as exc:
        one(column, expr)
    assert exc.value.code == code


@pytest.mark.parametrize(
    ("column", "expr", "op", "value", "negate"),
    [
        ("Title", "eq.x", Op.EQ, "x", False),
        ("Title", "neq.x", Op.EQ, "x", True),
        ("Title", "not.neq.x", Op.EQ, "x", False),
        ("Title", "like.a_b*%\\", Op.LIKE, "a\\_b%%\\\\", False),
        ("Score", "gte. 2.5 ", Op.GTE, 2.5, False),
        ("Score", "eq.-1e3", Op.EQ, -1000.0, False),
        ("Score", "in.(1,1,2)", Op.IN, (1.0, 2.0), False),
        ("Due", "eq.2026-01-02", Op.EQ, datetime(2026, 1, 2, tzinfo=timezone.utc), False),
        ("Due", "lt.2026-01-02T03:04:05", Op.LT, datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc), False),
        ("Done", "eq.1", Op.EQ, True, False),
        ("Done", "eq.FALSE", Op.EQ, False, False),
        ("Done", "is.false", Op.IS, "false", False),
        ("Status", "eq.To do", Op.EQ, "o1", False),
        ("Status", "eq.o1", Op.EQ, "o1", False),  # an id wins over an equal label
        ("Status", "eq.Done", Op.EQ, "o2", False),
        ("Status", "in.(Done,o3)", Op.IN, ("o2", "o3"), False),
        ("Status", "like.*o*", Op.IN, ("o1", "o2", "o3"), False),
        ("Status", "like.D*", Op.IN, ("o2",), False),
        ("Status", "ilike.d*", Op.IN, ("o2",), False),
        ("Status", "not.like.x*", Op.IN, (), True),
        # a pattern matches labels; an id only whole ("o2"), never by a wildcard ("o*"
        # is the label "o1" of o3, not the ids o1 and o2 it would spell)
        ("Status", "like.o*", Op.IN, ("o3",), False),
        ("Status", "ilike.O2", Op.IN, ("o2",), False),
        ("Status", "like.*2*", Op.IN, (), False),
        ("Tags", "eq.Red", Op.EQ, ("t1",), False),
        ("Tags", "neq.Red", Op.EQ, ("t1",), True),
        ("Tags", "cs.{Red,t2}", Op.CS, ("t1", "t2"), False),
        ("Owner", "eq.5", Op.EQ, 5, False),
        ("id", "in.(3,+4)", Op.IN, (3, 4), False),
        ("Files", "is.null", Op.IS, "null", False),
        ("Calc", "eq.5", Op.EQ, JsonOperand("5", Decimal("5.0")), False),
        ("Calc", "gt.abc", Op.GT, JsonOperand("abc", None), False),
        ("Calc", "in.(1,x)", Op.IN, (JsonOperand("1", Decimal("1.0")), JsonOperand("x", None)), False),
        ("Calc", "is.true", Op.IS, "true", False),
        ("Agent", "ilike.*ok*", Op.ILIKE, "%ok%", False),
    ],
)
def test_values_are_typed_by_column(column: str, expr: str, op: Op, value: Any, negate: bool) -> None:
    planned = one(column, expr)
    assert (planned.op, planned.value, planned.negate) == (op, value, negate)


def test_in_allows_200_values_and_refuses_201() -> None:
    ok = "in.(" + ",".join(str(i) for i in range(200)) + ")"
    assert len(one("Score", ok).value) == 200
    for expr in ("in.(" + ",".join(str(i) for i in range(201)) + ")", "cs.{" + ",".join(["Red"] * 201) + "}"):
        column = "Score" if expr.startswith("in") else "Tags"
        with pytest.raises(ServiceError) as exc:
            one(column, expr)
        assert exc.value.code == "TOO_MANY_VALUES"


@pytest.mark.parametrize(
    ("raw", "pattern"),
    [("abc", "abc"), ("a*", "a%"), ("%a%", "%a%"), ("a_b", "a\\_b"), ("a\\b", "a\\\\b"), ("**", "%%"),
     ("a\\*", "a*"), ("\\%", "\\%"), ("a\\\\*", "a\\\\%"), ("a\\", "a\\\\"), ("\\_", "\\\\\\_")],
)
def test_like_patterns_keep_underscore_and_backslash_literal(raw: str, pattern: str) -> None:
    """``_`` and a backslash are literal; a backslash before ``*``, ``%`` or a backslash
    makes that one literal."""
    assert like_pattern(raw) == pattern


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="ab*%\\_", max_size=8), st.text(alphabet="ab*%\\_", max_size=10))
def test_label_matching_is_what_like_does(raw: str, text: str) -> None:
    """:func:`like_matches` (single-select labels, matched in Python) agrees with a
    regex translation of the same LIKE pattern (:func:`like_pattern`)."""
    rx, i, pattern = [], 0, like_pattern(raw)
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            rx.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        rx.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    assert like_matches(like_pieces(raw), text) is (re.fullmatch("".join(rx), text, re.DOTALL) is not None)


def test_filter_objects_plan_like_query_strings() -> None:
    planned = plan_filters(parse_filter_object({"Status": "eq.Done", "Score": "not.lt.3"}), MAIN)
    assert [(p.target.name, p.op, p.value, p.negate) for p in planned] == [
        ("Status", Op.EQ, "o2", False),
        ("Score", Op.LT, 3.0, True),
    ]


@pytest.mark.parametrize(
    ("limit", "offset", "code"),
    [(1001, 0, "LIMIT_TOO_LARGE"), (10**30, 0, "LIMIT_TOO_LARGE"), (-1, 0, "VALIDATION_ERROR"), (10, -1, "VALIDATION_ERROR")],
)
def test_paging_bounds(limit: int, offset: int, code: str) -> None:
    with pytest.raises(ServiceError) as exc:
        plan_query(Query(limit=limit, offset=offset), MAIN, can_read=lambda _: True, get_table=TABLES.get)
    assert exc.value.code == code


def test_paging_limits_that_are_allowed() -> None:
    assert (plan([]).limit, plan([]).offset) == (100, 0)
    assert plan([("limit", "0")]).limit == 0
    assert plan([("limit", "1000"), ("offset", "5")]).limit == 1000


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ([], [("id", False, None)]),
        ([("order", "Score.desc")], [("c_2", True, None), ("id", True, None)]),
        ([("order", "id.desc,Score")], [("id", True, None), ("c_2", False, None)]),
        ([("sort", "-created_at,updated_at")], [("created_at", True, None), ("updated_at", False, None), ("id", True, None)]),
        ([("order", "Due.asc.nullslast")], [("c_3", False, "last"), ("id", False, None)]),
    ],
)
def test_order_always_ends_with_id(params: list[tuple[str, str]], expected: list[tuple[Any, ...]]) -> None:
    assert [(o.target.physical, o.desc, o.nulls) for o in plan(params).order] == expected


def test_single_select_orders_by_option_position() -> None:
    (term, _) = plan([("order", "Status")]).order
    assert term.option_ids == ("o1", "o2", "o3")


@pytest.mark.parametrize("params", [[("order", "Nope")], [("sort", "-Nope")], [("select", "Nope")], [("expand", "Nope")], [("select", "Owner(Nope)")]])
def test_unknown_names_outside_filters(params: list[tuple[str, str]]) -> None:
    with pytest.raises(ServiceError) as exc:
        plan(params)
    assert exc.value.code == "UNKNOWN_COLUMN"


def test_all_fields_by_default_in_column_position_order() -> None:
    p = plan([])
    names = [c.name for c in p.output]
    assert names[-2:] == ["Odd. \"name\" ü", "Last"]
    assert p.fields == p.output and p.embeds == ()


@pytest.mark.parametrize(
    ("select", "fields"),
    [
        ("Score,Title", ["Title", "Score"]),
        ("id,created_at,Score", ["Score"]),
        ("*", [c.name for c in sorted(MAIN.columns, key=lambda c: c.position)]),
        ("Score,Score", ["Score"]),
    ],
)
def test_select_chooses_fields(select: str, fields: list[str]) -> None:
    assert [c.name for c in plan([("select", select)]).output] == fields


def test_select_embeds_chosen_related_fields() -> None:
    p = plan([("select", "Title,Owner(Email,id,Name)")])
    assert [c.name for c in p.fields] == ["Title"]
    assert [c.name for c in p.output] == ["Title", "Owner"]
    (embed,) = p.embeds
    assert embed.table is PEOPLE and embed.column.name == "Owner"
    assert [c.name for c in embed.fields] == ["Name", "Email"]


def test_expand_embeds_every_related_field() -> None:
    p = plan([("select", "Title"), ("expand", "Owner")])
    assert [c.name for c in p.output] == ["Title", "Owner"]
    assert [c.name for c in p.embeds[0].fields] == ["Name", "Email"]
    assert "Owner" not in [c.name for c in p.fields]


def test_embedding_a_table_without_read_permission_is_forbidden() -> None:
    for params in ([("expand", "Vault")], [("select", "Vault(X)")]):
        with pytest.raises(ServiceError) as exc:
            plan(params)
        assert (exc.value.code, exc.value.status) == ("FORBIDDEN", 403)
    # reading the relation id itself needs no permission on the related table
    assert [c.name for c in plan([("select", "Vault")]).fields] == ["Vault"]


@pytest.mark.parametrize("params", [[("expand", "Title")], [("select", "Score(A)")], [("expand", "Gone")]])
def test_embedding_needs_an_existing_relation(params: list[tuple[str, str]]) -> None:
    with pytest.raises(ServiceError) as exc:
        plan(params)
    assert exc.value.code == "VALIDATION_ERROR"


def test_system_columns_win_over_user_columns_of_the_same_name() -> None:
    table = TableMeta(1, 7, "T", None, (ColumnMeta(1, 1, "id", C.TEXT),))
    assert resolve_target(table, "id").physical == "id"


def test_query_from_select_items_directly() -> None:
    q = Query(select=(SelectItem("Owner", ("*",)),))
    p = plan_query(q, MAIN, can_read=lambda _: True, get_table=TABLES.get)
    assert [c.name for c in p.embeds[0].fields] == ["Name", "Email"]
