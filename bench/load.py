"""The load generator: N concurrent workers repeating one async operation, bounded by
time AND by a count, recording each operation's latency.

The same loop drives HTTP requests and direct psycopg queries, so the service and its
baseline are measured by identical code. It is kept light on purpose: on a 2-core machine
the generator competes with the server for CPU, so the loop does no parsing, no logging
and no allocation beyond one float per operation; the CPU it uses is recorded
(``client_cpu``) so a reader can see the share it took.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import psycopg

from bench.report import percentile

Operation = Callable[[], Awaitable[None]]

# a phase whose operations fail this often is broken, not slow: stop it early
_ABORT_AFTER_ERRORS = 50


class OperationFailed(Exception):
    """An operation answered, but not as expected (wrong status, wrong row count)."""


# what a failed request or query raises; each one is a measured error, not a crash
FAILURES = (OperationFailed, aiohttp.ClientError, psycopg.Error, TimeoutError, OSError)


@dataclass(slots=True)
class PhaseResult:
    """One measured phase: successful operations, failures and their latencies (seconds)."""

    concurrency: int
    ops: int
    errors: int
    elapsed_s: float
    latencies: list[float] = field(repr=False, default_factory=list)
    client_cpu_s: float = 0.0
    first_error: str | None = None

    @property
    def rate(self) -> float:
        return self.ops / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def p50_ms(self) -> float | None:
        v = percentile(self.latencies, 50)
        return None if v is None else v * 1000

    @property
    def p99_ms(self) -> float | None:
        v = percentile(self.latencies, 99)
        return None if v is None else v * 1000

    @property
    def client_cpu(self) -> float | None:
        """Share of one core this process used during the phase."""
        return self.client_cpu_s / self.elapsed_s if self.elapsed_s > 0 else None


async def run_phase(
    op: Operation, *, concurrency: int, duration_s: float, max_ops: int, warmup_s: float = 0.0
) -> PhaseResult:
    """Run ``op`` from ``concurrency`` workers until ``duration_s`` passes or ``max_ops`` ran.

    A warm-up of ``warmup_s`` (same concurrency, not recorded) fills connection pools and
    prepared-statement caches first. An operation that raises counts as an error.
    """
    if warmup_s > 0:
        await _loop(op, concurrency, warmup_s, max_ops)
    cpu0 = time.process_time()
    result = await _loop(op, concurrency, duration_s, max_ops)
    result.client_cpu_s = time.process_time() - cpu0
    return result


async def _loop(op: Operation, concurrency: int, duration_s: float, max_ops: int) -> PhaseResult:
    latencies: list[float] = []
    state = {"started": 0, "errors": 0}
    first_error: list[str] = []
    clock = time.perf_counter
    deadline = clock() + duration_s

    async def worker() -> None:
        while clock() < deadline and state["started"] < max_ops:
            if state["errors"] >= _ABORT_AFTER_ERRORS and state["errors"] > len(latencies):
                return
            state["started"] += 1
            t0 = clock()
            try:
                await op()
            except FAILURES as exc:
                state["errors"] += 1
                if not first_error:
                    first_error.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            latencies.append(clock() - t0)

    t0 = clock()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = clock() - t0
    return PhaseResult(
        concurrency=concurrency, ops=len(latencies), errors=state["errors"], elapsed_s=elapsed,
        latencies=latencies, first_error=first_error[0] if first_error else None,
    )


async def run_sequential_batches(ops: list[Operation]) -> PhaseResult:
    """Run each operation once, in order (bulk loads: rows/s over the whole sequence)."""
    latencies: list[float] = []
    errors = 0
    first_error: str | None = None
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for op in ops:
        s = time.perf_counter()
        try:
            await op()
        except FAILURES as exc:
            errors += 1
            first_error = first_error or f"{type(exc).__name__}: {exc}"[:300]
            continue
        latencies.append(time.perf_counter() - s)
    elapsed = time.perf_counter() - t0
    return PhaseResult(1, len(latencies), errors, elapsed, latencies, time.process_time() - cpu0, first_error)


def http_get(session: aiohttp.ClientSession, url: str, headers: dict[str, str], expect: int = 200) -> Operation:
    """An operation GETting ``url``; the body is read (so the server's work is complete)
    but not parsed, keeping the generator light."""

    async def op() -> None:
        async with session.get(url, headers=headers) as resp:
            body = await resp.read()
            if resp.status != expect:
                raise OperationFailed(f"HTTP {resp.status}: {body[:200]!r}")

    return op


async def http_send(
    session: aiohttp.ClientSession, method: str, url: str, headers: dict[str, str],
    payload: bytes, expect: tuple[int, ...] = (200, 201),
) -> bytes:
    """Send a pre-encoded JSON body; raise :class:`OperationFailed` on an unexpected status."""
    async with session.request(method, url, data=payload, headers=headers) as resp:
        body = await resp.read()
        if resp.status not in expect:
            raise OperationFailed(f"HTTP {resp.status}: {body[:300]!r}")
        return body
