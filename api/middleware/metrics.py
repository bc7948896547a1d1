"""Prometheus metrics of the API process: ``GET /metrics``, request and pipeline histograms.

* ``wds_http_request_duration_seconds{door, route, method, status}`` — every HTTP request,
  observed by the front layer (:mod:`api.middleware.front`) around everything else it
  does, so refusals by the body limit and the rate limiter count too. ``route`` is the
  matched path *template* (``/functions/v1/rest-api/tables/{table_id}/records``), never
  the raw path, so the label set stays bounded; ``door`` is ``rest``, ``sql``, ``mcp``, ``chat``, ``storage``
  or ``other`` (admin, health, publishing, the SDK...).
* ``wds_pipeline_duration_seconds{mode, status}`` and ``wds_pipeline_records{mode}`` —
  the wait for a write's pipeline workflows (:func:`api.services.pipelines.observe_pipeline`).
* ``wds_token_lookups_total{result}`` — bearer-token lookups that reached the database
  (``found`` or ``missing``, counted in api/services/cache.py); a cached principal or a cached miss does not
  count, so a flood of one bad token shows as one ``missing`` per few seconds.
* ``wds_step_duration_seconds{kind, status}`` — from :mod:`activities.metrics`; the
  in-process worker's steps land in this process's registry.

``GET /metrics`` is meant for a scraper on the private network. With
``WDS_METRICS_TOKEN`` set it requires ``Authorization: Bearer <token>`` (401 otherwise).
Without a token it answers 401 too, except in dev mode (``WDS_DEV_MODE``) or when the
operator opens it explicitly with ``WDS_METRICS_PUBLIC=true``: its 150 KB of internals
(routes, traffic, step kinds) are not for anyone who asks.
With several uvicorn worker processes (``wds serve --workers N``) set
``PROMETHEUS_MULTIPROC_DIR`` to an empty directory shared by them (wiped before start):
prometheus_client then keeps the values in files there and ``/metrics`` aggregates every
process (:class:`prometheus_client.multiprocess.MultiProcessCollector`).
"""

from __future__ import annotations

import hmac
import os
from typing import Any

from fastapi import APIRouter, Request
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Histogram,
    generate_latest,
    multiprocess,
)
from starlette.responses import Response

import activities.metrics  # noqa: F401  (registers the step histograms in this process)
from storage.errors import Unauthorized

router = APIRouter(tags=["operations"])

REQUEST_SECONDS = Histogram(
    "wds_http_request_duration_seconds",
    "HTTP request duration by door, route template, method and status",
    ("door", "route", "method", "status"),
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
def observe_request(door: str | None, route: str, method: str, status: int, seconds: float) -> None:
    """Observe one HTTP request's duration (the front layer calls it for every request)."""
    _request_child(door or "other", route, method, status).observe(seconds)


_CHILDREN: dict[tuple[str, str, str, int], Any] = {}


def _request_child(door: str, route: str, method: str, status: int) -> Any:
    """``REQUEST_SECONDS.labels(...)``, looked up once per label set (``labels`` checks and
    converts its values and takes a lock on every call). Routes are templates, so the label
    sets are few."""
    key = (door, route, method, status)
    child = _CHILDREN.get(key)
    if child is None:
        child = _CHILDREN[key] = REQUEST_SECONDS.labels(door, route, method, str(status))
    return child


def _registry() -> CollectorRegistry:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY


def _check_token(request: Request) -> None:
    settings = request.app.state.wds.settings
    expected = settings.metrics_token or ""
    if not expected:
        if settings.dev_mode or settings.metrics_public:
            return
        raise Unauthorized("/metrics is closed: the operator sets WDS_METRICS_TOKEN (the scraper sends it as a"
                           " bearer token) or WDS_METRICS_PUBLIC=true", headers={"WWW-Authenticate": "Bearer"})
    scheme, _, secret = (request.headers.get("authorization") or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(secret.strip().encode(), expected.encode()):
        raise Unauthorized("a valid metrics token is required", headers={"WWW-Authenticate": "Bearer"})


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """Prometheus text exposition of this process (or all processes in multiprocess mode)."""
    _check_token(request)
    return Response(generate_latest(_registry()), media_type=CONTENT_TYPE_LATEST)
