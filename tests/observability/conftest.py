"""A second stack for observability tests: a standalone worker (its own metrics exporter)
and an API without an in-process worker, both tracing to their logs (console exporter),
with ``/metrics`` protected by a token."""

from __future__ import annotations

import secrets
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ApiProcess, Services, start_api
from wds.runtime import free_port

METRICS_TOKEN = secrets.token_urlsafe(16)


@dataclass
class Observed:
    api: ApiProcess
    worker_log: Path
    worker_metrics_url: str


@pytest.fixture(scope="module")
def observed(services: Services) -> Iterator[Observed]:
    queue = f"otel-{uuid.uuid4().hex[:8]}"
    port = free_port()
    env = {"WDS_TASK_QUEUE": queue, "WDS_OTEL": "true", "OTEL_TRACES_EXPORTER": "console",
           "WDS_LOG_LEVEL": "warning"}
    worker_log = services.tmp / f"worker-otel-{port}.log"
    worker = services.start_worker(worker_log.name, WDS_WORKER_METRICS_PORT=str(port),
                                   WDS_WORKER_METRICS_ADDR="127.0.0.1", **env)
    try:
        api = start_api(services, name="api-otel", WDS_INPROCESS_WORKER="false",
                        WDS_METRICS_TOKEN=METRICS_TOKEN, **env)
        try:
            yield Observed(api, worker_log, f"http://127.0.0.1:{port}/metrics")
        finally:
            api.stop()
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.kill()
