"""Temporal worker entry point. The worker itself (every workflow and activity it
registers) is built in ``service/worker.py``, shared with the API's in-process worker.

``python worker.py`` (or ``wds worker``) runs a worker process against
``WDS_TEMPORAL_ADDRESS``; the API also runs one in-process (``WDS_INPROCESS_WORKER``) so
that eager workflow start serves single writes with the lowest latency.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from temporalio.client import Client

from activities.metrics import start_worker_exporter
from service import tracing
from service.config import Settings, get_settings
from service.converter import DATA_CONVERTER
from service.relay import run_relay
from service.worker import build_worker
from storage.db import Database
from storage.migrations import migrate

log = logging.getLogger("wds.worker")


async def connect_temporal(settings: Settings) -> Client:
    """Connect, retrying with backoff while Temporal is not reachable yet."""
    delay = 0.2
    while True:
        try:
            return await Client.connect(settings.temporal_address, namespace=settings.temporal_namespace,
                                        data_converter=DATA_CONVERTER,
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
