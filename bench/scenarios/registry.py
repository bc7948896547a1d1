"""The scenario registry: each scenario is a named async function returning figures.

Adding a scenario (pipelines, SQL, MCP, realtime, ...) is one decorated function in a
module under ``bench/scenarios/`` plus its import in ``bench/scenarios/__init__.py``::

    @scenario("sql.select", title="SQL endpoint, one-row SELECT", target="≥ 30 % of psycopg")
    async def sql_select(ctx: BenchContext) -> list[Figure]:
        ...
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from bench.context import BenchContext
from bench.report import Figure

RunFn = Callable[[BenchContext], Awaitable[list[Figure]]]


@dataclass(frozen=True, slots=True)
class Scenario:
    """A named measurement: ``run`` returns its figures, each with a same-run baseline."""

    name: str  # dotted, e.g. "records.get"; ``--only`` matches substrings of it
    title: str
    target: str  # human description of what "good" is (the figures carry the exact test)
    run: RunFn


REGISTRY: dict[str, Scenario] = {}


def scenario(name: str, *, title: str, target: str = "informational") -> Callable[[RunFn], RunFn]:
    """Register the decorated coroutine function as a scenario (registration order = run order).

    Raises:
        ValueError: a scenario of that name is already registered.
    """

    def register(fn: RunFn) -> RunFn:
        if name in REGISTRY:
            raise ValueError(f"scenario {name!r} registered twice")
        REGISTRY[name] = Scenario(name, title, target, fn)
        return fn

    return register


def select(only: Sequence[str] | None) -> list[Scenario]:
    """Scenarios whose name contains any of ``only`` (case-insensitive); all when empty."""
    if not only:
        return list(REGISTRY.values())
    wanted = [o.lower() for o in only]
    return [s for s in REGISTRY.values() if any(w in s.name.lower() for w in wanted)]
