"""The SDK's per-call overhead over a bare ``fetch`` (issue 11), measured in Node.

Runs ``sdk/bench/overhead.mjs --json`` against the API under test: bare fetch and SDK
calls alternate on the same filtered list; the figure is the median of the per-pair
differences (target ≤ 0.2 ms). The script also reports the client-side-only cost (the
SDK against a fetch that answers instantly), given in the note.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

from bench.context import BenchContext, budget_figure, not_measured
from bench.report import Figure
from bench.scenarios.registry import scenario

SCRIPT = Path(__file__).resolve().parents[2] / "sdk" / "bench" / "overhead.mjs"
BUDGET_MS = 0.2
CALLS_FULL, CALLS_QUICK = 600, 150
TIMEOUT_S = 300
NAME = "SDK call vs bare fetch (median of per-pair differences)"


def parse_report(out: bytes) -> dict[str, Any]:
    """The JSON line ``overhead.mjs --json`` prints last.

    Raises:
        ValueError: no JSON object in the output.

    >>> parse_report(b'noise\\n{"overhead_median_of_pairs_ms": 0.05}\\n')["overhead_median_of_pairs_ms"]
    0.05
    """
    for line in reversed(out.decode(errors="replace").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return dict(json.loads(line))
    raise ValueError(f"no JSON report in the output: {out[-300:]!r}")


async def run_overhead(base_url: str, token: str, calls: int) -> dict[str, Any]:
    """Run the Node script and return its report.

    Raises:
        RuntimeError: node failed or timed out.
    """
    node = shutil.which("node")
    if node is None:
        raise RuntimeError("node is not installed")
    proc = await asyncio.create_subprocess_exec(
        node, str(SCRIPT), "--n", str(calls), "--json", cwd=SCRIPT.parents[2],
        env={**os.environ, "WDS_URL": base_url, "WDS_TOKEN": token},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout=TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"overhead.mjs timed out after {TIMEOUT_S}s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"overhead.mjs exited {proc.returncode}: {err.decode(errors='replace')[-400:]}")
    return parse_report(out)


@scenario("sdk.overhead", title="SDK per-call overhead over a bare fetch (Node)", target=f"≤ {BUDGET_MS:g} ms")
async def sdk_overhead(ctx: BenchContext) -> list[Figure]:
    if not SCRIPT.exists():
        return [not_measured("sdk.overhead", NAME, f"{SCRIPT} missing")]
    calls = CALLS_QUICK if ctx.config.quick else CALLS_FULL
    try:
        rep = await run_overhead(ctx.deployment.base_url, ctx.deployment.token, calls)
    except (RuntimeError, ValueError) as exc:
        return [not_measured("sdk.overhead", NAME, str(exc))]
    overhead = float(rep["overhead_median_of_pairs_ms"])
    bare = float(rep["bare_fetch_median_ms"])
    return [budget_figure(
        "sdk.overhead", NAME, overhead, BUDGET_MS, reference_ms=bare, what="overhead", p50_ms=float(rep["sdk_median_ms"]),
        tags=ctx.tags,
        note=(f"{rep['calls_per_side']} calls per side; bare fetch median {bare:.3f} ms; difference of medians "
              f"{rep['overhead_difference_of_medians_ms']:.3f} ms; SDK client-side only "
              f"{rep['client_side_only_ms']:.4f} ms; p50 column: the SDK call's median"),
    )]
