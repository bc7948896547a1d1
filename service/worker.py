"""The Temporal worker every process runs its pipelines on: the standalone worker
(``worker.py``, ``wds worker``) and the API's in-process worker (``api/app.py``) build it
here, so both register the same workflows and activities."""

from __future__ import annotations

import httpx
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities.action import ActionStep
from activities.ai_agent import AiStep
from activities.bulk import BulkSteps
from activities.egress import build_proxy_client
from activities.http_request import HttpStep
from activities.records import RecordSteps
from activities.records_io import RecordIO
from activities.scheduled import ScheduleSteps
from activities.steps import pure_step
from service.config import Settings
from storage.db import Database
from workflows.bulk import BulkRunWorkflow
from workflows.pipeline import PipelineWorkflow
from workflows.scheduled import ScheduledRunWorkflow


def build_worker(client: Client, settings: Settings, db: Database) -> Worker:
    """A worker with every workflow and activity of the service."""
    io = RecordIO(db)
    steps = RecordSteps(db, base_url=settings.public_base_url)
    bulk = BulkSteps(db)
    activities = [io.load_records, io.write_results, io.pure_pipeline, pure_step, steps.record_step, bulk.page_ids, bulk.record_costs, bulk.run_progress]
    # steps that reach outside: user HTTP goes through the SSRF-guarded proxy client; the
    # AI provider is operator configuration and gets a plain client
    proxy = build_proxy_client(settings)
    ai_client = httpx.AsyncClient(timeout=60.0)
    activities += [
        HttpStep(db, settings, proxy).http_step,
        ActionStep(db, settings, proxy).action_step,
        AiStep(db, settings, ai_client).ai_step,
        ScheduleSteps(db, chunks_per_run=settings.bulk_chunks_per_run).prepare_scheduled_run,
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
