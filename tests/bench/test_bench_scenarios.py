"""The pure parts of the issue scenarios: latency and budget figures, token dealing,
realtime latency pairing, the SDK report parser, the fake provider's vectors, the MCP
call body and the registry's run order."""

from __future__ import annotations

import json

import pytest

from bench.context import (
    LATENCY_UNIT,
    BenchError,
    budget_figure,
    inverse_ms,
    latency_figure,
    latency_target,
    not_measured,
)
from bench.fakes import DIM, bag_of_words
from bench.load import PhaseResult
from bench.report import Verdict
from bench.scenarios import REGISTRY
from bench.scenarios.chat import pair_differences
from bench.scenarios.limits import token_cycles
from bench.scenarios.mcp import tool_records, tools_call
from bench.scenarios.noisy import Probe, p99_figure
from bench.scenarios.pipelines import expected_d
from bench.scenarios.realtime import latencies, ws_url
from bench.scenarios.sdk import parse_report
from bench.stack import Deployment


def phase(*latencies_s: float, errors: int = 0) -> PhaseResult:
    return PhaseResult(1, len(latencies_s), errors, sum(latencies_s), list(latencies_s))


@pytest.mark.parametrize(("ms", "expected"), [(4.0, 250.0), (0.5, 2000.0), (0.0, None), (-1.0, None), (None, None)])
def test_inverse_ms_turns_a_latency_into_a_rate(ms: float | None, expected: float | None) -> None:
    assert inverse_ms(ms) == expected


@pytest.mark.parametrize(("api_ms", "base_ms", "max_ratio", "verdict"), [
    (13.0, 10.0, 1.3, Verdict.PASS),   # exactly 1.3x the floor passes
    (13.5, 10.0, 1.3, Verdict.FAIL),
    (5.0, 10.0, 1.3, Verdict.PASS),    # faster than the baseline
    (19.0, 10.0, 2.0, Verdict.PASS),
    (21.0, 10.0, 2.0, Verdict.FAIL),
    (21.0, 10.0, None, Verdict.NO_TARGET),
])
def test_latency_figure_judges_p50_against_a_multiple_of_the_baselines(
    api_ms: float, base_ms: float, max_ratio: float | None, verdict: Verdict,
) -> None:
    fig = latency_figure("s", "n", phase(api_ms / 1000), phase(base_ms / 1000), max_ratio=max_ratio,
                         baseline_label="floor")
    assert fig.verdict is verdict
    assert fig.unit == LATENCY_UNIT
    assert fig.p50_ms == pytest.approx(api_ms) and fig.baseline_p50_ms == pytest.approx(base_ms)
    assert f"p50 {api_ms / base_ms:.2f}× floor" in fig.note


def test_latency_figure_without_baseline_is_not_measured_and_errors_fail_it() -> None:
    assert latency_figure("s", "n", phase(0.01), None, max_ratio=1.5).verdict is Verdict.NOT_MEASURED
    assert latency_figure("s", "n", phase(0.001, errors=2), phase(0.01), max_ratio=1.5).verdict is Verdict.FAIL


def test_latency_target_reads_as_a_p50_multiple() -> None:
    target = latency_target(1.5, "REST")
    assert target.min_ratio == pytest.approx(1 / 1.5) and target.text == "p50 ≤ 1.5× REST"


@pytest.mark.parametrize(("measured", "budget", "reference", "verdict"), [
    (10.0, 10.0, 0.0, Verdict.PASS),   # on the budget passes
    (10.5, 10.0, 0.0, Verdict.FAIL),
    (2.8, 20.0, 0.0, Verdict.PASS),
    (0.19, 0.2, 1.1, Verdict.PASS),    # an overhead over a reference latency
    (0.21, 0.2, 1.1, Verdict.FAIL),
    (-0.05, 0.2, 1.1, Verdict.PASS),   # a negative overhead (noise) is within budget
    (0.0, 15.0, 0.8, Verdict.PASS),
    (None, 15.0, 0.8, Verdict.NOT_MEASURED),
])
def test_budget_figure_passes_exactly_when_within_budget(
    measured: float | None, budget: float, reference: float, verdict: Verdict,
) -> None:
    fig = budget_figure("s", "n", measured, budget, reference_ms=reference)
    assert fig.verdict is verdict
    assert fig.target is not None and fig.target.min_ratio == 1.0
    assert fig.baseline_label == f"{budget:g} ms budget"


def test_budget_figure_with_errors_fails_and_names_the_measure() -> None:
    fig = budget_figure("s", "n", 3.0, 10.0, errors=1, what="p50")
    assert fig.verdict is Verdict.FAIL
    assert fig.note.startswith("p50 3.00 ms (budget 10 ms)")


def test_not_measured_figures_carry_the_reason_and_never_pass() -> None:
    fig = not_measured("s", "n", "node is not installed", target=latency_target(1.3, "floor"))
    assert fig.value is None and fig.verdict is Verdict.NOT_MEASURED
    assert fig.note == "not run: node is not installed"


@pytest.mark.parametrize(("tokens", "clients", "expected"), [
    (["a", "b", "c", "d"], 2, [["a", "c"], ["b", "d"]]),
    (["a", "b", "c"], 2, [["a", "c"], ["b"]]),
    (["a"], 3, [["a"], ["a"], ["a"]]),  # fewer tokens than clients: they are shared
])
def test_token_cycles_deal_every_token_and_give_every_client_one(
    tokens: list[str], clients: int, expected: list[list[str]],
) -> None:
    assert token_cycles(tokens, clients) == expected


def test_token_cycles_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError):
        token_cycles([], 4)


def test_realtime_latencies_pair_each_event_with_its_write_once_per_client() -> None:
    sent = {10: 1.0, 11: 2.0}
    frames = [
        [(1.004, json.dumps({"type": "change", "record": {"id": 10}})),
         (1.005, json.dumps({"type": "change", "record": {"id": 10}})),  # a duplicate counts once
         (2.003, json.dumps({"type": "change", "record": {"id": 11}}))],
        [(2.5, json.dumps({"type": "heartbeat"})),
         (2.006, json.dumps({"type": "change", "record": {"id": 11}})),
         (3.0, json.dumps({"type": "change", "record": {"id": 99}}))],  # not ours: skipped
    ]
    got, missing = latencies(sent, frames)
    assert [round(x, 6) for x in got] == [0.004, 0.003, 0.006]
    assert missing == 1  # client 2 never saw record 10


@pytest.mark.parametrize(("base", "expected"), [
    ("http://127.0.0.1:8000", "ws://127.0.0.1:8000/realtime/v1?token=tok"),
    ("https://example.test", "wss://example.test/realtime/v1?token=tok"),
])
def test_ws_url_switches_the_scheme(base: str, expected: str) -> None:
    assert ws_url(base, "tok") == expected


def test_parse_report_takes_the_last_json_line_and_refuses_none() -> None:
    out = b"(node:1) warning\n{\"overhead_median_of_pairs_ms\": 0.04, \"budget_ms\": 0.2}\n"
    assert parse_report(out) == {"overhead_median_of_pairs_ms": 0.04, "budget_ms": 0.2}
    with pytest.raises(ValueError):
        parse_report(b"Error: connect ECONNREFUSED\n")


def test_bag_of_words_is_deterministic_unit_length_and_shares_words() -> None:
    a, b, c = bag_of_words("red fox blue owl"), bag_of_words("red fox blue owl"), bag_of_words("gold yak")
    assert a == b and len(a) == DIM
    assert sum(x * x for x in a) == pytest.approx(1.0)
    dot = sum(x * y for x, y in zip(a, bag_of_words("red fox")))
    assert dot > sum(x * y for x, y in zip(a, c))


def test_pair_differences_refuse_unpaired_lists() -> None:
    assert pair_differences([5.0, 7.0], [1.0, 2.0]) == [4.0, 5.0]
    with pytest.raises(ValueError):
        pair_differences([1.0], [])


def test_tools_call_is_a_list_records_json_rpc_request() -> None:
    body = tools_call(7)
    assert body["method"] == "tools/call" and body["params"]["name"] == "list_records"
    assert body["params"]["arguments"]["table_id"] == 7 and body["params"]["arguments"]["limit"] == 100


@pytest.mark.parametrize("body", [
    {"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "bad"}},
    {"jsonrpc": "2.0", "id": 1, "result": {"isError": True, "structuredContent": {"code": "NOT_FOUND"}}},
])
def test_tool_records_refuses_protocol_and_tool_errors(body: dict) -> None:
    with pytest.raises(BenchError):
        tool_records(body)


def test_tool_records_returns_the_page() -> None:
    body = {"result": {"isError": False, "structuredContent": {"records": [{"id": 1}], "total": 1}}}
    assert tool_records(body) == [{"id": 1}]


@pytest.mark.parametrize(("a", "d"), [(0, -1), (1, 1), (500, 999), (-1, -3)])
def test_expected_d_follows_the_three_formulas(a: float, d: float) -> None:
    assert expected_d(a) == d


def test_every_issue_scenario_is_registered_and_peers_run_last() -> None:
    names = list(REGISTRY)
    for wanted in ("pipelines.create", "pipelines.batch", "pipelines.run_actions", "sql.select", "sql.schema",
                   "mcp.list_records", "limits.rate_limiter", "realtime.latency", "storage.throughput",
                   "chat.first_token", "search.semantic", "sdk.overhead", "sql.analytics", "security.noisy_neighbour",
                   "peers.compare"):
        assert wanted in names
    assert names[-1] == "peers.compare"
    assert names.index("records.get") < names.index("pipelines.create")


@pytest.mark.parametrize(("attack_ms", "verdict"), [(19.0, Verdict.PASS), (21.0, Verdict.FAIL)])
def test_noisy_neighbour_p99_passes_below_twice_idle(attack_ms: float, verdict: Verdict) -> None:
    idle, attack, control = (Probe(latencies=[ms / 1000] * 10) for ms in (10.0, attack_ms, 10.0))
    fig = p99_figure("js", attack, idle, control, gate=True)
    assert fig.verdict is verdict
    assert f"p99 {attack_ms / 10:.2f}× idle" in fig.note


def test_noisy_neighbour_gate_off_is_informative_and_failed_gets_fail_the_figure() -> None:
    idle = Probe(latencies=[0.01] * 10)
    assert p99_figure("js", Probe(latencies=[0.05] * 10), idle, idle, gate=False).verdict is Verdict.NO_TARGET
    assert p99_figure("js", Probe(latencies=[0.01] * 10, get_errors=1), idle, idle, gate=True).verdict \
        is Verdict.FAIL


def test_a_deployment_without_operator_key_or_stack_says_so() -> None:
    dep = Deployment("http://127.0.0.1:1", "tok", None, workers=None, embedded=False)
    assert dep.admin_key is None and dep.stack is None and dep.temporal_address is None
