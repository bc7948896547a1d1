"""peers.compare's figure and target logic (issue 24 item 6), without the peers: two rounds
in alternating order, two modes of this service, "not measured" whenever a side is missing,
and the copy of the peers' script that spreads its requests over several tokens."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from bench.context import BenchConfig, BenchContext
from bench.report import Verdict, evaluate
from bench.scenarios.peers import LIMITED, MODES, OFF, PEERS, TOKENS, compare_peers, figures_of, round_order
from bench.stack import Deployment


def result(list_rps: float, insert_rps: float, *, seq_rps: float = 100.0, errors: int = 0) -> dict[str, Any]:
    """bench.py's JSON, the fields the figures read."""
    return {"insert_rows_per_s": insert_rps,
            "seq": {"req_per_s": seq_rps, "p50_ms": 2.0, "p99_ms": 5.0, "errors": 0},
            "c16": {"req_per_s": list_rps, "p50_ms": 10.0, "p99_ms": 30.0, "errors": errors}}


def by_name(figures: list[Any]) -> dict[str, Any]:
    return {f.name: f for f in figures}


def test_rounds_alternate_this_service_first_then_last() -> None:
    first, second = round_order(1), round_order(2)
    assert first[:2] == [OFF.key, LIMITED.key] and first[2:] == ["directus", "nocodb"]
    assert second == first[::-1]
    assert round_order(3) == first


def test_targets_are_the_issues() -> None:
    targets = {p.key: (p.list_target, p.insert_target) for p in PEERS}
    assert targets == {"directus": (6.0, None), "nocodb": (9.0, 5.0)}


def test_nothing_measured_gives_every_figure_not_measured_with_the_reason() -> None:
    notes = {(r, p.key): f"{p.label} down" for r in (1, 2) for p in PEERS}
    figs = figures_of({}, notes, conc=16)
    assert len(figs) == 2 * len(MODES) * len(PEERS) * 3
    assert all(f.value is None and f.baseline is None for f in figs)
    targeted = [f for f in figs if f.target is not None]
    assert targeted and all(evaluate(f) is Verdict.NOT_MEASURED for f in targeted)
    assert all("down" in f.note for f in figs)
    assert sum(f.name.endswith(", run 1") for f in figs) == sum(f.name.endswith(", run 2") for f in figs) == 12


def test_each_round_and_mode_is_its_own_figure_judged_on_its_own() -> None:
    results = {
        (1, OFF.key): result(1900.0, 16000.0), (1, LIMITED.key): result(1500.0, 15000.0),
        (1, "directus"): result(300.0, 600.0), (1, "nocodb"): result(200.0, 3000.0),
        # run 2: limits off misses Directus's 6× (1700 / 300 < 6)
        (2, OFF.key): result(1700.0, 16000.0), (2, LIMITED.key): result(1850.0, 14000.0),
        (2, "directus"): result(300.0, 600.0), (2, "nocodb"): result(200.0, 3000.0),
    }
    figs = by_name(figures_of(results, {}, conc=16))
    one = figs["filtered list, 16 clients (limits off) vs Directus 12.4.0, run 1"]
    assert (one.value, one.baseline, one.ratio) == (1900.0, 300.0, pytest.approx(1900 / 300))
    assert evaluate(one) is Verdict.PASS
    assert evaluate(figs["filtered list, 16 clients (limits off) vs Directus 12.4.0, run 2"]) is Verdict.FAIL
    limited = figs[f"filtered list, 16 clients (default limits, {TOKENS} tokens) vs NocoDB 0.301.3, run 1"]
    assert limited.ratio == pytest.approx(7.5) and evaluate(limited) is Verdict.FAIL  # < 9×
    assert "enterprise" in limited.note and f"{TOKENS} tokens" in limited.note
    assert evaluate(figs[f"filtered list, 16 clients (default limits, {TOKENS} tokens) vs NocoDB 0.301.3, "
                         "run 2"]) is Verdict.PASS
    insert = figs["batch insert, 100/call (limits off) vs NocoDB 0.301.3, run 2"]
    assert insert.unit == "rows/s" and insert.ratio == pytest.approx(16000 / 3000)
    assert evaluate(insert) is Verdict.PASS
    assert figs["batch insert, 100/call (limits off) vs Directus 12.4.0, run 1"].target is None
    seq = figs["filtered list, sequential (limits off) vs Directus 12.4.0, run 1"]
    assert seq.target is None and seq.value == 100.0


def test_refusals_under_the_limiter_fail_the_figure_whatever_the_ratio() -> None:
    results = {(1, LIMITED.key): result(5000.0, 16000.0, errors=3), (1, "nocodb"): result(200.0, 3000.0)}
    fig = by_name(figures_of(results, {}, conc=16, rounds=1))[
        f"filtered list, 16 clients (default limits, {TOKENS} tokens) vs NocoDB 0.301.3, run 1"]
    assert fig.errors == 3 and evaluate(fig) is Verdict.FAIL


def test_a_missing_side_is_never_shown_one_sided() -> None:
    results = {(1, OFF.key): result(1900.0, 16000.0), (1, "directus"): result(300.0, 600.0),
               (2, OFF.key): result(1900.0, 16000.0)}
    notes = {(1, LIMITED.key): "default limits: needs the operator key", (1, "nocodb"): "NocoDB down",
             (2, "directus"): "run 2, directus: exited 1"}
    figs = by_name(figures_of(results, notes, conc=16))
    assert figs["filtered list, 16 clients (limits off) vs Directus 12.4.0, run 1"].ratio is not None
    gone = [
        figs["filtered list, 16 clients (limits off) vs NocoDB 0.301.3, run 1"],  # the peer is down
        figs[f"filtered list, 16 clients (default limits, {TOKENS} tokens) vs Directus 12.4.0, run 1"],  # ours
        figs["filtered list, 16 clients (limits off) vs Directus 12.4.0, run 2"],  # the peer's run failed
    ]
    for fig in gone:
        assert fig.value is None and fig.baseline is None and evaluate(fig) is Verdict.NOT_MEASURED
    assert "NocoDB down" in gone[0].note
    assert "operator key" in gone[1].note
    assert "exited 1" in gone[2].note


async def test_without_the_script_the_scenario_reports_not_measured() -> None:
    deployment = Deployment("http://127.0.0.1:9", "tok", None, 1, embedded=False)
    ctx = BenchContext(deployment, BenchConfig(peers_bench="/nonexistent/bench.py"), session=None)  # type: ignore[arg-type]
    figs = await compare_peers(ctx)
    assert len(figs) == 24 and all(f.value is None for f in figs)
    assert all("/nonexistent/bench.py missing" in f.note for f in figs)


def test_the_scripts_copy_takes_the_tokens_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    peer_bench = importlib.import_module("bench.peer_bench")
    monkeypatch.setenv("WDS_TOKENS", "t1,t2,t3")
    wds = peer_bench.WDS()
    wds.table_id = 7
    auth = [wds.headers()["Authorization"] for _ in range(4)]
    assert auth == ["Bearer t1", "Bearer t2", "Bearer t3", "Bearer t1"]
    url, hdr = wds.list_req(count=True)
    assert url.endswith("/tables/7/records?Score=gt.500&Status=eq.a&limit=100&offset=0&order=id.asc")
    assert callable(hdr)
    made = [hdr() for _ in range(2)]
    assert [h["Authorization"] for h in made] == ["Bearer t2", "Bearer t3"]
    assert all(h["Prefer"] == "count=exact" for h in made)


def test_the_scripts_copy_without_tokens_sends_the_one_token(monkeypatch: pytest.MonkeyPatch) -> None:
    peer_bench = importlib.import_module("bench.peer_bench")
    monkeypatch.delenv("WDS_TOKENS", raising=False)
    monkeypatch.setattr(peer_bench.WDS, "token", "only")
    wds = peer_bench.WDS()
    _, hdr = wds.list_req()
    assert hdr == {"Authorization": "Bearer only", "Content-Type": "application/json"}
