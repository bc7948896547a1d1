"""OpenTelemetry: a REST write's span, the pipeline workflow's spans (in the worker
process) and its activities share one trace (console exporter into the process logs)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.observability.conftest import Observed

pytest.importorskip("opentelemetry.sdk.trace", reason="the 'otel' extra (OpenTelemetry SDK) is not installed")
pytest.importorskip("opentelemetry.instrumentation.fastapi", reason="the 'otel' extra is not installed")


def spans(log: Path) -> list[dict[str, Any]]:
    """Spans the console exporter wrote (one JSON object per line) into a process log."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{") and '"context"' in line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line interleaved with other output
    return out


def wait_for_span(log: Path, name: str, trace_id: str | None = None, timeout: float = 15.0) -> dict[str, Any]:
    """The first span called ``name`` (a trailing ``*``: starting with it) in a log, waiting for it."""
    deadline = time.monotonic() + timeout
    while True:
        for span in spans(log):
            named = span["name"].startswith(name[:-1]) if name.endswith("*") else span["name"] == name
            if named and (trace_id is None or span["context"]["trace_id"] == trace_id):
                return span
        if time.monotonic() > deadline:
            names = sorted({s["name"] for s in spans(log)})
            raise AssertionError(f"no span {name!r} (trace {trace_id}) in {log.name}; spans seen: {names}")
        time.sleep(0.1)


def test_a_write_and_its_pipeline_share_one_trace(observed: Observed, admin):
    base = observed.api.base_url
    ws = admin.post("/workspaces", json={"name": "trace", "plan": "pro"}).json()
    token = admin.post(f"/workspaces/{ws['id']}/tokens", json={"type": "vibe_mcp", "name": "b"}).json()["token"]
    with httpx.Client(base_url=f"{base}/functions/v1/rest-api", headers={"Authorization": f"Bearer {token}"},
                      timeout=60) as c:
        t = c.post("/tables", json={"name": "T", "columns": [
            {"name": "A", "type": "number"}, {"name": "B", "type": "formula", "formula": "{A} * 10"}]}).json()
        r = c.post(f"/tables/{t['id']}/records", json={"fields": {"A": 4}})
        assert r.status_code == 201 and r.json()["fields"]["B"] == 40
    request = wait_for_span(observed.api.log, "POST /functions/v1/rest-api/tables/{table_id}/records")
    assert request["kind"] == "SpanKind.SERVER"
    assert request["resource"]["attributes"]["service.name"] == "wds-api"
    trace_id = request["context"]["trace_id"]
    start = wait_for_span(observed.api.log, "StartWorkflow:PipelineWorkflow", trace_id)
    assert start["parent_id"] is not None
    # the worker is another process: the context travelled in the workflow's headers
    run = wait_for_span(observed.worker_log, "RunWorkflow:PipelineWorkflow", trace_id)
    assert run["resource"]["attributes"]["service.name"] == "wds-worker"
    # the formula runs in a (fused) local activity of that workflow
    activity = wait_for_span(observed.worker_log, "RunActivity:*", trace_id)
    assert activity["name"] in ("RunActivity:pure_pipeline", "RunActivity:pure_step")


def test_health_and_metrics_are_not_traced(observed: Observed):
    assert httpx.get(f"{observed.api.base_url}/healthz").status_code == 200
    assert not [s for s in spans(observed.api.log) if "healthz" in s["name"] or "metrics" in s["name"]]


def test_an_mcp_tool_call_is_traced_by_the_sdk(observed: Observed, admin):
    """With tracing on, the MCP SDK's own middleware spans every tool call (with tracing
    off the API drops that middleware: it would only make non-recording spans)."""
    base = observed.api.base_url
    ws = admin.post("/workspaces", json={"name": "trace-mcp", "plan": "pro"}).json()
    token = admin.post(f"/workspaces/{ws['id']}/tokens", json={"type": "vibe_mcp", "name": "b"}).json()["token"]
    r = httpx.post(f"{base}/functions/v1/mcp-server", timeout=30, headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18",
    }, json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_tables", "arguments": {}}})
    assert r.status_code == 200 and r.json()["result"]["structuredContent"] == {"tables": []}
    span = wait_for_span(observed.api.log, "tools/call list_tables")
    assert span["attributes"]["gen_ai.tool.name"] == "list_tables"

