"""Temporal worker entry point: the only place that registers workflows and activities.

``python worker.py`` (or ``wds worker``) runs a worker process against
``WDS_TEMPORAL_ADDRESS``; the API also runs one in-process (``WDS_INPROCESS_WORKER``) so
that eager workflow start serves single writes with the lowest latency.
"""

from __future__ import annotations

import asyncio
import logging
import signal

import httpx
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities.action import ActionStep
from activities.ai_agent import AiStep
from activities.bulk import BulkSteps
from activities.egress import build_proxy_client
from activities.http_request import HttpStep
from activities.metrics import start_worker_exporter
from activities.records import RecordSteps
from activities.records_io import RecordIO
from activities.scheduled import ScheduleSteps
from activities.steps import pure_step
from storage.db import Database
from storage.migrations import migrate
from wds.relay import run_relay
from wds import tracing
from wds.config import Settings, get_settings
from workflows.bulk import BulkRunWorkflow
from workflows.pipeline import PipelineWorkflow
from workflows.scheduled import ScheduledRunWorkflow

log = logging.getLogger("wds.worker")


def build_worker(client: Client, settings: Settings, db: Database) -> Worker:
    """A worker with every workflow and activity of the service."""
    io = RecordIO(db)
    steps = RecordSteps(db)
    bulk = BulkSteps(db)
    activities = [io.load_records, io.write_results, io.pure_pipeline, pure_step, steps.record_step, bulk.page_ids, bulk.run_progress]
    # steps that reach outside: user HTTP goes through the SSRF-guarded proxy client; the
    # AI provider is operator configuration and gets a plain client
    proxy = build_proxy_client(settings)
    ai_client = httpx.AsyncClient(timeout=60.0)
    activities += [
        HttpStep(db, settings, proxy).http_step,
        ActionStep(db, settings, proxy).action_step,
        AiStep(db, settings, ai_client).ai_step,
        ScheduleSteps(db).prepare_scheduled_run,
    ]
    return Worker(
        client,
        # our workflows are small, import only dataclasses and never do I/O; the sandbox's
        # per-run setup cost ~19 ms of every write's latency (docs/decisions.md). Sandbox
        # safety is kept by tests/pipelines/test_replay.py, which replays real histories
        # under the default sandbox; WDS_WORKFLOW_SANDBOX=true turns it back on here.
        workflow_runner=SandboxedWorkflowRunner() if settings.workflow_sandbox else UnsandboxedWorkflowRunner(),
        task_queue=settings.task_queue,
        workflows=[PipelineWorkflow, BulkRunWorkflow, ScheduledRunWorkflow],
        activities=activities,
        max_concurrent_activities=200,
        max_concurrent_local_activities=200,
        max_concurrent_workflow_tasks=200,
    )


async def connect_temporal(settings: Settings) -> Client:
    """Connect, retrying with backoff while Temporal is not reachable yet."""
    delay = 0.2
    while True:
        try:
            return await Client.connect(settings.temporal_address, namespace=settings.temporal_namespace,
                                        interceptors=tracing.temporal_interceptors())  # OpenTelemetry if on
        except Exception as exc:
            log.warning("temporal not reachable at %s: %s", settings.temporal_address, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


async def run_worker(settings: Settings | None = None) -> None:
    settings = settings or get_settings()
    tracing.setup_tracing("wds-worker", enabled=settings.otel)  # off unless WDS_OTEL / OTEL_EXPORTER_OTLP_ENDPOINT
    # Prometheus step metrics on WDS_WORKER_METRICS_PORT, when set
    start_worker_exporter(settings.worker_metrics_port, settings.worker_metrics_addr)
    await asyncio.to_thread(migrate, settings.database_url)
    db = Database(settings.database_url, min_size=settings.db_pool_min, max_size=settings.db_pool_max,
                  timeout_s=settings.db_timeout_s, statement_timeout_ms=settings.statement_timeout_ms)
    await db.open()
    client = await connect_temporal(settings)
    worker = build_worker(client, settings, db)
    # pipelines committed while Temporal was unreachable are started from the outbox
    relay = asyncio.create_task(run_relay(lambda: client, db, task_queue=settings.task_queue,
                                          search_attributes=settings.temporal_search_attributes))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        log.info("worker polling %s on %s", settings.task_queue, settings.temporal_address)
        await stop.wait()
    relay.cancel()
    await db.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    asyncio.run(run_worker())
