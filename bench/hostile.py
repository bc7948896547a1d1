"""The hostile tenant of issue #22 item 2, shared by the ``security.noisy_neighbour`` bench
scenario and ``tests/security/test_budgets_load.py`` (one implementation of the attack).

* :data:`HOSTILE`: the columns that made the API freeze before the budgets — a JavaScript
  formula ``while(true){}``, 20 catastrophic ``REGEX_MATCH({Title}, "(a|aa)+$")`` calls in
  one formula, and ``http_request`` templates that build a 1 GB / 100 MB string;
  :data:`CONTROL`: a column of the same write shape whose step waits 4 s and costs no CPU.
* :func:`start_writers` / :func:`stop_writers`: :data:`CLIENTS` threads in a separate
  process at a lower priority (``nice 10``), each writing batches of 5 rows of
  :data:`TITLE` into the tables round-robin until stopped. On loopback the load generator
  shares the API's CPU, which it does not in production; the lower priority keeps it from
  taking the CPU the API needs to answer the bystander.
* :func:`rss_bytes` / :func:`cpu_seconds`: a process's resident memory and CPU time (Linux).

This module is part of the shipped ``bench`` package, so both ``wds bench`` and the test
suite (which is not shipped) can import it (as :mod:`bench.fakes`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

CLIENTS = 20
ROWS_PER_BATCH = 5
TITLE = "a" * 30 + "!"  # the worst case of "(a|aa)+$": a long run of a's that does not match

HOSTILE: dict[str, dict[str, Any]] = {
    "js": {"name": "F", "type": "formula", "formula": "while(true){}", "config": {"language": "javascript"}},
    "regex": {"name": "F", "type": "formula", "formula": " & ".join(['REGEX_MATCH({Title}, "(a|aa)+$")'] * 20)},
    "template": {"name": "F", "type": "http_request",
                 "config": {"url": "http://127.0.0.1:9/x",
                            "body": {"a": "{{'a'*10**9}}", "b": "{{ 'a'|center(10**8) }}"}}},
}
CONTROL: dict[str, Any] = {"name": "F", "type": "delay", "config": {"seconds": 4}}

# at nice 10, CLIENTS threads, each writing batches of ROWS_PER_BATCH rows until SIGTERM or until its parent
# is gone; prints the statuses (0 for a request that raised)
ATTACKER = r"""
import os, signal, sys, threading, time, httpx
os.nice(10)
parent = os.getppid()
base, token, tables, clients, per_batch, title = sys.argv[1], sys.argv[2], sys.argv[3].split(","), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *a: stop.set())
def orphaned():  # a killed bench or test leaves no writer spinning behind it
    while not stop.wait(0.5):
        if os.getppid() != parent:
            stop.set()
threading.Thread(target=orphaned, daemon=True).start()
statuses = []
def attack(i):
    with httpx.Client(base_url=base + "/functions/v1/rest-api", headers={"Authorization": "Bearer " + token},
                      timeout=120) as c:
        while not stop.is_set():
            rows = [{"fields": {"Title": title}} for _ in range(per_batch)]
            try:
                statuses.append(c.post("/tables/%s/records/batch" % tables[i % len(tables)], json={"rows": rows}).status_code)
            except httpx.HTTPError:
                statuses.append(0)
                stop.wait(0.05)  # a refused connection is not retried in a hot loop
threads = [threading.Thread(target=attack, args=(i,)) for i in range(clients)]
for t in threads: t.start()
for t in threads: t.join()
print(" ".join(map(str, statuses)))
"""


def table_body(name: str, column: dict[str, Any]) -> dict[str, Any]:
    """``POST /tables`` body: a ``Title`` text column and the attack's (or control's) column."""
    return {"name": name, "columns": [{"name": "Title", "type": "text"}, column]}


def warm_row() -> dict[str, Any]:
    """One row of the attack, for the warm-up write of each table (sandbox children, V8)."""
    return {"fields": {"Title": TITLE}}


def start_writers(base_url: str, token: str, tables: Sequence[int], clients: int = CLIENTS) -> subprocess.Popen[str]:
    """Start ``clients`` writers of the workspace of ``token`` on ``tables`` (round-robin)."""
    return subprocess.Popen(
        [sys.executable, "-c", ATTACKER, base_url, token, ",".join(map(str, tables)), str(clients),
         str(ROWS_PER_BATCH), TITLE],
        stdout=subprocess.PIPE, text=True)


def stop_writers(proc: subprocess.Popen[str], timeout: float = 180) -> list[int]:
    """Stop the writers (each finishes its request in flight); the statuses of their writes.

    Raises:
        subprocess.TimeoutExpired: they did not finish within ``timeout`` s (then killed).
    """
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return [int(x) for x in out.split()]


def rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid`` (Linux)."""
    with open(f"/proc/{pid}/status", "rb") as fh:
        for line in fh:
            if line.startswith(b"VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (Linux)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
