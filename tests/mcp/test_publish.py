"""Published views and forms at ``{base_url}/p/<share_id>``: no token, visible columns
only, HTML and JSON, and form submissions through the normal write path."""

from __future__ import annotations

import httpx
import pytest

from tests.mcp.conftest import call_tool_sync

COLUMNS = [
    {"name": "Name", "type": "text", "required": True},
    {"name": "Email", "type": "text"},
    {"name": "Score", "type": "number"},
    {"name": "Secret", "type": "text"},
    {"name": "Tier", "type": "single_select", "options": ["free", "pro"]},
    {"name": "Greeting", "type": "formula", "formula": "\"Hi \" & {Name}"},
]


@pytest.fixture
def table(ws):
    t = ws.create_table("People", COLUMNS)
    rows = [{"fields": {"Name": n, "Email": f"{n}@x.io", "Score": s, "Secret": "hush"}}
            for n, s in (("ann", 3), ("bob", 1), ("cy", 2))]
    assert ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows}).status_code == 200
    return t


def publish(ws, table, view_type, config):
    r = ws.api.post(f"/tables/{table['id']}/views", json={"name": view_type, "view_type": view_type, "config": config})
    assert r.status_code == 201, r.text
    return call_tool_sync(ws.base_url, ws.builder_token, "publish_view",
                          {"table_id": table["id"], "view_id": r.json()["id"]})


def test_published_view_shows_only_visible_columns_filtered_and_sorted(ws, table):
    pub = publish(ws, table, "grid", {"column_order": ["Name", "Score", "Secret"],
                                                 "hidden_columns": ["Secret"], "filters": {"Score": "gte.2"},
                                                 "sort": "Score.desc"})
    r = httpx.get(pub["url"])  # no token
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert [c["name"] for c in body["columns"]] == ["Name", "Score"]
    assert [rec["fields"] for rec in body["records"]] == [{"Name": "ann", "Score": 3}, {"Name": "cy", "Score": 2}]
    assert body["total"] == 2 and body["next_offset"] is None
    assert "hush" not in r.text and "@x.io" not in r.text


def test_published_view_renders_html_for_browsers(ws, table):
    pub = publish(ws, table, "grid", {"hidden_columns": ["Secret", "Email"]})
    r = httpx.get(pub["url"], headers={"Accept": "text/html,application/xhtml+xml"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "<table>" in r.text and "ann" in r.text and "hush" not in r.text and "@x.io" not in r.text
    assert httpx.get(pub["url"], params={"format": "html"}).headers["content-type"].startswith("text/html")


def test_html_is_escaped(ws, table):
    ws.api.post(f"/tables/{table['id']}/records", json={"fields": {"Name": "<script>alert(1)</script>"}})
    pub = publish(ws, table, "grid", {})
    r = httpx.get(pub["url"], params={"format": "html"})
    assert "<script>alert(1)</script>" not in r.text and "&lt;script&gt;" in r.text


def test_published_form_accepts_submissions_through_the_write_path(ws, table):
    pub = publish(ws, table, "form", {"fields": ["Name", "Email", "Tier"], "title": "Join us"})
    assert pub["published"] == "form"
    form = httpx.get(pub["url"]).json()["form"]
    assert form["title"] == "Join us" and [f["name"] for f in form["fields"]] == ["Name", "Email", "Tier"]
    assert form["fields"][0]["required"] is True
    r = httpx.post(pub["url"], json={"fields": {"Name": "dee", "Email": "d@x.io", "Tier": "pro"}})
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    rec = ws.api.get(f"/tables/{table['id']}/records/{rid}").json()
    assert rec["fields"]["Name"] == "dee" and rec["fields"]["Greeting"] == "Hi dee"  # pipeline ran
    assert httpx.post(pub["url"], json={"fields": {"Email": "x@x.io"}}).json()["code"] == "REQUIRED_FIELD"
    assert httpx.post(pub["url"], json={"fields": {"Name": "x", "Secret": "s"}}).json()["code"] == "UNKNOWN_COLUMN"
    assert httpx.post(pub["url"], json={"fields": {"Name": "x", "Tier": "gold"}}).json()["code"] == "INVALID_OPTION"
    # a key beside "fields" is refused, not ignored (api.md: unknown body keys are refused)
    r = httpx.post(pub["url"], json={"fields": {"Name": "x"}, "extra": 1})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", r.text


def test_a_form_never_names_the_hidden_columns_it_cannot_fill(ws, table):
    """A required column the form does not show: the visitor is told the form cannot be
    submitted, not the hidden column's name."""
    pub = publish(ws, table, "form", {"fields": ["Name", "Email"]})
    secret = next(c for c in table["columns"] if c["name"] == "Secret")
    r = ws.api.patch(f"/tables/{table['id']}/columns/{secret['id']}", json={"required": True})  # after publishing
    assert r.status_code == 200, r.text
    r = httpx.post(pub["url"], json={"fields": {"Name": "a", "Email": "a@x.io"}})
    assert r.status_code == 400 and r.json()["code"] == "REQUIRED_FIELD", r.text
    assert "Secret" not in r.json()["error"] and "form's owner" in r.json()["error"]
    r = httpx.post(pub["url"], json={"fields": {"Email": "a@x.io"}})  # a field the form shows: named
    assert r.json()["code"] == "REQUIRED_FIELD" and "Name" in r.json()["error"]


def test_html_form_posts_create_records(ws, table):
    pub = publish(ws, table, "form", {"fields": ["Name", "Score"]})
    page = httpx.get(pub["url"], params={"format": "html"})
    assert "<form" in page.text and 'name="Score"' in page.text
    r = httpx.post(pub["url"], params={"format": "html"}, data={"Name": "eve", "Score": "7"})
    assert r.status_code == 201 and "Thank you" in r.text
    found = ws.api.get(f"/tables/{table['id']}/records", params={"Name": "eq.eve"}).json()["records"]
    assert [x["fields"]["Score"] for x in found] == [7]
    bad = httpx.post(pub["url"], params={"format": "html"}, data={"Score": "1"})
    assert bad.status_code == 400 and "required" in bad.text
    # a posted name the form does not have is refused, as in JSON, not silently dropped
    extra = httpx.post(pub["url"], data={"Name": "eve2", "Secret": "inj"})
    assert extra.status_code == 400 and extra.json()["code"] == "UNKNOWN_COLUMN", extra.text
    assert ws.api.get(f"/tables/{table['id']}/records", params={"Name": "eq.eve2"}).json()["records"] == []


def test_forms_are_refused_on_read_only_plans_and_views_take_no_posts(ws, table, admin):
    grid = publish(ws, table, "grid", {})
    assert httpx.post(grid["url"], json={"fields": {"Name": "x"}}).status_code == 404
    form = publish(ws, table, "form", {"fields": ["Name"]})
    assert admin.patch(f"/workspaces/{ws.id}", json={"read_only": True}).status_code == 200
    r = httpx.post(form["url"], json={"fields": {"Name": "x"}})
    assert r.status_code == 403 and r.json()["code"] == "PLAN_READ_ONLY"


def test_unknown_share_is_404(base_url):
    r = httpx.get(f"{base_url}/p/nope")
    assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"
    for odd in ("%00", "a%00b", "%C3%A9", "a.b", "x" * 65):  # not a share id: no page, not a 400
        r = httpx.get(f"{base_url}/p/{odd}")
        assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND", (odd, r.text)
        assert httpx.post(f"{base_url}/p/{odd}", json={"fields": {}}).status_code == 404
