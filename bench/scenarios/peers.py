"""Peer comparison: the peers' own benchmark script (``peers/bench.py``) run against
Directus, NocoDB and this service in the same run, when the peers are up on loopback.

The harness never installs or starts the peers (``run_peer.sh`` takes minutes). A peer
that is not listening yields "not measured" figures — never a made-up number.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.context import BenchContext
from bench.report import Figure, Target
from bench.scenarios.registry import scenario
from wds.runtime import port_open

PEER_BATCH = 100
RUN_TIMEOUT_S = 600


@dataclass(frozen=True, slots=True)
class Peer:
    key: str  # bench.py's adapter name
    label: str
    port: int
    list_target: float  # our filtered-list req/s at 16 clients ÷ theirs
    insert_target: float | None  # our batch rows/s ÷ theirs


PEERS = (
    Peer("directus", "Directus 12.4.0", 8055, list_target=5.0, insert_target=None),
    Peer("nocodb", "NocoDB 0.301.3", 8080, list_target=7.0, insert_target=5.0),
)


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
          key: str, target: Target | None, note: str) -> Figure:
    def rate(res: dict[str, Any] | None) -> float | None:
        if res is None:
            return None
        return float(res["insert_rows_per_s"]) if key == "insert" else float(res[key]["req_per_s"])

    def lat(res: dict[str, Any] | None, p: str) -> float | None:
        return None if res is None or key == "insert" else float(res[key][p])

    errors = 0 if ours is None or key == "insert" else int(ours[key]["errors"])
    return Figure(
        scenario="peers", name=f"{name} vs {peer.label}", unit=unit, value=rate(ours),
        baseline=rate(theirs), baseline_label=peer.label, target=target,
        p50_ms=lat(ours, "p50_ms"), p99_ms=lat(ours, "p99_ms"),
        baseline_p50_ms=lat(theirs, "p50_ms"), baseline_p99_ms=lat(theirs, "p99_ms"),
        errors=errors, note=note,
    )


@scenario("peers.compare", title="peers' bench.py: Directus and NocoDB vs this service",
          target="list 16 clients ≥ 5× Directus, ≥ 7× NocoDB; batch insert ≥ 5× NocoDB")
async def compare_peers(ctx: BenchContext) -> list[Figure]:
    cfg = ctx.config
    script = cfg.peers_bench
    up = {p.key: port_open("127.0.0.1", p.port) for p in PEERS}
    results: dict[str, dict[str, Any] | None] = {}
    notes: dict[str, str] = {}
    if not Path(script).exists():
        notes = {p.key: f"{script} missing: not measured" for p in PEERS}
    elif not any(up.values()):
        notes = {p.key: f"{p.label} not running on 127.0.0.1:{p.port}: not measured" for p in PEERS}
    else:
        conc = cfg.concurrency
        kw: dict[str, Any] = {"rows": cfg.rows, "duration_s": cfg.duration_s, "conc": conc}
        wds_env = {"WDS_URL": ctx.deployment.base_url, "WDS_TOKEN": ctx.deployment.token}
        try:
            results["wds"] = await run_peer_bench(script, "wds", env=wds_env, **kw)
        except RuntimeError as exc:
            notes = {p.key: f"bench.py wds failed: {exc}" for p in PEERS}
        for peer in PEERS:
            if not up[peer.key]:
                notes.setdefault(peer.key, f"{peer.label} not running on 127.0.0.1:{peer.port}: not measured")
                continue
            env = _nocodb_env() if peer.key == "nocodb" else {}
            try:
                results[peer.key] = await run_peer_bench(script, peer.key, env=env, **kw)
            except RuntimeError as exc:
                notes.setdefault(peer.key, f"bench.py {peer.key} failed: {exc}")
    ours = results.get("wds")
    conc_key = f"c{cfg.concurrency}"
    figures: list[Figure] = []
    for peer in PEERS:
        theirs = results.get(peer.key)
        note = notes.get(peer.key, "")
        ours_shown = ours if theirs is not None else None  # never a one-sided figure
        figures.append(_pair(f"filtered list, {cfg.concurrency} clients", "req/s", ours_shown, theirs, peer,
                             conc_key, Target(peer.list_target, f"≥ {peer.list_target:g}× {peer.label}"), note))
        figures.append(_pair("filtered list, sequential", "req/s", ours_shown, theirs, peer, "seq", None, note))
        insert_target = (Target(peer.insert_target, f"≥ {peer.insert_target:g}× {peer.label}")
                         if peer.insert_target else None)
        figures.append(_pair(f"batch insert, {PEER_BATCH}/call", "rows/s", ours_shown, theirs, peer,
                             "insert", insert_target, note))
    return figures
