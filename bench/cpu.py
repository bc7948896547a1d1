"""API CPU per request: the noise-resistant measure of the hot path on a shared machine.

``python -m bench.cpu [--tree DIR ...] [--ops create,list,get,batch,batch3] [--requests N] [--rounds R]``

Starts the embedded stack (PostgreSQL + the Temporal dev server, as ``python -m bench``
does), then one single-process API (uvicorn, no ``--workers``) per source tree given with
``--tree`` (default: this checkout), each serving that tree's code on the same database.
For every round, tree and operation it sends ``N`` warm-up requests, then ``N`` measured
requests at ``--clients`` concurrent clients, and reports the API process's CPU time
(``utime + stime`` from ``/proc/<pid>/stat``) divided by the requests: microseconds of API
CPU per request (beside it, PostgreSQL's CPU per request, all its processes, the Temporal
dev server's and this load generator's). The load generator runs in this process; its CPU is not counted, and the
other tenants of the machine only change the wall time, not the API's own CPU. Trees
alternate within each round, so a slow period hits every tree alike.

Operations (the ``records.*`` scenarios' requests):

* ``create``: ``POST {rest}/tables/{id}/records?run_pipeline=false`` with ``{"fields": {...}}``;
* ``list``: the filtered list of ``records.list`` (``Score>500 AND Status=a``, page 100);
* ``get``: ``GET {rest}/tables/{id}/records/{record_id}`` of a random seeded row;
* ``batch`` / ``batch3``: ``POST {rest}/tables/{id}/records/batch`` of 500 rows into the
  ``pipelines.batch`` scenario's table (``A`` and three chained formulas), with
  ``run_pipeline`` false / true: that scenario's two calls.

``--psycopg`` also runs each operation's psycopg baseline (the ``records.*`` scenarios'
SQL, same tables, same concurrency) and reports PostgreSQL's and the client's CPU per
operation for it: the API's request costs its own CPU *and* PostgreSQL's, on the same
cores. ``--env K=V`` sets API environment variables (e.g. ``WDS_FAST_READS=false``);
``--variant K=V[,K=V...]`` (repeatable) serves the first tree once per variant, each API
with those variables on top of ``--env``: two settings of one code side by side (e.g.
``--variant WDS_RATE_LIMITS=false --variant WDS_RATE_LIMITS=true``). ``--tokens N`` spreads
the requests over ``N`` builder tokens of the workspace, each request taking the next
(the ``limits.rate_limiter`` scenario's load: with limits on, no token nears its ceiling).
``--origin`` sends an ``Origin`` header (the CORS path); ``--profile DIR`` records every
measured phase with py-spy (``--format raw``, ``--nonblocking``) into ``DIR``;
``--cprofile DIR`` runs the APIs under :mod:`bench.cprof_server` and writes a cProfile of
every measured phase into ``DIR``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from bench.context import BENCH_COLUMNS, BenchTable, batch_payload, make_rows
from bench.scenarios.pipelines import FORMULAS
from bench.scenarios.records import LIST_QUERY, PAGE, _list_sql
from bench.stack import EmbeddedStack
from wds.runtime import create_workspace, free_port, stop_process, wait_healthy
from wds.server import uvicorn_args_for

HERE = Path(__file__).resolve().parents[1]
OPS = ("create", "list", "get")
BATCH_OPS = {"batch": False, "batch3": True}  # run_pipeline of each batch op
BATCH = 500


@dataclass
class Api:
    name: str
    tree: Path
    base_url: str
    proc: subprocess.Popen[bytes]
    log: Path


def cpu_times(pid: int) -> tuple[float, float]:
    """``(user, system)`` CPU seconds of process ``pid`` so far (Linux ``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def postgres_cpu(data_dir: Path) -> float:
    """User + system CPU seconds of the stack's PostgreSQL: the postmaster (its pid is the
    first line of ``postmaster.pid``) and every backend it forked. Backends that exited
    since the last call are not counted (the API's and the baseline's pools keep theirs)."""
    try:
        master = int((data_dir / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry.name) == master or int(fields[1]) == master:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def process_cpu(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` (0 when there is none)."""
    return sum(cpu_times(pid)) if pid is not None else 0.0


def start_api(stack: EmbeddedStack, name: str, tree: Path, env: dict[str, str], cprofile: str | None = None) -> Api:
    """One single-process uvicorn serving ``tree``'s ``api.app`` on the stack's database."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    full = stack.stack.env(**{"WDS_PUBLIC_BASE_URL": base_url, "WDS_RATE_LIMITS": "false", **env})
    full["PYTHONPATH"] = str(tree)
    log = stack.tmp / f"cpu-{name}-{port}.log"
    args = [sys.executable, "-m", "uvicorn", "api.app:create_app", "--factory", "--host", "127.0.0.1",
            "--port", str(port), "--log-level", "warning", "--no-access-log", *uvicorn_args_for(full)]
    if cprofile:  # the same uvicorn command line, under bench/cprof_server.py (from this checkout)
        Path(cprofile).mkdir(parents=True, exist_ok=True)
        full["PYTHONPATH"] = f"{tree}:{HERE}"
        args[1:3] = ["-m", "bench.cprof_server", str(Path(cprofile).resolve() / name), "--"]
    proc = subprocess.Popen(args, cwd=tree, env=full, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        wait_healthy(base_url, [proc], 180, log=log)
    except Exception:
        stop_process(proc)
        raise
    return Api(name, tree, base_url, proc, log)


async def _send(session: aiohttp.ClientSession, method: str, url: str, headers: dict[str, str],
                body: bytes | None, expect: int | tuple[int, ...]) -> bytes:
    async with session.request(method, url, data=body, headers=headers) as resp:
        raw = await resp.read()
        if resp.status not in (expect if isinstance(expect, tuple) else (expect,)):
            raise RuntimeError(f"{method} {url}: HTTP {resp.status} {raw[:300]!r}")
        return raw


async def _seed(session: aiohttp.ClientSession, rest: str, headers: dict[str, str], rows: int,
                made: list[dict[str, Any]]) -> tuple[int, int, list[int]]:
    """A read table of ``rows`` bench rows and an empty create table: (read id, create id,
    ids); the tables as the API answered their creation are appended to ``made``."""
    tables = []
    for purpose in ("read", "create"):
        body = json.dumps({"name": f"cpu-{purpose}-{random.randrange(1 << 30)}", "columns": BENCH_COLUMNS}).encode()
        made.append(json.loads(await _send(session, "POST", f"{rest}/tables", headers, body, (200, 201))))
        tables.append(int(made[-1]["id"]))
    data = make_rows(rows)
    ids: list[int] = []
    for start in range(0, rows, 500):
        raw = await _send(session, "POST", f"{rest}/tables/{tables[0]}/records/batch", headers,
                          batch_payload(data[start:start + 500]), (200, 201))
        ids += [int(r["record"]["id"]) for r in json.loads(raw)["results"]]
    return tables[0], tables[1], ids


async def _formula_table(session: aiohttp.ClientSession, rest: str, headers: dict[str, str]) -> int:
    """The ``pipelines.batch`` scenario's table: ``A`` and three chained formulas."""
    body = json.dumps({"name": f"cpu-formulas-{random.randrange(1 << 30)}",
                       "columns": [{"name": "A", "type": "number"}, *FORMULAS]}).encode()
    return int(json.loads(await _send(session, "POST", f"{rest}/tables", headers, body, (200, 201)))["id"])


def _operation(op: str, session: aiohttp.ClientSession, rest: str, headers: Iterator[dict[str, str]],
               read_id: int, create_id: int, ids: list[int], formula_id: int = 0) -> Callable[[], Awaitable[None]]:
    """``op``'s request; each takes the next of ``headers`` (a cycle over the tokens)."""
    rnd = random.Random(1)
    if op in BATCH_OPS:
        url = f"{rest}/tables/{formula_id}/records/batch"
        scores = [r["Score"] for r in make_rows(BATCH * 4)]
        bodies = itertools.cycle([json.dumps({"rows": [{"fields": {"A": a}} for a in scores[i:i + BATCH]],
                                              "run_pipeline": BATCH_OPS[op]}).encode()
                                  for i in range(0, len(scores), BATCH)])
        return lambda: _send(session, "POST", url, next(headers), next(bodies), 200)  # type: ignore[return-value]
    if op == "create":
        url = f"{rest}/tables/{create_id}/records?run_pipeline=false"
        bodies = itertools.cycle([json.dumps({"fields": r}).encode() for r in make_rows(1000)])
        return lambda: _send(session, "POST", url, next(headers), next(bodies), 201)  # type: ignore[return-value]
    if op == "list":
        url = f"{rest}/tables/{read_id}/records?{LIST_QUERY}"
        return lambda: _send(session, "GET", url, next(headers), None, 200)  # type: ignore[return-value]
    base = f"{rest}/tables/{read_id}/records/"
    return lambda: _send(session, "GET", base + str(rnd.choice(ids)), next(headers), None, 200)  # type: ignore[return-value]


def _token(base_url: str, admin_key: str, ws_id: int, i: int) -> str:
    """Another builder token of workspace ``ws_id`` (the operator API)."""
    r = httpx.post(f"{base_url}/functions/v1/admin/workspaces/{ws_id}/tokens", json={"type": "vibe_mcp", "name": f"cpu-{i}"},
                   headers={"Authorization": f"Bearer {admin_key}"}, timeout=60)
    r.raise_for_status()
    return str(r.json()["token"])


async def _bench_table(pool: AsyncConnectionPool, made: dict[str, Any]) -> BenchTable:
    """The API's table as the psycopg baselines of ``records.*`` address it."""
    cols = {c["name"]: c for c in made["columns"]}
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE c.relname = %s AND n.nspname LIKE 'ws\\_%%' AND c.relkind = 'r'", (f"t_{made['id']}",))
        schema = (await cur.fetchone())[0]  # type: ignore[index]
    return BenchTable(int(made["id"]), schema, {n: f"c_{c['id']}" for n, c in cols.items()},
                      {o["label"]: o["id"] for o in cols["Status"]["options"]})


def _pg_operation(op: str, pool: AsyncConnectionPool, read: BenchTable, create: BenchTable,
                  ids: list[int]) -> Callable[[], Awaitable[None]] | None:
    """The ``records.*`` scenarios' psycopg baseline of ``op`` (same SQL, same tables);
    ``None`` for the batch ops (their baseline is ``batch``, the call without pipeline)."""
    rnd = random.Random(1)
    if op in BATCH_OPS:
        return None
    if op == "create":
        query = sql.SQL("INSERT INTO {} ({}, {}, {}) VALUES (%s, %s, %s) RETURNING *").format(
            create.qualified, create.col("Name"), create.col("Score"), create.col("Status"))
        values = itertools.cycle([create.encode(r) for r in make_rows(1000)])

        async def insert() -> None:
            async with pool.connection() as conn:
                await (await conn.execute(query, next(values))).fetchone()
        return insert
    if op == "list":
        page, _ = _list_sql(read)
        params = (500.0, read.options["a"], PAGE, 0)

        async def listing() -> None:
            async with pool.connection() as conn:
                await (await conn.execute(page, params)).fetchall()
        return listing
    query = sql.SQL("SELECT * FROM {} WHERE id = %s").format(read.qualified)

    async def get() -> None:
        async with pool.connection() as conn:
            await (await conn.execute(query, (rnd.choice(ids),))).fetchone()
    return get


async def _drive(operation: Callable[[], Awaitable[None]], requests: int, clients: int) -> None:
    left = requests

    async def client() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await operation()

    await asyncio.gather(*(client() for _ in range(clients)))


def _py_spy(pid: int, out: Path) -> subprocess.Popen[bytes] | None:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        return None
    return subprocess.Popen([exe, "record", "--pid", str(pid), "--format", "raw", "--nonblocking",
                             "--rate", "1000", "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def measure(args: argparse.Namespace) -> int:
    trees = [Path(t).resolve() for t in (args.tree or [str(HERE)])]
    env = dict(kv.split("=", 1) for kv in args.env or ())
    ops = [o for o in args.ops.split(",") if o]
    stack = EmbeddedStack(keep=args.keep)
    stack.start()
    apis: list[Api] = []
    results: dict[tuple[str, str], list[float]] = {}
    try:
        if args.variant:
            for i, variant in enumerate(args.variant):
                extra = dict(kv.split("=", 1) for kv in variant.split(",") if kv)
                apis.append(start_api(stack, f"v{i}", trees[0], {**env, **extra}, args.cprofile))
        else:
            for i, tree in enumerate(trees):
                apis.append(start_api(stack, f"t{i}", tree, env, args.cprofile))
        ws_id, token = create_workspace(apis[0].base_url, stack.admin_key, name=f"cpu-{random.randrange(1 << 30)}")
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        if args.origin:
            headers["Origin"] = args.origin
        spread = [headers]
        for i in range(1, args.tokens):
            more = _token(apis[0].base_url, stack.admin_key, ws_id, i)
            spread.append({**headers, "Authorization": f"Bearer {more}"})
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            made: list[dict[str, Any]] = []
            read_id, create_id, ids = await _seed(
                session, f"{apis[0].base_url}/functions/v1/rest-api", headers, args.rows, made)
            formula_id = (await _formula_table(session, f"{apis[0].base_url}/functions/v1/rest-api", headers)
                          if any(op in BATCH_OPS for op in ops) else 0)
            temporal = stack.temporal.proc.pid if stack.temporal.proc is not None else None
            async with await psycopg.AsyncConnection.connect(stack.pg.dsn, autocommit=True) as conn:
                await conn.execute("ANALYZE")  # fresh statistics, as records.* has them (BenchContext.seeded_table)
            if args.psycopg:  # the scenarios' baseline beside the APIs: PostgreSQL's own share
                pool = AsyncConnectionPool(stack.pg.dsn, min_size=args.clients, max_size=args.clients, open=False,
                                           kwargs={"autocommit": True})
                await pool.open(wait=True, timeout=30)
                baseline = (pool, await _bench_table(pool, made[0]), await _bench_table(pool, made[1]))
            variants = (f"; variants {', '.join(f'{a.name}={v}' for a, v in zip(apis, args.variant, strict=True))}"
                        if args.variant else "")
            print(f"# trees: {', '.join(f'{a.name}={a.tree}' for a in apis)}; env {env or '-'}{variants}; "
                  f"{args.requests} requests x {args.clients} clients, {len(spread)} token(s);"
                  f" load {os.getloadavg()[0]:.2f}", flush=True)
            for rnd in range(args.rounds):
                for op in ops:
                    pg_op = _pg_operation(op, *baseline, ids) if args.psycopg else None
                    if pg_op is not None:
                        operation = pg_op
                        await _drive(operation, args.requests, args.clients)  # warm-up
                        pg0, me0, wall0 = postgres_cpu(stack.pg.data_dir / "data"), time.process_time(), time.perf_counter()
                        await _drive(operation, args.requests, args.clients)
                        pg_us = (postgres_cpu(stack.pg.data_dir / "data") - pg0) / args.requests * 1e6
                        client_us = (time.process_time() - me0) / args.requests * 1e6
                        print(f"round {rnd} psycopg {op:6s} {'':43s}"
                              f"{args.requests / (time.perf_counter() - wall0):7.0f} req/s  PostgreSQL {pg_us:4.0f} us  "
                              f"client {client_us:4.0f} us  load {os.getloadavg()[0]:.2f}", flush=True)
                    for api in apis:
                        rest = f"{api.base_url}/functions/v1/rest-api"
                        operation = _operation(op, session, rest, itertools.cycle(spread), read_id, create_id, ids,
                                               formula_id)
                        await _drive(operation, args.requests, args.clients)  # warm-up
                        spy = None
                        if args.profile:
                            Path(args.profile).mkdir(parents=True, exist_ok=True)
                            spy = _py_spy(api.proc.pid, Path(args.profile) / f"{api.name}-{op}-r{rnd}.txt")
                            await asyncio.sleep(0.5)
                        if args.cprofile:
                            api.proc.send_signal(signal.SIGUSR1)
                        pg0, me0 = postgres_cpu(stack.pg.data_dir / "data"), time.process_time()
                        tp0 = process_cpu(temporal)
                        cpu0, wall0 = cpu_times(api.proc.pid), time.perf_counter()
                        await _drive(operation, args.requests, args.clients)
                        cpu1, wall1 = cpu_times(api.proc.pid), time.perf_counter()
                        pg_us = (postgres_cpu(stack.pg.data_dir / "data") - pg0) / args.requests * 1e6
                        client_us = (time.process_time() - me0) / args.requests * 1e6
                        temporal_us = (process_cpu(temporal) - tp0) / args.requests * 1e6
                        if args.cprofile:
                            api.proc.send_signal(signal.SIGUSR2)
                            print(f"# cProfile: {args.cprofile}/{api.name}-<n>.prof, phase {op} round {rnd}")
                        if spy is not None:
                            spy.send_signal(signal.SIGINT)
                            spy.wait(timeout=30)
                        user, system = ((b - a) / args.requests * 1e6 for a, b in zip(cpu0, cpu1, strict=True))
                        us = user + system
                        results.setdefault((api.name, op), []).append(us)
                        print(f"round {rnd} {api.name} {op:6s} {us:7.0f} us CPU/request "
                              f"(user {user:4.0f}, sys {system:4.0f})  "
                              f"{args.requests / (wall1 - wall0):7.0f} req/s  PostgreSQL {pg_us:4.0f} us  "
                              f"Temporal {temporal_us:4.0f} us  client {client_us:4.0f} us  "
                              f"load {os.getloadavg()[0]:.2f}", flush=True)
            if args.psycopg:
                await baseline[0].close()
        print("# median us of API CPU per request (rounds):")
        for (name, op), values in results.items():
            print(f"{name} {op:6s} median {statistics.median(values):6.0f}  "
                  f"[{' / '.join(f'{v:.0f}' for v in values)}]")
    finally:
        for api in apis:
            stop_process(api.proc)
        stack.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", action="append", help="source tree to serve (repeatable; default: this checkout)")
    p.add_argument("--ops", default=",".join(OPS), help=f"comma-separated, of {', '.join((*OPS, *BATCH_OPS))}")
    p.add_argument("--requests", type=int, default=6000, help="measured requests per phase (as many warm-up)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--rows", type=int, default=10_000, help="rows in the read table")
    p.add_argument("--env", action="append", metavar="K=V", help="API environment variable (repeatable)")
    p.add_argument("--variant", action="append", metavar="K=V[,K=V]",
                   help="serve the first tree once more with these variables (repeatable; replaces --tree's APIs)")
    p.add_argument("--tokens", type=int, default=1, help="spread the requests over this many tokens")
    p.add_argument("--psycopg", action="store_true",
                   help="also run the scenarios' psycopg baseline of each operation (PostgreSQL and client CPU)")
    p.add_argument("--origin", help="send this Origin header (CORS) with every request")
    p.add_argument("--profile", metavar="DIR", help="py-spy raw profiles of the measured phases")
    p.add_argument("--cprofile", metavar="DIR",
                   help="run the APIs under bench/cprof_server.py and cProfile each measured phase into DIR"
                        " (CPU figures then include cProfile's overhead)")
    p.add_argument("--keep", action="store_true", help="keep the stack's temp dir")
    args = p.parse_args(argv)
    try:
        import uvloop
    except ImportError:  # plain asyncio: the client costs more CPU, the API's figure is the same
        return asyncio.run(measure(args))
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(measure(args))


if __name__ == "__main__":
    sys.exit(main())
