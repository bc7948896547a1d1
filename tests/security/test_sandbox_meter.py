"""The sandbox child's CPU meter (``activities.sandbox_jobs.Meter``) arms one timer per
value and leaves it running between values (one system call per value, not two): a timer
that runs out between values must not fail anything, and the next value still gets its
whole budget and no more. Run in a child interpreter: an armed meter installs a SIGPROF
handler, which the test process must not carry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import time
from activities.sandbox_jobs import Meter, OverBudget

def spin(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    return "done"

meter = Meter(256 * 1024 * 1024, armed=True)
with meter.capped():
    assert meter.run(lambda: 1, 0.005) == 1
    spin(0.05)  # the first value's 5 ms timer runs out here, between values: ignored
    assert meter.run(lambda: spin(0.02), 0.1) == "done"  # a fresh 100 ms budget
    try:
        meter.run(lambda: spin(1.0), 0.05)
    except OverBudget:
        stopped = True
    else:
        stopped = False
    assert stopped, "a value past its CPU budget was not stopped"
    assert meter.run(lambda: 2, 0.1) == 2
spin(0.05)  # disarmed after the batch: nothing fires
print("ok")
"""


def test_a_timer_ending_between_values_fails_nothing_and_each_value_keeps_its_budget():
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
