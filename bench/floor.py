"""The pipeline floor: the cheapest Temporal round trip a computed-column write could make.

A bare workflow running three trivial local activities in sequence (the shape of a
three-formula chain), started eagerly by a client whose worker runs in this process, on
the same Temporal dev server the API uses. Start → result latency of this workflow is
what Temporal itself costs; the API's single create with three chained formulas is
compared with it (target p50 ≤ 1.3× the floor).

This module is imported inside the workflow sandbox, so it imports nothing but temporalio
at module level.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

from service.converter import DATA_CONVERTER

LOCAL_TIMEOUT = timedelta(seconds=10)


@activity.defn(name="bench_floor_step")
async def floor_step(value: float) -> float:
    """One trivial step (what a formula's evaluation is, minus the formula)."""
    return value + 1.0


@workflow.defn(name="BenchFloorWorkflow")  # sandboxed, like PipelineWorkflow
class FloorWorkflow:
    """Three chained local activities, like ``{A}+1`` → ``{B}*2`` → ``{C}-3``."""

    @workflow.run
    async def run(self, value: float) -> float:
        for _ in range(3):
            value = await workflow.execute_local_activity(
                floor_step, value, start_to_close_timeout=LOCAL_TIMEOUT)
        return value


class Floor:
    """A connected client and a running worker; :meth:`once` is one measured round trip."""

    def __init__(self, client: Client, task_queue: str) -> None:
        self.client = client
        self.task_queue = task_queue

    async def once(self, value: float = 1.0) -> float:
        """Start one workflow eagerly and wait for its result.

        Raises:
            RuntimeError: the workflow answered something else than ``value + 3``.
        """
        handle = await self.client.start_workflow(
            FloorWorkflow.run, value, id=f"bench-floor-{uuid.uuid4().hex[:12]}", task_queue=self.task_queue,
            request_eager_start=True, execution_timeout=timedelta(seconds=30),
        )
        got = await handle.result()
        if got != value + 3.0:
            raise RuntimeError(f"floor workflow returned {got!r}, expected {value + 3.0!r}")
        return got


@asynccontextmanager
async def running_floor(address: str, namespace: str = "default") -> AsyncIterator[Floor]:
    """Connect to ``address`` and run a worker for the floor workflow on a fresh task queue.

    The worker's limits match the API's in-process worker (``worker.build_worker``).
    """
    client = await Client.connect(address, namespace=namespace, data_converter=DATA_CONVERTER)  # as the API's
    queue = f"bench-floor-{uuid.uuid4().hex[:8]}"
    worker = Worker(client, task_queue=queue, workflows=[FloorWorkflow], activities=[floor_step],
                    max_concurrent_activities=200, max_concurrent_local_activities=200,
                    max_concurrent_workflow_tasks=200)
    async with worker:
        yield Floor(client, queue)
