"""Schemathesis against the live test server's ``/openapi.json``: every operation, with
generated inputs (valid and invalid), a builder token, the operator key on the admin door
and an invalid token. No answer may be a 5xx or contradict the schema (undeclared status
code, content type, headers or a body that does not match the declared model).

Bounded for CI: a fixed number of examples per operation and identity, derandomized (the
same cases on every run), no shrinking (a failure is reported with the case that found
it). Half the cases use real ids (a fresh table with records, a view, a schedule, a
bucket with an object, an agent with a channel) so that they reach past the 404s.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import requests

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis (the 'test' extra) is not installed")
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.fuzz.spec import OPERATIONS

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]
EXAMPLES = int(os.environ.get("WDS_FUZZ_EXAMPLES", "20"))  # per operation, identity and mode
ADMIN = "/functions/v1/admin"


@dataclass
class Seed:
    """Real ids of one fresh table and its neighbours, by path-parameter name."""

    params: dict[str, Any]
    cleanup: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def fuzz_schema(base_url: str) -> Any:
    return schemathesis.openapi.from_url(f"{base_url}/openapi.json")


@pytest.fixture(scope="module")
def fuzz_ws(admin: httpx.Client, base_url: str) -> Iterator[dict[str, Any]]:
    """An enterprise workspace (no per-minute workspace limit) and a second one that the
    admin door's generated writes are pinned to."""
    r = admin.post("/workspaces", json={"name": f"fuzz-{secrets.token_hex(3)}", "plan": "enterprise"})
    target = admin.post("/workspaces", json={"name": f"fuzz-admin-{secrets.token_hex(3)}", "plan": "enterprise"})
    assert r.status_code == 201 and target.status_code == 201
    yield {"id": r.json()["id"], "admin_target": target.json()["id"]}


def _token(admin: httpx.Client, ws_id: int) -> str:
    r = admin.post(f"/workspaces/{ws_id}/tokens", json={"type": "vibe_mcp", "name": f"fuzz-{secrets.token_hex(3)}"})
    assert r.status_code == 201, r.text
    return str(r.json()["token"])


def _seed(admin: httpx.Client, base_url: str, ws_id: int, admin_target: int, token: str) -> Seed:
    rest = httpx.Client(base_url=f"{base_url}/functions/v1/rest-api",
                        headers={"Authorization": f"Bearer {token}"}, timeout=60)
    store = httpx.Client(base_url=f"{base_url}/storage/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60)
    with rest, store:
        t = rest.post("/tables", json={"name": f"F{secrets.token_hex(3)}", "columns": [
            {"name": "Name", "type": "text"}, {"name": "N", "type": "number"},
            {"name": "S", "type": "single_select", "options": ["a", "b"]},
            {"name": "Twice", "type": "formula", "formula": "{N} * 2"},
        ]})
        assert t.status_code == 201, t.text
        table = t.json()
        rec = rest.post(f"/tables/{table['id']}/records", json={"fields": {"Name": "x", "N": 1, "S": "a"}}).json()
        view = rest.post(f"/tables/{table['id']}/views", json={"name": "V", "view_type": "grid"}).json()
        sched = rest.post(f"/tables/{table['id']}/schedules", json={
            "name": "s", "interval_seconds": 3600, "paused": True}).json()
        run = rest.post(f"/tables/{table['id']}/run-actions", json={"record_ids": [rec["id"]]}).json()
        agent = rest.post("/agents", json={"name": "A", "table_ids": [table["id"]]}).json()
        channel = rest.post(f"/agents/{agent['id']}/channels", json={"type": "web"}).json()
        bucket_name = f"b{secrets.token_hex(3)}"
        bucket = store.post("/bucket", json={"name": bucket_name, "public": True}).json()
        store.post(f"/object/{bucket_name}/dir/a.txt", content=b"hello", headers={"Content-Type": "text/plain"})
    profiles = admin.get(f"/workspaces/{admin_target}/profiles").json()
    tokens = admin.get(f"/workspaces/{admin_target}/tokens").json()
    return Seed(params={
        "table_id": table["id"], "column_id": table["columns"][0]["id"], "column": "Twice",
        "record_id": rec["id"], "view_id": view.get("id"), "schedule_id": sched.get("id"),
        "run_id": run.get("run_id"), "agent_id": agent.get("id"), "channel_id": channel.get("id"),
        "bucket": bucket_name, "bucket_id": bucket.get("id"), "path": "dir/a.txt",
        "workspace_id": admin_target, "profile_id": (profiles[0]["id"] if profiles else 1),
        "token_id": (tokens[-1]["id"] if tokens else 1), "group_id": "slack", "name": "wds.js",
        "credential": "none", "share_id": "nope",
    }, cleanup=[f"/tables/{table['id']}"])


def _identities(path: str, token: str, admin_key: str) -> list[tuple[str, dict[str, str], int]]:
    invalid = {"Authorization": f"Bearer wds_invalid_{secrets.token_hex(8)}"}
    builder = {"Authorization": f"Bearer {token}"}
    if path.startswith(ADMIN):
        return [("admin", {"Authorization": f"Bearer {admin_key}"}, EXAMPLES),
                ("builder", builder, max(EXAMPLES // 4, 3)), ("invalid", invalid, max(EXAMPLES // 4, 3))]
    return [("builder", builder, EXAMPLES), ("invalid", invalid, max(EXAMPLES // 4, 3))]


def _describe(case: Any, response: requests.Response | None, exc: BaseException) -> str:
    status = response.status_code if response is not None else "-"
    body = (response.text[:300] if response is not None else "")
    return (f"{type(exc).__name__}: {str(exc).strip()[:600]}\n  request: {case.method} {case.formatted_path} "
            f"query={case.query!r} body={str(case.body)[:200]!r}\n  status {status}: {body}")


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_operation_answers_within_its_schema(method: str, path: str, fuzz_schema: Any, fuzz_ws: dict[str, Any],
                                             admin: httpx.Client, base_url: str, services: Any) -> None:
    operation = fuzz_schema[path][method]
    token = _token(admin, fuzz_ws["id"])  # one token per operation: the per-token limit stays far away
    seed = _seed(admin, base_url, fuzz_ws["id"], fuzz_ws["admin_target"], token)
    real = {k: seed.params[k] for k in re.findall(r"{(\w+)}", path) if k in seed.params}
    if path.startswith(ADMIN) and "workspace_id" in real:
        generated_paths = False  # never let generated writes reach other tests' workspaces
    else:
        generated_paths = True
    failures: dict[str, str] = {}
    session = requests.Session()
    try:
        for who, headers, examples in _identities(path, token, services.admin_key):
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                strategies = [operation.as_strategy(generation_mode=mode, path_parameters=real)] if real else []
                if generated_paths or not real:
                    strategies.append(operation.as_strategy(generation_mode=mode))
                n = examples if mode is GenerationMode.POSITIVE else max(examples // 2, 3)

                @settings(max_examples=n, derandomize=True, deadline=None, database=None,
                          phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
                # run() is called right below, inside this iteration: the loop variables it
                # reads (headers, who, mode) are the current ones
                @given(case=st.one_of(strategies))
                def run(case: Any) -> None:
                    response = None
                    try:
                        response = case.call(base_url=base_url, session=session,
                                             headers=headers, timeout=60)  # noqa: B023
                        case.validate_response(response, checks=CHECKS, headers=headers)  # noqa: B023
                    except (Exception, FailureGroup) as exc:  # noqa: BLE001 (collect every distinct failure)
                        key = (f"{who}/{mode.value}/{type(exc).__name__}/"  # noqa: B023
                               f"{getattr(response, 'status_code', '-')}")
                        failures.setdefault(key, _describe(case, response, exc))

                try:
                    run()
                except Unsatisfiable:
                    assert mode is GenerationMode.NEGATIVE  # nothing to make invalid (no inputs)
    finally:
        session.close()
        with httpx.Client(base_url=f"{base_url}/functions/v1/rest-api",
                          headers={"Authorization": f"Bearer {token}"}, timeout=60) as rest:
            for url in seed.cleanup:
                rest.delete(url)
    assert not failures, f"{method} {path}: {len(failures)} kinds of failure\n" + "\n".join(
        f"[{k}] {v}" for k, v in sorted(failures.items()))
