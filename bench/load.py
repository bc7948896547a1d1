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


class Percentiles:
    """``p50_ms`` and ``p99_ms`` of a result's ``latencies`` (seconds)."""

    __slots__ = ()
    latencies: list[float]

    @property
    def p50_ms(self) -> float | None:
        v = percentile(self.latencies, 50)
        return None if v is None else v * 1000

    @property
    def p99_ms(self) -> float | None:
        v = percentile(self.latencies, 99)
        return None if v is None else v * 1000


@dataclass(slots=True)
class PhaseResult(Percentiles):
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


def merge(results: list[PhaseResult]) -> PhaseResult:
    """One result from several slices of the same phase (interleaved measurement)."""
    if not results:
        raise ValueError("nothing to merge")
    errors = [r.first_error for r in results if r.first_error]
    return PhaseResult(
        concurrency=results[0].concurrency,
        ops=sum(r.ops for r in results),
        errors=sum(r.errors for r in results),
        elapsed_s=sum(r.elapsed_s for r in results),
        latencies=[x for r in results for x in r.latencies],
        client_cpu_s=sum(r.client_cpu_s for r in results),
        first_error=errors[0] if errors else None,
    )


async def run_interleaved(
    ops: list[Operation], *, concurrency: int, duration_s: float, max_ops: int, rounds: int,
    warmup_s: float = 0.0,
) -> list[PhaseResult]:
    """Measure several operations in alternating slices: A, B, A, B, ... ``rounds`` times.

    Each operation gets ``duration_s`` in total. On a shared, noisy machine a burst of
    foreign load then hits every operation alike instead of only the one that happened to
    run during it, which keeps the service/baseline ratio meaningful.
    """
    for op in ops:
        if warmup_s > 0:
            await run_phase(op, concurrency=concurrency, duration_s=warmup_s, max_ops=max_ops)
    rounds = max(1, rounds)
    slices: list[list[PhaseResult]] = [[] for _ in ops]
    for _ in range(rounds):
        for i, op in enumerate(ops):
            slices[i].append(await run_phase(
                op, concurrency=concurrency, duration_s=duration_s / rounds, max_ops=max(1, max_ops // rounds)))
    return [merge(s) for s in slices]


async def run_alternating_batches(sequences: list[list[Operation]]) -> list[PhaseResult]:
    """Run each sequence's operations once, in order, alternating between the sequences
    call by call (A1, B1, A2, B2, ...): bulk loads measured side by side.

    Each result's ``elapsed_s`` is the time spent in that sequence's calls only.
    """
    latencies: list[list[float]] = [[] for _ in sequences]
    errors = [0 for _ in sequences]
    first: list[str | None] = [None for _ in sequences]
    cpu = [0.0 for _ in sequences]
    for step in range(max((len(s) for s in sequences), default=0)):
        for i, seq in enumerate(sequences):
            if step >= len(seq):
                continue
            c0, t0 = time.process_time(), time.perf_counter()
            try:
                await seq[step]()
            except FAILURES as exc:
                errors[i] += 1
                first[i] = first[i] or f"{type(exc).__name__}: {exc}"[:300]
            else:
                latencies[i].append(time.perf_counter() - t0)
            cpu[i] += time.process_time() - c0
    return [
        PhaseResult(1, len(lat), errors[i], sum(lat), lat, cpu[i], first[i])
        for i, lat in enumerate(latencies)
    ]


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
