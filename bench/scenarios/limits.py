"""The rate limiter's cost (issue 8): single-record GET req/s with limits on vs off.

A second API process with ``WDS_RATE_LIMITS=true`` (same worker count, same PostgreSQL
and Temporal) is started beside the main one (limits off; if the run itself has
``--rate-limits``, a third process with them off is started instead). Both serve the
same requests on the same record of one enterprise workspace, interleaved at 16 clients,
for three times the run's duration in three times its slices (:data:`LONGER`).

The limiter must never refuse here, or the figure would measure 429s: the load is spread
over :data:`TOKENS` tokens, each client cycling through its own share, far below the
per-token ceiling of 3,000 requests per minute (enterprise has no workspace ceiling);
any non-200 counts as an error and fails the figure. "Far below" is checked, not
assumed: the limits-on side keeps the lowest ``X-RateLimit-Remaining`` it saw, the note
reports it, and a window that came within :data:`HEADROOM_FLOOR` of its limit fails the
figure. Near its limit the limiter is exact on purpose (every request its own hit in the
store, docs/decisions.md), which is a different cost from the one measured here. With
64 tokens (until session 24) the API's ~9,000 GETs a second took every window to
~3,000 within the run: its last part measured that exact mode.

The limiter is measured with each store: process memory (the default) and Redis
(``WDS_REDIS_URL``, every API process sharing the windows), the latter when a
``redis-server`` binary is installed (a throwaway server on a free loopback port,
no persistence); otherwise its figure says "not measured" and why.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from typing import Any

from bench.context import BenchContext, NotMeasurable, not_measured
from bench.load import Operation, OperationFailed, run_phase
from bench.report import Figure, Target
from bench.scenarios.registry import scenario
from wds.runtime import free_port, port_open

TARGET = Target(0.95, "≥ 95 % of limits off")  # issue #24 (was 90 %)
TOKENS = 256  # ~35 GETs a second each at ~9,000 a second: ~1,000 of a 3,000 window in the run
HEADROOM_FLOOR = 0.5  # the lowest remaining seen must stay above half of the limit
RECORDS = 200
WARMUP_S = 2.0
# both sides run three times the run's duration in three times its slices: the effect
# measured is a few per cent, and two identical processes (limits off on both) read
# 94.8-103.5 % of each other at 5 s in 5 slices but 99.3-99.6 % at 15 s in 15 (session 15)
LONGER = 3


def token_cycles(tokens: list[str], clients: int) -> list[list[str]]:
    """Deal ``tokens`` round-robin to ``clients`` (each gets at least one).

    >>> token_cycles(["a", "b", "c"], 2)
    [['a', 'c'], ['b']]
    >>> token_cycles(["a"], 2)
    [['a'], ['a']]
    """
    if not tokens:
        raise ValueError("no tokens")
    dealt: list[list[str]] = [[] for _ in range(clients)]
    for i, tok in enumerate(tokens):
        dealt[i % clients].append(tok)
    return [d or [tokens[i % len(tokens)]] for i, d in enumerate(dealt)]


class _Lowest:
    """The lowest ``X-RateLimit-Remaining`` and its limit seen on one side (None: no header)."""

    def __init__(self) -> None:
        self.remaining: int | None = None
        self.limit: int | None = None

    def see(self, headers: Any) -> None:
        left = headers.get("X-RateLimit-Remaining")
        if left is not None and (self.remaining is None or int(left) < self.remaining):
            self.remaining, self.limit = int(left), int(headers.get("X-RateLimit-Limit", 0))


def _get_op(ctx: BenchContext, base_url: str, table_id: int, ids: list[int], tokens: list[list[str]],
            lowest: _Lowest | None = None) -> Operation:
    """Each call takes the next client's next token (a worker's calls are sequential,
    so a shared round-robin spreads every token's requests evenly)."""
    session = ctx.session
    prefix = f"{base_url}/functions/v1/rest-api/tables/{table_id}/records/"
    headers = itertools.cycle([{"Authorization": f"Bearer {t}"} for share in tokens for t in share])
    rnd = random.Random(8)

    async def op() -> None:
        async with session.get(prefix + str(rnd.choice(ids)), headers=next(headers)) as resp:
            body = await resp.read()
            if resp.status != 200:
                raise OperationFailed(f"HTTP {resp.status}: {body[:200]!r}")
            if lowest is not None:
                lowest.see(resp.headers)

    return op


@contextlib.asynccontextmanager
async def _redis_server() -> AsyncIterator[str]:
    """A throwaway ``redis-server`` on a free loopback port (no persistence); its URL.

    Raises:
        NotMeasurable: no ``redis-server`` binary, or it did not start.
    """
    binary = shutil.which("redis-server")
    if binary is None:
        raise NotMeasurable("redis-server is not installed (apt-get install -y redis-server)")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="wds-bench-redis-") as workdir:
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", workdir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while not port_open("127.0.0.1", port):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise NotMeasurable("redis-server did not start")
                await asyncio.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            try:
                await asyncio.to_thread(proc.wait, 10)
            except subprocess.TimeoutExpired:
                proc.kill()


@contextlib.asynccontextmanager
async def _limits_off(ctx: BenchContext) -> AsyncIterator[Any]:
    # a fresh process like the limits-on side, so the two differ only in the flag (the
    # main API has been warm for the whole run, which skews a comparison with a new one)
    async with ctx.extra_api("limits-off", workers=1, WDS_RATE_LIMITS="false") as proc:
        yield proc


def cpu_seconds(pid: int) -> float | None:
    """The CPU time (user + system, with reaped children's) of process ``pid`` so far, from
    ``/proc`` (``None`` where there is none)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


@scenario("limits.rate_limiter", title="single-record GET req/s, rate limits on vs off (same run), memory and Redis stores",
          target=TARGET.text)
async def limiter_cost(ctx: BenchContext) -> list[Figure]:
    conc = ctx.config.concurrency
    names = {store: f"GET by id, {conc} clients, limits on ({store} store) vs off" for store in ("memory", "Redis")}
    try:
        _, tokens = await ctx.new_workspace("bench-limits", tokens=TOKENS)
    except NotMeasurable as exc:
        return [not_measured("limits.rate_limiter", name, str(exc), target=TARGET) for name in names.values()]
    headers = {"Authorization": f"Bearer {tokens[0]}", "Content-Type": "application/json"}
    table = await ctx.call("POST", f"{ctx.rest}/tables", {"name": "limits", "columns": [
        {"name": "Name", "type": "text"}, {"name": "Score", "type": "number"}]}, expect=(201,), headers=headers)
    rows = [{"fields": {"Name": f"r{i}", "Score": i}} for i in range(RECORDS)]
    out = await ctx.call("POST", f"{ctx.rest}/tables/{table['id']}/records/batch",
                         {"rows": rows, "run_pipeline": False}, expect=(200,), headers=headers)
    ids = [int(r["record"]["id"]) for r in out["results"]]
    shares = token_cycles(tokens, conc)
    figures = []
    for store, name in names.items():
        try:
            async with contextlib.AsyncExitStack() as stack:
                env = {"WDS_RATE_LIMITS": "true"}
                if store == "Redis":
                    env["WDS_REDIS_URL"] = await stack.enter_async_context(_redis_server())
                # one worker per side: two multi-worker processes on this 2-core machine measure
                # the OS scheduler (67–122 % seen), not the limiter (~10 µs a request in isolation)
                on = await stack.enter_async_context(ctx.extra_api(f"limits-on-{store.lower()}", workers=1, **env))
                off = await stack.enter_async_context(_limits_off(ctx))
                lowest = _Lowest()
                on_op = _get_op(ctx, on.base_url, int(table["id"]), ids, shares, lowest)
                off_op = _get_op(ctx, off.base_url, int(table["id"]), ids, shares)
                # a fresh process: fill its token cache, pools and code paths before measuring
                for op in (on_op, off_op):
                    await run_phase(op, concurrency=conc, duration_s=WARMUP_S, max_ops=ctx.config.max_ops)
                cpu0 = [cpu_seconds(p.proc.pid) for p in (on, off)]
                limited, free = await ctx.interleave([on_op, off_op], conc, longer=LONGER)
                cpu1 = [cpu_seconds(p.proc.pid) for p in (on, off)]
        except NotMeasurable as exc:
            figures.append(not_measured("limits.rate_limiter", name, str(exc), target=TARGET))
            continue
        if lowest.remaining is None or not lowest.limit:
            figures.append(not_measured("limits.rate_limiter", name, "the limits-on side answered without "
                                        "X-RateLimit-* headers: the limiter did not run", target=TARGET))
            continue
        seen = (f"lowest X-RateLimit-Remaining seen {lowest.remaining:,} of {lowest.limit:,}")
        if None not in cpu0 and None not in cpu1 and limited.ops and free.ops:
            per = [(b - a) / n * 1e6 for a, b, n in zip(cpu0, cpu1, (limited.ops, free.ops))]  # type: ignore[operator]
            seen += f"; API CPU per request {per[0]:.0f} µs on, {per[1]:.0f} µs off"
        if lowest.remaining < lowest.limit * HEADROOM_FLOOR:
            limited.errors += 1  # fails the figure
            limited.first_error = limited.first_error or (
                f"{seen}: the windows came near their limit, where every request is an exact hit; "
                "more tokens are needed")
        fig = ctx.figure("limits.rate_limiter", name, limited, free, target=TARGET,
                         note=f"{TOKENS} tokens of one enterprise workspace, spread over the clients; "
                              f"two fresh single-worker API processes, differing only in WDS_RATE_LIMITS"
                              + (" (and WDS_REDIS_URL: a local redis-server)" if store == "Redis" else "")
                              + f"; {seen}")
        fig.baseline_label = "limits off"
        figures.append(fig)
    return figures
