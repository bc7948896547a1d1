"""Pipelines that reach outside: a 1,000-row ``run-actions`` whose http_request column
calls a local echo server with 5 ms latency (rows/s and the concurrency the receiver
saw), beside direct httpx calls to the same server at the same concurrency; and the
platform proxy's per-call overhead over a direct httpx call, interleaved in one run.

The echo server runs inside the bench process (aiohttp), so both sides share its cost.
The API must run in dev mode (``bench/stack.py`` sets ``WDS_DEV_MODE``) to reach loopback.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from types import SimpleNamespace

import httpx
from aiohttp import web

from activities.egress import build_proxy_client
from activities.proxy import CONCURRENCY, OutboundRequest, bounded, send
from bench.context import BenchContext, BenchError
from bench.fakes import LocalServer
from bench.load import PhaseResult, http_send
from bench.report import Figure
from bench.scenarios.registry import scenario

ROWS = 1000
LATENCY_MS = 5
CALLS = 400  # per side, for the overhead figure


class _Echo(LocalServer):
    """``GET /latency?ms=N`` after N ms; counts requests in flight."""

    def __init__(self) -> None:
        app = web.Application()
        app.router.add_get("/latency", self.handle)
        super().__init__(app)
        self.in_flight = self.max_in_flight = self.calls = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.calls += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(float(request.query.get("ms", "0")) / 1000)
            return web.json_response({"ok": True})
        finally:
            self.in_flight -= 1

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/latency"


async def _run_actions(ctx: BenchContext, echo: _Echo) -> tuple[PhaseResult, int]:
    body = {"name": f"bench-http-{secrets.token_hex(3)}", "columns": [
        {"name": "N", "type": "number"},
        {"name": "Call", "type": "http_request",
         "config": {"url": f"{echo.url}?ms={LATENCY_MS}&n={{{{ N }}}}"}},
    ]}
    table = json.loads(await http_send(ctx.session, "POST", f"{ctx.rest}/tables", ctx.headers,
                                       json.dumps(body).encode(), expect=(201,)))
    for start in range(0, ROWS, 500):
        rows = [{"fields": {"N": n}} for n in range(start, min(ROWS, start + 500))]
        await http_send(ctx.session, "POST", f"{ctx.rest}/tables/{table['id']}/records/batch", ctx.headers,
                        json.dumps({"rows": rows, "run_pipeline": False}).encode(), expect=(200,))
    echo.max_in_flight, calls0 = 0, echo.calls
    t0 = time.perf_counter()
    run = json.loads(await http_send(ctx.session, "POST", f"{ctx.rest}/tables/{table['id']}/run-actions",
                                     ctx.headers, b"{}", expect=(202,)))
    while True:
        state = json.loads(await http_send(ctx.session, "GET", f"{ctx.rest}/runs/{run['run_id']}",
                                           ctx.headers, b"", expect=(200,)))
        if state["status"] == "completed":
            break
        await asyncio.sleep(0.02)
    elapsed = time.perf_counter() - t0
    if state["done"] != ROWS or echo.calls - calls0 != ROWS:
        raise BenchError(f"run-actions did {state['done']} rows and {echo.calls - calls0} calls, not {ROWS}")
    return PhaseResult(concurrency=1, ops=ROWS, errors=state["failed"], elapsed_s=elapsed), echo.max_in_flight


async def _direct(echo: _Echo, concurrency: int) -> PhaseResult:
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=concurrency)) as client:
        url = f"{echo.url}?ms={LATENCY_MS}"
        t0 = time.perf_counter()
        await bounded([lambda: client.get(url) for _ in range(ROWS)], limit=concurrency)
        return PhaseResult(concurrency=concurrency, ops=ROWS, errors=0, elapsed_s=time.perf_counter() - t0)


async def _overhead(echo: _Echo) -> tuple[PhaseResult, PhaseResult]:
    proxy = build_proxy_client(SimpleNamespace(dev_mode=True, http_allowed_hosts=""))
    direct = httpx.AsyncClient()
    url = f"{echo.url}?ms=0"
    p_lat: list[float] = []
    d_lat: list[float] = []
    try:
        for i in range(CALLS + 20):  # interleaved: both sides see the same noise; 20 warm-up
            t0 = time.perf_counter()
            await direct.get(url, headers={"Idempotency-Key": str(i)})
            t1 = time.perf_counter()
            out = await send(proxy, OutboundRequest("GET", url, {}, None, str(i)), deadline=time.monotonic() + 10)
            t2 = time.perf_counter()
            if out.error is not None:
                raise BenchError(f"proxy call failed: {out.error}")
            if i >= 20:
                d_lat.append(t1 - t0)
                p_lat.append(t2 - t1)
    finally:
        await proxy.aclose()
        await direct.aclose()
    return (PhaseResult(1, CALLS, 0, sum(p_lat), p_lat), PhaseResult(1, CALLS, 0, sum(d_lat), d_lat))


@scenario("pipelines.http_request", title="run-actions over 1,000 rows with an http_request column (5 ms receiver)",
          target="≥ 200 rows/s; proxy overhead ≤ 3 ms p50 over direct httpx")
async def http_request_run_actions(ctx: BenchContext) -> list[Figure]:
    async with _Echo() as echo:
        api, reached = await _run_actions(ctx, echo)
        # the pipeline's ceiling: 4 chunk workflows × CONCURRENCY requests per step
        base = await _direct(echo, min(reached or CONCURRENCY, 4 * CONCURRENCY))
        proxy, direct = await _overhead(echo)
    rate = ctx.figure("pipelines.http_request", f"run-actions {ROWS:,} rows, http_request {LATENCY_MS} ms",
                      api, base, unit="rows/s",
                      note=f"receiver saw ≤ {reached} concurrent calls; baseline: direct httpx, same concurrency;"
                           f" target ≥ 200 rows/s")
    rate.baseline_label = "httpx"
    over = ctx.figure("pipelines.http_request", "proxy call vs direct httpx (p50 latency)", proxy, direct,
                      unit="calls/s", note=f"overhead p50 {(proxy.p50_ms or 0) - (direct.p50_ms or 0):.2f} ms"
                                           " (target ≤ 3 ms)")
    over.baseline_label = "httpx"
    return [rate, over]
