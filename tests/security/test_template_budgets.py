"""Hostile templates (issue #22, item 2). Jinja2's sandbox folds constant expressions when
it compiles: ``{{'a'*10**9}}`` in an http_request column used to be built while the table
was created (24 s on the event loop, the API's memory 0.3 -> 4.1 GB, 1.26 GB never given
back). Now nothing is evaluated at compile time, the arithmetic that builds huge values is
refused at render time, and rendering anything but plain substitutions runs in the
sandbox processes under a CPU budget and a memory cap."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Iterator

import pytest

from activities.formula import BUDGET_EXCEEDED
from activities.sandbox import Sandbox
from activities.templates import TemplateFailure, check_template, is_simple, render, render_many
from tests.security.probes import rss_bytes

HUGE = "{{'a'*10**9}}"


def test_creating_a_column_with_a_huge_constant_template_builds_nothing(api, ws):
    before = rss_bytes(api.proc.pid)
    t = ws.create_table("H", [
        {"name": "Name", "type": "text"},
        {"name": "Call", "type": "http_request", "config": {"url": "http://127.0.0.1:9/x", "method": "POST",
                                                            "body": {"v": HUGE}}},
    ])
    assert rss_bytes(api.proc.pid) - before < 100 * 1024 * 1024
    r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Name": "x"}})
    assert r.status_code == 201, r.text
    error = r.json()["pipeline"]["errors"]["Call"]
    assert "refused by the sandbox" in error or error.startswith(BUDGET_EXCEEDED)
    assert rss_bytes(api.proc.pid) - before < 100 * 1024 * 1024


def test_a_template_longer_than_the_limit_is_refused_at_creation(ws):
    r = ws.api.post("/tables", json={"name": "L", "columns": [
        {"name": "Call", "type": "http_request", "config": {"url": "http://127.0.0.1:9/" + "{{ Name }}" * 3000}}]})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", r.text


@pytest.mark.parametrize("source", [
    HUGE, "{{ 'a'|center(10**9) }}", "{{ ('ab' ~ 'c') * 10**8 }}", "{{ 'x'|indent(10**9) }}",
    "{{ [0] * 10**9 }}", "{{ '%999999999s' % 1 }}",
])
def test_compiling_a_template_evaluates_nothing(source):
    tracemalloc.start()
    try:
        check_template(source)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 10 * 1024 * 1024


@pytest.mark.parametrize("source", [
    HUGE, "{{ [0] * 10**9 }}", "{{ 10 ** 100000 }}", "{{ (7 ** 99) ** 99 }}", "{{ '%999999999s' % 1 }}",
    "{{ '%*s' % (10**9, 1) }}", "{% set s = 'a' * 600000 %}{{ s + s }}",
])
def test_arithmetic_that_builds_huge_values_is_refused_at_render(source):
    with pytest.raises(TemplateFailure, match="refused by the sandbox"):
        render(source, {})


def test_plain_substitutions_render_inline_and_the_rest_in_the_sandbox():
    assert is_simple("{{ Name }} / {{ fields['Due Date'] }} / {{ item.x }} / {{ Name|tojson }}")
    assert not is_simple("{% for i in range(3) %}{{ i }}{% endfor %}") and not is_simple("{{ 1 + 1 }}")
    assert not is_simple("{{ Name }}" * 17)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    box = Sandbox(size=1)
    yield box
    box.close()


def _render(sandbox: Sandbox, sources: list[str]) -> list[tuple[bool, object]]:
    return asyncio.run(render_many([(s, {"Name": "Bo"}, {"record_id": 1}) for s in sources], sandbox))


def test_rendering_past_the_memory_cap_fails_that_value_only(sandbox):
    out = _render(sandbox, ["{{ 'a'|center(10**9) }}", "{% if Name %}hi {{ Name }}{% endif %}"])
    assert out[0][0] is False and out[0][1].startswith(BUDGET_EXCEEDED) and "memory" in out[0][1]
    assert out[1] == (True, "hi Bo")


def test_rendering_past_the_cpu_budget_fails_that_value_only(sandbox):
    loops = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    out = _render(sandbox, [loops, "{{ record_id * 2 }}"])
    assert out[0][0] is False and out[0][1].startswith(BUDGET_EXCEEDED) and "CPU" in out[0][1]
    assert out[1] == (True, "2")


def test_a_refused_template_in_the_sandbox_is_a_plain_template_error(sandbox):
    out = _render(sandbox, [HUGE])
    assert out[0][0] is False and "refused by the sandbox" in out[0][1]


@pytest.mark.parametrize("text", [HUGE, "{{ 'a'|center(10**8) }}", "{{ [1]*10**8 }}", "{{ ('b'*10**9)|length }}",
                                  "{% if 'x'*10**9 %}{{ Y }}{% endif %}"])
def test_finding_the_columns_a_template_reads_evaluates_nothing(text):
    """Dependency tracking (storage.refs.template_names) walks Jinja2's code generator,
    whose optimizer folded ``'a'*10**9`` into a 1 GB string on the event loop at every
    table or column creation (3 s each; RSS came back, so the test above missed it)."""
    from storage.refs import template_names

    template_names.cache_clear()
    tracemalloc.start()
    try:
        names = template_names(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5 * 1024 * 1024, peak
    assert names <= {"Y"}


def test_many_simple_substitutions_in_one_config_do_not_render_inline_unbounded(api, ws):
    """Each string of a body was "simple" (at most 16 substitutions), but a body may hold
    any number of strings: 1,000 keys of ``{{ T }}`` over a 1 MB ``T`` rendered 1 GB inline
    (API memory 4.4 GB, never given back, other tenants waiting). A value substituting more
    than 64 times in all renders in the sandbox, and no step's rendered strings exceed
    5,000,000 characters together: the request is never sent."""
    before = rss_bytes(api.proc.pid)
    body = {f"k{i}": "{{ T }}" for i in range(1000)}
    t = ws.create_table("Many", [
        {"name": "T", "type": "text"},
        {"name": "Call", "type": "http_request", "config": {"url": "http://127.0.0.1:9/x", "method": "POST",
                                                            "body": body}},
    ])
    r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"T": "a" * 1_000_000}}, timeout=60)
    assert r.status_code == 201, r.text
    error = r.json()["pipeline"]["errors"]["Call"]
    assert "larger than 5,000,000 characters" in error or error.startswith(BUDGET_EXCEEDED), error
    assert rss_bytes(api.proc.pid) - before < 300 * 1024 * 1024


def test_a_value_of_simple_strings_renders_inline_up_to_its_limits():
    from activities.templates import MAX_VALUE_OUTPUT, SIMPLE_VALUE_MAX, render_value, simple_value

    assert simple_value({f"k{i}": "{{ T }}" for i in range(SIMPLE_VALUE_MAX)})
    assert not simple_value({f"k{i}": "{{ T }}" for i in range(SIMPLE_VALUE_MAX + 1)})
    assert simple_value({"a": "no templates", "b": ["{{ T|tojson }}"]})
    big = "a" * 800_000  # under the 1 MB of one string
    fit = MAX_VALUE_OUTPUT // len(big)
    assert render_value(["{{ T }}"] * fit, {"T": big}) == [big] * fit
    with pytest.raises(TemplateFailure, match="larger than"):
        render_value(["{{ T }}"] * (fit + 1), {"T": big})
