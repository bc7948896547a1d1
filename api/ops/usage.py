"""A workspace's usage report, for the REST usage route and the operator's admin API."""

from __future__ import annotations

from typing import Any

from api.services import limits
from api.state import AppState
from storage.usage import usage_report


async def workspace_usage(state: AppState, *, workspace_id: int, plan_name: str, days: int) -> dict[str, Any]:
    """Flush this process's queued usage and counters, then report (read-your-writes here;
    other processes' calls appear within about a second)."""
    rt = limits.runtime(state)
    await limits.flush(state, rt)
    async with state.db.connection() as conn:
        return await usage_report(
            conn, workspace_id=workspace_id, days=days, plan_name=plan_name, month=rt.quotas.month()
        )
