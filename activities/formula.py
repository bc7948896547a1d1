"""The formula kind: Excel/Airtable-like or JavaScript formulas over a record.

Budgets (issue #22; docs/security.md): every value has a CPU budget
(``VALUE_CPU_S``) and a memory cap, every record a total over the run's formula values
(``ROW_CPU_S``, within the plan's time budget per row), every batch a wall-clock deadline.
A value past one fails with ``BUDGET_EXCEEDED`` (its write still answers); after
``STRIKES`` such values in one column of a batch, the column's remaining records fail the
same way without running. Evaluation never runs on the event loop, except formulas
proven cheap (:func:`is_cheap`), which run inline for at most ``INLINE_SLICE_S`` per
column and batch before the rest of the batch goes to the sandbox processes
(:mod:`activities.sandbox`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

import orjson

from activities.types import ColumnSnap
from storage.errors import InvalidFormula
from storage.formula import CompiledFormula, FormulaError, compile_formula
from storage.formula.errors import MEMORY, TIMEOUT

BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
VALUE_CPU_S = 0.1  # CPU per value (JavaScript also keeps V8's own 50 ms / 32 MB limits)
ROW_CPU_S = 1.0  # per record over every formula value of one run (capped by the plan's budget)
BATCH_WALL_S = 5.0  # wall clock per batch (capped by half the plan's time budget per row)
STRIKES = 3  # values over budget in one column of a batch before the rest are failed unrun
# the computed values one run may hold, every column together (text counted by characters):
# REPT({Name}, 500000) over a 500-row batch made 500 MB, held in the sandbox, the API, the
# INSERT and the answer at once (docs/decisions.md, "A run's values are bounded in bytes")
RUN_VALUE_BYTES = 64 * 1024 * 1024
INLINE_SLICE_S = 0.05  # how long cheap formulas may run on the event loop per column and batch
CHEAP_NODES = 64  # a formula with more syntax nodes than this is not "cheap"
# Where formulas run (an operator knob, read once; bench/scenarios/sandbox.py compares them):
# "cheap" (default) cheap Excel formulas inline, the rest in the sandbox; "never" every
# formula in the sandbox; "always" every Excel formula inline and unsliced, as before the
# budgets (no CPU budget or memory cap: for measurement only).
INLINE = os.environ.get("WDS_FORMULA_INLINE", "cheap")
# functions that build large text or lists from small input, loop, or run regular
# expressions: a formula calling one never runs inline
HEAVY_FUNCTIONS = frozenset({
    "REGEX_MATCH", "REGEX_EXTRACT", "REGEX_REPLACE", "REPT", "SPLIT", "SUBSTITUTE", "REPLACE",
    "LPAD", "RPAD", "ARRAYJOIN", "ARRAYFLATTEN", "ARRAYUNIQUE", "ARRAYCOMPACT", "ARRAYSLICE",
    "WORKDAY", "WORKDAY_DIFF", "DATETIME_FORMAT", "DATETIME_PARSE",
})


@dataclass
class Budget:
    """The budgets of one batch. ``deadline`` is on ``time.monotonic()`` (one clock for
    every process of the machine); ``used`` is CPU seconds per record so far."""

    value_s: float = VALUE_CPU_S
    row_s: float = ROW_CPU_S
    deadline: float = 0.0
    used: dict[str, float] = field(default_factory=dict)
    strikes: int = STRIKES
    value_bytes: int = RUN_VALUE_BYTES  # left for the run's values (:func:`value_size`)

    @classmethod
    def for_run(cls, time_budget_s: float, *, started: float | None = None) -> Budget:
        """The budgets of a run whose plan gives ``time_budget_s`` per row."""
        start = time.monotonic() if started is None else started
        return cls(row_s=min(ROW_CPU_S, time_budget_s), deadline=start + min(BATCH_WALL_S, time_budget_s / 2))

    def subset(self, rids: list[str]) -> Budget:
        return dataclasses.replace(self, used={r: self.used.get(r, 0.0) for r in rids})

    def absorb(self, spent: Budget) -> None:
        """Take what a :meth:`subset` spent elsewhere (a sandbox child): its records' time
        and the run's bytes left."""
        self.used.update(spent.used)
        self.value_bytes = spent.value_bytes


def over(detail: str) -> str:
    """A budget failure as it shows in ``pipeline.errors``."""
    return f"{BUDGET_EXCEEDED} {detail}"


def value_size(value: Any) -> int:
    """What a computed value counts against :attr:`Budget.value_bytes`: a text's
    characters, a list's or object's JSON bytes, 8 for anything else."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (list, dict)):
        try:
            return len(orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS))
        except TypeError:  # not JSON (the write refuses it later); its text stands in
            return len(repr(value))
    return 8


TOO_MANY_BYTES = over(f"the run's computed values passed {RUN_VALUE_BYTES // (1024 * 1024)} MiB, so this"
                      " value was not kept: run the column again for this record (run-actions)")


def _walk(node: Any) -> Any:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        for f in dataclasses.fields(n):
            v = getattr(n, f.name)
            if dataclasses.is_dataclass(v):
                stack.append(v)
            elif isinstance(v, (list, tuple)):
                for item in v:
                    if dataclasses.is_dataclass(item):
                        stack.append(item)
                    elif isinstance(item, tuple):  # Chain.rest: (operator, node)
                        stack.extend(x for x in item if dataclasses.is_dataclass(x))


@lru_cache(maxsize=2048)
def is_cheap(compiled: CompiledFormula) -> bool:
    """An Excel formula of at most ``CHEAP_NODES`` nodes calling no heavy function: its
    cost per value is bounded by the size of the record it reads (measured: the 3-formula
    bench columns take ~20 µs a value), so it may run inline on the event loop."""
    if compiled.tree is None:
        return False
    count = 0
    for node in _walk(compiled.tree):
        count += 1
        if count > CHEAP_NODES or getattr(node, "name", None) in HEAVY_FUNCTIONS and hasattr(node, "args"):
            return False
    return True


def run_budgeted(
    formula: str | CompiledFormula, language: str, records: dict[str, dict[str, Any]], now: datetime,
    budget: Budget, *, meter: Any = None, over_budget: type[BaseException] | None = None,
    stop_at: float | None = None,
) -> tuple[dict[str, Any], dict[str, str], dict[str, dict[str, Any]]]:
    """Evaluate one formula for many records under ``budget``.

    Returns (values, errors, rest): ``rest`` are the records not evaluated because
    ``stop_at`` (a ``time.perf_counter()`` instant) passed; ``budget.used`` is updated.
    ``meter`` (the sandbox child's) enforces the CPU budget and memory cap per value and
    raises ``over_budget``, and is charged the time JavaScript values spend in V8 (its
    demotion threshold); without it (inline) values are only timed.
    """
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    try:
        compiled = formula if isinstance(formula, CompiledFormula) else compile_formula(formula, language=language)
    except InvalidFormula as exc:
        return {}, {rid: exc.message for rid in records}, {}
    is_js = compiled.language == "javascript"
    catch: tuple[type[BaseException], ...] = (over_budget,) if over_budget is not None else ()
    metered = meter is not None and not is_js  # V8 limits JavaScript itself (the parent only waits on a pipe)
    evaluate = compiled.evaluate
    clock, wall = time.perf_counter, time.monotonic  # locals: this loop runs once per value
    used_by, value_s, row_s, deadline, max_strikes = budget.used, budget.value_s, budget.row_s, budget.deadline, budget.strikes
    strikes = 0
    items = list(records.items())
    for i, (rid, fields) in enumerate(items):
        started = clock()  # the value's time counts from here (its checks included)
        if stop_at is not None and i and started >= stop_at:
            return values, errors, dict(items[i:])
        used = used_by.get(rid, 0.0)
        allowed = min(value_s, row_s - used)
        if strikes >= max_strikes:
            errors[rid] = over(f"the formula went over its budget on {strikes} "
                               f"record{'' if strikes == 1 else 's'} of this batch")
            continue
        if wall() >= deadline:
            errors[rid] = over("the batch ran out of its wall-clock budget")
            continue
        if allowed <= 0:
            errors[rid] = over(f"the record used its {row_s:g} s of formula time")
            continue
        try:
            if metered:
                values[rid] = meter.run(functools.partial(evaluate, fields, now=now), allowed)
            else:
                values[rid] = evaluate(fields, now=now)
        except catch:
            errors[rid] = over(f"a value used more than its {allowed * 1000:.0f} ms CPU budget")
            strikes += 1
        except MemoryError:
            errors[rid] = over("a value exceeded its memory cap")
            strikes += 1
        except FormulaError as exc:
            if exc.code in (TIMEOUT, MEMORY):
                errors[rid] = over(f"{exc.code} {exc.message}".strip())
                strikes += 1
            else:
                errors[rid] = f"{exc.code} {exc.message}".strip()
        if rid in values:
            size = value_size(values[rid])
            if size > budget.value_bytes:
                del values[rid]  # the run keeps at most RUN_VALUE_BYTES of values
                errors[rid] = TOO_MANY_BYTES
            else:
                budget.value_bytes -= size
        spent = clock() - started
        used_by[rid] = used + spent
        if is_js and meter is not None:
            meter.charge(spent)  # V8's time, in another process, counts towards demotion
    return values, errors, {}


def sandbox_bound(col: ColumnSnap) -> bool:
    """Whether :func:`evaluate_column` sends every value of this column to the sandbox
    (JavaScript, heavy or long Excel formulas, or ``WDS_FORMULA_INLINE=never``); a cheap
    column (inline, even when its slice spills part of a batch over) or one that does not
    compile (its error needs no evaluation) is not."""
    if col.type == "json_parser" and not col.broken:
        from activities import json_parser  # (it imports this module)

        return INLINE == "never" or not json_parser.is_simple(col.config.get("path"))
    if col.type != "formula" or col.broken:
        return False
    language = col.config.get("language", "excel")
    if language != "excel":
        return True
    try:
        compiled = compile_formula(col.formula or col.config.get("formula") or "", language=language)
    except InvalidFormula:
        return False
    return not (INLINE == "always" or (INLINE == "cheap" and is_cheap(compiled)))


async def evaluate_column(
    col: ColumnSnap, records: dict[str, dict[str, Any]], now: datetime, budget: Budget, sandbox: Any,
    *, workspace: int | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """One formula column over a batch, off the event loop unless cheap: (values, errors)."""
    source = col.formula or col.config.get("formula") or ""
    language = col.config.get("language", "excel")
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    if language == "excel":
        try:
            compiled = compile_formula(source, language=language)  # cached: parsed at column creation
        except InvalidFormula as exc:
            return {}, {rid: exc.message for rid in records}
        if INLINE == "always" or (INLINE == "cheap" and is_cheap(compiled)):
            stop_at = None if INLINE == "always" else time.perf_counter() + INLINE_SLICE_S
            values, errors, records = run_budgeted(compiled, language, records, now, budget, stop_at=stop_at)
            if not records:
                return values, errors
    more_values, more_errors = await sandbox.formula(source, language, records, now, budget, workspace=workspace)
    values.update(more_values)
    errors.update(more_errors)
    return values, errors


def evaluate_batch(
    col: ColumnSnap, records: dict[str, dict[str, Any]], now: datetime
) -> tuple[dict[str, Any], dict[str, str]]:
    """Evaluate one formula column for many records in this thread, unbudgeted: (values,
    errors) by record id. Only for callers off the event loop (tools, tests)."""
    source = col.formula or col.config.get("formula") or ""
    try:
        compiled = compile_formula(source, language=col.config.get("language", "excel"))
    except InvalidFormula as exc:
        return {}, {rid: exc.message for rid in records}
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for rid, fields in records.items():
        try:
            values[rid] = compiled.evaluate(fields, now=now)
        except FormulaError as exc:
            errors[rid] = f"{exc.code} {exc.message}".strip()
    return values, errors
