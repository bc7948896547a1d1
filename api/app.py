"""The FastAPI application factory: wires routers, error handlers and the lifespan."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

from fastapi import FastAPI
from temporalio.client import Client

from api import errors
from api.doors.fastpath import FastReads
from api.doors.mcp import server as mcp_server
from api.doors.rest import (
    admin,
    agents,
    auth,
    catalogue,
    chat,
    columns,
    credentials,
    health,
    publish,
    realtime,
    records,
    runs,
    schedules,
    schema,
    sdk,
    search,
    sql,
    tables,
    usage,
    views,
)
from api.doors.rest import storage as storage_routes
from api.middleware import metrics
from api.middleware.front import Front
from api.services import embeddings, limits
from api.state import AppState
from service import tracing
from service.config import Settings, get_settings
from service.converter import DATA_CONVERTER
from service.relay import run_relay
from service.worker import build_worker
from storage import access
from storage.db import Database
from storage.migrations import migrate
from storage.query import cursor
from storage.values import set_file_base_url

log = logging.getLogger("wds.api")
VERSION = "0.1.0"


async def _connect_temporal(state: AppState) -> None:
    """Connect to Temporal and start the in-process worker, retrying until it answers.

    The API serves data while Temporal is down; pipelines report it (and, with the
    outbox, catch up later).
    """
    delay = 0.2
    while state.temporal is None:
        try:
            client = await Client.connect(
                state.settings.temporal_address, namespace=state.settings.temporal_namespace,
                data_converter=DATA_CONVERTER,  # Temporal's JSON without its copies (service/converter.py)
                interceptors=tracing.temporal_interceptors(),  # OpenTelemetry when WDS_OTEL is on
            )
        except Exception as exc:
            log.warning("temporal not reachable at %s: %s", state.settings.temporal_address, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            continue
        state.temporal = client
    if state.settings.inprocess_worker:
        state.worker = build_worker(client, state.settings, state.db)
        state.extras["worker_task"] = asyncio.create_task(state.worker.run(), name="wds-inprocess-worker")


async def _flush_token_use(state: AppState) -> None:
    """Write ``last_used_at`` for tokens seen recently, off the request path."""
    while True:
        await asyncio.sleep(5.0)
        touched = state.extras.get("touched_tokens")
        if not touched:
            continue
        ids = list(touched)
        touched.clear()
        with suppress(Exception):
            async with state.db.connection() as conn:
                await access.touch_tokens(conn, token_ids=ids)


def _settle_gc() -> None:
    """Keep the collector off the long-lived start-up heap.

    After start-up the process holds a few hundred thousand long-lived objects (FastAPI,
    pydantic, sqlglot, the MCP SDK, Temporal's protos). A full collection walks all of them and
    stalls every in-flight request for 100+ ms; measured as the p99 of list requests at 16
    clients. Freezing moves them out of the collector's sight, and a larger first threshold
    stops request garbage from promoting into the old generations so quickly.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)


def _fastapi_telemetry(settings: Settings) -> dict[str, Any] | None:
    """FastAPI's own OpenTelemetry bridge: off when nothing can configure a provider.

    On every request FastAPI asks the three global OpenTelemetry providers (traces, metrics,
    logs) whether they are configured (environment reads, ~5 µs). Only our tracing set-up
    (:func:`service.tracing.setup_tracing`, when tracing is wanted) or FastAPI's own
    ``FASTAPI_OTEL_AUTO_CONFIGURE`` configures one; without either the answer is always no,
    so the bridge is switched off instead of asked. ``None``: FastAPI's defaults.
    """
    if tracing.wanted(settings.otel) or os.environ.get("FASTAPI_OTEL_AUTO_CONFIGURE", "").lower() == "true":
        return None
    return {"tracing": False, "metrics": False, "logs": False}


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    db = Database(
        settings.database_url,
        min_size=settings.db_pool_min,
        max_size=settings.db_pool_max,
        timeout_s=settings.db_timeout_s,
        statement_timeout_ms=settings.statement_timeout_ms,
        per_workspace=settings.db_connections_per_workspace,
    )
    state = AppState(settings=settings, db=db)
    set_file_base_url(settings.public_base_url)
    cursor.set_key(settings.secret_key, settings.database_url)  # signs list pages' next cursors

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await asyncio.to_thread(migrate, settings.database_url)
        await db.open()
        state.caches.start_listener(settings.database_url)
        tasks: list[asyncio.Task[Any]] = [
            asyncio.create_task(_connect_temporal(state), name="wds-temporal-connect"),
            asyncio.create_task(_flush_token_use(state), name="wds-token-use"),
            # every writer's records embedded (record steps, run-actions, ...): api/services/embeddings.py
            asyncio.create_task(embeddings.run_keeper(state), name="wds-embeddings-keeper"),
        ]
        if settings.inprocess_worker:  # the outbox relay runs beside every worker
            tasks.append(asyncio.create_task(run_relay(
                lambda: state.temporal, db, task_queue=settings.task_queue,
                search_attributes=settings.temporal_search_attributes), name="wds-outbox-relay"))
        _settle_gc()
        sys.setswitchinterval(settings.gil_switch_interval_ms / 1000)
        try:
            async with mcp_door.run():  # the MCP SDK's (stateless) session manager
                yield
        finally:
            for task in tasks:
                task.cancel()
            if state.worker is not None:
                with suppress(Exception):
                    await asyncio.wait_for(state.worker.shutdown(), timeout=10)
            await state.caches.stop_listener()
            await limits.stop(state)  # write queued usage rows and quota counters
            await db.close()

    app = FastAPI(
        title="Workspace Data Service",
        version=VERSION,
        description="Typed tables over REST and MCP with durable computed-column pipelines.",
        lifespan=lifespan,
        telemetry=_fastapi_telemetry(settings),
    )
    app.state.wds = state
    mcp_door = mcp_server.install(app, state, version=VERSION)  # {base_url}/functions/v1/mcp-server
    errors.install(app)
    # One ASGI layer in front of FastAPI's router (api/middleware/front.py), which does in this
    # order: metrics → body limit → CORS (requests with an Origin header) → limits and usage →
    # text guard → idempotency (requests with an Idempotency-Key) → the fast path (FastReads:
    # GET record / list, POST one record and POST /sql without FastAPI's router) → the router.
    # No step before the body limit reads a body.
    app.add_middleware(
        Front,
        max_body=settings.max_body_bytes, max_upload=settings.storage_max_object_bytes,
        timeout_s=settings.body_timeout_s,
        # browsers on other origins may call the API with bearer tokens (no cookies are used)
        cors={
            "allow_origins": ["*"],
            "allow_methods": ["GET", "POST", "PATCH", "PUT", "DELETE", "OPTIONS"],
            # X-Chat-Session-Key: a web chat's later messages may send the session key as a
            # header (docs/api.md "Agents and chat"); the answer carries the session's id and key
            "allow_headers": ["Authorization", "Content-Type", "Idempotency-Key", "Prefer", "Accept", "x-upsert",
                              "X-Chat-Session-Key"],
            "expose_headers": ["X-Total-Count", "Content-Range", "Retry-After", "X-RateLimit-Limit",
                               "X-RateLimit-Remaining", "X-RateLimit-Reset", "Idempotent-Replayed",
                               "X-Chat-Session-Id", "X-Chat-Session-Key"],
            "max_age": 600,
        },
        fast=FastReads if settings.fast_reads else None,
    )
    if tracing.setup_tracing("wds-api", enabled=settings.otel):  # OpenTelemetry: off unless WDS_OTEL / OTEL_EXPORTER_OTLP_ENDPOINT
        tracing.instrument_app(app)
    for module in (health, admin, tables, columns, records, runs, sql, schema, views, agents, usage, publish,
                   credentials, catalogue, schedules, auth, realtime, storage_routes, sdk, metrics, chat, search):
        app.include_router(module.router)
    return app
