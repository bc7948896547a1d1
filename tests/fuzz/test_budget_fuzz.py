"""Fuzz of the budgeted entry points (issue #22): formulas and templates built to be
expensive (huge counts, backtracking patterns, nested repetition, loops, folding bait)
never crash an entry point and never escape their budgets: every value ends as a value or
an error string, no evaluation outlives its deadline (the sandbox kills a child only when
a value escaped its CPU budget, and says so), compiling a template evaluates nothing, and
no rendered text exceeds the output cap."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from activities.formula import Budget, is_cheap, run_budgeted
from activities.sandbox import Sandbox
from activities.templates import MAX_OUTPUT, TemplateFailure, check_template, render_many
from storage.errors import InvalidFormula
from storage.formula import compile_formula
from storage.formula.nodes import to_source
from tests.storage.test_formula_properties import records, trees

NOW = datetime(2024, 3, 15, 12, 0, tzinfo=UTC)
ESCAPED = "ran past its deadline"  # a lost child: the per-value budget did not stop it
PROFILE = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

big = st.sampled_from(["0", "1", "7", "1000", "99999", "1000000", "10^9", "2^64", "-1", "1e300"])
patterns = st.sampled_from(['"(a|aa)+$"', '"(a+)+b"', '"^(\\\\w+\\\\s?)*$"', '"(x+x+)+y"', '"."', '"["', '""'])
texts = st.sampled_from(['{Tags}', '{Price}', '"a,b,c"', 'REPT("a", 20) & "!"', 'REPT("ab", 400000)', '""'])
heavy = st.one_of(
    st.builds(lambda t, n: f"REPT({t}, {n})", texts, big),
    st.builds(lambda t, p: f"REGEX_MATCH({t}, {p})", texts, patterns),
    st.builds(lambda t, p: f'REGEX_REPLACE({t}, {p}, "$0$0")', texts, patterns),
    st.builds(lambda t, p: f"REGEX_EXTRACT({t}, {p})", texts, patterns),
    st.builds(lambda t: f'LEN(SPLIT({t}, ","))', texts),
    st.builds(lambda t, n: f'LPAD({t}, {n}, "xy")', texts, big),
    st.builds(lambda t: f'SUBSTITUTE(SUBSTITUTE({t}, "a", "aa"), "a", "aa")', texts),
    st.builds(lambda t: f'ARRAYJOIN(SPLIT({t}, ""), "-")', texts),
    st.builds(lambda n: f'WORKDAY("2024-01-01", {n})', big),
)
formulas = st.one_of(
    st.lists(heavy, min_size=1, max_size=6).map(lambda parts: " & ".join(parts)),
    st.builds(lambda tree, h: f"IF(LEN({to_source(tree)}) > 0, {h}, {h})", trees, heavy),
    trees.map(to_source),
)

numbers = st.sampled_from(["1", "9", "10**9", "2**64", "10**10**10", "-1", "0.5", "(7**99)"])
exprs = st.one_of(
    st.builds(lambda a, b: f"'ab' * {a} * {b}", numbers, numbers),
    st.builds(lambda a, b: f"{a} ** {b}", numbers, numbers),
    st.builds(lambda a: f"[0] * {a}", numbers),
    st.builds(lambda a: f"'x'|center({a})", numbers),
    st.builds(lambda a: f"'x'|indent({a})", numbers),
    st.builds(lambda a: f"'x'.ljust({a})", numbers),
    st.builds(lambda a: f"'%{a}s' % 1", st.sampled_from(["5", "999999999", "*"])),
    st.builds(lambda a: f"'{{:>{a}}}'.format(1)", st.sampled_from(["5", "999999999"])),
    st.builds(lambda a: f"range({a})|list|length", numbers),
    st.sampled_from(["Name", "fields['Due Date']", "record_id", "''.__class__.__mro__", "Name|upper",
                     "lipsum(10**6)", "cycler", "self", "namespace(a=1)"]),
)
snippets = st.one_of(
    exprs.map(lambda e: "{{ " + e + " }}"),
    st.builds(lambda a, e: "{% for i in range(" + a + ") %}{{ " + e + " }}{% endfor %}", numbers, exprs),
    st.builds(lambda a: "{% for i in range(" + a + ") %}{% for j in range(" + a + ") %}x{% endfor %}{% endfor %}",
              numbers),
    st.builds(lambda e: "{% set s = " + e + " %}{{ s ~ s ~ s }}", exprs),
    st.sampled_from(["plain", "{{", "{% if %}", "{{ Name }", "{# c #}", "{{ Name }} and {{ fields['Due Date'] }}"]),
)
templates = st.lists(snippets, min_size=1, max_size=3).map("".join)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    box = Sandbox(size=1)
    yield box
    box.close()


@PROFILE
@given(formulas, records)
def test_formulas_end_as_a_value_or_an_error_within_their_budget(sandbox, source, record):
    try:
        compiled = compile_formula(source)
    except InvalidFormula:
        return
    budget = Budget.for_run(10)
    values, errors = asyncio.run(sandbox.formula(source, "excel", {"1": record, "2": {}}, NOW, budget))
    assert set(values) | set(errors) == {"1", "2"} and not set(values) & set(errors)
    assert all(isinstance(e, str) and ESCAPED not in e for e in errors.values()), errors
    if is_cheap(compiled):  # cheap formulas run inline: they must end without the sandbox's help
        inline_values, inline_errors, rest = run_budgeted(compiled, "excel", {"1": record}, NOW, Budget.for_run(10))
        assert not rest and set(inline_values) | set(inline_errors) == {"1"}


@PROFILE
@given(templates)
def test_templates_compile_without_evaluating_and_render_within_their_budget(sandbox, source):
    tracemalloc.start()
    try:
        try:
            check_template(source)
            compiled = True
        except TemplateFailure:
            compiled = False
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * 1024 * 1024
    if not compiled:
        return
    out = asyncio.run(render_many([({"a": source, "b": [source]}, {"Name": "Bo", "Due Date": "soon"},
                                    {"record_id": 1})], sandbox))
    ((ok, value),) = out
    if ok:
        assert len(value["a"]) <= MAX_OUTPUT and value["b"] == [value["a"]]
    else:
        assert isinstance(value, str) and ESCAPED not in value, value
