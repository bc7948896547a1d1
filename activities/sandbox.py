"""The evaluation sandbox: a few child processes that run formulas and templates off the
API's event loop, each value under a CPU budget and a memory cap (issue #22).

Why processes: formula and template evaluation is CPU-bound Python; in a thread it would
still hold the GIL and stall the event loop (and with it every tenant's requests and
``/healthz``). Each child (:mod:`activities.sandbox_worker`) evaluates a whole batch per
round trip (every formula and parser column of a fused pure pipeline over a batch, one
column over every record of a batch, or every template of a step), so the inter-process
cost is paid per batch, not per value or column. A child runs at a lower CPU
priority (``NICE``; and at ``SCHED_IDLE`` for the rest of a batch that passed its
demotion threshold, and for the whole of its workspace's next batch, which also gets
:data:`HEAVY_STRIKES` instead of ``STRIKES``: :mod:`activities.sandbox_jobs`), without
the service's environment (no database URL, no secrets), and is killed when a batch outlives its wall-clock deadline (plus
``KILL_GRACE_S``), or retired after a batch that left it holding more than
``RETIRE_RSS`` resident memory (or at ``SCHED_IDLE`` without the privilege to return); a
replacement is started on the next call, in a thread.

The parent's side never blocks the loop: a call waits for a child in a small thread pool
(one thread per child: each blocks on its pipe with the GIL released).
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from multiprocessing.connection import Connection
from typing import Any

from activities.formula import Budget, over
from activities.ledger import Ledger
from activities.types import PipelineInput
from storage.childpool import ChildPool, PoolClosed
from storage.slots import KeyedSlots

SIZE = max(1, min(2, os.cpu_count() or 1))
MEMORY_BYTES = 256 * 1024 * 1024  # memory cap per value (on top of the child's baseline)
RETIRE_RSS = 384 * 1024 * 1024  # a child holding more after a batch is replaced
NICE = 10  # the children yield the CPU to the API process (19 starved them on a busy machine)
# values over budget per column before the rest fail unrun, in the batch after one that passed
# its demotion threshold (STRIKES otherwise): a flood of hostile rows burns one value's budget a batch
HEAVY_STRIKES = 1
PER_WORKSPACE = 1  # batches of one workspace in the children at once: a tenant takes at most one
KILL_GRACE_S = 1.0  # beyond a batch's deadline before its child is killed
START_TIMEOUT_S = 30.0
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class SandboxLost(Exception):
    """The child died or missed its deadline (and was killed)."""


class SandboxDown(SandboxLost):
    """No child could be started: not a budget matter, the records get a plain error."""


class _Child:
    def __init__(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        keep = ("PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "TMPDIR", "HOME")
        env = {k: v for k, v in os.environ.items() if k in keep}
        env["PYTHONPATH"] = _ROOT
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "activities.sandbox_worker", str(to_child_r), str(from_child_w),
                 str(MEMORY_BYTES), str(NICE)],
                pass_fds=(to_child_r, from_child_w), env=env, cwd=_ROOT,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self.send_conn = Connection(to_child_w, readable=False)
        self.recv_conn = Connection(from_child_r, writable=False)
        self.rss = 0
        self.stuck = False  # left at SCHED_IDLE by a demoted batch (see activities.sandbox_jobs)
        self.over = False  # the last batch passed its demotion threshold
        reply = self._receive(time.monotonic() + START_TIMEOUT_S)
        if reply is None or reply[0] != "ready":
            self.kill()
            raise SandboxDown("the evaluation sandbox failed to start")

    def _receive(self, deadline: float) -> tuple[Any, ...] | None:
        try:
            if not self.recv_conn.poll(max(0.0, deadline - time.monotonic())):
                return None
            reply = self.recv_conn.recv()
        except (EOFError, OSError):
            return None
        self.rss = int(reply[2] or 0)
        self.stuck = bool(reply[3])
        self.over = bool(reply[4])
        return reply  # type: ignore[no-any-return]

    def call(self, kind: str, args: tuple[Any, ...], deadline: float, idle: bool = False) -> tuple[Any, ...] | None:
        try:
            self.send_conn.send((kind, args, idle))
        except (OSError, ValueError):
            return None
        return self._receive(deadline)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for conn in (self.send_conn, self.recv_conn):
            try:
                conn.close()
            except (OSError, AttributeError):
                pass


class Sandbox:
    """At most ``size`` children, each serving one batch at a time."""

    def __init__(self, size: int = SIZE) -> None:
        self.size = size
        self._children: ChildPool[_Child] = ChildPool(_Child, "sandbox")
        self._executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix="wds-sandbox")
        self._tenants = KeyedSlots(PER_WORKSPACE)
        # workspaces whose last batch passed its demotion threshold (one entry per such
        # workspace, dropped at its next batch that stays below: bounded by the tenants)
        self._heavy: set[int] = set()

    def heavy(self, workspace: int) -> bool:
        """Whether ``workspace``'s last batch here passed its demotion threshold (its next
        one starts idle, with :data:`HEAVY_STRIKES`; the API's fair share of pipeline runs
        gives it the heavy share: api/services/fairness.py)."""
        return workspace in self._heavy

    # ------------------------------------------------------------------ blocking side (threads)
    def _call(self, kind: str, args: tuple[Any, ...], deadline: float, workspace: int | None = None) -> Any:
        try:
            child = self._children.take()
        except PoolClosed:
            raise SandboxDown("the evaluation sandbox is closed") from None
        # a workspace whose last batch passed its demotion threshold starts this one idle,
        # with HEAVY_STRIKES (read here, once, after its previous batch has ended: the
        # workspace's slot is held)
        heavy = workspace in self._heavy
        if heavy and args and isinstance(args[-1], Budget):
            budget = args[-1]
            args = (*args[:-1], dataclasses.replace(budget, strikes=min(budget.strikes, HEAVY_STRIKES)))
        reply = child.call(kind, args, deadline + KILL_GRACE_S, heavy)
        if workspace is not None and reply is not None:
            if child.over:
                self._heavy.add(workspace)
            else:
                self._heavy.discard(workspace)
        if reply is None or reply[0] not in ("ok", "error") or child.rss > RETIRE_RSS:
            self._children.discard(child)
            if reply is None:
                raise SandboxLost("the evaluation ran past its deadline and was stopped")
        elif child.stuck:
            # it could not return from SCHED_IDLE (no privilege): a fresh one starts at our priority
            self._children.discard(child)
            self._children.start_in_background()
        else:
            self._children.give_back(child)
        if reply[0] == "error":
            raise SandboxLost(f"the evaluation failed: {reply[1]}")
        return reply[1]

    def pids(self) -> list[int]:
        """The process ids of the live children (for operators and tests)."""
        return self._children.pids()

    def warm(self) -> None:
        """Start the children in the background (so the first heavy batch need not wait)."""
        self._children.start_in_background(self.size - self._children.idle())

    def close(self) -> None:
        self._children.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ async side (the loop)
    async def _run(self, kind: str, args: tuple[Any, ...], deadline: float, workspace: int | None) -> Any:
        loop = asyncio.get_running_loop()
        if workspace is None:
            return await loop.run_in_executor(self._executor, self._call, kind, args, deadline)
        # one workspace's batches queue behind each other (on the loop, not in a thread), so
        # a tenant flooding the service with hostile rows holds at most PER_WORKSPACE children
        try:
            release = await self._tenants.take(workspace, deadline - time.monotonic())
        except TimeoutError:
            raise SandboxLost("the batch ran out of its wall-clock budget waiting for the sandbox") from None
        try:
            return await loop.run_in_executor(self._executor, self._call, kind, args, deadline, workspace)
        finally:
            release()

    async def formula(self, source: str, language: str, records: dict[str, dict[str, Any]], now: datetime,
                      budget: Budget, *, workspace: int | None = None) -> tuple[dict[str, Any], dict[str, str]]:
        """One formula column over ``records`` in a child: (values, errors); ``budget`` is
        charged (its records' time, the run's bytes). A lost child fails every record of the call with ``BUDGET_EXCEEDED``."""
        if not records:
            return {}, {}
        if time.monotonic() >= budget.deadline:
            return {}, {rid: over("the batch ran out of its wall-clock budget") for rid in records}
        sub = budget.subset(list(records))
        try:
            values, errors, spent = await self._run("formula", (source, language, records, now.isoformat(), sub),
                                                    budget.deadline, workspace)
        except SandboxLost as exc:
            message = lost_message(exc)
            return {}, {rid: message for rid in records}
        budget.absorb(spent)  # the records' time, and the run's bytes the child left
        return values, errors

    async def json_parser(self, col: Any, records: dict[str, dict[str, Any]], budget: Budget, *,
                          workspace: int | None = None) -> tuple[dict[str, Any], dict[str, str]]:
        """One json_parser column over ``records`` in a child (a path that is not simple):
        (values, errors). A lost child fails every record of the call."""
        if not records:
            return {}, {}
        if time.monotonic() >= budget.deadline:
            return {}, {rid: over("the batch ran out of its wall-clock budget") for rid in records}
        try:
            return await self._run("json_parser", (col, records, budget.value_s), budget.deadline,  # type: ignore[no-any-return]
                                   workspace)
        except SandboxLost as exc:
            message = lost_message(exc)
            return {}, {rid: message for rid in records}

    async def pipeline(self, p: PipelineInput, fields: dict[str, dict[str, Any]], now: datetime, budget: Budget,
                       *, workspace: int | None = None) -> tuple[Ledger, list[tuple[str, str, float, int]]]:
        """Every level of a pure pipeline over a batch in a child, in one round trip
        (:func:`activities.sandbox_jobs.pipeline_job`): its :class:`Ledger` and (kind,
        status, seconds, records) per column evaluated; ``fields`` gets the computed values
        and ``budget`` is charged (time and bytes), as when the columns run one by one.

        Raises:
            SandboxLost: the batch ran out of its wall-clock budget, or the child died or
                was killed (:func:`lost_message` says how each value reports it).
        """
        if time.monotonic() >= budget.deadline:
            raise SandboxLost("the batch ran out of its wall-clock budget")
        # the child needs the columns, levels and budgets, not the run's record ids
        slim = dataclasses.replace(p, record_ids=[])
        state, spent, timings = await self._run("pipeline", (slim, fields, now.isoformat(), budget.subset(list(fields))),
                                                budget.deadline, workspace)
        ledger = Ledger(p, list(fields))
        ledger.values, ledger.errors, ledger.steps, ledger.blocked = state
        for rid, values in ledger.values.items():
            for cid, value in values.items():
                fields[rid][ledger.names[cid]] = value
        budget.absorb(spent)
        return ledger, timings

    async def render(self, items: list[tuple[Any, dict[str, Any], dict[str, Any]]], value_s: float,
                     deadline: float, *, workspace: int | None = None) -> list[tuple[bool, Any]]:
        """Render each (JSON value holding templates, fields, extra) in a child:
        ``(True, rendered)`` or ``(False, error message)``, in order."""
        if not items:
            return []
        try:
            return await self._run("render", (items, value_s, deadline), deadline, workspace)  # type: ignore[no-any-return]
        except SandboxLost as exc:
            return [(False, lost_message(exc))] * len(items)


def lost_message(exc: SandboxLost) -> str:
    """How a value reports a lost evaluation: ``BUDGET_EXCEEDED …``, except a sandbox that
    could not start (not a budget matter: a plain error)."""
    return str(exc) if isinstance(exc, SandboxDown) else over(str(exc))


_sandbox: Sandbox | None = None
_sandbox_lock = threading.Lock()


def sandbox() -> Sandbox:
    """The process's sandbox (created on first use; children start on first call)."""
    global _sandbox
    with _sandbox_lock:
        if _sandbox is None:
            _sandbox = Sandbox()
        return _sandbox


def heavy(workspace: int) -> bool:
    """:meth:`Sandbox.heavy` of the process's sandbox; false while it has none (no batch
    ran here yet), without making one."""
    return _sandbox is not None and _sandbox.heavy(workspace)


def _close() -> None:
    if _sandbox is not None:
        _sandbox.close()


def _forget_after_fork() -> None:
    # a forked process (a server worker) must not share the parent's pipes
    global _sandbox
    _sandbox = None


atexit.register(_close)
os.register_at_fork(after_in_child=_forget_after_fork)
