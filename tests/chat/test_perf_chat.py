"""Time to the first streamed token through the webhook, minus the provider's own time to
first token measured the same way (a direct streaming call to the same local provider) in
the same run. Target: ≤ 15 ms p50. Prints the figures; runs only with ``WDS_PERF=1``."""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import httpx
import pytest

from tests.chat.fakes import FakeServices
from tests.chat.support import WEBHOOK, make_agent
from tests.conftest import ApiProcess, Workspace

pytestmark = pytest.mark.skipif(not os.environ.get("WDS_PERF"), reason="set WDS_PERF=1 to measure")
ROUNDS = 60


def _first_token(client: httpx.Client, url: str, body: dict[str, Any], marker: str, **kw: Any) -> float:
    start = time.perf_counter()
    with client.stream("POST", url, json=body, **kw) as resp:
        lines = resp.iter_lines()
        for line in lines:
            if marker in line:
                elapsed = time.perf_counter() - start
                break
        else:
            raise AssertionError("no token arrived")
        for _ in lines:  # drain: the turn completes as in real use
            pass
    return elapsed


def test_time_to_first_token_overhead(cws: Workspace, ai_api: ApiProcess, fake: FakeServices) -> None:
    bot = make_agent(cws, [])
    direct: list[float] = []
    through: list[float] = []
    with httpx.Client(timeout=30) as client:
        for i in range(ROUNDS + 5):
            d = _first_token(client, f"{fake.url}/chat/completions",
                             {"model": "m", "stream": True, "messages": [{"role": "user", "content": f"hi {i}"}]},
                             '"content": "You')
            w = _first_token(client, f"{ai_api.base_url}{WEBHOOK}",
                             {"message": f"hi {i}", "stream": True}, "event: token",
                             params={"type": "web", "token": bot["token"]})
            if i >= 5:  # warm-up rounds are not counted
                direct.append(d)
                through.append(w)
    p50_direct = statistics.median(direct) * 1000
    p50_through = statistics.median(through) * 1000
    overhead = p50_through - p50_direct
    print(f"\nTTFT p50: provider direct {p50_direct:.2f} ms, through webhook {p50_through:.2f} ms,"
          f" overhead {overhead:.2f} ms (target <= 15 ms); p90 webhook"
          f" {statistics.quantiles(through, n=10)[-1] * 1000:.2f} ms")
    assert overhead <= 15.0
