"""Property tests: no input crashes the formula language; printing round-trips."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.errors import InvalidFormula
from storage.formula import FUNCTIONS, FormulaError, compile_formula
from storage.formula.nodes import LEVEL_OPS, Bool, Call, Chain, Field, Node, Num, Str, Unary, to_source
from storage.formula.parser import parse

NOW = datetime(2024, 3, 15, 12, 0, tzinfo=UTC)
NAMES = ["a", "Price", "Unit Price", "x}y", "back\\slash", "名前", "Tags", "When"]
SLOW = {"REPT", "LPAD", "RPAD", "WORKDAY"}  # fine, but big counts make examples slow

field_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-10**6, max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["2024-01-31", "2024-03-15T12:00:00Z", "1999-12-31T23:59:59+05:30", "", "0", "1e3"]),
    st.lists(st.one_of(st.none(), st.text(max_size=5), st.integers(-5, 5)), max_size=4),
)
records = st.fixed_dictionaries({}, optional={name: field_values for name in NAMES})

leaves = st.one_of(
    st.integers(min_value=0, max_value=10**9).map(Num),
    st.floats(min_value=0, max_value=1e12, allow_nan=False, allow_infinity=False).map(Num),
    st.text(max_size=8).map(Str),
    st.booleans().map(Bool),
    st.sampled_from(NAMES).map(Field),
)
function_names = sorted(name for name in FUNCTIONS if name not in SLOW)


def _call(name: str, args: list[Node]) -> Node | None:
    spec = FUNCTIONS[name]
    hi = spec.max_args if spec.max_args is not None else spec.min_args + 2
    if not spec.min_args <= len(args) <= hi:
        return None
    return Call(name, tuple(args))


def _extend(children: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
    calls = st.builds(_call, st.sampled_from(function_names), st.lists(children, max_size=4)).filter(
        lambda n: n is not None
    )
    unary = st.builds(Unary, st.sampled_from(["-", "+"]), children)
    chains = st.integers(min_value=0, max_value=4).flatmap(
        lambda level: st.builds(
            Chain,
            st.just(level),
            children,
            st.lists(st.tuples(st.sampled_from(LEVEL_OPS[level]), children), min_size=1, max_size=3),
        )
    )
    return st.one_of(calls, unary, chains)


trees = st.recursive(leaves, _extend, max_leaves=12)
# database=None: no .hypothesis/ example store is written into the repository.
PROPERTY_SETTINGS = settings(
    max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def _evaluate_safely(source: str, record: dict[str, Any]) -> tuple[str, Any]:
    try:
        return ("ok", compile_formula(source).evaluate(record, now=NOW))
    except FormulaError as exc:
        return ("error", exc.code)


@PROPERTY_SETTINGS
@given(trees, records)
def test_generated_formulas_compile_and_only_raise_formula_errors(tree: Node, record: dict[str, Any]) -> None:
    source = to_source(tree)
    compile_formula(source)  # every printed tree is valid source
    _evaluate_safely(source, record)


@PROPERTY_SETTINGS
@given(trees)
def test_printing_is_a_fixed_point_after_one_parse(tree: Node) -> None:
    canonical = to_source(parse(to_source(tree)))
    assert parse(canonical) == parse(to_source(tree))
    assert to_source(parse(canonical)) == canonical


@PROPERTY_SETTINGS
@given(trees, records)
def test_canonical_form_evaluates_like_the_original(tree: Node, record: dict[str, Any]) -> None:
    source = to_source(tree)
    canonical = compile_formula(source).canonical()
    first, second = _evaluate_safely(source, record), _evaluate_safely(canonical, record)
    if first[0] == "ok" and isinstance(first[1], float) and first[1] != first[1]:
        return
    assert first == second


formula_alphabet = st.sampled_from(
    list("0123456789.+-*/%^&=<>!(),{}\"'\\ \n") + ["IF", "SUM", "LEFT", "TRUE", "{a}", "{Price}", "x", "é"]
)


@PROPERTY_SETTINGS
@given(st.lists(formula_alphabet, max_size=40).map("".join), records)
def test_arbitrary_text_is_valid_or_invalid_formula_never_a_crash(
    source: str, record: dict[str, Any]
) -> None:
    try:
        compile_formula(source)
    except InvalidFormula as exc:
        assert exc.code == "INVALID_FORMULA"
        return
    _evaluate_safely(source, record)


@PROPERTY_SETTINGS
@given(st.text(max_size=60))
def test_any_unicode_text_never_crashes_the_parser(source: str) -> None:
    try:
        compile_formula(source)
    except InvalidFormula:
        pass


@PROPERTY_SETTINGS
@given(st.text(min_size=1, max_size=30).filter(lambda s: s.strip() != ""))
def test_any_column_name_round_trips_through_a_reference(name: str) -> None:
    source = to_source(Field(name))
    formula = compile_formula(source)
    assert formula.references == frozenset({name})
    assert formula.evaluate({name: 7}, now=NOW) == 7
