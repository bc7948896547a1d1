"""A soak run (issue 12): a mixed workload for N minutes against the embedded stack, with
the API processes' memory sampled throughout, to show whether anything grows without
bound. Not part of CI (it takes ten minutes by default).

    python -m bench.soak [--minutes 10] [--concurrency 8] [--output bench/SOAK.md]

The workload, bounded in count and time and loopback only: single-record GETs, filtered
lists with counts, creates that run a 3-formula pipeline, batches of 100 without pipeline,
and updates. Memory is the resident set size of the uvicorn process and its workers
(psutil), sampled every 10 s; the report gives the first sample after warm-up, the last,
the growth, and the slope of a least-squares line through the samples.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import random
import time
from datetime import datetime, timezone
from pathlib import Path

import aiohttp
import orjson
import psutil

from bench.stack import EmbeddedStack

MAX_OPS = 2_000_000
SAMPLE_S = 10.0
WARMUP_S = 30.0


def rss_mb(pid: int) -> float:
    proc = psutil.Process(pid)
    total = proc.memory_info().rss
    for child in proc.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def slope_mb_per_min(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) samples, in MB per minute.

    >>> round(slope_mb_per_min([(0, 100.0), (60, 101.0), (120, 102.0)]), 3)
    1.0
    """
    n = len(samples)
    if n < 2:
        return 0.0
    mx = sum(t for t, _ in samples) / n
    my = sum(m for _, m in samples) / n
    var = sum((t - mx) ** 2 for t, _ in samples)
    if var == 0:
        return 0.0
    cov = sum((t - mx) * (m - my) for t, m in samples)
    return cov / var * 60.0


async def workload(base: str, token: str, minutes: float, concurrency: int, counts: dict[str, int]) -> None:
    rest = f"{base}/functions/v1/rest-api"
    hdr = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    deadline = time.monotonic() + minutes * 60
    async with aiohttp.ClientSession(headers=hdr) as s:
        async with s.post(f"{rest}/tables", json={"name": f"soak-{int(time.time())}", "columns": [
            {"name": "Name", "type": "text"}, {"name": "Score", "type": "number"},
            {"name": "Status", "type": "single_select", "options": ["a", "b", "c"]},
            {"name": "P1", "type": "formula", "formula": "{Score} + 1"},
            {"name": "P2", "type": "formula", "formula": "{P1} * 2"},
            {"name": "P3", "type": "formula", "formula": "\"s\" & {P2}"},
        ]}) as r:
            table = (await r.json())["id"]
        ids: list[int] = []

        async def op(rng: random.Random) -> None:
            kind = rng.choices(["get", "list", "create", "batch", "update"], [40, 25, 15, 5, 15])[0]
            if kind in ("get", "update") and not ids:
                kind = "create"
            if kind == "get":
                url, method, body = f"{rest}/tables/{table}/records/{rng.choice(ids)}", "GET", None
            elif kind == "list":
                url, method, body = (f"{rest}/tables/{table}/records?Score=gt.{rng.randint(0, 900)}&Status=eq.a&limit=100",
                                     "GET", None)
            elif kind == "create":
                url, method = f"{rest}/tables/{table}/records", "POST"
                body = {"fields": {"Name": f"n{rng.random()}", "Score": rng.randint(0, 1000), "Status": rng.choice("abc")}}
            elif kind == "batch":
                url, method = f"{rest}/tables/{table}/records/batch", "POST"
                body = {"rows": [{"fields": {"Name": "b", "Score": rng.randint(0, 1000), "Status": "b"}}
                                 for _ in range(100)], "run_pipeline": False}
            else:
                url, method = f"{rest}/tables/{table}/records/{rng.choice(ids)}", "PATCH"
                body = {"fields": {"Score": rng.randint(0, 1000)}}
            headers = {"Prefer": "count=exact"} if kind == "list" else {}
            async with s.request(method, url, json=body, headers=headers) as r:
                data = await r.read()
                counts[kind] = counts.get(kind, 0) + 1
                if r.status >= 500:
                    counts["errors_5xx"] = counts.get("errors_5xx", 0) + 1
                elif kind == "create" and r.status == 201:
                    ids.append(orjson.loads(data)["id"])
                    if len(ids) > 50_000:
                        del ids[: len(ids) // 2]

        async def client(seed: int) -> None:
            rng = random.Random(seed)
            while time.monotonic() < deadline and sum(counts.values()) < MAX_OPS:
                await op(rng)

        await asyncio.gather(*(client(i) for i in range(concurrency)))


async def sampler(pid: int, minutes: float, samples: list[tuple[float, float]]) -> None:
    start = time.monotonic()
    deadline = start + minutes * 60
    while time.monotonic() < deadline:
        samples.append((time.monotonic() - start, rss_mb(pid)))
        await asyncio.sleep(SAMPLE_S)
    samples.append((time.monotonic() - start, rss_mb(pid)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.soak")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--output", type=Path, default=Path(__file__).with_name("SOAK.md"))
    args = ap.parse_args(argv)
    stack = EmbeddedStack()
    stack.start()
    try:
        dep = stack.start_api(args.workers)
        pid = stack.api.proc.pid  # type: ignore[union-attr]
        counts: dict[str, int] = {}
        samples: list[tuple[float, float]] = []

        async def run() -> None:
            await asyncio.gather(workload(dep.base_url, dep.token, args.minutes, args.concurrency, counts),
                                 sampler(pid, args.minutes, samples))

        started = time.monotonic()
        asyncio.run(run())
        elapsed = time.monotonic() - started
    finally:
        stack.stop()
    steady = [(t, m) for t, m in samples if t >= WARMUP_S] or samples
    first, last = steady[0][1], steady[-1][1]
    total = sum(v for k, v in counts.items() if k != "errors_5xx")
    lines = [
        "# Soak run", "",
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, {psutil.cpu_count()} cores; "
        f"{args.minutes:g} min, {args.concurrency} clients, {args.workers} API worker(s).", "",
        "| Figure | Value |", "|---|---|",
        f"| requests | {total:,} ({total / elapsed:,.0f}/s) |",
        f"| mix | {', '.join(f'{k} {v:,}' for k, v in sorted(counts.items()))} |",
        f"| 5xx answers | {counts.get('errors_5xx', 0)} |",
        f"| API RSS after {WARMUP_S:.0f} s warm-up | {first:,.1f} MB |",
        f"| API RSS at the end | {last:,.1f} MB |",
        f"| growth | {last - first:+,.1f} MB ({(last - first) / first * 100:+.1f} %) |",
        f"| trend (least squares) | {slope_mb_per_min(steady):+.2f} MB/min |",
        "", "Samples (s, MB): " + ", ".join(f"{t:.0f}:{m:.0f}" for t, m in samples), "",
    ]
    args.output.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
