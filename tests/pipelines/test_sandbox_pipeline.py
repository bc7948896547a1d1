"""A pure pipeline whose formulas go to the sandbox runs there in one round trip
(``activities.records_io.evaluate_pure`` → ``Sandbox.pipeline``), with the same answers as
column by column: values flow down the chain, a failed value skips what reads it, the
plan's step budget charges each column, json_parser columns compute alongside, and a
batch out of its wall-clock budget fails its formula values with ``BUDGET_EXCEEDED``
(never running them) while the parser still computes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from activities import formula
from activities.ledger import BUDGET_EXCEEDED as STEP_BUDGET_EXCEEDED
from activities.ledger import SKIPPED, Ledger
from activities.records_io import evaluate_pure
from activities.types import Caller, ColumnSnap, FusedInput, PipelineInput, TableSnap

A, JSON, B, C, D, P = 1, 2, 3, 4, 5, 6
COLUMNS = [
    ColumnSnap(id=A, name="A", type="number"),
    ColumnSnap(id=JSON, name="Json", type="text"),
    ColumnSnap(id=B, name="B", type="formula", formula='LEN(REPT("a", {A}))'),  # heavy: the sandbox
    ColumnSnap(id=C, name="C", type="formula", formula="10 / ({B} - 2)"),  # 0 for A = 2
    ColumnSnap(id=D, name="D", type="formula", formula="{C} + 1"),  # cheap
    ColumnSnap(id=P, name="P", type="json_parser", config={"source_column": "Json", "path": "a.b"}),
]


def _input(*, step_budget: int = 10, time_budget_s: float = 10.0) -> FusedInput:
    pipeline = PipelineInput(
        table=TableSnap(id=1, workspace_id=1, name="T", columns=COLUMNS), record_ids=[0, 1, 2, 3], mode="create",
        levels=[[B, P], [C], [D]], caller=Caller(token_id=1, token_type="vibe_mcp", plan="free"),
        time_budget_s=time_budget_s, step_budget=step_budget,
        dependants={str(A): [B, C, D], str(B): [C, D], str(C): [D], str(JSON): [P]})
    return FusedInput(pipeline=pipeline, run_id="run-1", now=datetime.now(UTC).isoformat())


def _fields() -> dict[str, dict[str, Any]]:
    return {str(i): {"id": i, "A": i, "Json": f'{{"a": {{"b": {i * 10}}}}}', "B": None, "C": None, "D": None,
                     "P": None} for i in range(4)}


def _run(inp: FusedInput) -> tuple[Ledger, dict[str, dict[str, Any]]]:
    fields = _fields()
    return asyncio.run(evaluate_pure(inp, fields)), fields


def test_the_pipeline_runs_in_the_sandbox_and_answers_as_column_by_column():
    assert formula.sandbox_bound(COLUMNS[2]) and not formula.sandbox_bound(COLUMNS[4])
    ledger, fields = _run(_input())
    for i in (0, 1, 3):
        c = 10 / (i - 2)
        assert ledger.values[str(i)] == {B: i, P: i * 10, C: c, D: c + 1}
        assert ledger.errors[str(i)] == {}
        assert (fields[str(i)]["B"], fields[str(i)]["D"]) == (i, c + 1)  # later steps see the values
    # the division by zero fails C and skips D, which reads it: both are written null (an
    # edit must not keep a value computed from earlier inputs); B and P keep their values
    assert ledger.values["2"] == {B: 2, P: 20, C: None, D: None}
    assert set(ledger.errors["2"]) == {"C", "D"} and ledger.errors["2"]["D"] == SKIPPED
    assert ledger.steps == {"0": 4, "1": 4, "2": 3, "3": 4}
    result, updates = ledger.result("run-1", json_keys=False)
    assert result.status == "error" and sorted(result.ok) == ["0", "1", "3"] and len(updates) == 4


def test_the_step_budget_is_charged_column_by_column_in_the_sandbox():
    ledger, _ = _run(_input(step_budget=3))
    # B, P and C fit in 3 steps; D, the fourth, is over the plan's step budget
    assert all(ledger.errors[r]["D"] == STEP_BUDGET_EXCEEDED for r in ("0", "1", "3"))
    assert all(ledger.values[r][D] is None and ledger.values[r][C] is not None for r in ("0", "1", "3"))


def test_a_batch_out_of_its_wall_clock_budget_fails_its_formulas_and_still_parses():
    ledger, _ = _run(_input(time_budget_s=0.0))  # the batch's deadline is its start
    for r in ("0", "1", "2", "3"):
        assert ledger.errors[r]["B"].startswith(formula.BUDGET_EXCEEDED)
        assert ledger.errors[r]["C"] == SKIPPED and ledger.errors[r]["D"] == SKIPPED
        assert ledger.values[r] == {B: None, C: None, D: None, P: int(r) * 10}
