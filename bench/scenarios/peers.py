"""Peer comparison: the peers' own benchmark script (``peers/bench.py``) run against
Directus, NocoDB and this service in the same run, when the peers are up on loopback.

Issue 24 item 6: the machine is noisy, so everything is measured twice, in alternating
order (round 1: this service, Directus, NocoDB; round 2: NocoDB, Directus, this
service), and each round's ratios are separate figures ("run 1", "run 2"). This service
runs in two modes per round (the peers have no rate limits, so they run once per round):

* **limits off**: the bench deployment as configured (``WDS_RATE_LIMITS=false`` unless the
  run has ``--rate-limits``; then an extra API process with them off), one token.
* **default limits, several tokens**: an extra API process with ``WDS_RATE_LIMITS=true``
  and the default limits, the load spread over :data:`TOKENS` tokens of one workspace on
  the :data:`PLAN` plan, by this repository's copy of the script (``bench/peer_bench.py``,
  which takes ``WDS_TOKENS``). The enterprise plan has no per-workspace ceiling; the
  per-token ceiling (3,000 a minute, every plan) over 16 tokens is 48,000 a minute, about
  three times what one run of the script sends (business's 10,000 a minute per workspace
  would throttle a 16-client run). Any 429 counts as an error and fails the figure.

The harness never installs or starts the peers (``run_peer.sh`` takes minutes). A peer
that is not listening, or a run that failed, yields "not measured" figures — never a
made-up number, and never a one-sided figure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.context import BenchContext, NotMeasurable
from bench.report import Figure, Target
from bench.scenarios.registry import scenario
from wds.runtime import port_open

PEER_BATCH = 100
RUN_TIMEOUT_S = 600
ROUNDS = 2
PLAN = "enterprise"
TOKENS = 16
TOKENS_SCRIPT = str(Path(__file__).resolve().parents[1] / "peer_bench.py")  # the copy taking WDS_TOKENS


@dataclass(frozen=True, slots=True)
class Peer:
    key: str  # bench.py's adapter name
    label: str
    port: int
    list_target: float  # our filtered-list req/s at 16 clients ÷ theirs
    insert_target: float | None  # our batch rows/s ÷ theirs


PEERS = (
    Peer("directus", "Directus 12.4.0", 8055, list_target=6.0, insert_target=None),
    Peer("nocodb", "NocoDB 0.301.3", 8080, list_target=9.0, insert_target=5.0),
)


@dataclass(frozen=True, slots=True)
class Mode:
    """One way of running this service's side."""

    key: str  # the result key: "wds-off", "wds-tokens"
    label: str  # in the figure names


OFF = Mode("wds-off", "limits off")
LIMITED = Mode("wds-tokens", f"default limits, {TOKENS} tokens")
MODES = (OFF, LIMITED)


def round_order(n: int) -> list[str]:
    """The runs of round ``n`` (1-based): odd rounds this service first, even rounds reversed.

    >>> round_order(1)
    ['wds-off', 'wds-tokens', 'directus', 'nocodb']
    >>> round_order(2)
    ['nocodb', 'directus', 'wds-tokens', 'wds-off']
    """
    order = [m.key for m in MODES] + [p.key for p in PEERS]
    return order if n % 2 else order[::-1]


def _nocodb_env() -> dict[str, str]:
    """NocoDB's token and base id: from the environment, else from ``run_peer.sh start``."""
    if os.environ.get("NOCODB_TOKEN") and os.environ.get("NOCODB_BASE_ID"):
        return {}
    env_file = Path(os.environ.get("PEER_WORK", "/tmp/peer/w")) / "nocodb.env"
    found: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for word in env_file.read_text().split():
            key, sep, value = word.partition("=")
            if sep and key in ("NOCODB_TOKEN", "NOCODB_BASE_ID"):
                found[key] = value
    return found


async def run_peer_bench(script: str, target: str, *, rows: int, duration_s: float, conc: int,
                         env: dict[str, str]) -> dict[str, Any]:
    """Run ``bench.py <target>`` and return its JSON result.

    Raises:
        RuntimeError: the script failed, timed out or printed no JSON.
    """
    proc = await asyncio.create_subprocess_exec(
        sys.executable, script, target, "--rows", str(rows), "--batch", str(PEER_BATCH),
        "--dur", str(duration_s), "--conc", str(conc),
        env={**os.environ, **env}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=RUN_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"bench.py {target} timed out after {RUN_TIMEOUT_S}s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"bench.py {target} exited {proc.returncode}: {err.decode(errors='replace')[-500:]}")
    try:
        return dict(json.loads(out))
    except ValueError:
        raise RuntimeError(f"bench.py {target} printed no JSON: {out[-300:]!r}") from None


def _pair(name: str, unit: str, ours: dict[str, Any] | None, theirs: dict[str, Any] | None, peer: Peer,
          key: str, target: Target | None, note: str, suffix: str = "") -> Figure:
    def rate(res: dict[str, Any] | None) -> float | None:
        if res is None:
            return None
        return float(res["insert_rows_per_s"]) if key == "insert" else float(res[key]["req_per_s"])

    def lat(res: dict[str, Any] | None, p: str) -> float | None:
        return None if res is None or key == "insert" else float(res[key][p])

    errors = 0 if ours is None or key == "insert" else int(ours[key]["errors"])
    return Figure(
        scenario="peers", name=f"{name} vs {peer.label}{suffix}", unit=unit, value=rate(ours),
        baseline=rate(theirs), baseline_label=peer.label, target=target,
        p50_ms=lat(ours, "p50_ms"), p99_ms=lat(ours, "p99_ms"),
        baseline_p50_ms=lat(theirs, "p50_ms"), baseline_p99_ms=lat(theirs, "p99_ms"),
        errors=errors, note=note,
    )


def mode_note(mode: Mode) -> str:
    if mode is LIMITED:
        return (f"rate limits on at their defaults (in-process store), {TOKENS} tokens of one {PLAN} workspace "
                "taken in turn per request (bench/peer_bench.py, WDS_TOKENS)")
    return "rate limits off, one token (the peers' bench.py as is)"


def figures_of(results: dict[tuple[int, str], dict[str, Any]], notes: dict[tuple[int, str], str], *,
               conc: int, rounds: int = ROUNDS) -> list[Figure]:
    """The figures of a run: per round, per mode of this service, per peer, the filtered
    list at ``conc`` clients (targeted), sequential, and the batch insert (targeted for
    NocoDB). ``results`` maps (round, run key) to bench.py's JSON; ``notes`` gives why a
    run is missing. A figure one of whose sides is missing is "not measured" (never
    one-sided), with both sides' reasons."""
    conc_key = f"c{conc}"
    figures: list[Figure] = []
    for rnd in range(1, rounds + 1):
        for mode in MODES:
            ours = results.get((rnd, mode.key))
            for peer in PEERS:
                theirs = results.get((rnd, peer.key))
                missing = [notes[(rnd, k)] for k in (mode.key, peer.key)
                           if results.get((rnd, k)) is None and (rnd, k) in notes]
                if (ours is None or theirs is None) and not missing:
                    missing = ["not measured"]
                note = "; ".join([*missing, mode_note(mode)])
                both = ours is not None and theirs is not None
                shown_ours, shown_theirs = (ours, theirs) if both else (None, None)
                suffix = f", run {rnd}"
                list_target = Target(peer.list_target, f"≥ {peer.list_target:g}× {peer.label}")
                figures.append(_pair(f"filtered list, {conc} clients ({mode.label})", "req/s", shown_ours,
                                     shown_theirs, peer, conc_key, list_target, note, suffix))
                figures.append(_pair(f"filtered list, sequential ({mode.label})", "req/s", shown_ours,
                                     shown_theirs, peer, "seq", None, note, suffix))
                insert_target = (Target(peer.insert_target, f"≥ {peer.insert_target:g}× {peer.label}")
                                 if peer.insert_target else None)
                figures.append(_pair(f"batch insert, {PEER_BATCH}/call ({mode.label})", "rows/s", shown_ours,
                                     shown_theirs, peer, "insert", insert_target, note, suffix))
    return figures


@contextlib.asynccontextmanager
async def _limits_off(ctx: BenchContext) -> AsyncIterator[dict[str, str]]:
    """This service with rate limits off: the bench deployment itself unless the run keeps
    its limiter on (``--rate-limits``), then an extra process with them off."""
    stack = ctx.deployment.stack
    if stack is None or not stack.rate_limits:
        yield {"WDS_URL": ctx.deployment.base_url, "WDS_TOKEN": ctx.deployment.token}
        return
    async with ctx.extra_api("peers-limits-off", WDS_RATE_LIMITS="false") as proc:
        yield {"WDS_URL": proc.base_url, "WDS_TOKEN": ctx.deployment.token}


@contextlib.asynccontextmanager
async def _limits_on(ctx: BenchContext) -> AsyncIterator[dict[str, str]]:
    """This service with the default rate limits on, :data:`TOKENS` tokens of one :data:`PLAN` workspace.

    Raises:
        NotMeasurable: no operator key, or not an embedded stack.
    """
    _, tokens = await ctx.new_workspace("bench-peers", plan=PLAN, tokens=TOKENS)
    async with ctx.extra_api("peers-limits-on", WDS_RATE_LIMITS="true") as proc:
        yield {"WDS_URL": proc.base_url, "WDS_TOKEN": tokens[0], "WDS_TOKENS": ",".join(tokens)}


@scenario("peers.compare", title="peers' bench.py: Directus and NocoDB vs this service, two alternating runs",
          target="list 16 clients ≥ 6× Directus, ≥ 9× NocoDB; batch insert ≥ 5× NocoDB (each run, each mode)")
async def compare_peers(ctx: BenchContext) -> list[Figure]:
    cfg = ctx.config
    script = cfg.peers_bench
    up = {p.key: port_open("127.0.0.1", p.port) for p in PEERS}
    results: dict[tuple[int, str], dict[str, Any]] = {}
    notes: dict[tuple[int, str], str] = {}
    rounds = range(1, ROUNDS + 1)
    if not Path(script).exists():
        notes = {(r, k): f"{script} missing: not measured" for r in rounds for k in round_order(r)}
    elif not any(up.values()):
        notes = {(r, p.key): f"{p.label} not running on 127.0.0.1:{p.port}: not measured"
                 for r in rounds for p in PEERS}
    else:
        kw: dict[str, Any] = {"rows": cfg.rows, "duration_s": cfg.duration_s, "conc": cfg.concurrency}
        async with contextlib.AsyncExitStack() as stack:
            envs: dict[str, tuple[str, dict[str, str]]] = {
                p.key: (script, _nocodb_env() if p.key == "nocodb" else {}) for p in PEERS}
            envs[OFF.key] = (script, await stack.enter_async_context(_limits_off(ctx)))
            try:
                envs[LIMITED.key] = (TOKENS_SCRIPT, await stack.enter_async_context(_limits_on(ctx)))
            except NotMeasurable as exc:
                notes.update({(r, LIMITED.key): f"{LIMITED.label}: {exc}" for r in rounds})
            for rnd in rounds:
                for key in round_order(rnd):
                    peer = next((p for p in PEERS if p.key == key), None)
                    if peer is not None and not up[key]:
                        notes[(rnd, key)] = f"{peer.label} not running on 127.0.0.1:{peer.port}: not measured"
                        continue
                    if key not in envs:
                        continue
                    run_script, env = envs[key]
                    target = "wds" if peer is None else key
                    try:
                        results[(rnd, key)] = await run_peer_bench(run_script, target, env=env, **kw)
                    except RuntimeError as exc:
                        notes[(rnd, key)] = f"run {rnd}, {key}: {exc}"
    return figures_of(results, notes, conc=cfg.concurrency)
