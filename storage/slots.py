"""Slots per key (a workspace, usually): at most ``size`` holders per key at once, the
others waiting their turn, first come first served — one ``asyncio.Semaphore`` per key.

Used for a workspace's pooled connections (storage/db.py), its requests in one API
process (api/services/limits.py ``WorkspaceGate``) and its batches in the evaluation
sandbox (activities/sandbox.py). Each caller turns a wait that timed out into its own
error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable


class KeyedSlots:
    def __init__(self, size: int) -> None:
        self.size = size
        self._slots: dict[Hashable, asyncio.Semaphore] = {}

    async def take(self, key: Hashable, timeout: float) -> Callable[[], None]:
        """Wait up to ``timeout`` seconds for one of ``key``'s slots; call what is returned
        to give it back.

        Raises:
            TimeoutError: no slot came free in time.
        """
        slots = self._slots.get(key)
        if slots is None:
            slots = self._slots[key] = asyncio.Semaphore(self.size)
        if slots.locked():  # full, or others are waiting: queue behind them, for at most timeout
            await asyncio.wait_for(slots.acquire(), timeout=max(0.0, timeout))
        else:  # free: taken at once (wait_for would start a task on every call of a hot path)
            await slots.acquire()
        return slots.release

    def held(self, key: Hashable) -> int:
        """How many of ``key``'s slots are taken now."""
        slots = self._slots.get(key)
        return 0 if slots is None else self.size - slots._value  # noqa: SLF001 - asyncio keeps no public count
