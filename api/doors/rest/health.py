"""``GET /healthz``: 200 only when the database, Temporal and a worker are ready."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

from api.deps import StateDep
from api.responses import JSON

router = APIRouter(tags=["health"])


async def _database(state: Any) -> str | None:
    try:
        await asyncio.wait_for(state.db.execute("SELECT 1"), timeout=2)
        return None
    except Exception as exc:
        return f"database: {type(exc).__name__}"


async def _temporal(state: Any) -> str | None:
    client = state.temporal
    if client is None:
        return "temporal: not connected"
    try:
        resp = await asyncio.wait_for(
            client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=client.namespace,
                    task_queue=TaskQueue(name=state.settings.task_queue),
                    task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
                )
            ),
            timeout=2,
        )
    except Exception as exc:
        return f"temporal: {type(exc).__name__}"
    if not resp.pollers:
        return "worker: no worker polls the task queue"
    return None


@router.get("/healthz", responses={503: {"description": "not ready"}})
async def healthz(state: StateDep) -> JSON:
    problems = [p for p in await asyncio.gather(_database(state), _temporal(state)) if p]
    if problems:
        return JSON({"status": "unavailable", "problems": problems, "code": "UNAVAILABLE",
                     "error": "; ".join(problems)}, status_code=503)
    return JSON({"status": "ok"})
