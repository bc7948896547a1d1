"""Tables: list, create with columns, get, patch, delete."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest


def test_create_table_returns_it_with_its_columns(ws):
    r = ws.api.post("/tables", json={"name": "Tasks", "icon": "check", "columns": [
        {"name": "Title", "type": "text", "required": True},
        {"name": "Points", "type": "number"},
        {"name": "Status", "column_type": "single_select", "options": [{"label": "todo", "color": "red"}, "done"]},
    ]})
    assert r.status_code == 201, r.text
    t = r.json()
    assert t["name"] == "Tasks" and t["icon"] == "check"
    assert [c["name"] for c in t["columns"]] == ["Title", "Points", "Status"]
    assert [c["type"] for c in t["columns"]] == ["text", "number", "single_select"]
    assert t["columns"][0]["required"] is True
    status = t["columns"][2]
    assert [o["label"] for o in status["options"]] == ["todo", "done"]
    assert status["options"][0]["color"] == "red" and status["options"][1]["color"] in (
        "red", "orange", "amber", "green", "teal", "blue", "indigo", "purple", "pink", "gray")
    assert all(o["id"] for o in status["options"])
    assert t["created_at"] and t["updated_at"]


def test_list_tables_shows_summaries(ws):
    t = ws.create_table("Alpha")
    r = ws.api.get("/tables")
    assert r.status_code == 200
    rows = [x for x in r.json() if x["id"] == t["id"]]
    assert rows and set(rows[0]) == {"id", "name", "icon", "created_at", "updated_at"}


def test_table_names_are_unique_per_workspace(ws, make_workspace):
    ws.create_table("Same")
    r = ws.api.post("/tables", json={"name": "Same", "columns": []})
    assert r.status_code == 409 and r.json()["code"] == "CONFLICT"
    other = make_workspace()
    other.create_table("Same")  # another workspace may use the name


def test_create_table_with_bad_input_is_refused_and_creates_nothing(ws):
    bad = [
        {"name": "", "columns": []},
        {"name": "X", "columns": [{"name": "A", "type": "nope"}]},
        {"name": "X", "columns": [{"name": "A", "type": "text"}, {"name": "A", "type": "number"}]},
        {"name": "X", "columns": [{"name": "S", "type": "single_select", "options": [{"label": "a", "color": "black"}]}]},
        {"name": "X", "columns": [{"name": "id", "type": "text"}]},
        {"name": "X", "columns": [{"name": "R", "type": "relation"}]},
        {"name": "X", "columns": [{"name": "F", "type": "formula", "formula": "1 +"}]},
        {"name": "X", "columns": "nope"},
        {"nam": "X"},
    ]
    for body in bad:
        r = ws.api.post("/tables", json=body)
        assert r.status_code == 400, (body, r.text)
        assert set(r.json()) >= {"error", "code"}
    assert all(t["name"] != "X" for t in ws.api.get("/tables").json())


def test_patch_table_renames_and_changes_icon(ws):
    t = ws.create_table("Old")
    r = ws.api.patch(f"/tables/{t['id']}", json={"name": "New", "icon": "star"})
    assert r.status_code == 200 and r.json()["name"] == "New" and r.json()["icon"] == "star"
    assert ws.api.get(f"/tables/{t['id']}").json()["name"] == "New"


def test_delete_table_drops_it_and_its_records(ws):
    t = ws.create_table("Gone", [{"name": "A", "type": "text"}])
    ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": "x"}})
    r = ws.api.delete(f"/tables/{t['id']}")
    assert r.status_code == 200 and r.json() == {"id": t["id"], "deleted": True}
    assert ws.api.get(f"/tables/{t['id']}").json()["code"] == "NOT_FOUND"
    assert ws.api.get(f"/tables/{t['id']}/records").status_code == 404


def test_deleting_a_table_removes_relation_columns_pointing_at_it(ws):
    a = ws.create_table("A", [{"name": "Name", "type": "text"}])
    b = ws.create_table("B", [{"name": "Link", "type": "relation", "relation_table_id": a["id"]}])
    r = ws.api.delete(f"/tables/{a['id']}")
    assert r.status_code == 409 and r.json()["code"] == "COLUMN_IN_USE"
    assert ws.api.delete(f"/tables/{a['id']}?force=true").status_code == 200
    cols = ws.api.get(f"/tables/{b['id']}/columns").json()
    assert cols == []


def test_unknown_table_is_404(ws):
    for path in ("/tables/999999", "/tables/999999/columns", "/tables/999999/records", "/tables/999999/records/1"):
        r = ws.api.get(path)
        assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND", path


def _post_until(client, url, fields, stop, answers) -> None:
    """Create records at ``url`` (``fields(i)``) until ``stop`` is set, 200 at most or the
    first 404, noting each answer's ``(status, text)`` in ``answers``."""
    for i in range(1, 201):
        if stop.is_set():
            return
        r = client.post(url, json={"fields": fields(i)})
        answers.append((r.status_code, r.text))
        if r.status_code == 404:
            return


def _delete_while_writing(ws, table_id: int, writes: list[tuple[str, Any, int]], *, force: bool,
                          warm: int) -> tuple[httpx.Response, list[list[tuple[int, str]]]]:
    """DELETE the table while ``writes`` run — each ``(records URL, fields(writer, i), writers)``
    — once ``warm`` answers have come back in all; the delete's answer and each write
    group's answers once every writer has stopped."""
    stop = threading.Event()
    groups: list[list[tuple[int, str]]] = [[] for _ in writes]
    writers = [threading.Thread(target=_post_until, args=(
        ws.client(ws.builder_token), url, lambda i, n=n, f=fields: f(n, i), stop, answers))
        for (url, fields, count), answers in zip(writes, groups, strict=True) for n in range(count)]
    for w in writers:
        w.start()
    deadline = time.monotonic() + 20
    while sum(len(g) for g in groups) < warm and time.monotonic() < deadline:  # the writes are under way
        time.sleep(0.02)
    deleted = ws.client(ws.builder_token).delete(f"/tables/{table_id}", params={"force": "true" if force else "false"})
    time.sleep(0.3)
    stop.set()
    for w in writers:
        w.join(60)
    return deleted, groups


@pytest.mark.parametrize("related", [False, True], ids=["alone", "with-a-relation-pointing-at-it"])
def test_deleting_a_table_under_concurrent_writes_never_deadlocks(ws, related):
    """DELETE /tables/{t} while clients create records in it: the writes' statement locks
    the data table, then (its outbox row's foreign key) the table's ``wds.tables`` row;
    the delete took that row first and the data table last, so the two deadlocked and the
    delete answered 503 UNAVAILABLE with the table kept. The delete takes the data tables
    first, as writers do (a table whose relation points at it before the table itself), so
    it waits for the writes in flight and succeeds; a write either lands before it (201)
    or finds the table gone (404 NOT_FOUND or 409 SCHEMA_CHANGED) — never a 500 or 503.
    Writes to a table whose relation column went with it answer 201, 409 SCHEMA_CHANGED
    or 400 UNKNOWN_COLUMN."""
    for round_ in range(3):
        t = ws.create_table(f"Busy{round_}", [{"name": "A", "type": "number"},
                                               {"name": "F", "type": "formula", "formula": "{A} * 2"}])
        records = f"/tables/{t['id']}/records"
        for i in range(6):  # warm: the API's statements for this table are prepared
            assert ws.api.post(records, json={"fields": {"A": i}}).status_code == 201
        child_records = None
        if related:
            child = ws.create_table(f"Child{round_}", [
                {"name": "N", "type": "number"}, {"name": "G", "type": "formula", "formula": "{N} + 1"},
                {"name": "O", "type": "relation", "relation_table_id": t["id"]}])
            child_records = f"/tables/{child['id']}/records"
        writes: list[tuple[str, Any, int]] = [(records, lambda n, i: {"A": n * 1000 + i}, 6)]
        if related:
            writes.append((child_records, lambda n, i: {"N": i, "O": 1 + i % 6}, 3))
        deleted, (answers, *rest) = _delete_while_writing(ws, t["id"], writes, force=related, warm=12)
        child_answers = rest[0] if rest else []
        assert deleted.status_code == 200, deleted.text
        assert deleted.json()["id"] == t["id"] and deleted.json()["deleted"] is True
        assert ws.api.get(f"/tables/{t['id']}").status_code == 404
        for status, text in answers:
            assert status in (201, 404, 409), text
            if status == 409:
                assert '"SCHEMA_CHANGED"' in text, text
            if status == 404:
                assert '"NOT_FOUND"' in text, text
        assert any(s == 201 for s, _ in answers)
        for status, text in child_answers:
            assert status in (201, 400, 409), text
            if status != 201:
                assert '"SCHEMA_CHANGED"' in text or '"UNKNOWN_COLUMN"' in text, text


def test_deleting_one_of_two_mutually_related_tables_under_writes_is_no_deadlock(ws):
    """A and B point at each other: a write into A locks A, then B's rows (its relation's
    foreign key), and a write into B locks B, then A's. No order of the delete's locks is
    the writers' order for both, so taking them one by one and waiting deadlocked with a
    write in flight: PostgreSQL ended one of the two, a client got 409 CONFLICT "deadlock"
    (a write into B, or the delete itself). The delete now takes its locks only all at
    once, stepping back and trying again while any is held: no write waits on it while it
    waits, and no one gets the deadlock."""
    for round_ in range(3):
        a = ws.create_table(f"A{round_}", [{"name": "N", "type": "number"}])
        b = ws.create_table(f"B{round_}", [{"name": "M", "type": "number"},
                                           {"name": "ToA", "type": "relation", "relation_table_id": a["id"]}])
        r = ws.api.post(f"/tables/{a['id']}/columns", json={"name": "ToB", "type": "relation",
                                                              "relation_table_id": b["id"]})
        assert r.status_code == 201, r.text
        a_rec, b_rec = f"/tables/{a['id']}/records", f"/tables/{b['id']}/records"
        for i in range(1, 7):  # ids 1..6 on both sides
            assert ws.api.post(a_rec, json={"fields": {"N": i}}).status_code == 201
            assert ws.api.post(b_rec, json={"fields": {"M": i, "ToA": i}}).status_code == 201
        deleted, (answers, b_answers) = _delete_while_writing(ws, a["id"], [
            (a_rec, lambda n, i: {"N": i, "ToB": 1 + i % 6}, 4),
            (b_rec, lambda n, i: {"M": i, "ToA": 1 + i % 6}, 4)], force=True, warm=24)
        assert deleted.status_code == 200, deleted.text
        assert ws.api.get(f"/tables/{a['id']}").status_code == 404
        for status, text in answers:
            assert status in (201, 404) or (status == 409 and '"SCHEMA_CHANGED"' in text), text
        for status, text in b_answers:
            assert status == 201 or (status in (400, 409) and ('"SCHEMA_CHANGED"' in text
                                                                or '"UNKNOWN_COLUMN"' in text)), text
        assert any(s == 201 for s, _ in answers) and any(s == 201 for s, _ in b_answers)
