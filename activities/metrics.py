"""Prometheus step histograms for the pipeline activities, and the worker's exporter.

Every step activity (``pure_step``, ``record_step``, ``http_step``, ``action_step``,
``ai_step``) is wrapped by :func:`timed_step`, and the fused ``pure_pipeline`` calls
:func:`observe_step` per column; both observe
``wds_step_duration_seconds{kind, status}``: ``kind`` is the computed column's kind
(``formula``, ``http_request``, ...; a loop's sub-step counts as its own kind) and
``status`` is ``ok`` (no record failed), ``error`` (some record's cell got an error) or
``exception`` (the activity raised; Temporal retries or fails it). Retried attempts are
observed one by one.

The metrics live in prometheus_client's default registry, so the API process (whose
in-process worker runs steps too) serves them on ``GET /metrics``; a standalone worker
serves them with :func:`start_worker_exporter` on ``WDS_WORKER_METRICS_PORT``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from prometheus_client import Counter, Histogram, start_http_server

from activities.types import StepInput, StepResult

log = logging.getLogger("wds.metrics")

# pipelines steps range from sub-millisecond formulas to minute-long AI calls
STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

STEP_SECONDS = Histogram(
    "wds_step_duration_seconds",
    "Duration of one pipeline step activity (one computed column over a batch of records)",
    ("kind", "status"),
    buckets=STEP_BUCKETS,
)
STALE_VALUES = Counter(
    "wds_pipeline_stale_values_total",
    "Computed values a run did not store because their inputs or their column's definition"
    " changed while it ran (a newer write's run or a backfill stores the current ones)",
)
STEP_RECORDS = Histogram(
    "wds_step_records",
    "Records handled by one pipeline step activity",
    ("kind",),
    buckets=(1, 2, 5, 10, 25, 50, 100, 200, 500, 1000),
)

F = TypeVar("F", bound=Callable[..., Awaitable[StepResult]])


def step_kind(inp: StepInput) -> str:
    """The computed column kind a step runs (a loop's sub-step: the sub-step's kind).

    >>> from activities.types import TableSnap, ColumnSnap, Caller
    >>> t = TableSnap(id=1, workspace_id=1, name="t", columns=[ColumnSnap(id=5, name="a", type="formula")])
    >>> step_kind(StepInput(table=t, column_id=5, records={}, now="", caller=Caller(1, "rest_api", "pro")))
    'formula'
    """
    if inp.override and isinstance(inp.override.get("type"), str):
        return str(inp.override["type"])
    for col in inp.table.columns:
        if col.id == inp.column_id:
            return col.type
    return "unknown"


def observe_step(kind: str, status: str, seconds: float, records: int) -> None:
    """Record one step (one column over ``records`` records); for steps evaluated inside
    another activity, e.g. the formula and parser columns of the fused ``pure_pipeline``."""
    STEP_SECONDS.labels(kind, status).observe(seconds)
    STEP_RECORDS.labels(kind).observe(records)


def timed_step(fn: F) -> F:
    """Observe a step activity's duration; put it under ``@activity.defn``.

    Works for functions and methods: the step input is the last positional argument.
    ``functools.wraps`` keeps the signature and annotations Temporal reads.
    """

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> StepResult:
        inp = args[-1] if args else next(iter(kwargs.values()))
        kind = step_kind(inp) if isinstance(inp, StepInput) else "unknown"
        status = "exception"
        started = time.perf_counter()
        try:
            result = await fn(*args, **kwargs)
            status = "error" if result.errors else "ok"
            return result
        finally:
            observe_step(kind, status, time.perf_counter() - started,
                         len(inp.records) if isinstance(inp, StepInput) else 0)

    return wrapper  # type: ignore[return-value]


def start_worker_exporter(port: int | None = None, addr: str | None = None) -> int | None:
    """Serve the default registry on ``port`` (default ``WDS_WORKER_METRICS_PORT``).

    Returns the port served, or ``None`` when no port is configured. The address is
    ``WDS_WORKER_METRICS_ADDR`` (default ``0.0.0.0``): the endpoint has no authentication,
    so publish it only to the scraper's network.
    """
    if port is None:
        return None
    addr = addr or "0.0.0.0"
    start_http_server(port, addr=addr)
    log.info("worker metrics on http://%s:%d/metrics", addr, port)
    return port
