"""Hostile formulas (issue #22, item 2): an endless JavaScript loop, catastrophic regular
expressions, and many of them in one formula, over whole batches. Each value has a CPU
budget, each column of a batch stops after a few values over budget, and the write still
answers, with ``BUDGET_EXCEEDED`` in ``pipeline.errors``; meanwhile another workspace's
reads and ``/healthz`` keep answering (the evaluation runs in the sandbox processes).
On the code before the budgets, the same batches answered after 25-50 s with plain
``#TIMEOUT!`` values while every other client stalled."""

from __future__ import annotations

from datetime import datetime, timezone

from activities.formula import BUDGET_EXCEEDED, STRIKES, Budget, run_budgeted
from tests.security.probes import Bystander, bystander_record

CATASTROPHIC = '"(a|aa)+$"'
SLOW_TITLE = "a" * 30 + "!"


def _hostile_batch(ws, formula: str, n: int, *, language: str = "excel") -> list[dict]:
    config = {"language": language} if language != "excel" else {}
    t = ws.create_table("Hostile", [
        {"name": "Title", "type": "text"},
        {"name": "Ok", "type": "formula", "formula": "LEN({Title})"},
        {"name": "Bad", "type": "formula", "formula": formula, "config": config},
    ])
    r = ws.api.post(f"/tables/{t['id']}/records/batch",
                    json={"rows": [{"fields": {"Title": SLOW_TITLE}} for _ in range(n)]})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert len(results) == n and all("record" in x for x in results), results[:2]
    return [x["record"] for x in results]


def _assert_budgeted(records: list[dict]) -> None:
    errors = [rec["pipeline"]["errors"].get("Bad", "") for rec in records]
    assert all(e.startswith(BUDGET_EXCEEDED) for e in errors), sorted(set(errors))[:3]
    # the column stops after a few values over budget: the rest never ran
    assert sum("went over its budget" in e for e in errors) >= len(records) - STRIKES - 1
    # the cheap column of the same rows is unaffected, and the records were stored
    assert all(rec["fields"]["Ok"] == len(SLOW_TITLE) and rec["fields"]["Bad"] is None for rec in records)


def test_an_endless_javascript_formula_is_stopped_by_its_budget_and_nobody_else_waits(make_workspace, base_url):
    other, path = bystander_record(make_workspace)
    hostile = make_workspace()
    with Bystander(base_url, other.builder_token, path) as bystander:
        records = _hostile_batch(hostile, "while(true){}", 500, language="javascript")
    _assert_budgeted(records)
    assert bystander.statuses and bystander.failures() == []


def test_a_catastrophic_regex_over_a_batch_is_stopped_by_its_budget(make_workspace, base_url):
    other, path = bystander_record(make_workspace)
    hostile = make_workspace()
    with Bystander(base_url, other.builder_token, path) as bystander:
        records = _hostile_batch(hostile, f"REGEX_MATCH({{Title}}, {CATASTROPHIC})", 500)
    _assert_budgeted(records)
    assert bystander.statuses and bystander.failures() == []


def test_twenty_catastrophic_regex_calls_in_one_formula_are_one_value_budget(make_workspace, base_url):
    other, path = bystander_record(make_workspace)
    hostile = make_workspace()
    formula = " & ".join([f"REGEX_MATCH({{Title}}, {CATASTROPHIC})"] * 20)
    with Bystander(base_url, other.builder_token, path) as bystander:
        records = _hostile_batch(hostile, formula, 40)
    _assert_budgeted(records)
    # the first values end on their CPU budget (100 ms), not after 20 x 50 ms of regex
    first = records[0]["pipeline"]["errors"]["Bad"]
    assert "CPU budget" in first or "#TIMEOUT!" in first
    assert bystander.failures() == []


def test_a_record_stops_at_its_total_budget_across_formula_values():
    now = datetime.now(timezone.utc)
    budget = Budget(row_s=0.0, deadline=float("inf"), used={"1": 0.0})
    values, errors, rest = run_budgeted("1 + 1", "excel", {"1": {}}, now, budget)
    assert values == {} and rest == {} and errors["1"].startswith(BUDGET_EXCEEDED)


def test_a_batch_past_its_wall_clock_deadline_fails_its_remaining_values():
    now = datetime.now(timezone.utc)
    budget = Budget(deadline=0.0)  # long past
    values, errors, _ = run_budgeted("{A} * 2", "excel", {"1": {"A": 1}, "2": {"A": 2}}, now, budget)
    assert values == {} and all(e.startswith(BUDGET_EXCEEDED) and "wall-clock" in e for e in errors.values())


def test_a_jmespath_path_that_builds_more_than_it_reads_runs_in_the_sandbox(make_workspace, base_url):
    """A json_parser path ran inline on the event loop with no budget: ``[@,@] | …`` 25
    times over "1" built a 134-million-character value and held every tenant for 6.5 s.
    A path with functions, projections or pipes now runs in the sandbox under the CPU
    budget per value (inline there is no budget, so the error proves where it ran); a
    path that only walks the document still runs inline and answers as before."""
    other, path = bystander_record(make_workspace)
    hostile = make_workspace()
    doubling = " | ".join(["[@,@]"] * 25) + " | length(to_string(@))"
    t = hostile.create_table("Jmes", [
        {"name": "T", "type": "text"},
        {"name": "Walk", "type": "json_parser", "config": {"source_column": "T", "path": "a.b[1]"}},
        {"name": "Boom", "type": "json_parser", "config": {"source_column": "T", "path": doubling}},
        {"name": "Small", "type": "json_parser", "config": {"source_column": "T", "path": "length(a.b)"}},
    ])
    with Bystander(base_url, other.builder_token, path) as bystander:
        r = hostile.api.post(f"/tables/{t['id']}/records", json={"fields": {"T": '{"a": {"b": [1, 2]}}'}}, timeout=60)
    assert r.status_code == 201, r.text
    rec = r.json()
    assert rec["fields"]["Walk"] == 2 and rec["fields"]["Small"] == 2
    assert rec["fields"]["Boom"] is None
    assert rec["pipeline"]["errors"]["Boom"].startswith(BUDGET_EXCEEDED), rec["pipeline"]
    assert bystander.statuses and bystander.failures() == []


def test_search_is_linear_in_the_text(ws):
    """SEARCH compiled its needle into a regular expression: len(needle) × len(text) on
    the event loop (20,000 × 250,000 characters: 10 s; these sizes: many minutes)."""
    t = ws.create_table("Search", [{"name": "A", "type": "text"}, {"name": "B", "type": "text"},
                                   {"name": "X", "type": "formula", "formula": "SEARCH({A}, {B})"}])
    r = ws.api.post(f"/tables/{t['id']}/records",
                    json={"fields": {"A": "a" * 100_000 + "B", "B": "A" * 900_000 + "b"}}, timeout=60)
    assert r.status_code == 201, r.text
    assert r.json()["fields"]["X"] == 800_001
