"""The FastAPI application factory: wires routers, error handlers and the lifespan."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

from fastapi import FastAPI
from temporalio.client import Client

from api import errors, limits
from api.routes import admin, agents, columns, health, records, runs, schema, sql, tables, usage, views, publish
from api.routes import catalogue, credentials, schedules
from api.routes import auth, realtime, sdk, storage as storage_routes
from api.mcp import server as mcp_server
from api.state import AppState
from api.idempotency import IdempotencyMiddleware
from api.usage import ApiMiddleware
from storage import access
from storage.db import Database
from storage.migrations import migrate
from storage.values import set_file_base_url
from wds.config import Settings, get_settings
from worker import build_worker

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
                state.settings.temporal_address, namespace=state.settings.temporal_namespace
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


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    db = Database(
        settings.database_url,
        min_size=settings.db_pool_min,
        max_size=settings.db_pool_max,
        timeout_s=settings.db_timeout_s,
    )
    state = AppState(settings=settings, db=db)
    set_file_base_url(settings.public_base_url)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await asyncio.to_thread(migrate, settings.database_url)
        await db.open()
        state.caches.start_listener(settings.database_url)
        tasks: list[asyncio.Task[Any]] = [
            asyncio.create_task(_connect_temporal(state), name="wds-temporal-connect"),
            asyncio.create_task(_flush_token_use(state), name="wds-token-use"),
        ]
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
    )
    app.state.wds = state
    mcp_door = mcp_server.install(app, state, version=VERSION)  # {base_url}/functions/v1/mcp-server
    errors.install(app)
    app.add_middleware(IdempotencyMiddleware)  # inner: runs after limits resolved the principal
    app.add_middleware(ApiMiddleware)  # rate limits + quotas on REST/SQL, usage log of every door
    for module in (health, admin, tables, columns, records, runs, sql, schema, views, agents, usage, publish,
                   credentials, catalogue, schedules, auth, realtime, storage_routes, sdk):
        app.include_router(module.router)
    return app
