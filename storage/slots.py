"""Slots per key (a workspace, usually): at most ``size`` holders per key at once, the
others waiting their turn, first come first served.

Used for a workspace's pooled connections (storage/db.py), its requests in one API
process (api/services/limits.py ``WorkspaceGate``) and its batches in the evaluation
sandbox (activities/sandbox.py). Each caller turns a wait that timed out into its own
error.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Hashable


class _Slots:
    """One key's slots: how many are free and who waits for one, in arrival order."""

    __slots__ = ("free", "waiters")

    def __init__(self, size: int) -> None:
        self.free = size
        self.waiters: deque[asyncio.Future[None]] = deque()

    def release(self) -> None:
        """Give a slot back: straight to the first waiter still waiting, else free."""
        waiters = self.waiters
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the slot passes to it; ``free`` is unchanged
                return
        self.free += 1


def _expire(slots: _Slots, fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError())
        try:
            slots.waiters.remove(fut)
        except ValueError:
            pass


class KeyedSlots:
    """``take(key, timeout)`` → a function that gives the slot back.

    A free slot is taken at once, without a timer or a task. A wait is a future in the
    key's queue with one timer (``loop.call_later``) that fails it with ``TimeoutError``;
    ``asyncio.wait_for`` around a semaphore started a task for every wait, and under a
    full gate (more clients than slots) that was every request, twice (the request gate
    and the connection slot): profiled in bench/RESULTS-hotpath.md.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._slots: dict[Hashable, _Slots] = {}

    async def take(self, key: Hashable, timeout: float) -> Callable[[], None]:
        """Wait up to ``timeout`` seconds for one of ``key``'s slots; call what is returned
        to give it back.

        Raises:
            TimeoutError: no slot came free in time.
        """
        slots = self._slots.get(key)
        if slots is None:
            slots = self._slots[key] = _Slots(self.size)
        if slots.free > 0 and not slots.waiters:  # free: taken at once
            slots.free -= 1
            return slots.release
        # full, or others are waiting: queue behind them, for at most timeout
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        slots.waiters.append(fut)
        timer = loop.call_later(max(0.0, timeout), _expire, slots, fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                slots.release()  # handed a slot as the wait was cancelled: pass it on
            else:
                try:
                    slots.waiters.remove(fut)
                except ValueError:
                    pass
            raise
        finally:
            timer.cancel()
        return slots.release

    def held(self, key: Hashable) -> int:
        """How many of ``key``'s slots are taken now."""
        slots = self._slots.get(key)
        return 0 if slots is None else self.size - slots.free
