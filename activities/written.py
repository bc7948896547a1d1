"""Process-local notice that a pipeline run's results are committed.

A write waits for its pipeline so the response carries the computed values. The run's
last step is the write of every record's values and outcome (``_pipeline``, the same
``{status, run_id, errors}`` the workflow returns); once that statement has committed,
the database already holds everything the response needs. When the run executes in the
API process that waits for it (eager start on the in-process worker: the usual case),
the write activity hands the waiter the rows its statement wrote (``RETURNING``), and
the API answers from them without waiting for Temporal to record the workflow's
completion and deliver its result (two more round trips through the server, ~8-10 ms per
write) and without reading the rows again. The workflow completes in Temporal exactly as
before; a run executed by another process simply never notifies, and the waiter falls
back to the workflow result and a fresh read.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress
from typing import Any

Rows = list[dict[str, Any]]
_waiting: dict[str, asyncio.Future[Rows]] = {}
_given: dict[str, Rows] = {}


def expect(run_id: str, given: Rows | None = None) -> asyncio.Future[Rows]:
    """A future that resolves, with the written rows, when run ``run_id`` (workflow id)
    has committed its write in this process. Call :func:`forget` when no longer waiting.

    ``given``: the rows as the write that queued the run committed them (``RETURNING *``);
    a run executing here reads its records from them instead of from the database
    (:func:`given_rows`). They are the committed rows: the run is started after the commit.
    """
    fut: asyncio.Future[Rows] = asyncio.get_running_loop().create_future()
    _waiting[run_id] = fut
    if given is not None:
        _given[run_id] = given
    return fut


def given_rows(run_id: str) -> Rows | None:
    """The rows handed over with :func:`expect` for ``run_id``, if this process has them."""
    return _given.get(run_id)


def waiting(run_id: str) -> bool:
    """Whether this process waits for ``run_id`` (the write then returns its rows)."""
    return run_id in _waiting


def forget(run_id: str) -> None:
    _waiting.pop(run_id, None)
    _given.pop(run_id, None)


def _resolve(fut: asyncio.Future[Rows], rows: Rows) -> None:
    if not fut.done():
        fut.set_result(rows)


def notify(run_id: str, rows: Rows) -> None:
    """Called by the write activity once its statement committed (from any thread)."""
    fut = _waiting.get(run_id)
    if fut is not None:
        with suppress(RuntimeError):  # the waiter's loop is gone: nobody to tell
            fut.get_loop().call_soon_threadsafe(_resolve, fut, rows)
