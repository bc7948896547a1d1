"""The API under uvicorn (one process) with cProfile switched on and off by signals.

``python -m bench.cprof_server OUT_PREFIX -- <uvicorn options>``: ``SIGUSR1`` starts
profiling the event loop's thread, ``SIGUSR2`` stops it and writes the statistics to
``OUT_PREFIX-<n>.prof`` (``pstats`` format). :mod:`bench.cpu` starts the APIs this way with
``--cprofile DIR`` and profiles each measured phase, in CPU time of the event loop's
thread (``time.thread_time_ns``). cProfile adds a fixed cost to every
Python call, so its figures over-weigh code of many small calls: read it for where the
time goes, and :mod:`bench.cpu`'s CPU per request (without it) for how much.
"""

from __future__ import annotations

import cProfile
import signal
import sys
import time
from types import FrameType

import uvicorn.main


def main() -> None:
    prefix = sys.argv[1]
    args = sys.argv[3:] if sys.argv[2:3] == ["--"] else sys.argv[2:]
    state = {"profile": None, "n": 0}

    def start(_sig: int, _frame: FrameType | None) -> None:
        if state["profile"] is None:
            # CPU time of the loop's thread, not wall time: on a loaded machine a send(2)
            # that wakes PostgreSQL or the client is often preempted, and wall time would
            # charge that wait to the call
            profile = cProfile.Profile(time.thread_time_ns, 1e-9)
            state["profile"] = profile
            profile.enable()

    def stop(_sig: int, _frame: FrameType | None) -> None:
        profile = state["profile"]
        if profile is not None:
            profile.disable()  # type: ignore[attr-defined]
            profile.dump_stats(f"{prefix}-{state['n']}.prof")  # type: ignore[attr-defined]
            state["profile"] = None
            state["n"] += 1  # type: ignore[operator]

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    uvicorn.main.main(args)


if __name__ == "__main__":
    main()
