"""``GET /metrics`` is closed by default outside dev mode (issue 22: it answered 150 KB of
internals to anyone): a bearer token (``WDS_METRICS_TOKEN``) opens it for the scraper,
``WDS_METRICS_PUBLIC=true`` opens it explicitly, dev mode leaves it open."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import ApiProcess, Services, running_api

TOKEN = secrets.token_urlsafe(16)


@pytest.fixture(scope="module")
def closed(services: Services) -> Iterator[ApiProcess]:
    """Production settings and nothing said about metrics."""
    yield from running_api(services, name="api-metrics-closed", WDS_DEV_MODE="false")


@pytest.fixture(scope="module")
def tokened(services: Services) -> Iterator[ApiProcess]:
    yield from running_api(services, name="api-metrics-token", WDS_DEV_MODE="false", WDS_METRICS_TOKEN=TOKEN)


@pytest.fixture(scope="module")
def public(services: Services) -> Iterator[ApiProcess]:
    yield from running_api(services, name="api-metrics-public", WDS_DEV_MODE="false", WDS_METRICS_PUBLIC="true")


def test_metrics_are_closed_outside_dev_mode_without_a_token(closed: ApiProcess):
    r = httpx.get(f"{closed.base_url}/metrics")
    assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED" and r.json()["error"]
    assert "wds_http_request_duration_seconds" not in r.text
    # a guessed token does not open it either
    r = httpx.get(f"{closed.base_url}/metrics", headers={"Authorization": "Bearer anything"})
    assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED"


def test_the_metrics_token_opens_them_for_the_scraper(tokened: ApiProcess):
    url = f"{tokened.base_url}/metrics"
    assert httpx.get(url).json()["code"] == "UNAUTHORIZED"
    assert httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}x"}).status_code == 401
    r = httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200 and "wds_http_request_duration_seconds" in r.text


def test_metrics_can_be_made_public_explicitly(public: ApiProcess):
    r = httpx.get(f"{public.base_url}/metrics")
    assert r.status_code == 200 and "wds_http_request_duration_seconds" in r.text


def test_dev_mode_leaves_them_open(api: ApiProcess):
    r = httpx.get(f"{api.base_url}/metrics")
    assert r.status_code == 200 and "wds_http_request_duration_seconds" in r.text
