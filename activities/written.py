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


# --------------------------------------------------------------------------- staged creates


class Staged:
    """A create's rows staged in this process before its INSERT.

    The API stages the rows (new record ids and values typed as stored,
    :func:`storage.records.stage_records`, read while the run starts) and starts the run;
    the run, executing here, computes every column from them and hands the values back
    (:meth:`hand`); the API stores rows and values in one statement and tells the run
    which records it stored (:meth:`settle`), which the run's result reports. A run that
    finds no staged rows (another process took the task, or the API gave up waiting)
    writes nothing.
    """

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.rows: asyncio.Future[Rows] = loop.create_future()  # set by the write (:meth:`fill`)
        self.computed: asyncio.Future[tuple[Any, list[dict[str, Any]]]] = loop.create_future()
        self.stored: asyncio.Future[set[int]] = loop.create_future()

    def fill(self, rows: Rows | None) -> None:
        """From the write: the staged rows (``None``: it could not stage them)."""
        if not self.rows.done():
            if rows is None:
                self.rows.cancel()
            else:
                self.rows.set_result(rows)

    def hand(self, result: Any, updates: list[dict[str, Any]]) -> None:
        """From the run: its result and per-record ``{id, values, outcome}`` (any thread)."""
        with suppress(RuntimeError):
            self.computed.get_loop().call_soon_threadsafe(_settle, self.computed, (result, updates))

    def settle(self, ids: set[int]) -> None:
        """From the write: the records it stored (none when it gave up on the run)."""
        _settle(self.stored, ids)
        self.fill(None)


def _settle(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


_staged: dict[str, Staged] = {}


def stage(run_id: str) -> Staged:
    """Stage a create's rows for run ``run_id`` (:meth:`Staged.fill`); call
    :func:`unstage` when no longer waiting."""
    staged = _staged[run_id] = Staged()
    return staged


def take_staged(run_id: str) -> Staged | None:
    """The rows staged for ``run_id``, once (a retried attempt finds none), when they can
    be handed back on this event loop."""
    staged = _staged.pop(run_id, None)
    if staged is None:
        return None
    try:
        same_loop = staged.computed.get_loop() is asyncio.get_running_loop()
    except RuntimeError:
        same_loop = False
    if not same_loop:
        staged.settle(set())
        return None
    return staged


def unstage(run_id: str) -> None:
    staged = _staged.pop(run_id, None)
    if staged is not None:
        staged.settle(set())
