"""What the sandbox child (:mod:`activities.sandbox_worker`) runs, and its per-value meter.

Each value runs under a CPU-time budget (``ITIMER_PROF``: the signal raises
:class:`OverBudget` at the next bytecode; C code that does not come back to the
interpreter is bounded by its own limits, the ``regex`` timeout and V8's) and a memory
cap (``RLIMIT_DATA``, the process's data segment now plus the cap: an allocation past it
raises ``MemoryError``). Whatever escapes both is ended by the parent's wall-clock kill.

Each job (one batch) also has a *demotion* threshold (:meth:`Meter.job`): once the batch
has used ``DEMOTE_AFTER_S`` of CPU plus ``DEMOTE_PER_RECORD_S`` per record (user time of
this process, ``ITIMER_VIRTUAL``, plus the time its JavaScript values spent in V8), the
child moves itself to ``SCHED_IDLE`` for the rest of the batch, and back to
``SCHED_OTHER`` when the batch ends. Legitimate batches stay well below it (the cheap
formulas take ~20 µs a value); a hostile one spends most of its budgets at a priority
that any other runnable task preempts at once. Returning to ``SCHED_OTHER`` needs root,
``CAP_SYS_NICE`` or ``RLIMIT_NICE`` ≥ 20 - ``NICE`` (e.g. systemd ``LimitNICE=10``);
without it the child is left idle after the batch, says so in its reply, and the parent
replaces it (a child stuck at ``SCHED_IDLE`` would starve the next tenant's batch).
The reply says whether the batch passed its threshold; the parent starts the next batch
of the same workspace at ``SCHED_IDLE`` from its first instruction if it did (a flood of
hostile batches then runs idle all the way), until one of its batches stays below.
"""

from __future__ import annotations

import os
import resource
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

from activities import formula, json_parser, templates
from activities.ledger import Ledger
from activities.types import PipelineInput

T = TypeVar("T")

DEMOTE_AFTER_S = 0.02  # CPU a batch may use at the child's normal priority ...
DEMOTE_PER_RECORD_S = 0.002  # ... plus this per record, before the rest runs at SCHED_IDLE


class OverBudget(BaseException):
    """A value ran out of its CPU budget. A BaseException, so that code catching
    ``Exception`` (the formula evaluator turns every Exception into a formula error) lets
    it through."""



def _data_bytes() -> int:
    """This process's data segment now (what RLIMIT_DATA counts), from /proc."""
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def rss_bytes() -> int:
    """This process's resident memory now."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class Meter:
    """Runs one value at a time under a CPU budget (main thread only), inside a batch whose
    data segment is capped at its size when the batch began plus ``memory_bytes``.

    Unarmed (``armed=False``, anywhere but the sandbox child) it just calls the function:
    the parent never installs signal handlers or limits on itself."""

    def __init__(self, memory_bytes: int, *, armed: bool = False) -> None:
        self.memory_bytes = memory_bytes
        self.armed = armed and hasattr(signal, "setitimer")
        self._in_value = False
        self._threshold = 0.0
        self._external = 0.0
        self.demoted = False  # SCHED_IDLE now (until the job ends)
        self.over = False  # the current (or last) job passed its demotion threshold
        self.stuck = False  # left at SCHED_IDLE after a job (returning was refused)
        self.demotions = 0  # jobs demoted so far (for tests and logs)
        self.start_idle = False  # the next job starts at SCHED_IDLE (set by the child's loop)
        if self.armed:
            signal.signal(signal.SIGPROF, self._on_timer)
            signal.signal(signal.SIGVTALRM, self._on_threshold)

    def _on_timer(self, signum: int, frame: Any) -> None:
        # a value's timer is re-armed when the next value starts, not disarmed after each
        # (one system call per value, not two): one that ends between values is ignored
        if self._in_value:
            raise OverBudget()

    def _on_threshold(self, signum: int, frame: Any) -> None:
        self.over = True
        self.demote()

    def demote(self) -> None:
        """Move this process (its main thread, which runs every job) to ``SCHED_IDLE``."""
        if self.demoted or not self.armed:
            return
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except (OSError, AttributeError):  # not Linux, or refused: stay at the nice level
            return
        self.demoted = True
        self.demotions += 1

    def _promote(self) -> None:
        if not self.demoted:
            return
        try:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        except OSError:  # EPERM without CAP_SYS_NICE or RLIMIT_NICE: the parent retires us
            self.stuck = True
            return
        self.demoted = False

    def charge(self, seconds: float) -> None:
        """Count CPU spent for this job outside this process (a JavaScript value's time in
        V8) against the demotion threshold."""
        if not self.armed:
            return
        self._external += seconds
        if self._external >= self._threshold:
            self.over = True
            self.demote()

    @contextmanager
    def job(self, records: int, *, idle: bool = False) -> Iterator[None]:
        """One batch of ``records``: past its demotion threshold (see the module's
        docstring), or from the start with ``idle`` (its workspace's last batch passed
        it), it runs at ``SCHED_IDLE``; it returns to ``SCHED_OTHER`` at the end.
        :attr:`over` then says whether this batch passed the threshold."""
        if not self.armed:
            yield
            return
        self._threshold = DEMOTE_AFTER_S + records * DEMOTE_PER_RECORD_S
        self._external = 0.0
        self.over = False
        if idle:
            self.demote()
        signal.setitimer(signal.ITIMER_VIRTUAL, self._threshold)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_VIRTUAL, 0)
            self._promote()

    @contextmanager
    def capped(self, enabled: bool = True) -> Iterator[None]:
        """Cap the data segment for the duration of a batch (one /proc read and two
        setrlimit calls per batch: per value they cost more than the cheap formulas)."""
        if not self.armed:
            yield
            return
        if not enabled:
            try:
                yield
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
            return
        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        cap = _data_bytes() + self.memory_bytes
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)  # the last value's timer
            resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))

    def run(self, fn: Callable[[], T], cpu_s: float) -> T:
        """``fn()`` within ``cpu_s`` seconds of CPU.

        Raises:
            OverBudget: the CPU budget ran out.
            MemoryError: the batch's memory cap was reached.
        """
        if not self.armed:
            return fn()
        # re-arming replaces the previous value's timer; the flag is set after it, so that
        # timer cannot fail this value (its signal, if it came, is ignored)
        signal.setitimer(signal.ITIMER_PROF, max(0.001, cpu_s))
        self._in_value = True
        try:
            return fn()
        finally:
            self._in_value = False


def formula_job(meter: Meter, source: str, language: str, records: dict[str, dict[str, Any]], now: str,
                budget: formula.Budget) -> tuple[dict[str, Any], dict[str, str], formula.Budget]:
    """One formula column over a batch: (values, errors, the budget as spent)."""
    # JavaScript runs in V8 worker processes started from here: they must not inherit the cap
    with meter.job(len(records), idle=meter.start_idle), meter.capped(language != "javascript"):
        values, errors, _ = formula.run_budgeted(source, language, records, datetime.fromisoformat(now), budget,
                                                 meter=meter, over_budget=OverBudget)
    return values, errors, budget


def pipeline_job(meter: Meter, p: PipelineInput, fields: dict[str, dict[str, Any]], now: str,
                 budget: formula.Budget) -> tuple[tuple[Any, ...], formula.Budget, list[tuple[str, str, float, int]]]:
    """Every level of a pure pipeline (formula and json_parser columns) over a batch, in
    order, as the fused pipeline activity runs it (``activities.records_io._evaluate``): one
    round trip for the whole run instead of one per formula column. Each formula column
    runs as :func:`formula_job` runs it (CPU budget per value, memory cap per column's
    batch, the row and batch budgets in ``budget``).

    Returns ((values, errors, steps, blocked) of the run's :class:`Ledger`, the budget as
    spent, (kind, status, seconds, records) per column evaluated)."""
    ledger = Ledger(p, list(fields))
    when = datetime.fromisoformat(now)
    timings: list[tuple[str, str, float, int]] = []
    with meter.job(len(fields), idle=meter.start_idle):
        _pipeline_levels(meter, ledger, fields, when, budget, timings)
    return (ledger.values, ledger.errors, ledger.steps, ledger.blocked), budget, timings


def _pipeline_levels(meter: Meter, ledger: Ledger, fields: dict[str, dict[str, Any]], when: datetime,
                     budget: formula.Budget, timings: list[tuple[str, str, float, int]]) -> None:
    for col, rids in ledger.due(fields):
        cid = col.id
        batch = {r: fields[r] for r in rids}
        started = time.perf_counter()
        if col.type == "formula":
            language = col.config.get("language", "excel")
            with meter.capped(language != "javascript"):
                values, errors, _ = formula.run_budgeted(col.formula or col.config.get("formula") or "", language,
                                                         batch, when, budget, meter=meter, over_budget=OverBudget)
        else:
            with meter.capped():
                values, errors = _jmespath(meter, col, batch, budget.value_s)
        timings.append((col.type, "error" if errors else "ok", time.perf_counter() - started, len(batch)))
        ledger.apply(cid, rids, values, errors, fields)


def render_job(meter: Meter, items: list[tuple[Any, dict[str, Any], dict[str, Any]]], value_s: float,
               deadline: float) -> list[tuple[bool, Any]]:
    """Render each (JSON value of templates, fields, extra): (True, rendered) or (False, error)."""
    out: list[tuple[bool, Any]] = []
    with meter.job(len(items), idle=meter.start_idle), meter.capped():
        _render_all(meter, items, value_s, deadline, out)
    return out


def _render_all(meter: Meter, items: list[tuple[Any, dict[str, Any], dict[str, Any]]], value_s: float,
                deadline: float, out: list[tuple[bool, Any]]) -> None:
    for value, fields, extra in items:
        if time.monotonic() >= deadline:
            out.append((False, templates.over_budget("the batch ran out of its wall-clock budget")))
            continue
        try:
            out.append((True, meter.run(lambda: templates.render_value(value, fields, **extra), value_s)))
        except OverBudget:
            out.append((False, templates.over_budget(f"rendering used more than its {value_s * 1000:.0f} ms CPU budget")))
        except MemoryError:
            out.append((False, templates.over_budget("rendering exceeded its memory cap")))
        except templates.TemplateFailure as exc:
            out.append((False, str(exc)))


def _jmespath(meter: Meter, col: Any, records: dict[str, dict[str, Any]],
              value_s: float) -> tuple[dict[str, Any], dict[str, str]]:
    return json_parser.evaluate_batch(col, records, run=lambda fn: meter.run(fn, value_s), over_budget=(OverBudget,))


def json_parser_job(meter: Meter, col: Any, records: dict[str, dict[str, Any]],
                    value_s: float) -> tuple[dict[str, Any], dict[str, str]]:
    """One json_parser column over a batch (a path that is not simple: :func:`activities.json_parser.is_simple`),
    each value under ``value_s`` of CPU, the batch under the memory cap."""
    with meter.job(len(records), idle=meter.start_idle), meter.capped():
        return _jmespath(meter, col, records, value_s)


JOBS: dict[str, Callable[..., Any]] = {"formula": formula_job, "pipeline": pipeline_job, "render": render_job,
                                       "json_parser": json_parser_job}
