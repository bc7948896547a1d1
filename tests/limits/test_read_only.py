"""Read-only plans: every write through REST answers 403 PLAN_READ_ONLY; reads and SQL go on."""

from __future__ import annotations

import pytest

# (method, path template, body); {t} table, {r} record, {c} column, {v} view
WRITES = [
    ("POST", "/tables", {"name": "New", "columns": []}),
    ("PATCH", "/tables/{t}", {"name": "Renamed"}),
    ("DELETE", "/tables/{t}", None),
    ("POST", "/tables/{t}/columns", {"name": "More", "type": "text"}),
    ("PATCH", "/tables/{t}/columns/{c}", {"name": "A2"}),
    ("DELETE", "/tables/{t}/columns/{c}", None),
    ("POST", "/tables/{t}/records", {"fields": {"A": 1}}),
    ("PATCH", "/tables/{t}/records/{r}", {"fields": {"A": 2}}),
    ("DELETE", "/tables/{t}/records/{r}", None),
    ("POST", "/tables/{t}/records/batch", {"rows": [{"A": 1}]}),
    ("POST", "/tables/{t}/records/{r}/run", {"mode": "create"}),
    ("POST", "/tables/{t}/records/{r}/compute/B", None),
    ("POST", "/tables/{t}/run-actions", {"record_ids": []}),
    ("POST", "/tables/{t}/views", {"name": "Grid", "view_type": "grid", "config": {}}),
    ("PATCH", "/tables/{t}/views/{v}", {"name": "Grid 2"}),
    ("DELETE", "/tables/{t}/views/{v}", None),
]


@pytest.fixture
def frozen(ws, admin):
    """A workspace with a table, a record and a view, then switched to read-only."""
    t = ws.create_table("RO", [{"name": "A", "type": "number"}, {"name": "B", "type": "formula", "formula": "{A}+1"}])
    rec = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 1}}).json()
    view = ws.api.post(f"/tables/{t['id']}/views", json={"name": "V", "view_type": "grid", "config": {}})
    assert view.status_code == 201, view.text
    assert admin.patch(f"/workspaces/{ws.id}", json={"read_only": True}).json()["read_only"] is True
    ids = {"t": t["id"], "r": rec["id"], "c": t["columns"][0]["id"], "v": view.json()["id"]}
    return ws, ids


@pytest.mark.parametrize(("method", "path", "body"), WRITES, ids=[f"{m} {p}" for m, p, _ in WRITES])
def test_every_rest_write_is_refused_on_a_read_only_plan(frozen, method, path, body):
    ws, ids = frozen
    r = ws.api.request(method, path.format(**ids), json=body)
    assert r.status_code == 403, r.text
    assert r.json()["code"] == "PLAN_READ_ONLY"


def test_reads_and_sql_continue_on_a_read_only_plan(frozen, admin):
    ws, ids = frozen
    t = ids["t"]
    assert ws.api.get("/tables").status_code == 200
    assert ws.api.get(f"/tables/{t}").status_code == 200
    assert ws.api.get(f"/tables/{t}/records").json()["records"][0]["fields"]["B"] == 2
    assert ws.api.get(f"/tables/{t}/records/{ids['r']}").status_code == 200
    r = ws.api.post("/sql", json={"query": "SELECT A, B FROM RO"})
    assert r.status_code == 200 and r.json()["rows"] == [{"A": 1, "B": 2}]
    assert ws.api.get("/usage").status_code == 200
    # and writes work again once the plan allows them
    assert admin.patch(f"/workspaces/{ws.id}", json={"read_only": False}).status_code == 200
    assert ws.api.post(f"/tables/{t}/records", json={"fields": {"A": 5}}).status_code == 201
