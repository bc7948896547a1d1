"""Bookkeeping for a pool of child processes (the JavaScript engine's V8 workers,
storage/formula/js.py, and the evaluation sandbox, activities/sandbox.py).

Idle children wait in a LIFO queue (the warmest is reused first); every live child is
tracked so :meth:`ChildPool.close` can kill them all; replacements start on a background
thread so the next caller need not wait for a process to boot. How a child is started,
talked to and judged healthy stays with each user.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

log = logging.getLogger("wds.childpool")


class Child(Protocol):
    def kill(self) -> None: ...


C = TypeVar("C", bound=Child)


class PoolClosed(Exception):
    """The pool was closed (the process is exiting): no child is started any more."""


class ChildPool(Generic[C]):
    """Idle and live children made by ``start`` (which raises when a child fails to boot)."""

    def __init__(self, start: Callable[[], C], name: str) -> None:
        self._start = start
        self._name = name
        self._idle: queue.LifoQueue[C] = queue.LifoQueue()
        self._all: set[C] = set()
        self._lock = threading.Lock()
        self._closed = False

    def idle(self) -> int:
        return self._idle.qsize()

    def _adopt(self, child: C) -> bool:
        with self._lock:
            if self._closed:
                child.kill()
                return False
            self._all.add(child)
            return True

    def take(self) -> C:
        """An idle child, or a new one.

        Raises:
            PoolClosed: the pool is closed.
            Exception: whatever ``start`` raises when the child fails to boot.
        """
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            child = self._start()
            if not self._adopt(child):
                raise PoolClosed(f"the {self._name} is closed") from None
            return child

    def pids(self) -> list[int]:
        """The process ids of the live children that have a ``proc``."""
        with self._lock:
            return [c.proc.pid for c in self._all if hasattr(c, "proc")]

    def give_back(self, child: C) -> None:
        self._idle.put(child)

    def discard(self, child: C) -> None:
        """Kill a child that failed, timed out or grew too large, and forget it."""
        child.kill()
        with self._lock:
            self._all.discard(child)

    def start_in_background(self, count: int = 1) -> None:
        """Start up to ``count`` children on a thread; a failure is logged, and the next
        :meth:`take` tries (and reports) again."""

        def spawn() -> None:
            for _ in range(count):
                try:
                    child = self._start()
                except Exception as exc:  # noqa: BLE001 - see the docstring
                    log.warning("%s child not started: %s", self._name, exc)
                    return
                if not self._adopt(child):
                    return
                self._idle.put(child)

        threading.Thread(target=spawn, name=f"wds-{self._name}-spawn", daemon=True).start()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            children, self._all = list(self._all), set()
        for child in children:
            child.kill()
