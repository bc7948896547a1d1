"""A noisy neighbour (issue #22 item 2's acceptance): while 20 clients of one workspace
write rows whose formulas spin (``while(true){}``), backtrack (20 × ``(a|aa)+$``) or
whose templates build huge strings, another workspace's record GET p99 stays under 2×
its idle p99, ``/healthz`` never fails, and the API's resident memory comes back within
10 % of its start.

A fresh single-worker API process of its own (its own task queue, so its pipelines run in
its own worker and sandbox children) serves everything here. A bystander workspace's
record is read sequentially (GET, then ``/healthz``, every :data:`PROBE_GAP_S`) through
an idle phase, then through one phase per attack kind, each with the 20 writers of
:mod:`bench.hostile` running in a separate niced process, and a *control* phase of the
same shape whose rows wait 4 s in a ``delay`` step and cost no CPU. Figures:

* per attack kind (and the control): hostile p99 ÷ idle p99, target < 2 (expressed as
  1 ÷ p99 against 1 ÷ idle p99 ≥ 0.5, so higher is better like every latency figure);
* ``/healthz`` answers: every check 200 (target: 0 failures);
* the API's RSS after the attacks (drained, then :data:`SETTLE_S`) ÷ before, target ≤ 1.10;
* informative: the same idle and hostile phases on a second fresh process with the
  per-workspace gate off (``WDS_REQUESTS_IN_FLIGHT_PER_WORKSPACE=0``), so the gate's effect
  shows beside it.

On a loaded machine the control's ratio shows what the same write traffic costs without
hostile content; compare the hostile ratios with it.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from bench.context import BenchContext, NotMeasurable, inverse_ms, not_measured
from bench.hostile import (
    CLIENTS,
    CONTROL,
    HOSTILE,
    cpu_seconds,
    rss_bytes,
    start_writers,
    stop_writers,
    table_body,
    warm_row,
)
from bench.load import FAILURES, Percentiles
from bench.report import Figure, Target
from bench.scenarios.registry import scenario
from bench.stack import ApiProcess

NAME = "security.noisy_neighbour"
MAX_P99_RATIO = 2.0
P99_UNIT = "/s (1÷p99)"
P99_TARGET = Target(1 / MAX_P99_RATIO, f"p99 < {MAX_P99_RATIO:g}× idle")
HEALTH_TARGET = Target(1.0, "0 failures")
MAX_RSS_RATIO = 1.10
RSS_TARGET = Target(1 / MAX_RSS_RATIO, f"RSS after ≤ {MAX_RSS_RATIO:.2f}× before")
PHASE_S = 20.0  # ~800 reads a phase: p99 is the 8th slowest, not the 3rd (8 s phases swung 0.8–2.3× on the no-CPU control)
QUICK_PHASE_S = 3.0
PROBE_GAP_S = 0.02
SETTLE_S = 3.0
KINDS = {"js": "JS while(true){}", "regex": "20× REGEX_MATCH (a|aa)+$", "template": "templates 'a'*10**9 / center(10**8)",
         "control": "control (delay 4 s, no CPU)"}


@dataclass(slots=True)
class Probe(Percentiles):
    """What the bystander saw in one phase (latencies in seconds)."""

    latencies: list[float] = field(default_factory=list)
    get_errors: int = 0
    health: int = 0
    health_failures: int = 0
    writes: list[int] = field(default_factory=list)
    api_cpu_s: float = 0.0
    elapsed_s: float = 0.0


    def writes_text(self) -> str:
        counts: dict[int, int] = {}
        for s in self.writes:
            counts[s] = counts.get(s, 0) + 1
        return ", ".join(f"{n}×{s}" for s, n in sorted(counts.items())) or "none"


@dataclass(slots=True)
class Setup:
    """One API process set up for the scenario: the bystander's record, the attack tables."""

    api: ApiProcess
    record_url: str
    headers: dict[str, str]
    attacker_token: str
    tables: dict[str, int]


async def _probe(ctx: BenchContext, t: Setup, seconds: float, writers_of: tuple[str, list[int]] | None) -> Probe:
    """Read the bystander's record and ``/healthz`` for ``seconds``, with the writers of
    ``writers_of`` = (token, tables) running meanwhile (then stopped and drained)."""
    out = Probe()
    pid = t.api.proc.pid
    writers = None
    if writers_of is not None:
        writers = await asyncio.to_thread(start_writers, t.api.base_url, writers_of[0], writers_of[1])
        await asyncio.sleep(0.5)  # let the writers connect and fill the process
    cpu0, started = cpu_seconds(pid), time.monotonic()
    deadline = started + seconds
    try:
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            try:
                async with ctx.session.get(t.record_url, headers=t.headers) as resp:
                    await resp.read()
                    ok = resp.status == 200
            except FAILURES:
                ok = False
            if ok:
                out.latencies.append(time.perf_counter() - t0)
            else:
                out.get_errors += 1
            try:
                async with ctx.session.get(f"{t.api.base_url}/healthz") as resp:
                    await resp.read()
                    out.health_failures += resp.status != 200
            except FAILURES:
                out.health_failures += 1
            out.health += 1
            await asyncio.sleep(PROBE_GAP_S)
    finally:
        out.elapsed_s = time.monotonic() - started
        out.api_cpu_s = cpu_seconds(pid) - cpu0
        if writers is not None:
            out.writes = await asyncio.to_thread(stop_writers, writers)
    return out


async def _setup(ctx: BenchContext, api: ApiProcess) -> Setup:
    """A bystander workspace with one record, and a hostile workspace with one table per
    attack kind (and the control's), each written once to warm the process."""
    rest = f"{api.base_url}/functions/v1/rest-api"
    _, (quiet,) = await ctx.new_workspace("bench-bystander")
    _, (hostile,) = await ctx.new_workspace("bench-hostile", plan="business")
    q_headers = {"Authorization": f"Bearer {quiet}", "Content-Type": "application/json"}
    h_headers = {"Authorization": f"Bearer {hostile}", "Content-Type": "application/json"}
    table = await ctx.call("POST", f"{rest}/tables", {"name": "Quiet", "columns": [{"name": "Note", "type": "text"}]},
                           expect=(201,), headers=q_headers)
    rec = await ctx.call("POST", f"{rest}/tables/{table['id']}/records", {"fields": {"Note": "still here"}},
                         expect=(201,), headers=q_headers)
    tables = {}
    for kind, column in [*HOSTILE.items(), ("control", CONTROL)]:
        made = await ctx.call("POST", f"{rest}/tables", table_body(f"T-{kind}", column), expect=(201,),
                              headers=h_headers)
        tables[kind] = int(made["id"])
        await ctx.call("POST", f"{rest}/tables/{made['id']}/records", warm_row(), expect=(201,), headers=h_headers)
    t = Setup(api, f"{rest}/tables/{table['id']}/records/{rec['id']}", {"Authorization": f"Bearer {quiet}"},
                hostile, tables)
    for _ in range(20):
        async with ctx.session.get(t.record_url, headers=t.headers) as resp:
            await resp.read()
    return t


@asynccontextmanager
async def _fresh_api(ctx: BenchContext, name: str, **env: str) -> AsyncIterator[ApiProcess]:
    async with ctx.extra_api(name, workers=1, WDS_TASK_QUEUE=f"bench-{name}-{secrets.token_hex(3)}", **env) as api:
        yield api


def p99_figure(kind: str, attack: Probe, idle: Probe, control: Probe, *, gate: bool) -> Figure:
    label = "gate on" if gate else "gate off (informative)"
    notes = []
    if attack.p99_ms and idle.p99_ms:
        notes.append(f"p99 {attack.p99_ms / idle.p99_ms:.2f}× idle")
    if kind != "control" and attack.p99_ms and control.p99_ms:
        notes.append(f"{attack.p99_ms / control.p99_ms:.2f}× the control's")
    notes.append(f"{len(attack.latencies)} GETs; writes {attack.writes_text()}; API CPU {attack.api_cpu_s:.1f} s "
                 f"in {attack.elapsed_s:.1f} s; /healthz failures {attack.health_failures}/{attack.health}")
    return Figure(
        scenario=NAME, name=f"other workspace's GET p99 under {CLIENTS} writers: {KINDS[kind]}, {label}",
        unit=P99_UNIT, value=inverse_ms(attack.p99_ms), baseline=inverse_ms(idle.p99_ms), baseline_label="idle",
        target=P99_TARGET if gate else None, p50_ms=attack.p50_ms, p99_ms=attack.p99_ms,
        baseline_p50_ms=idle.p50_ms, baseline_p99_ms=idle.p99_ms, errors=attack.get_errors,
        note="; ".join(notes), tags={"workers": "1"},
    )


async def _run(ctx: BenchContext, api: ApiProcess, phase_s: float) -> tuple[Probe, dict[str, Probe], int, int]:
    """(idle, probe per kind, RSS before, RSS after) on one fresh API process."""
    t = await _setup(ctx, api)
    await asyncio.sleep(SETTLE_S)
    rss_before = rss_bytes(api.proc.pid)
    idle = await _probe(ctx, t, phase_s, None)
    attacks = {}
    for kind in [*HOSTILE, "control"]:
        attacks[kind] = await _probe(ctx, t, phase_s, (t.attacker_token, [t.tables[kind]]))
        await asyncio.sleep(SETTLE_S)  # the drained writes' workflows finish before the next phase
    return idle, attacks, rss_before, rss_bytes(api.proc.pid)


@scenario(NAME, title=f"another workspace's GET p99 and /healthz while {CLIENTS} clients write hostile rows",
          target=f"p99 < {MAX_P99_RATIO:g}× idle; /healthz never fails; RSS after ≤ {MAX_RSS_RATIO:.2f}× before")
async def noisy_neighbour(ctx: BenchContext) -> list[Figure]:
    phase_s = QUICK_PHASE_S if ctx.config.quick else max(PHASE_S, ctx.config.duration_s)
    try:
        async with _fresh_api(ctx, "noisy-gate") as api:
            idle, attacks, rss_before, rss_after = await _run(ctx, api, phase_s)
        async with _fresh_api(ctx, "noisy-nogate", WDS_REQUESTS_IN_FLIGHT_PER_WORKSPACE="0") as api:
            idle_off, attacks_off, _, _ = await _run(ctx, api, phase_s)
    except NotMeasurable as exc:
        return [not_measured(NAME, f"other workspace's GET p99 under {CLIENTS} writers", str(exc), target=P99_TARGET)]
    figures = [p99_figure(kind, attacks[kind], idle, attacks["control"], gate=True) for kind in attacks]
    checks = [idle, *attacks.values()]
    total = sum(p.health for p in checks)
    failed = sum(p.health_failures for p in checks)
    figures.append(Figure(
        scenario=NAME, name="/healthz answers 200 through the idle and attack phases, gate on", unit="checks",
        value=float(total - failed), baseline=float(total), baseline_label="checks", target=HEALTH_TARGET,
        errors=failed, note=f"{failed} of {total} checks failed", tags={"workers": "1"}))
    figures.append(Figure(
        scenario=NAME, name="API resident memory after the attacks vs before, gate on", unit="1/GB (1÷RSS)",
        value=2**30 / rss_after, baseline=2**30 / rss_before, baseline_label="before", target=RSS_TARGET,
        note=f"RSS {rss_before / 2**20:.0f} → {rss_after / 2**20:.0f} MB ({rss_after / rss_before:.2f}×), "
             f"{SETTLE_S:g} s after the last writers drained", tags={"workers": "1"}))
    figures += [p99_figure(kind, attacks_off[kind], idle_off, attacks_off["control"], gate=False) for kind in attacks_off]
    failed_off = sum(p.health_failures for p in [idle_off, *attacks_off.values()])
    figures[-1].note += f"; gate off: /healthz failures {failed_off} over all phases"
    return figures
