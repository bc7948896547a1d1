"""Child process of the evaluation sandbox (see :mod:`activities.sandbox`).

Run as ``python -m activities.sandbox_worker READ_FD WRITE_FD MEMORY NICE`` by the parent,
it answers one pickled request (kind, args, whether to start it at ``SCHED_IDLE``) per
message on ``READ_FD`` with one pickled reply on ``WRITE_FD``: (status, result, resident
bytes, whether to retire it, whether the batch passed its demotion threshold). Requests
come only from our own parent process over an inherited pipe (never from a client), so
pickle is the framing, not an input format. The jobs and their
budgets are in :mod:`activities.sandbox_jobs`. The process runs at a lower CPU priority
than the API (and at ``SCHED_IDLE`` for the rest of a batch past its demotion threshold)
and without the service's environment (no database URL, no secret key).
"""

from __future__ import annotations

import os
import sys
from multiprocessing.connection import Connection
from typing import Any


def main() -> None:
    read_fd, write_fd, memory, nice = (int(a) for a in sys.argv[1:5])
    inbox = Connection(read_fd, writable=False)
    outbox = Connection(write_fd, readable=False)
    if nice:
        try:
            os.nice(nice)
        except OSError:
            pass
    # the formula engine and Jinja2 are imported once, before saying ready
    from activities import sandbox_jobs

    meter = sandbox_jobs.Meter(memory, armed=True)
    outbox.send(("ready", None, sandbox_jobs.rss_bytes(), False, False))
    while True:
        try:
            kind, args, meter.start_idle = inbox.recv()
            meter.over = False
        except (EOFError, OSError):
            return
        try:
            reply: tuple[str, Any] = ("ok", sandbox_jobs.JOBS[kind](meter, *args))
        except BaseException as exc:  # noqa: BLE001 - report, never die silently mid-request
            reply = ("error", f"{type(exc).__name__}: {str(exc)[:200]}")
        # meter.stuck: left at SCHED_IDLE by a demoted job (no privilege to return): retire me
        try:
            outbox.send((*reply, sandbox_jobs.rss_bytes(), meter.stuck, meter.over))
        except Exception as exc:  # noqa: BLE001 - an unpicklable result
            outbox.send(("error", f"reply not sendable: {type(exc).__name__}", sandbox_jobs.rss_bytes(), meter.stuck,
                         meter.over))


if __name__ == "__main__":
    main()
