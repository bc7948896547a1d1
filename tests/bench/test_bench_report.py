"""The benchmark harness's pure parts: percentiles, verdicts, formatting, the Markdown
report, the pass comparison, the scenario registry and the bounded load loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench.load import (
    OperationFailed,
    PhaseResult,
    merge,
    run_alternating_batches,
    run_interleaved,
    run_phase,
)
from bench.report import (
    COLUMNS,
    Figure,
    RunReport,
    Target,
    Verdict,
    compare_passes,
    evaluate,
    figure_row,
    fmt_ms,
    fmt_rate,
    fmt_ratio,
    markdown_table,
    percentile,
    render_markdown,
)
from bench.runner import build_parser, config_from
from bench.scenarios import REGISTRY, scenario, select
from bench.scenarios.peers import _nocodb_env

FORTY = Target(0.4, "≥ 40 % of psycopg")


def fig(value: float | None, baseline: float | None, *, target: Target | None = FORTY, errors: int = 0,
        scenario: str = "records.get", name: str = "GET by id, 16 clients") -> Figure:
    return Figure(scenario=scenario, name=name, unit="req/s", value=value, baseline=baseline,
                  target=target, errors=errors)


@pytest.mark.parametrize(("values", "p", "expected"), [
    ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
    ([4.0, 1.0, 3.0, 2.0], 50, 2.5),  # order of input does not matter
    ([1.0, 2.0, 3.0, 4.0], 0, 1.0),
    ([1.0, 2.0, 3.0, 4.0], 100, 4.0),
    ([float(i) for i in range(1, 101)], 99, 99.01),
    ([7.0], 99, 7.0),
])
def test_percentile_interpolates_between_closest_ranks(values: list[float], p: float, expected: float) -> None:
    assert percentile(values, p) == pytest.approx(expected)


def test_percentile_of_nothing_is_none_and_out_of_range_is_rejected() -> None:
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1.0], 101)


@pytest.mark.parametrize(("figure", "verdict"), [
    (fig(400.0, 1000.0), Verdict.PASS),  # exactly on the target passes
    (fig(399.0, 1000.0), Verdict.FAIL),
    (fig(900.0, 1000.0, errors=3), Verdict.FAIL),  # errors fail whatever the ratio
    (fig(900.0, None), Verdict.NOT_MEASURED),
    (fig(None, 1000.0), Verdict.NOT_MEASURED),
    (fig(900.0, 0.0), Verdict.NOT_MEASURED),  # a zero baseline gives no ratio
    (fig(10.0, 1000.0, target=None), Verdict.NO_TARGET),
    (fig(5100.0, 1000.0, target=Target(5.0, "≥ 5× Directus")), Verdict.PASS),
])
def test_evaluate_judges_the_ratio_against_the_target(figure: Figure, verdict: Verdict) -> None:
    assert evaluate(figure) is verdict
    assert figure.verdict is verdict


def test_ratio_is_value_over_baseline() -> None:
    assert fig(250.0, 1000.0).ratio == pytest.approx(0.25)
    assert fig(250.0, None).ratio is None


@pytest.mark.parametrize(("text", "expected"), [
    (fmt_rate(12345.6, "req/s"), "12,346 req/s"),
    (fmt_rate(7.25, "rows/s"), "7.2 rows/s"),
    (fmt_rate(None, "req/s"), "—"),
    (fmt_ms(1.234, 56.78), "1.23 / 56.8 ms"),
    (fmt_ms(None, 3.0), "—"),
    (fmt_ratio(0.4), "40.0 %"),
    (fmt_ratio(7.456), "7.46×"),
    (fmt_ratio(None), "—"),
])
def test_formatting_of_cells(text: str, expected: str) -> None:
    assert text == expected


def test_figure_row_names_the_baseline_and_reports_errors_first() -> None:
    f = fig(500.0, 1000.0, errors=2)
    f.note = "slow"
    row = figure_row(f)
    assert len(row) == len(COLUMNS)
    assert row[4] == "1,000 req/s (psycopg)"
    assert row[6] == "50.0 %"
    assert row[8] == "fail"
    assert row[10] == "2 errors; slow"


def test_markdown_table_escapes_pipes_and_has_one_line_per_row() -> None:
    text = markdown_table(["a", "b"], [["1", "x|y"], ["2", "z"]])
    lines = text.splitlines()
    assert lines[0] == "| a | b |"
    assert lines[1] == "|---|---|"
    assert lines[2] == "| 1 | x\\|y |"
    assert len(lines) == 4


def test_compare_passes_picks_the_pass_with_the_best_ratios() -> None:
    one = [fig(300.0, 1000.0), fig(100.0, 1000.0, name="list"), fig(5.0, None, name="peer")]
    two = [fig(450.0, 1000.0), fig(120.0, 1000.0, name="list"), fig(6.0, None, name="peer")]
    rows, fastest = compare_passes({"1 worker": one, "2 workers": two})
    assert fastest == "2 workers"
    # figures without a baseline are left out; a last row summarises
    assert [r[1] for r in rows] == ["GET by id, 16 clients", "list", "geometric mean of ratios"]
    assert rows[0][-1] == "2 workers"


def test_compare_passes_of_nothing_names_no_winner() -> None:
    assert compare_passes({}) == ([], None)


def test_render_markdown_has_facts_a_table_per_pass_and_the_comparison() -> None:
    report = RunReport(
        facts={"nproc": "2", "CPU model": "AMD EPYC"},
        passes={"1 worker": [fig(300.0, 1000.0)], "2 workers": [fig(450.0, 1000.0)]},
        notes=["peers were not measured"],
    )
    text = render_markdown(report)
    assert "| nproc | 2 |" in text
    assert "## Results: 1 worker" in text and "## Results: 2 workers" in text
    assert "## Worker comparison" in text
    assert "Fastest on this machine: **2 workers**" in text
    assert "- peers were not measured" in text
    assert "| records.get | GET by id, 16 clients | 450 req/s |" in text
    assert report.failed() == [report.passes["1 worker"][0]]


def test_render_markdown_of_one_pass_has_no_comparison() -> None:
    text = render_markdown(RunReport(facts={}, passes={"1 worker": [fig(500.0, 1000.0)]}))
    assert "Worker comparison" not in text
    assert "| pass |" in text


def test_select_matches_substrings_case_insensitively() -> None:
    assert [s.name for s in select(["LIST_count"])] == ["records.list_count"]
    assert {s.name for s in select(["records.list"])} == {"records.list", "records.list_count"}
    assert len(select(None)) == len(REGISTRY)
    assert select(["no-such-scenario"]) == []


def test_registering_a_scenario_name_twice_is_refused() -> None:
    with pytest.raises(ValueError):
        scenario("records.get", title="again")(lambda ctx: asyncio.sleep(0))  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize(("argv", "duration", "rows"), [
    ([], 5.0, 10_000),
    (["--quick"], 1.0, 2_000),
    (["--quick", "--duration", "3", "--rows", "500"], 3.0, 500),
])
def test_config_defaults_and_quick_mode(argv: list[str], duration: float, rows: int) -> None:
    config = config_from(build_parser().parse_args(argv))
    assert (config.duration_s, config.rows) == (duration, rows)
    assert 0 < config.warmup_s <= 1.0


def test_phase_result_rates_and_latency_percentiles() -> None:
    r = PhaseResult(concurrency=1, ops=4, errors=0, elapsed_s=2.0, latencies=[0.001, 0.002, 0.003, 0.004],
                    client_cpu_s=0.5)
    assert r.rate == 2.0
    assert r.p50_ms == pytest.approx(2.5)
    assert r.p99_ms == pytest.approx(3.97)
    assert r.client_cpu == 0.25


async def test_run_phase_stops_at_the_operation_cap() -> None:
    async def op() -> None:
        await asyncio.sleep(0)

    result = await run_phase(op, concurrency=4, duration_s=30, max_ops=50)
    assert result.ops == 50 and result.errors == 0
    assert len(result.latencies) == 50


async def test_run_phase_counts_failures_and_gives_up_on_a_broken_operation() -> None:
    async def op() -> None:
        await asyncio.sleep(0)
        raise OperationFailed("HTTP 500")

    result = await run_phase(op, concurrency=2, duration_s=30, max_ops=10_000)
    assert result.ops == 0
    assert 50 <= result.errors < 100
    assert result.first_error == "OperationFailed: HTTP 500"


def test_nocodb_credentials_come_from_the_peer_env_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "nocodb.env").write_text("export NOCODB_TOKEN=tok123 NOCODB_BASE_ID=base9\n")
    monkeypatch.setenv("PEER_WORK", str(tmp_path))
    monkeypatch.delenv("NOCODB_TOKEN", raising=False)
    monkeypatch.delenv("NOCODB_BASE_ID", raising=False)
    assert _nocodb_env() == {"NOCODB_TOKEN": "tok123", "NOCODB_BASE_ID": "base9"}


def test_merge_adds_up_slices_of_a_phase() -> None:
    a = PhaseResult(16, 10, 1, 1.0, [0.1] * 10, 0.2, "OperationFailed: x")
    b = PhaseResult(16, 30, 0, 2.0, [0.2] * 30, 0.4, None)
    m = merge([a, b])
    assert (m.ops, m.errors, m.elapsed_s, len(m.latencies)) == (40, 1, 3.0, 40)
    assert m.client_cpu_s == pytest.approx(0.6)
    assert m.first_error == "OperationFailed: x"
    with pytest.raises(ValueError):
        merge([])


async def test_run_interleaved_alternates_the_operations_slice_by_slice() -> None:
    order: list[str] = []

    def op(name: str):  # type: ignore[no-untyped-def]
        async def run() -> None:
            if not order or order[-1] != name:
                order.append(name)
            await asyncio.sleep(0)
        return run

    results = await run_interleaved([op("api"), op("pg")], concurrency=1, duration_s=10, max_ops=6, rounds=3)
    assert order == ["api", "pg"] * 3
    assert [r.ops for r in results] == [6, 6]


async def test_run_alternating_batches_interleaves_calls_and_times_each_side() -> None:
    calls: list[str] = []

    def op(name: str):  # type: ignore[no-untyped-def]
        async def run() -> None:
            calls.append(name)
            if name == "b2":
                raise OperationFailed("rejected")
        return run

    api, pg = await run_alternating_batches([[op("a1"), op("a2"), op("a3")], [op("b1"), op("b2")]])
    assert calls == ["a1", "b1", "a2", "b2", "a3"]
    assert (api.ops, api.errors, pg.ops, pg.errors) == (3, 0, 1, 1)
    assert pg.first_error == "OperationFailed: rejected"
