"""Fair shares of pipeline runs between workspaces, when the process is short of CPU
(issue #22 item 2; docs/decisions.md, "Pipeline runs are shared fairly under CPU
pressure").

A write that starts a pipeline costs far more than the write: its workflow's tasks and
activities run in this process's Temporal worker (and the Temporal server), about 15 ms
of this process's CPU for a short ``http_request`` run. A tenant writing such rows as fast
as it can takes both cores of a small machine even when each value fails at once, and
every other tenant's reads then wait for a CPU. Neither the per-workspace gate (requests
*in flight*) nor the sandbox's CPU budgets (per *value*) bound that.

So, per API process: every write that will run a pipeline is admitted here first
(:meth:`RunFairness.admit`), counting one run per workflow chunk in a moving window per
workspace (``limits``, the same library as the rate limits). A workspace past its share
(``WDS_FAIR_PIPELINE_RUNS_PER_S``) waits before its write, in steps, up to
:data:`MAX_WAIT_S`, and only while **both**:

* the process is short of CPU: its event-loop thread spent at least
  ``WDS_FAIR_CPU_PRESSURE`` of the last half second runnable but not running
  (``run_delay`` of its ``schedstat``, sampled every :data:`SAMPLE_S`), or did so less
  than :data:`HOLD_S` ago (so that the writes held back do not rush out together the
  moment the pressure dips, and bring it straight back);
* another workspace made a request in the last :data:`ACTIVE_S` seconds.

It is work-conserving: alone, or on an idle machine, a tenant runs as fast as before;
nothing is refused (past :data:`MAX_WAIT_S` the write goes ahead) and no error is new.
Where ``/proc`` has no schedstat (not Linux), there is no pressure signal and no wait.

One exception: a *heavy* workspace, whose last sandbox batch in this process burned past
its demotion threshold (:meth:`activities.sandbox.Sandbox.heavy`: hostile formulas or
regular expressions that use up their CPU budgets), keeps to the smaller
``WDS_FAIR_HEAVY_RUNS_PER_S`` whenever another workspace is active, short of CPU or not.
The pressure signal lags (it is the event loop's own waiting, smoothed over half a
second), and each heavy batch takes a core for up to its budget: measured, the share
waiting for pressure let 84–92 hostile writes through in 20 s, instead of the 60 that
the share allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from limits import RateLimitItemPerSecond
from limits.aio.strategies import MovingWindowRateLimiter
from prometheus_client import Counter

log = logging.getLogger(__name__)

FAIR_WAITS = Counter("wds_fair_wait_seconds", "Seconds pipeline writes waited for their workspace's share of runs")

SAMPLE_S = 0.1  # how often the event-loop thread's run delay is read
PRESSURE_SPAN_S = 0.5  # the pressure is the run delay over about this long
ACTIVE_S = 2.0  # a workspace that made a request this recently is active
HOLD_S = 2.0  # once short of CPU, shares hold this long after the last short sample
MAX_WAIT_S = 5.0  # the longest one write waits for its share
STEP_S = 0.05  # the shortest wait between two looks at the window


def _schedstat_path() -> str | None:
    """The calling (event-loop) thread's schedstat, if this system has one."""
    path = f"/proc/self/task/{threading.get_native_id()}/schedstat"
    return path if _run_delay(path) is not None else None


@dataclass
class RunFairness:
    """One process's fair shares of pipeline runs (see the module docstring)."""

    runs_per_s: int  # a workspace's share of runs a second under pressure; 0 turns this off
    pressure_limit: float  # the share of time runnable-but-waiting that counts as pressure
    storage: Any  # limits' async in-process storage (api.services.limits makes it)
    # the share of a workspace whose sandbox batches burn past their demotion threshold
    # (``heavy`` in :meth:`admit`): at most ``runs_per_s``; 0: treated as any other
    heavy_runs_per_s: int = 0
    pressure: float = 0.0  # the last measure
    pressed_until: float = 0.0  # monotonic time shares hold until (HOLD_S after the last short sample)
    # the two workspaces that made the latest requests, the latest first: (id, monotonic
    # time); whether another workspace than W is active needs no more than these
    latest: list[tuple[int, float]] = field(default_factory=list)
    _limiter: MovingWindowRateLimiter = field(init=False, repr=False)
    _item: RateLimitItemPerSecond = field(init=False, repr=False)
    _heavy_item: RateLimitItemPerSecond = field(init=False, repr=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._limiter = MovingWindowRateLimiter(self.storage)
        self._item = RateLimitItemPerSecond(max(1, self.runs_per_s))
        self._heavy_item = RateLimitItemPerSecond(max(1, min(self.heavy_runs_per_s, self.runs_per_s)))

    def note(self, workspace_id: int) -> None:
        """A request of ``workspace_id`` (the gate calls this for every gated request)."""
        now = time.monotonic()
        latest = self.latest
        if latest and latest[0][0] == workspace_id:
            latest[0] = (workspace_id, now)
        else:
            self.latest = [(workspace_id, now), *latest[:1]]

    def contended(self, workspace_id: int) -> bool:
        """Whether ``workspace_id`` must keep to its share now: the process is short of CPU
        (pressure at or above the limit: a limit of 0 means always) and another workspace
        is active."""
        if self.pressure < self.pressure_limit and time.monotonic() >= self.pressed_until:
            return False
        return self.others_active(workspace_id)

    def others_active(self, workspace_id: int) -> bool:
        """Whether a workspace other than ``workspace_id`` made a request in the last
        :data:`ACTIVE_S` seconds."""
        since = time.monotonic() - ACTIVE_S
        return any(ws != workspace_id and t >= since for ws, t in self.latest)

    async def admit(self, workspace_id: int, *, heavy: bool = False) -> float:
        """Count one pipeline run of ``workspace_id``; wait first while it is past its
        share under contention (at most :data:`MAX_WAIT_S`). When ``heavy`` (its last
        sandbox batch burned past its demotion threshold) the share is the heavy one,
        counted in a window of its own, and it holds whenever another workspace is active,
        short of CPU or not: its next batch will burn a core again. Returns the seconds
        waited."""
        if self.runs_per_s <= 0:
            return 0.0
        self._start()
        key = str(workspace_id)
        heavy = heavy and self.heavy_runs_per_s > 0  # 0: a heavy workspace is treated as any other
        item, holds = (self._heavy_item, self.others_active) if heavy else (self._item, self.contended)
        waited = 0.0
        while not await self._limiter.hit(item, "runs", key):
            if waited >= MAX_WAIT_S or not holds(workspace_id):
                break
            stats = await self._limiter.get_window_stats(item, "runs", key)
            pause = min(max(STEP_S, stats.reset_time - time.time()), MAX_WAIT_S - waited)
            await asyncio.sleep(pause)
            waited += pause
        if waited:
            FAIR_WAITS.inc(waited)
        return waited

    # ----------------------------------------------------------------- pressure

    def _start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._sample(), name="wds-fairness")

    async def _sample(self) -> None:
        """Keep :attr:`pressure` current: the event-loop thread's run delay ÷ wall time,
        smoothed over :data:`PRESSURE_SPAN_S`."""
        path = _schedstat_path()  # read from the loop's own thread
        if path is None:
            log.info("no schedstat for the event loop: pipeline fair shares never wait")
            return
        alpha = min(1.0, SAMPLE_S / PRESSURE_SPAN_S)
        last_delay, last_at = _run_delay(path), time.monotonic()
        while True:
            await asyncio.sleep(SAMPLE_S)
            delay, now = _run_delay(path), time.monotonic()
            if delay is None:
                return
            if last_delay is not None and now > last_at:
                share = (delay - last_delay) / 1e9 / (now - last_at)
                self.pressure += alpha * (min(1.0, max(0.0, share)) - self.pressure)
                if self.pressure >= self.pressure_limit:
                    # held a while: released at once, the waiting writes would bring the
                    # pressure straight back (bursts, not a share)
                    self.pressed_until = now + HOLD_S
            last_delay, last_at = delay, now

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


def _run_delay(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
