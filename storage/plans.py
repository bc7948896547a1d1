"""The one table of plan figures (spec "Limits", DESIGN §4). Everything that enforces a
limit reads it from here. ``None`` means unlimited."""

from __future__ import annotations

from dataclasses import dataclass

from storage.errors import ValidationError

GB = 1024**3


@dataclass(frozen=True, slots=True)
class Plan:
    name: str
    requests_per_minute: int | None
    requests_per_month: int | None
    pipeline_seconds_per_row: int
    pipeline_steps_per_row: int
    sql_timeout_s: int
    automation_runs_per_month: int | None
    tables: int | None
    storage_bytes: int | None
    builds_per_month: int | None
    ai_credits_per_month: int | None
    can_auto_recharge: bool


PLANS: dict[str, Plan] = {
    p.name: p
    for p in (
        Plan("free", 60, 10_000, 10, 25, 5, 1_000, 10, 1 * GB, 10, 1_000, False),
        Plan("starter", 600, 100_000, 30, 100, 5, 10_000, 50, 10 * GB, 100, 10_000, False),
        Plan("pro", 3_000, 1_000_000, 120, 500, 10, 100_000, 500, 100 * GB, 1_000, 100_000, True),
        Plan("business", 10_000, None, 300, 2_000, 30, 1_000_000, None, 1_000 * GB, None, 1_000_000, True),
        Plan("enterprise", None, None, 600, 10_000, 30, None, None, None, None, None, True),
    )
}

# fixed on every plan
PAGE_DEFAULT = 100
PAGE_MAX = 1000
BATCH_MAX = 500
IN_MAX = 200
CONDITIONS_MAX = 200  # filter conditions in one query's filters, those inside or/and groups too
TOKEN_REQUESTS_PER_MINUTE = 3_000
SDK_WRITE_PARALLELISM = 8


def page_size(limit: int | None, *, word: str = "limit") -> int:
    """The page size a query asks for (REST, MCP, SQL, analytic SQL: one rule for all):
    :data:`PAGE_DEFAULT` when it names none.

    >>> page_size(None), page_size(7)
    (100, 7)

    Raises:
        ValidationError: ``LIMIT_TOO_LARGE`` above :data:`PAGE_MAX` (the message names the
            limit as the query wrote it: ``limit`` or ``LIMIT``).
    """
    size = PAGE_DEFAULT if limit is None else limit
    if size > PAGE_MAX:
        raise ValidationError(f"{word} may be at most {PAGE_MAX}", code="LIMIT_TOO_LARGE")
    return size


def plan(name: str) -> Plan:
    return PLANS.get(name, PLANS["free"])
