"""``python -m bench`` / ``wds bench``: start (or reach) the service, run the selected
scenarios, print a table and write ``bench/RESULTS.md``.

Without ``--url`` the harness starts its own PostgreSQL, Temporal dev server and API
(uvicorn, ``--workers N``) in a temp dir and removes them afterwards; with
``--compare-workers`` it runs every scenario once per worker count (1 and 2) against the
same database and reports which is fastest on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
from rich.console import Console
from rich.table import Table

from bench.context import BenchConfig, BenchContext
from bench.report import (
    Figure,
    RunReport,
    Verdict,
    compare_passes,
    figure_row,
    machine_facts,
    render_markdown,
)
from bench.scenarios import REGISTRY, Scenario, select
from bench.stack import Deployment, EmbeddedStack, StackError, check_loopback, create_workspace_token

try:
    import uvloop
except ImportError:  # optional: plain asyncio works, the client just costs more CPU
    uvloop = None  # type: ignore[assignment]

HERE = Path(__file__).resolve().parent
DEFAULT_OUTPUT = HERE / "RESULTS.md"
QUICK_OUTPUT = HERE / "RESULTS-quick.md"
CLIENT_NOTE = (
    "The load generator runs on the same cores as the API, PostgreSQL and Temporal (this "
    "machine has few cores): it competes with the server for CPU. 'Client CPU' is its share of "
    "one core during the service's phase. The psycopg baselines are driven from the same process "
    "and event loop, so both sides pay the same client cost, but the baseline has no HTTP/JSON "
    "work on either side."
)
BASELINE_NOTE = (
    "Baseline: psycopg AsyncConnectionPool, autocommit, sized to the concurrency, the same SQL the "
    "operation needs against the same physical table (ws_<w>.t_<t>, c_<column id>)."
)
SETTLE_NOTE = (
    "Between scenarios the harness settles: a PostgreSQL CHECKPOINT, a wait for autovacuum workers "
    "(at most 10 s) and a 2 s pause, so that no scenario measures the previous one's background work."
)
_VERDICT_STYLE = {Verdict.PASS: "green", Verdict.FAIL: "bold red", Verdict.NOT_MEASURED: "yellow"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="wds bench",
        description="Benchmark the service beside same-run psycopg baselines (and peers, when running).",
    )
    p.add_argument("--only", action="append", metavar="SUBSTRING",
                   help="run scenarios whose name contains this (repeatable); see --list")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--duration", type=float, default=None, metavar="S", help="seconds per load phase (default 5)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 1 s phases, 2,000 rows; writes bench/RESULTS-quick.md")
    p.add_argument("--rounds", type=int, default=None,
                   help="service and baseline alternate in this many slices per phase (default 5)")
    p.add_argument("--concurrency", type=int, default=16, help="concurrent clients of the loaded phases")
    p.add_argument("--rows", type=int, default=None, help="rows in the read table and bulk loads (10,000)")
    p.add_argument("--max-requests", type=int, default=200_000, help="hard cap of operations per phase")
    p.add_argument("--analytics-rows", type=int, default=0, metavar="N",
                   help="run sql.analytics over a table of N rows (the issue's figure: 1000000); 0 skips it")
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes of the embedded API")
    p.add_argument("--compare-workers", action="store_true",
                   help="run everything with 1 and with 2 API workers and report the fastest")
    p.add_argument("--url", help="existing deployment's API base URL (loopback only)")
    p.add_argument("--token", help="builder or rest_api token for --url (plan without rate limits)")
    p.add_argument("--admin-key", help="operator key for --url: the harness creates its own workspace")
    p.add_argument("--dsn", help="PostgreSQL DSN of --url's database, for the psycopg baselines")
    p.add_argument("--rate-limits", action="store_true", help="keep the embedded API's rate limiter on")
    p.add_argument("--peers-bench", default="/work/shared/peers/bench.py", help="the peers' bench.py")
    p.add_argument("--output", type=Path, default=None, help="Markdown report path")
    p.add_argument("--keep", action="store_true", help="keep the embedded stack's temp dir (logs)")
    p.add_argument("--fail-on-target", action="store_true", help="exit 1 when a target is missed")
    return p


def config_from(args: argparse.Namespace) -> BenchConfig:
    duration = args.duration if args.duration is not None else (1.0 if args.quick else 5.0)
    rows = args.rows if args.rows is not None else (2_000 if args.quick else 10_000)
    return BenchConfig(
        duration_s=duration, warmup_s=min(1.0, duration / 4), max_ops=args.max_requests,
        rounds=args.rounds if args.rounds is not None else (2 if args.quick else 5),
        concurrency=args.concurrency, rows=rows, quick=args.quick, peers_bench=args.peers_bench,
        analytics_rows=args.analytics_rows,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m bench`` and ``wds bench``; returns the exit status.

    0 when every scenario ran (targets may still fail unless ``--fail-on-target``),
    1 when a scenario crashed or (with ``--fail-on-target``) missed its target,
    2 for bad arguments or a stack that would not start.
    """
    args = build_parser().parse_args(argv)
    console = Console()
    if not console.is_terminal:
        # piped or logged: rich would wrap the table at 80 columns
        console = Console(width=160)
    if args.list:
        for sc in REGISTRY.values():
            console.print(f"[bold]{sc.name}[/]  {sc.title}  [dim]({sc.target})[/]")
        return 0
    scenarios = select(args.only)
    if not scenarios:
        console.print(f"[red]no scenario matches {args.only}; see --list[/]")
        return 2
    config = config_from(args)
    load_before = _load_average()
    crashed: list[str] = []
    passes: dict[str, list[Figure]] = {}
    try:
        if args.url:
            deployment = _existing(args)
            pg_version = _pg_version(deployment.dsn)
            passes["existing deployment"] = _run(run_pass(deployment, config, scenarios, console, crashed))
        else:
            pg_version = _embedded(args, config, scenarios, console, crashed, passes)
    except StackError as exc:
        console.print(f"[bold red]stack error:[/] {exc}")
        return 2
    facts = _facts(args, config, pg_version)
    notes = _notes(args, config, passes)
    if load_before is not None:
        facts["load average before start (1 min)"] = f"{load_before:.2f}"
        cores = os.cpu_count() or 1
        if load_before > 0.5 * cores:
            notes.insert(0, f"The machine was already busy before the run (load average {load_before:.2f} on "
                            f"{cores} cores): other processes competed with the stack, so raw figures are low "
                            "and noisy; ratios to the interleaved baselines are the figures to read.")
    report = RunReport(facts, passes, notes)
    print_report(report, console)
    output = args.output or (QUICK_OUTPUT if args.quick else DEFAULT_OUTPUT)
    output.write_text(render_markdown(report))
    console.print(f"wrote {output}")
    if crashed:
        console.print(f"[bold red]scenarios that crashed:[/] {', '.join(crashed)}")
        return 1
    if args.fail_on_target and report.failed():
        return 1
    return 0


def _existing(args: argparse.Namespace) -> Deployment:
    url = args.url.rstrip("/")
    check_loopback(url)
    if args.token:
        token = args.token
    elif args.admin_key:
        token = create_workspace_token(url, args.admin_key, name="bench")
    else:
        raise StackError("--url needs --token or --admin-key")
    return Deployment(url, token, args.dsn, workers=None, embedded=False)


def _embedded(args: argparse.Namespace, config: BenchConfig, scenarios: list[Scenario], console: Console,
              crashed: list[str], passes: dict[str, list[Figure]]) -> str:
    """Run one pass per worker count on a fresh embedded stack; returns the PostgreSQL version."""
    counts = [1, 2] if args.compare_workers else [args.workers]
    stack = EmbeddedStack(keep=args.keep, rate_limits=args.rate_limits)
    console.print(f"[dim]starting PostgreSQL and Temporal under {stack.tmp} ...[/]")
    try:
        stack.start()
        pg_version = _pg_version(stack.pg.dsn)
        for workers in counts:
            label = f"{workers} worker" + ("s" if workers != 1 else "")
            console.rule(f"API with {label}")
            t0 = time.monotonic()
            deployment = stack.start_api(workers)
            console.print(f"[dim]API up at {deployment.base_url} in {time.monotonic() - t0:.1f}s[/]")
            try:
                passes[label] = _run(run_pass(deployment, config, scenarios, console, crashed))
            finally:
                stack.stop_api()
    finally:
        stack.stop()
        if args.keep:
            console.print(f"[dim]kept {stack.tmp}[/]")
    return pg_version


def _run(coro: Coroutine[Any, Any, list[Figure]]) -> list[Figure]:
    """Run the pass on uvloop when available: a cheaper event loop leaves more CPU to the
    server on a small machine."""
    if uvloop is None:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


async def run_pass(deployment: Deployment, config: BenchConfig, scenarios: Sequence[Scenario],
                   console: Console, crashed: list[str]) -> list[Figure]:
    """Run the scenarios in order against one deployment; a crash is reported, not fatal."""
    # keep-alive pool sized to the clients; loopback only (checked by the caller)
    connector = aiohttp.TCPConnector(limit=config.concurrency + 4, keepalive_timeout=60)
    figures: list[Figure] = []
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as session:
        ctx = BenchContext(deployment, config, session)
        try:
            for i, sc in enumerate(scenarios):
                if i:
                    await ctx.settle()  # the previous scenario's background work ends first
                console.print(f"[bold cyan]▶ {sc.name}[/] {sc.title}")
                t0 = time.monotonic()
                try:
                    got = await sc.run(ctx)
                except Exception as exc:  # noqa: BLE001 - one broken scenario must not void the others
                    crashed.append(sc.name)
                    console.print(f"[bold red]  crashed:[/] {type(exc).__name__}: {exc}")
                    console.print(f"[dim]{traceback.format_exc(limit=4)}[/]")
                    got = [Figure(scenario=sc.name, name="(crashed)", unit="", value=None,
                                  note=f"{type(exc).__name__}: {exc}"[:300])]
                for fig in got:
                    cells = figure_row(fig)
                    console.print(f"  {fig.name}: {cells[2]} vs {cells[4]} → {cells[6]} ({cells[8]})", markup=False)
                console.print(f"[dim]  ({time.monotonic() - t0:.1f}s)[/]")
                figures += got
        finally:
            await ctx.close()
    return figures


CONSOLE_COLUMNS = ("Figure", "Value", "p50 / p99", "Baseline", "Ratio", "Target", "Result")


def print_report(report: RunReport, console: Console) -> None:
    """A compact table per pass (RESULTS.md has every column), then the comparison and notes."""
    for label, figs in report.passes.items():
        table = Table(title=f"Results: {label}", header_style="bold")
        for col in CONSOLE_COLUMNS:
            table.add_column(col, overflow="fold")
        notes: dict[str, None] = {}
        for fig in figs:
            cells = figure_row(fig)
            style = _VERDICT_STYLE.get(fig.verdict)
            verdict = f"[{style}]{cells[8]}[/]" if style else cells[8]
            table.add_row(f"{fig.scenario}: {fig.name}", cells[2], cells[3], cells[4], cells[6], cells[7], verdict)
            if cells[10]:
                notes[f"{fig.scenario}: {cells[10]}"] = None
        console.print(table)
        for note in notes:
            console.print(f"[dim]  {note}[/]")
    if len(report.passes) > 1:
        rows, fastest = compare_passes(report.passes)
        table = Table(title="Worker comparison (value, ratio to baseline)", header_style="bold")
        for col in ["Scenario", "Figure", *report.passes, "Best"]:
            table.add_column(col)
        for row in rows:
            table.add_row(*row)
        console.print(table)
        if fastest:
            console.print(f"[bold]fastest on this machine: {fastest}[/]")
    for note in report.notes:
        console.print(f"[dim]• {note}[/]")


def _facts(args: argparse.Namespace, config: BenchConfig, pg_version: str) -> dict[str, str]:
    extra = {
        "PostgreSQL": pg_version,
        "target": args.url or "embedded stack (PostgreSQL + Temporal dev server + uvicorn API)",
        "API workers": "1 and 2 (compared)" if args.compare_workers else (
            "unknown (existing deployment)" if args.url else str(args.workers)),
        "load phase": (f"{config.duration_s:g} s each for service and baseline, alternating in "
                       f"{config.rounds} slices (+{config.warmup_s:g} s warm-up), ≤ {config.max_ops:,} ops"),
        "concurrency": f"1 and {config.concurrency}",
        "rows": f"{config.rows:,}",
        "load generator": f"aiohttp {aiohttp.__version__} on {_loop_name()}, one process; psycopg {psycopg.__version__}",
        "commit": _git_commit(),
    }
    if config.quick:
        extra["mode"] = "QUICK smoke run: figures are not representative"
    return machine_facts(**extra)


def _notes(args: argparse.Namespace, config: BenchConfig, passes: dict[str, list[Figure]]) -> list[str]:
    notes = [CLIENT_NOTE, BASELINE_NOTE, SETTLE_NOTE]
    if not args.url:
        notes.append("Embedded PostgreSQL (wds.runtime.Postgres: shared_buffers=256MB, "
                     "synchronous_commit=off, fsync on); API workspace on the enterprise plan, "
                     f"rate limiting {'on' if args.rate_limits else 'off'}.")
    peer_figs = [f for figs in passes.values() for f in figs if f.scenario == "peers"]
    if peer_figs and all(f.value is None for f in peer_figs):
        notes.append("Peers (Directus, NocoDB) were not measured in this run: "
                     + (peer_figs[0].note or "not running") + ". Start them with "
                     "`bash /work/shared/peers/run_peer.sh start`; no peer figure is ever estimated.")
    elif peer_figs:
        notes.append("Peers were measured with their own bench.py (batches of 100, their PostgreSQL "
                     "with default durability) in this same run.")
    if config.quick:
        notes.append("QUICK mode: 1 s phases on a small table; use a full run for real figures.")
    return notes


def _pg_version(dsn: str | None) -> str:
    if not dsn:
        return "unknown (no --dsn)"
    with contextlib.suppress(Exception), psycopg.connect(dsn, connect_timeout=5) as conn:
        row = conn.execute("SHOW server_version").fetchone()
        return str(row[0]) if row else "unknown"
    return "unknown"


def _git_commit() -> str:
    with contextlib.suppress(Exception):
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE.parent, capture_output=True,
                             text=True, timeout=5, check=False)
        if out.returncode == 0:
            return out.stdout.strip()
    return "unknown"


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _loop_name() -> str:
    return "asyncio" if uvloop is None else f"uvloop {uvloop.__version__}"


if __name__ == "__main__":
    sys.exit(main())
