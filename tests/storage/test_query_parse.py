"""The query-string parser: pure, knows nothing of tables."""

from __future__ import annotations

from typing import Any

import pytest

from storage.errors import ServiceError
from storage.query import (
    DEFAULT_LIMIT,
    Filter,
    Op,
    OrderTerm,
    Query,
    SelectItem,
    parse_filter_list,
    parse_filter_object,
    parse_params,
)


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("Name", "eq.Ann", Filter("Name", Op.EQ, "Ann")),
        ("Name", "eq.", Filter("Name", Op.EQ, "")),
        ("Name", "eq.a.b.c", Filter("Name", Op.EQ, "a.b.c")),
        ("Name", "neq.x", Filter("Name", Op.NEQ, "x")),
        ("Score", "gt.1", Filter("Score", Op.GT, "1")),
        ("Score", "gte.1", Filter("Score", Op.GTE, "1")),
        ("Score", "lt.1", Filter("Score", Op.LT, "1")),
        ("Score", "lte.1", Filter("Score", Op.LTE, "1")),
        ("Name", "like.A*", Filter("Name", Op.LIKE, "A*")),
        ("Name", "ilike.%a%", Filter("Name", Op.ILIKE, "%a%")),
        ("Tag", "in.(a,b)", Filter("Tag", Op.IN, ("a", "b"))),
        ("Tag", "in.()", Filter("Tag", Op.IN, ())),
        ("Tag", "in.( a , b )", Filter("Tag", Op.IN, ("a", "b"))),
        ("Tag", 'in.("a,b",c)', Filter("Tag", Op.IN, ("a,b", "c"))),
        ("Tag", 'in.("say \\"hi\\"","x)")', Filter("Tag", Op.IN, ('say "hi"', "x)"))),
        ("Tag", "in.(a,,b)", Filter("Tag", Op.IN, ("a", "", "b"))),
        ("Tags", "cs.{a,b}", Filter("Tags", Op.CS, ("a", "b"))),
        ("Tags", "cs.a", Filter("Tags", Op.CS, ("a",))),
        ("Done", "is.null", Filter("Done", Op.IS, "null")),
        ("Done", "is.TRUE", Filter("Done", Op.IS, "true")),
        ("Done", "is.false", Filter("Done", Op.IS, "false")),
        ("Name", "not.eq.x", Filter("Name", Op.EQ, "x", negate=True)),
        ("Tag", "not.in.(a)", Filter("Tag", Op.IN, ("a",), negate=True)),
        ("Done", "not.is.null", Filter("Done", Op.IS, "null", negate=True)),
        ("My col. with \"quotes\" ünï", "eq.v", Filter("My col. with \"quotes\" ünï", Op.EQ, "v")),
        ("filter", "eq.1", Filter("filter", Op.EQ, "1")),
    ],
)
def test_filter_parameter_forms(key: str, value: str, expected: Filter) -> None:
    assert parse_params([(key, value)]).filters == (expected,)


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("filter[Name][eq]", "Ann", Filter("Name", Op.EQ, "Ann")),
        ("filter[Name]", "Ann", Filter("Name", Op.EQ, "Ann")),
        ("filter[Name][not.eq]", "Ann", Filter("Name", Op.EQ, "Ann", negate=True)),
        ("filter[Name][not_like]", "A*", Filter("Name", Op.LIKE, "A*", negate=True)),
        ("filter[Tag][in]", "a,b", Filter("Tag", Op.IN, ("a", "b"))),
        ("filter[Tag][in]", "(a,b)", Filter("Tag", Op.IN, ("a", "b"))),
        ("filter[Tags][cs]", "{a,b}", Filter("Tags", Op.CS, ("a", "b"))),
        ("filter[order][eq]", "x", Filter("order", Op.EQ, "x")),
        ("filter[a][b][gt]", "1", Filter("a][b", Op.GT, "1")),
        ("filter[Done][is]", "null", Filter("Done", Op.IS, "null")),
    ],
)
def test_legacy_filter_forms(key: str, value: str, expected: Filter) -> None:
    assert parse_params([(key, value)]).filters == (expected,)


def test_repeated_and_mixed_filters_are_all_kept_in_order() -> None:
    q = parse_params([("Score", "gt.1"), ("filter[Score][lt]", "5"), ("Score", "not.eq.3")])
    assert q.filters == (
        Filter("Score", Op.GT, "1"),
        Filter("Score", Op.LT, "5"),
        Filter("Score", Op.EQ, "3", negate=True),
    )


@pytest.mark.parametrize(
    ("key", "value", "code"),
    [
        ("Name", "foo.x", "UNKNOWN_OPERATOR"),
        ("Name", "x", "UNKNOWN_OPERATOR"),
        ("Name", "not.not.eq.x", "UNKNOWN_OPERATOR"),
        ("Name", "EQ.x", "UNKNOWN_OPERATOR"),
        ("filter[Name][contains]", "x", "UNKNOWN_OPERATOR"),
        ("Name", "eq", "INVALID_VALUE"),
        ("Done", "is.maybe", "INVALID_VALUE"),
        ("Tag", "in.a,b", "INVALID_VALUE"),
        ("Tag", 'in.("a,b)', "INVALID_VALUE"),
        ("Tag", 'in.("a"b)', "INVALID_VALUE"),
        ("limit", "-1", "VALIDATION_ERROR"),
        ("limit", "1.5", "VALIDATION_ERROR"),
        ("limit", "ten", "VALIDATION_ERROR"),
        ("limit", "", "VALIDATION_ERROR"),
        ("offset", "-5", "VALIDATION_ERROR"),
        ("offset", "9" * 30, "VALIDATION_ERROR"),
        ("order", '"unterminated.asc', "VALIDATION_ERROR"),
        ("order", "asc", "VALIDATION_ERROR"),
        ("order", '"a"b.asc', "VALIDATION_ERROR"),
        ("select", "Rel(A,B", "VALIDATION_ERROR"),
        ("select", "Rel(A(B))", "VALIDATION_ERROR"),
        ("select", "Rel()", "VALIDATION_ERROR"),
        ("select", "(A)", "VALIDATION_ERROR"),
    ],
)
def test_malformed_parameters_raise_typed_errors(key: str, value: str, code: str) -> None:
    with pytest.raises(ServiceError) as exc:
        parse_params([(key, value)])
    assert exc.value.code == code


def test_defaults_when_nothing_is_given() -> None:
    assert parse_params([]) == Query(limit=DEFAULT_LIMIT, offset=0)


@pytest.mark.parametrize("params", [
    [("limit", "5"), ("offset", "10"), ("limit", "0")],
    [("offset", "1"), ("offset", "1")],
    [("order", "A.desc"), ("sort", "B")],
    [("select", "A"), ("select", "B")],
    [("expand", "A"), ("expand", "B")],
    [("view", "1"), ("view", "2")],
    [("count", "exact"), ("count", "exact")],
])
def test_single_valued_parameters_given_twice_are_refused(params: list[tuple[str, str]]) -> None:
    with pytest.raises(ServiceError) as info:
        parse_params(params)
    assert info.value.code == "REPEATED_PARAMETER"


def test_limit_above_maximum_is_left_to_the_planner() -> None:
    assert parse_params([("limit", "1001")]).limit == 1001
    assert parse_params([("limit", "9" * 40)]).limit > 1000


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ([("order", "Name")], (OrderTerm("Name"),)),
        ([("order", "Name.asc,Score.desc")], (OrderTerm("Name"), OrderTerm("Score", desc=True))),
        ([("order", "Score.desc.nullslast")], (OrderTerm("Score", True, "last"),)),
        ([("order", "Score.nullsfirst")], (OrderTerm("Score", False, "first"),)),
        ([("order", "a.b.c.desc")], (OrderTerm("a.b.c", True),)),
        ([("order", '"x.asc".desc')], (OrderTerm("x.asc", True),)),
        ([("order", '"a,b"')], (OrderTerm("a,b"),)),
        ([("order", "id.desc,,")], (OrderTerm("id", True),)),
        ([("sort", "-created_at,Name")], (OrderTerm("created_at", True), OrderTerm("Name"))),
        ([("sort", '-"-x"')], (OrderTerm("-x", True),)),
    ],
)
def test_order_and_sort(params: list[tuple[str, str]], expected: tuple[OrderTerm, ...]) -> None:
    assert parse_params(params).order == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("*", (SelectItem("*"),)),
        ("a,b", (SelectItem("a"), SelectItem("b"))),
        ("Rel(Name,Score)", (SelectItem("Rel", ("Name", "Score")),)),
        ("Rel(*)", (SelectItem("Rel", ("*",)),)),
        ('"a,b",Rel("x(y)")', (SelectItem("a,b"), SelectItem("Rel", ("x(y)",)))),
        (" a , Rel( X , Y ) ", (SelectItem("a"), SelectItem("Rel", ("X", "Y")))),
    ],
)
def test_select(value: str, expected: tuple[SelectItem, ...]) -> None:
    assert parse_params([("select", value)]).select == expected


def test_expand_accepts_commas() -> None:
    q = parse_params([("expand", 'Owner,Team,"A,B"')])
    assert q.expand == ("Owner", "Team", "A,B")


def test_reserved_parameters_are_not_filters() -> None:
    q = parse_params([("view", "3"), ("count", "exact")])
    assert (q.filters, q.view, q.count) == ((), "3", True)
    with pytest.raises(ServiceError) as info:
        parse_params([("run_pipeline", "true")])
    assert info.value.code == "UNKNOWN_PARAMETER"
    assert parse_params([("count", "planned")]).count is True  # the door reads the mode (count_param)
    with pytest.raises(ServiceError) as info:
        parse_params([("count", "exactly")])
    assert info.value.code == "VALIDATION_ERROR"


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ({"Name": "eq.Ann"}, (Filter("Name", Op.EQ, "Ann"),)),
        ({"Score": "not.gt.3"}, (Filter("Score", Op.GT, "3", negate=True),)),
        ({"Score": 3}, (Filter("Score", Op.EQ, "3"),)),
        ({"Score": 2.0}, (Filter("Score", Op.EQ, "2"),)),
        ({"Done": True}, (Filter("Done", Op.IS, "true"),)),
        ({"Owner": None}, (Filter("Owner", Op.IS, "null"),)),
        ({"Tag": ["a", 1]}, (Filter("Tag", Op.IN, ("a", "1")),)),
    ],
)
def test_filter_object_form(obj: dict[str, Any], expected: tuple[Filter, ...]) -> None:
    assert parse_filter_object(obj) == expected


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        ([{"column": "Name", "op": "eq", "value": "Ann"}], (Filter("Name", Op.EQ, "Ann"),)),
        ([{"column": "Name", "value": "Ann"}], (Filter("Name", Op.EQ, "Ann"),)),
        ([{"column": "Score", "op": "not.lte", "value": 5}], (Filter("Score", Op.LTE, "5", negate=True),)),
        ([{"column": "Score", "op": "gt", "value": 5, "negate": True}], (Filter("Score", Op.GT, "5", negate=True),)),
        ([{"column": "Tag", "op": "in", "value": ["a,b", "c"]}], (Filter("Tag", Op.IN, ("a,b", "c")),)),
        ([{"column": "Tag", "op": "in", "value": '("a,b",c)'}], (Filter("Tag", Op.IN, ("a,b", "c")),)),
        ([{"column": "Tags", "op": "cs", "value": ["x"]}], (Filter("Tags", Op.CS, ("x",)),)),
        ([{"column": "Done", "op": "is", "value": None}], (Filter("Done", Op.IS, "null"),)),
        ([{"column": "Done", "op": "is", "value": False}], (Filter("Done", Op.IS, "false"),)),
        ([{"column": "Owner", "op": "eq", "value": None}], (Filter("Owner", Op.IS, "null"),)),
        ([{"column": "Owner", "op": "neq", "value": None}], (Filter("Owner", Op.IS, "null", negate=True),)),
    ],
)
def test_filter_list_form(items: list[dict[str, Any]], expected: tuple[Filter, ...]) -> None:
    assert parse_filter_list(items) == expected


@pytest.mark.parametrize(
    ("items", "code"),
    [
        ([{"column": "Name", "op": "between", "value": 1}], "UNKNOWN_OPERATOR"),
        ([{"column": "Name", "op": 3, "value": 1}], "UNKNOWN_OPERATOR"),
        ([{"op": "eq", "value": 1}], "VALIDATION_ERROR"),
        ([{"column": "Name", "op": "eq", "value": [1, 2]}], "INVALID_VALUE"),
        ([{"column": "Name", "op": "eq", "value": {"a": 1}}], "INVALID_VALUE"),
        ([{"column": "Done", "op": "is", "value": "maybe"}], "INVALID_VALUE"),
        ("Name=eq.x", "VALIDATION_ERROR"),
        # a forgotten value never silently means is.null; typos in keys are refused
        ([{"column": "Points"}], "VALIDATION_ERROR"),
        ([{"column": "Points", "op": "eq"}], "VALIDATION_ERROR"),
        ([{"column": "Points", "op": "eq", "value": 1, "extra": 1}], "VALIDATION_ERROR"),
        ([{"column": "Points", "op": "eq", "valeu": 1}], "VALIDATION_ERROR"),
        ([{"column": "Points", "op": "eq", "value": 1, "negate": "yes"}], "VALIDATION_ERROR"),
    ],
)
def test_filter_list_errors(items: Any, code: str) -> None:
    with pytest.raises(ServiceError) as exc:
        parse_filter_list(items)
    assert exc.value.code == code


def test_filter_object_rejects_unknown_operators_and_non_objects() -> None:
    with pytest.raises(ServiceError) as exc:
        parse_filter_object({"Name": "between.1"})
    assert exc.value.code == "UNKNOWN_OPERATOR"
    with pytest.raises(ServiceError) as exc:
        parse_filter_object(["Name=eq.x"])  # type: ignore[arg-type]
    assert exc.value.code == "VALIDATION_ERROR"


# --------------------------------------------------------------------------- group_text


def _group_trees() -> Any:
    from hypothesis import strategies as st

    from storage.query.parse import Group

    text = st.text(alphabet=st.sampled_from(list('ab .,"()\\{}*@é-')), max_size=8)
    name = text.filter(lambda s: s != "")
    single = st.builds(Filter, name, st.sampled_from([o for o in Op if o not in (Op.IN, Op.CS, Op.IS)]),
                       text, st.booleans())
    listed = st.builds(Filter, name, st.sampled_from([Op.IN, Op.CS]),
                       st.lists(text, min_size=1, max_size=3).map(tuple),
                       st.booleans())
    is_ = st.builds(Filter, name, st.just(Op.IS), st.sampled_from(["null", "true", "false"]), st.booleans())
    leaf = st.one_of(single, listed, is_)
    return st.recursive(
        st.builds(Group, st.sampled_from(["and", "or"]), st.lists(leaf, min_size=1, max_size=3).map(tuple),
                  st.booleans()),
        lambda inner: st.builds(Group, st.sampled_from(["and", "or"]),
                                st.lists(st.one_of(leaf, inner), min_size=1, max_size=3).map(tuple), st.booleans()),
        max_leaves=6,
    )


def test_group_text_reads_back_to_the_same_group() -> None:
    """Views store a group re-rendered with column ids (storage/views.py): the renderer must
    be the parser's exact inverse, whatever the names and values hold."""
    from hypothesis import given, settings

    from storage.query.parse import group_key, group_text, parse_group

    @settings(max_examples=300, deadline=None)
    @given(_group_trees())
    def check(group: Any) -> None:
        assert parse_group(group_key(group), group_text(group)) == group

    check()


def test_group_text_renames_every_column_of_a_nested_group() -> None:
    from storage.query.parse import group_text, parse_group

    g = parse_group("or", '(Score.gte.10,and("My.col".eq.1,Title.in.(a,"b,c")))')
    assert group_text(g, lambda n: {"Score": "@3", "My.col": "@4", "Title": "@5"}[n]) \
        == '(@3.gte.10,and(@4.eq.1,@5.in.(a,"b,c")))'


def test_whitespace_around_a_group_condition_is_not_part_of_it() -> None:
    """After a comma and before a comma or the closing parenthesis, whitespace belongs to
    no condition; a quoted value keeps its trailing spaces, and a value's own leading
    spaces (after the operator's dot) are kept."""
    q = parse_params([("or", '( Title.eq.foo ,Title.eq."bar ",Title.eq. baz )')])
    (group,) = q.filters
    assert [f.value for f in group.items] == ["foo", "bar ", " baz"]  # type: ignore[union-attr]
