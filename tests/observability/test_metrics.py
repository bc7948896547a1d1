"""``GET /metrics``: request, pipeline and step histograms in Prometheus text format."""

from __future__ import annotations

import secrets
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.observability.conftest import METRICS_TOKEN, Observed


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample called ``name`` in an exposition."""
    return [(dict(s.labels), s.value) for fam in text_string_to_metric_families(text)
            for s in fam.samples if s.name == name]


def count(text: str, name: str, **labels: str) -> float:
    """Sum of ``name`` samples whose labels include ``labels``."""
    return sum(v for got, v in samples(text, name) if labels.items() <= got.items())


def formula_table(ws):
    return ws.create_table(f"M{secrets.token_hex(2)}", [
        {"name": "A", "type": "number"},
        {"name": "B", "type": "formula", "formula": "{A} * 2"},
    ])


def test_metrics_has_request_pipeline_and_step_histograms(ws, base_url):
    t = formula_table(ws)
    before = httpx.get(f"{base_url}/metrics").text
    r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 2}})
    assert r.status_code == 201 and r.json()["pipeline"]["status"] == "ok"
    assert ws.api.get(f"/tables/{t['id']}/records/999999").status_code == 404
    r = httpx.get(f"{base_url}/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    after = r.text
    route = "/functions/v1/rest-api/tables/{table_id}/records"
    req = "wds_http_request_duration_seconds_count"
    assert count(after, req, door="rest", route=route, method="POST", status="201") == \
        count(before, req, door="rest", route=route, method="POST", status="201") + 1
    assert count(after, req, door="rest", route=route + "/{record_id}", method="GET", status="404") >= 1
    pipe = "wds_pipeline_duration_seconds_count"
    assert count(after, pipe, mode="create", status="ok") == count(before, pipe, mode="create", status="ok") + 1
    assert count(after, "wds_pipeline_records_sum", mode="create") >= 1
    step = "wds_step_duration_seconds_count"
    assert count(after, step, kind="formula", status="ok") > count(before, step, kind="formula", status="ok")


def test_route_labels_are_templates_never_raw_ids(ws, base_url):
    t = formula_table(ws)
    ws.api.get(f"/tables/{t['id']}/records")
    ws.api.get("/no/such/route/12345")
    text = httpx.get(f"{base_url}/metrics").text
    routes = {labels["route"] for labels, _ in samples(text, "wds_http_request_duration_seconds_count")}
    assert "/functions/v1/rest-api/tables/{table_id}/records" in routes and "<unmatched>" in routes
    assert not any(str(t["id"]) in r or "12345" in r for r in routes)


def test_step_errors_are_counted_as_error(ws, base_url):
    t = ws.create_table("E", [{"name": "A", "type": "number"},
                              {"name": "Inv", "type": "formula", "formula": "1 / {A}"}])
    before = httpx.get(f"{base_url}/metrics").text
    r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 0}})
    assert r.json()["pipeline"]["status"] == "error"
    after = httpx.get(f"{base_url}/metrics").text
    step = "wds_step_duration_seconds_count"
    assert count(after, step, kind="formula", status="error") == count(before, step, kind="formula", status="error") + 1
    pipe = "wds_pipeline_duration_seconds_count"
    assert count(after, pipe, mode="create", status="error") == count(before, pipe, mode="create", status="error") + 1


def test_metrics_token_is_required_when_configured(observed: Observed):
    url = f"{observed.api.base_url}/metrics"
    assert httpx.get(url).status_code == 401
    r = httpx.get(url, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.json()["code"] == "UNAUTHORIZED"
    r = httpx.get(url, headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert r.status_code == 200 and "wds_http_request_duration_seconds" in r.text


def test_metrics_is_not_in_the_openapi_schema(base_url):
    assert "/metrics" not in httpx.get(f"{base_url}/openapi.json").json()["paths"]


def test_a_standalone_worker_exports_step_metrics(observed: Observed, admin):
    base = observed.api.base_url
    ws = admin.post("/workspaces", json={"name": "obs", "plan": "pro"}).json()
    token = admin.post(f"/workspaces/{ws['id']}/tokens", json={"type": "vibe_mcp", "name": "b"}).json()["token"]
    with httpx.Client(base_url=f"{base}/functions/v1/rest-api", headers={"Authorization": f"Bearer {token}"},
                      timeout=60) as c:
        t = c.post("/tables", json={"name": "W", "columns": [
            {"name": "A", "type": "number"}, {"name": "B", "type": "formula", "formula": "{A} + 1"}]}).json()
        r = c.post(f"/tables/{t['id']}/records", json={"fields": {"A": 1}})
        assert r.status_code == 201 and r.json()["fields"]["B"] == 2
    # the API process ran no step (no in-process worker); the worker's exporter has it
    deadline = time.monotonic() + 10
    while True:
        text = httpx.get(observed.worker_metrics_url).text
        if count(text, "wds_step_duration_seconds_count", kind="formula", status="ok") >= 1 or \
                time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert count(text, "wds_step_duration_seconds_count", kind="formula", status="ok") >= 1
    api_text = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).text
    assert count(api_text, "wds_step_duration_seconds_count") == 0
    assert count(api_text, "wds_pipeline_duration_seconds_count", mode="create", status="ok") >= 1
