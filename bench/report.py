"""Figures, targets and the two renderings of a run: a rich table and ``RESULTS.md``.

Everything here is pure (no I/O except :func:`machine_facts`, which only reads local
facts), so the report logic is unit-tested without a running stack.

A :class:`Figure` is one measured number beside its baseline, both taken in the same run:
the service's figure and the same operation done directly with psycopg (or by a peer
product). The verdict compares ``value / baseline`` with the figure's :class:`Target`.
"""

from __future__ import annotations

import math
import os
import platform
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path


def percentile(values: Sequence[float], p: float) -> float | None:
    """The ``p``-th percentile (0–100) by linear interpolation between closest ranks.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 50)
    2.5
    >>> percentile([5.0], 99)
    5.0
    >>> percentile([], 50) is None
    True
    """
    if not values:
        return None
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be within 0..100, got {p}")
    ordered = sorted(values)
    rank = p / 100 * (len(ordered) - 1)
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True, slots=True)
class Target:
    """A floor on ``value / baseline``: ``min_ratio=0.4`` means "at least 40 % of the baseline"."""

    min_ratio: float
    text: str


class Verdict(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    NO_TARGET = "—"
    NOT_MEASURED = "not measured"


@dataclass(slots=True)
class Figure:
    """One measured figure of the service and, when there is one, its same-run baseline.

    ``value`` and ``baseline`` are throughputs (higher is better) in ``unit``; the
    latency percentiles are in milliseconds. ``errors`` counts failed requests of the
    service's phase; a targeted figure with errors fails whatever its ratio.
    """

    scenario: str
    name: str
    unit: str
    value: float | None
    baseline: float | None = None
    baseline_label: str = "psycopg"
    target: Target | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    baseline_p50_ms: float | None = None
    baseline_p99_ms: float | None = None
    errors: int = 0
    client_cpu: float | None = None  # share of one core the load generator used
    note: str = ""
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.value is None or self.baseline is None or self.baseline <= 0:
            return None
        return self.value / self.baseline

    @property
    def verdict(self) -> Verdict:
        return evaluate(self)


def evaluate(fig: Figure) -> Verdict:
    """Judge a figure against its target.

    A figure without a target is informational; one whose value or baseline is missing
    was not measured (never a pass); errors during the service's phase fail it.
    """
    if fig.target is None:
        return Verdict.NO_TARGET
    ratio = fig.ratio
    if ratio is None:
        return Verdict.NOT_MEASURED
    if fig.errors:
        return Verdict.FAIL
    return Verdict.PASS if ratio >= fig.target.min_ratio else Verdict.FAIL


def fmt_rate(value: float | None, unit: str = "") -> str:
    """``12345.6`` → ``"12,346 req/s"``; small values keep one decimal.

    >>> fmt_rate(12345.6, "req/s")
    '12,346 req/s'
    >>> fmt_rate(7.25)
    '7.2'
    >>> fmt_rate(None, "req/s")
    '—'
    """
    if value is None:
        return "—"
    text = f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"
    return f"{text} {unit}".strip()


def fmt_ms(p50: float | None, p99: float | None) -> str:
    """Latency pair as ``"p50 / p99 ms"``.

    >>> fmt_ms(1.234, 10.0)
    '1.23 / 10.0 ms'
    >>> fmt_ms(None, None)
    '—'
    """
    if p50 is None or p99 is None:
        return "—"
    return f"{_ms(p50)} / {_ms(p99)} ms"


def _ms(v: float) -> str:
    return f"{v:.2f}" if v < 10 else f"{v:.1f}"


def fmt_ratio(ratio: float | None) -> str:
    """``0.456`` → ``"45.6 %"``; ratios of 2 and more read as multiples (``"5.3×"``).

    >>> fmt_ratio(0.456)
    '45.6 %'
    >>> fmt_ratio(5.31)
    '5.31×'
    >>> fmt_ratio(None)
    '—'
    """
    if ratio is None:
        return "—"
    return f"{ratio:.2f}×" if ratio >= 2 else f"{ratio * 100:.1f} %"


def fmt_cpu(share: float | None) -> str:
    return "—" if share is None else f"{share * 100:.0f} %"


COLUMNS = (
    "Scenario", "Figure", "Value", "p50 / p99", "Baseline", "Baseline p50 / p99",
    "Ratio", "Target", "Result", "Client CPU", "Note",
)


def figure_row(fig: Figure) -> list[str]:
    """The cells of one figure, in :data:`COLUMNS` order."""
    baseline = fmt_rate(fig.baseline, fig.unit)
    if fig.baseline is not None:
        baseline = f"{baseline} ({fig.baseline_label})"
    note = fig.note
    if fig.errors:
        note = f"{fig.errors} errors" + (f"; {note}" if note else "")
    return [
        fig.scenario,
        fig.name,
        fmt_rate(fig.value, fig.unit),
        fmt_ms(fig.p50_ms, fig.p99_ms),
        baseline,
        fmt_ms(fig.baseline_p50_ms, fig.baseline_p99_ms),
        fmt_ratio(fig.ratio),
        fig.target.text if fig.target else "—",
        fig.verdict.value,
        fmt_cpu(fig.client_cpu),
        note,
    ]


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table; pipes inside cells are escaped.

    >>> print(markdown_table(["a", "b"], [["1", "x|y"]]))
    | a | b |
    |---|---|
    | 1 | x\\|y |
    """
    lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |",
             "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


@dataclass(slots=True)
class RunReport:
    """Everything one ``python -m bench`` invocation measured, one pass per API shape.

    ``passes`` maps a label (``"1 worker"``, ``"2 workers"``, ``"existing deployment"``)
    to the figures of that pass, in run order.
    """

    facts: dict[str, str]
    passes: dict[str, list[Figure]]
    notes: list[str] = field(default_factory=list)

    @property
    def all_figures(self) -> list[Figure]:
        return [f for figs in self.passes.values() for f in figs]

    def failed(self) -> list[Figure]:
        return [f for f in self.all_figures if f.verdict is Verdict.FAIL]


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of the positive values (``None`` when there are none).

    >>> round(geomean([1.0, 4.0]), 6)
    2.0
    """
    vals = [v for v in values if v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def compare_passes(passes: dict[str, list[Figure]]) -> tuple[list[list[str]], str | None]:
    """Rows comparing the service's figures across passes, and the label of the fastest.

    Figures are matched by ``(scenario, name)`` and only those every pass measured with a
    baseline count. The fastest pass has the highest geometric mean of ``value / baseline``:
    ratios, not raw values, because the same-run baseline absorbs the machine's drift
    between passes.
    """
    labels = list(passes)
    keyed = {label: {(f.scenario, f.name): f for f in figs} for label, figs in passes.items()}
    common = [
        key for key in (keyed[labels[0]] if labels else {})
        if all(key in keyed[label] and keyed[label][key].ratio is not None for label in labels)
    ]
    rows: list[list[str]] = []
    for key in common:
        figs = [keyed[label][key] for label in labels]
        best = max(range(len(labels)), key=lambda i: figs[i].ratio or 0.0)
        cells = [f"{fmt_rate(f.value, f.unit)} ({fmt_ratio(f.ratio)})" for f in figs]
        rows.append([key[0], key[1], *cells, labels[best]])
    means = {label: geomean(keyed[label][key].ratio or 0.0 for key in common) for label in labels}
    scored = {label: m for label, m in means.items() if m is not None}
    fastest = max(scored, key=lambda label: scored[label]) if scored else None
    if rows:
        rows.append(["all", "geometric mean of ratios", *[fmt_ratio(means[label]) for label in labels],
                     fastest or "—"])
    return rows, fastest


def render_markdown(report: RunReport) -> str:
    """``RESULTS.md``: machine facts, one table per pass, the pass comparison, notes."""
    out = ["# Benchmark results", "",
           "Generated by `python -m bench` (or `wds bench`). Every baseline is measured in the",
           "same run, against the same PostgreSQL and the same physical table; compare ratios,",
           "not raw figures, across runs. Throughputs are higher-is-better; Ratio = Value / Baseline.",
           "", "## Machine", ""]
    out.append(markdown_table(["Fact", "Value"], [[k, v] for k, v in report.facts.items()]))
    for label, figs in report.passes.items():
        out += ["", f"## Results: {label}", ""]
        out.append(markdown_table(COLUMNS, [figure_row(f) for f in figs]))
    if len(report.passes) > 1:
        rows, fastest = compare_passes(report.passes)
        out += ["", "## Worker comparison", ""]
        out.append(markdown_table(["Scenario", "Figure", *report.passes, "Best"], rows))
        if fastest is not None:
            out += ["", (f"Fastest on this machine: **{fastest}** "
                         "(highest geometric mean of service/baseline ratios).")]
    if report.notes:
        out += ["", "## Notes", ""] + [f"- {n}" for n in report.notes]
    return "\n".join(out) + "\n"


def machine_facts(**extra: str) -> dict[str, str]:
    """nproc, CPU model, Python version and the UTC date, plus caller-supplied facts."""
    facts = {
        "date (UTC)": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S"),
        "nproc": str(os.cpu_count() or "?"),
        "CPU model": cpu_model(),
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "OS": f"{platform.system()} {platform.release()}",
    }
    try:
        facts["load average at end (1/5/15 min)"] = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        pass
    facts.update(extra)
    return facts


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
