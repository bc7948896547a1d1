"""Realtime and storage (issue 10).

* ``realtime.latency``: 100 WebSocket clients subscribed to one table; a writer inserts
  rows one at a time (autocommit ``INSERT`` through psycopg into the physical table, so
  the figure is the change feed's and not the REST write's), every 20 ms. Latency is from
  the moment the writer sent the committing statement to the moment a client's socket
  handed over the event (so it includes the INSERT's own round trip, ~0.3 ms), over
  every (event, client) pair — p50 target ≤ 10 ms, p99 reported. The clients run in the
  bench process and only timestamp raw frames while measuring (parsing comes after), so
  the generator's share is as small as it can be; it is still one process reading 100
  sockets per event, which the p99 includes.
* ``storage.throughput``: upload (``POST /storage/v1/object/{bucket}/{path}``) and
  download of a 10 MB object, MB/s, beside a plain file copy (read + write, 1 MiB
  buffer, no fsync: the object store does not fsync either) of the same bytes on the
  same file system, interleaved.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from psycopg import sql

from bench.context import BenchContext, BenchError, BenchTable, budget_figure
from bench.load import OperationFailed, PhaseResult, http_send
from bench.report import Figure, percentile
from bench.scenarios.registry import scenario

CLIENTS = 100
WRITES_FULL, WRITES_QUICK = 200, 40
WRITE_GAP_S = 0.02
BUDGET_MS = 10.0
SETTLE_S = 10.0
OBJECT_MB = 10
REPS_FULL, REPS_QUICK = 10, 3


def ws_url(base_url: str, token: str) -> str:
    """The realtime endpoint of ``base_url`` with the token in the query.

    >>> ws_url("http://127.0.0.1:8000", "t")
    'ws://127.0.0.1:8000/realtime/v1?token=t'
    """
    return base_url.replace("https://", "wss://").replace("http://", "ws://") + f"/realtime/v1?token={token}"


def latencies(sent: dict[int, float], frames: list[list[tuple[float, str]]]) -> tuple[list[float], int]:
    """Seconds from each write to each client's receipt, and how many (write, client)
    pairs never arrived. Frames that are not ``change`` events of a sent id are skipped.

    >>> lat, missing = latencies({1: 0.0, 2: 1.0},
    ...     [[(0.5, '{"type":"change","record":{"id":1}}'), (9.0, '{"type":"heartbeat"}')]])
    >>> lat, missing
    ([0.5], 1)
    """
    out: list[float] = []
    missing = 0
    for client in frames:
        seen: set[int] = set()
        for at, raw in client:
            msg = orjson.loads(raw)
            if msg.get("type") != "change":
                continue
            rid = (msg.get("record") or {}).get("id")
            if rid in sent and rid not in seen:
                seen.add(rid)
                out.append(at - sent[rid])
        missing += len(sent) - len(seen)
    return out, missing


async def _subscriber(session: aiohttp.ClientSession, url: str, table_id: int) -> aiohttp.ClientWebSocketResponse:
    """Connect and subscribe to the table's inserts; returns once the server acknowledged."""
    ws = await session.ws_connect(url, heartbeat=None, max_msg_size=0)
    await ws.send_str(orjson.dumps({"type": "subscribe", "table": table_id, "events": ["INSERT"]}).decode())
    while True:
        msg = await asyncio.wait_for(ws.receive(), timeout=30)
        if msg.type != aiohttp.WSMsgType.TEXT:
            raise BenchError(f"realtime socket closed while subscribing: {msg.type} {msg.data!r}")
        body = orjson.loads(msg.data)
        if body.get("type") == "subscribed":
            break
        if body.get("type") == "error":
            raise BenchError(f"subscribe refused: {body}")
    return ws


async def _reader(ws: aiohttp.ClientWebSocketResponse, frames: list[tuple[float, str]]) -> None:
    clock = time.perf_counter
    async for msg in ws:  # ends when the socket closes
        if msg.type == aiohttp.WSMsgType.TEXT:
            frames.append((clock(), msg.data))  # parse later: keep the read loop minimal


async def _writer(ctx: BenchContext, table: BenchTable, writes: int) -> dict[int, float]:
    """Insert ``writes`` rows one at a time; returns id → send time of its statement."""
    sent: dict[int, float] = {}
    pool = await ctx.pool()
    if pool is not None:
        async with pool.connection() as conn:
            stmt = sql.SQL("INSERT INTO {} ({}, {}, {}) VALUES (%s, %s, %s) RETURNING id").format(
                table.qualified, table.col("Name"), table.col("Score"), table.col("Status")).as_string(conn)
            for i in range(writes):
                t0 = time.perf_counter()
                cur = await conn.execute(stmt, (f"rt-{i}", float(i), table.options["a"]))
                row = await cur.fetchone()
                assert row is not None
                sent[int(row[0])] = t0
                await asyncio.sleep(WRITE_GAP_S)
        return sent
    url = f"{ctx.rest}/tables/{table.id}/records?run_pipeline=false"  # no DSN: through REST
    for i in range(writes):
        payload = orjson.dumps({"fields": {"Name": f"rt-{i}", "Score": i, "Status": "a"}})
        t0 = time.perf_counter()
        body = await http_send(ctx.session, "POST", url, ctx.headers, payload, expect=(201,))
        sent[int(orjson.loads(body)["id"])] = t0
        await asyncio.sleep(WRITE_GAP_S)
    return sent


@scenario("realtime.latency", title=f"committed write → event at {CLIENTS} subscribed clients",
          target=f"p50 ≤ {BUDGET_MS:g} ms")
async def realtime_latency(ctx: BenchContext) -> list[Figure]:
    table = await ctx.create_table("realtime")
    url = ws_url(ctx.deployment.base_url, ctx.deployment.token)
    writes = WRITES_QUICK if ctx.config.quick else WRITES_FULL
    frames: list[list[tuple[float, str]]] = [[] for _ in range(CLIENTS)]
    # its own session: the shared one's connection limit is sized to the load phases
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        sockets: list[aiohttp.ClientWebSocketResponse] = []
        gate = asyncio.Semaphore(20)

        async def join() -> None:
            async with gate:
                sockets.append(await _subscriber(session, url, table.id))

        readers: list[asyncio.Task[None]] = []
        try:
            await asyncio.gather(*(join() for _ in range(CLIENTS)))
            readers = [asyncio.create_task(_reader(ws, frames[i])) for i, ws in enumerate(sockets)]
            sent = await _writer(ctx, table, writes)
            deadline = time.monotonic() + SETTLE_S
            while time.monotonic() < deadline and sum(len(f) for f in frames) < writes * CLIENTS:
                await asyncio.sleep(0.05)
        finally:
            for ws in sockets:
                await ws.close()
            for task in readers:
                task.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
    lat, missing = latencies(sent, frames)
    lat_ms = [x * 1000 for x in lat]
    p50, p99 = percentile(lat_ms, 50), percentile(lat_ms, 99)
    how = "psycopg autocommit INSERT" if ctx.deployment.dsn else "REST POST (no --dsn)"
    return [budget_figure(
        "realtime.latency", f"write → event, {CLIENTS} clients, {writes} writes", p50, BUDGET_MS,
        p50_ms=p50, p99_ms=p99, errors=missing, tags=ctx.tags,
        note=f"{len(lat):,} deliveries; {missing} missing; writes by {how}, every {WRITE_GAP_S * 1000:g} ms",
    )]


def _copy(src: Path, dst: Path) -> None:
    with src.open("rb") as fin, dst.open("wb") as fout:
        shutil.copyfileobj(fin, fout, 1024 * 1024)


async def _storage_rounds(ctx: BenchContext, bucket: str, data: bytes, reps: int, work: Path
                          ) -> tuple[list[float], list[float], list[float]]:
    base = f"{ctx.deployment.base_url}/storage/v1/object/{bucket}"
    auth = {"Authorization": ctx.headers["Authorization"]}
    up_h = {**auth, "Content-Type": "application/octet-stream"}
    src = work / "source.bin"
    src.write_bytes(data)
    up, down, copy = [], [], []
    for i in range(reps + 1):  # the first round warms caches and connections, unrecorded
        t0 = time.perf_counter()
        await http_send(ctx.session, "POST", f"{base}/obj-{i}.bin", up_h, data, expect=(200, 201))
        t1 = time.perf_counter()
        async with ctx.session.get(f"{base}/obj-{i}.bin", headers=auth) as resp:
            got = await resp.read()
            if resp.status != 200 or len(got) != len(data):
                raise OperationFailed(f"download: HTTP {resp.status}, {len(got)} bytes")
        t2 = time.perf_counter()
        _copy(src, work / f"copy-{i}.bin")
        t3 = time.perf_counter()
        (work / f"copy-{i}.bin").unlink()
        await http_send(ctx.session, "DELETE", f"{base}/obj-{i}.bin", auth, b"", expect=(200,))
        if i:
            up.append(t1 - t0)
            down.append(t2 - t1)
            copy.append(t3 - t2)
    return up, down, copy


@scenario("storage.throughput", title=f"upload / download of a {OBJECT_MB} MB object vs a plain file copy")
async def storage_throughput(ctx: BenchContext) -> list[Figure]:
    bucket = f"bench-{os.urandom(3).hex()}"
    await ctx.call("POST", f"{ctx.deployment.base_url}/storage/v1/bucket", {"name": bucket, "public": False},
                   expect=(201,))
    data = os.urandom(OBJECT_MB * 1_000_000)  # random bytes: nothing on the path can compress them
    reps = REPS_QUICK if ctx.config.quick else REPS_FULL
    stack = ctx.deployment.stack
    work = Path(tempfile.mkdtemp(prefix="copy-", dir=stack.tmp if stack is not None else None))
    try:
        up, down, copy = await _storage_rounds(ctx, bucket, data, reps, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    copied = PhaseResult(1, reps, 0, sum(copy), copy)
    note = f"{reps} rounds of upload, download, copy (+1 warm-up); baseline: read + write of the same bytes"
    figures: list[Any] = []
    for label, times in (("upload", up), ("download", down)):
        fig = ctx.figure("storage.throughput", f"{label} {OBJECT_MB} MB object", PhaseResult(1, reps, 0, sum(times), times),
                         copied, unit="MB/s", scale=OBJECT_MB, note=note)
        fig.baseline_label = "file copy"
        figures.append(fig)
    return figures
