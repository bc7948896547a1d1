"""Semantic search over the OpenAI-compatible provider (the fake's bag-of-words vectors):
ranking on a small labelled set, filters in the same query, refresh on write, backfill
as a run, permissions on REST, MCP and the agent tool, and the life cycle of the index."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import psycopg
import pytest

from storage.embeddings import NotConfigured, choose_provider
from tests.chat.fakes import FakeServices
from tests.chat.support import make_agent, post
from tests.conftest import ApiProcess, Workspace
from tests.mcp.conftest import connect, error_code

DOCS = [  # (label, title, body, category)
    ("cats", "Caring for cats", "kittens cats litter whiskers purring", "pets"),
    ("dogs", "Walking dogs", "dogs leash puppies fetch bark", "pets"),
    ("bread", "Baking bread", "flour yeast dough oven crust", "food"),
    ("soup", "Tomato soup", "tomato soup basil simmer bowl", "food"),
    ("tax", "Filing taxes", "taxes receipts deductions refund forms", "money"),
    ("cat-food", "Cat food recipes", "cats fish oven treats kittens", "food"),
]


def _docs_table(ws: Workspace, *, semantic: bool = True) -> dict[str, Any]:
    extra = {"semantic_search": {"columns": ["Title", "Body"]}} if semantic else {}
    table = ws.create_table("Docs", [
        {"name": "Title", "type": "text"}, {"name": "Body", "type": "text"},
        {"name": "Category", "type": "single_select", "options": ["pets", "food", "money"]},
        {"name": "Score", "type": "number"},
    ], **extra)
    rows = [{"fields": {"Title": t, "Body": b, "Category": c, "Score": i}} for i, (_, t, b, c) in enumerate(DOCS)]
    r = ws.api.post(f"/tables/{table['id']}/records/batch", json={"rows": rows})
    assert r.status_code == 200, r.text
    table["ids"] = {label: res["record"]["id"] for (label, *_), res in zip(DOCS, r.json()["results"])}
    return table


def _search(ws: Workspace, table_id: int, query: str, **kw: Any) -> httpx.Response:
    return ws.api.post(f"/tables/{table_id}/search", json={"query": query, **kw})


def _titles(r: httpx.Response) -> list[str]:
    return _titles_of(r, "Title")


def test_enabling_records_provider_and_dimension(cws: Workspace) -> None:
    table = _docs_table(cws)
    assert table["semantic_search"] == {"columns": ["Title", "Body"], "provider": "openai",
                                        "model": "fake-embed", "dim": 384}


@pytest.mark.parametrize("query,best", [
    ("kittens and cats", "Caring for cats"),
    ("puppies on a leash", "Walking dogs"),
    ("yeast dough", "Baking bread"),
    ("tax refund receipts", "Filing taxes"),
])
def test_results_are_ranked_by_similarity(cws: Workspace, query: str, best: str) -> None:
    table = _docs_table(cws)
    r = _search(cws, table["id"], query, limit=3)
    assert _titles(r)[0] == best
    scores = [hit["score"] for hit in r.json()["results"]]
    assert scores == sorted(scores, reverse=True) and 0 < scores[0] <= 1.0
    record = r.json()["results"][0]["record"]
    assert set(record) >= {"id", "fields", "created_at", "updated_at"} and record["fields"]["Category"]


def test_filters_apply_in_the_same_query(cws: Workspace) -> None:
    table = _docs_table(cws)
    assert _titles(_search(cws, table["id"], "cats kittens oven", limit=2))[0] == "Cat food recipes"
    pets = _titles(_search(cws, table["id"], "cats kittens oven", limit=2, filters={"Category": "eq.pets"}))
    assert pets == ["Caring for cats", "Walking dogs"]
    listed = _titles(_search(cws, table["id"], "cats", limit=5,
                             filters=[{"column": "Score", "op": "gte", "value": 4}]))
    assert listed[0] == "Cat food recipes" and set(listed) <= {"Filing taxes", "Cat food recipes"}


def test_a_write_refreshes_only_when_embedded_columns_change(cws: Workspace, fake: FakeServices) -> None:
    table = _docs_table(cws)
    rid = table["ids"]["soup"]
    calls = len(fake.embeddings)
    assert cws.api.patch(f"/tables/{table['id']}/records/{rid}", json={"fields": {"Score": 99}}).status_code == 200
    assert len(fake.embeddings) == calls  # not an embedded column
    r = cws.api.patch(f"/tables/{table['id']}/records/{rid}", json={"fields": {"Body": "volcano lava eruption"}})
    assert r.status_code == 200
    assert len(fake.embeddings) == calls + 1
    assert _titles(_search(cws, table["id"], "lava from a volcano", limit=1)) == ["Tomato soup"]
    created = cws.api.post(f"/tables/{table['id']}/records", json={"fields": {"Title": "Glaciers", "Body": "ice"}})
    assert created.status_code == 201
    assert _titles(_search(cws, table["id"], "glaciers ice", limit=1)) == ["Glaciers"]
    cws.api.delete(f"/tables/{table['id']}/records/{created.json()['id']}")
    assert "Glaciers" not in _titles(_search(cws, table["id"], "glaciers ice", limit=10))


def test_an_update_by_filter_refreshes_embeddings_as_a_single_update_does(cws: Workspace, ai_api: ApiProcess,
                                                                             fake: FakeServices) -> None:
    """MCP batch_update_records on a table without computed columns: the changed records
    are embedded again, as REST's update of one record does."""
    table = _docs_table(cws)
    calls = len(fake.embeddings)

    async def go() -> Any:
        async with connect(ai_api.base_url, cws.builder_token) as client:
            return await client.call_tool("batch_update_records", {
                "table_id": "Docs", "filters": {"Category": "eq.money"}, "fields": {"Body": "volcano lava eruption"}})

    # before, the best "lava from a volcano" is none of them in particular: make it one
    assert cws.api.post(f"/tables/{table['id']}/records", json={"fields": {"Title": "Ash", "Body": "volcano"}}).status_code == 201
    assert _titles(_search(cws, table["id"], "lava from a volcano", limit=1)) == ["Ash"]
    calls = len(fake.embeddings)
    out = asyncio.run(go())
    assert not out.is_error and out.structured_content["updated"] == 1
    assert len(fake.embeddings) > calls
    assert _titles(_search(cws, table["id"], "lava from a volcano", limit=1)) == ["Filing taxes"]


def _titles_of(r: httpx.Response, column: str) -> list[Any]:
    assert r.status_code == 200, r.text
    return [hit["record"]["fields"][column] for hit in r.json()["results"]]


def _found_by(ws: Workspace, table_id: int, query: str, column: str, value: Any, timeout: float = 20.0) -> bool:
    """Whether the best hit for ``query`` has ``column`` = ``value`` within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _titles_of(_search(ws, table_id, query, limit=1), column) == [value]:
            return True
        time.sleep(0.2)
    return False


def _found(ws: Workspace, table_id: int, query: str, title: str, timeout: float = 20.0) -> bool:
    """Whether ``title`` becomes the best hit for ``query`` within ``timeout`` (the keeper
    reads the change log once a second)."""
    return _found_by(ws, table_id, query, "Title", title, timeout)


def test_records_written_by_a_pipeline_step_are_embedded(cws: Workspace) -> None:
    """A create_record step writes into a table with semantic search: the record is found
    by what it says (the write of the step refreshes nothing itself; the keeper follows
    the change log), and so is an update_record step's change."""
    notes = cws.create_table("Notes", [{"name": "Title", "type": "text"}], semantic_search={"columns": ["Title"]})
    for title in ("tomato soup basil", "glacier hiking trail"):  # the second is the best "frozen glacier" before
        assert cws.api.post(f"/tables/{notes['id']}/records", json={"fields": {"Title": title}}).status_code == 201
    assert _titles(_search(cws, notes["id"], "frozen glacier", limit=1)) == ["glacier hiking trail"]
    src = cws.create_table("Src", [
        {"name": "Name", "type": "text"},
        {"name": "Logged", "type": "create_record", "config": {"table_id": notes["id"], "fields": {"Title": "{{ Name }}"}}},
    ])
    r = cws.api.post(f"/tables/{src['id']}/records", json={"fields": {"Name": "volcano lava eruption"}})
    assert r.status_code == 201 and r.json()["pipeline"]["status"] == "ok", r.text
    assert _found(cws, notes["id"], "lava from a volcano", "volcano lava eruption")
    first = cws.api.get(f"/tables/{notes['id']}/records", params={"Title": "eq.tomato soup basil"}).json()["records"][0]
    upd = cws.create_table("Upd", [
        {"name": "Text", "type": "text"},
        {"name": "Edit", "type": "update_record", "config": {"table_id": notes["id"], "record_id": str(first["id"]),
                                                               "fields": {"Title": "{{ Text }}"}}},
    ])
    r = cws.api.post(f"/tables/{upd['id']}/records", json={"fields": {"Text": "glacier ice frozen"}})
    assert r.status_code == 201 and r.json()["pipeline"]["status"] == "ok", r.text
    assert _found(cws, notes["id"], "frozen glacier", "glacier ice frozen")


def test_a_provider_outage_delays_the_keeper_but_loses_nothing(cws: Workspace, fake: FakeServices) -> None:
    """The provider refuses the keeper's first calls: the change log's mark stays where it
    was, and the record is embedded once the provider answers again."""
    notes = cws.create_table("Outage", [{"name": "Title", "type": "text"}], semantic_search={"columns": ["Title"]})
    src = cws.create_table("Feed", [
        {"name": "Name", "type": "text"},
        {"name": "Logged", "type": "create_record", "config": {"table_id": notes["id"], "fields": {"Title": "{{ Name }}"}}},
    ])
    refused = fake.embeddings_refused
    fake.embeddings_down = 2
    try:
        r = cws.api.post(f"/tables/{src['id']}/records", json={"fields": {"Name": "desert sand dunes"}})
        assert r.status_code == 201 and r.json()["pipeline"]["status"] == "ok", r.text
        deadline = time.monotonic() + 20  # nothing else calls the provider meanwhile: the keeper's tries
        while fake.embeddings_refused - refused < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert fake.embeddings_refused - refused == 2
    finally:
        fake.embeddings_down = 0
    assert _found(cws, notes["id"], "sand dunes in the desert", "desert sand dunes", timeout=30)


def _unseen_write(db: psycopg.Connection[Any], ws: Workspace, table: dict[str, Any], record_id: int,
                  title: str, *, forget: str) -> None:
    """Change ``Title`` of a record in SQL so that the keeper cannot read the write in the
    change log: in the same transaction either the workspace's mark is deleted (``"mark"``:
    as for a workspace whose tables were embedded before the keeper existed, met for the
    first time at the log's end) or the write's events are deleted as retention deletes
    them (``"events"``: a keeper behind the retention window)."""
    col = next(c["id"] for c in table["columns"] if c["name"] == "Title")
    with db.transaction():
        db.execute(f"UPDATE ws_{ws.id}.t_{table['id']} SET c_{col} = %s WHERE id = %s", (title, record_id))
        if forget == "mark":
            db.execute("DELETE FROM wds.embedding_marks WHERE workspace_id = %s", (ws.id,))
        else:
            db.execute(
                "WITH gone AS (DELETE FROM wds.events WHERE workspace_id = %s AND seq > (SELECT max(seq) FROM"
                " wds.embedding_marks WHERE workspace_id = %s) RETURNING seq)"
                " INSERT INTO wds.event_horizon AS h (workspace_id, purged_through)"
                " SELECT %s, max(seq) FROM gone HAVING max(seq) IS NOT NULL ON CONFLICT (workspace_id)"
                " DO UPDATE SET purged_through = greatest(h.purged_through, excluded.purged_through)",
                (ws.id, ws.id, ws.id))


@pytest.mark.parametrize("forget", ["mark", "events"])
def test_writes_the_keeper_cannot_read_are_backfilled(cws: Workspace, db: psycopg.Connection[Any],
                                                      forget: str) -> None:
    """Writes the change log no longer shows the keeper (before its first pass over the
    workspace, or deleted by retention while it was behind) are not lost: the keeper backfills
    the workspace's embedded tables (a run, as enabling search starts) and moves on. Before,
    such a record kept its old embedding, found by what it no longer says."""
    notes = cws.create_table("Kept", [{"name": "Title", "type": "text"}], semantic_search={"columns": ["Title"]})
    ids = []
    for title in ("tomato soup basil", "volcano ash cloud", "walking dogs leash"):
        r = cws.api.post(f"/tables/{notes['id']}/records", json={"fields": {"Title": title}})
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    # a stale embedding ranks the other volcano first: found only once the record is embedded again
    assert _titles(_search(cws, notes["id"], "volcano lava eruption", limit=1)) == ["volcano ash cloud"]
    _unseen_write(db, cws, notes, ids[0], "lava eruption of a volcano", forget=forget)
    assert _found(cws, notes["id"], "volcano lava eruption", "lava eruption of a volcano")
    deadline = time.monotonic() + 10  # the run is marked completed just after its last page
    while True:
        runs = db.execute("SELECT status, kind FROM wds.runs WHERE workspace_id = %s AND table_id = %s",
                          (cws.id, notes["id"])).fetchall()
        if ("completed", "embeddings") in runs or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert runs == [("completed", "embeddings")], runs
    # the keeper follows the log again from there: a later write by another writer is kept
    src = cws.create_table("After", [
        {"name": "Name", "type": "text"},
        {"name": "Logged", "type": "create_record", "config": {"table_id": notes["id"], "fields": {"Title": "{{ Name }}"}}},
    ])
    assert cws.api.post(f"/tables/{src['id']}/records", json={"fields": {"Name": "glacier ice frozen"}}).status_code == 201
    assert _found(cws, notes["id"], "frozen glacier", "glacier ice frozen")


def test_the_keepers_backfills_take_turns_and_all_complete(cws: Workspace, db: psycopg.Connection[Any]) -> None:
    """A workspace met for the first time with more embedded tables than the keeper's
    backfills run at once (2): each table gets its run, the ones past the first two wait
    their turn, and every one completes with its changed record found."""
    tables = []
    for i in range(4):
        t = cws.create_table(f"Many{i}", [{"name": "Title", "type": "text"}], semantic_search={"columns": ["Title"]})
        ids = [cws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Title": title}}).json()["id"]
               for title in ("tomato soup basil", "volcano ash cloud")]
        tables.append((t, ids))
    with db.transaction():
        for t, ids in tables:
            col = t["columns"][0]["id"]
            db.execute(f"UPDATE ws_{cws.id}.t_{t['id']} SET c_{col} = 'lava eruption of a volcano' WHERE id = %s",
                       (ids[0],))
        db.execute("DELETE FROM wds.embedding_marks WHERE workspace_id = %s", (cws.id,))
    for t, _ in tables:
        assert _found(cws, t["id"], "volcano lava eruption", "lava eruption of a volcano")
    deadline = time.monotonic() + 10
    while True:
        runs = db.execute("SELECT table_id, status FROM wds.runs WHERE workspace_id = %s AND kind = 'embeddings'",
                          (cws.id,)).fetchall()
        if all(status == "completed" for _, status in runs) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert sorted(runs) == sorted((t["id"], "completed") for t, _ in tables), runs


def _keeper_caught_up(db: psycopg.Connection[Any], ws: Workspace, timeout: float = 20.0) -> None:
    """Wait until the keeper has read the workspace's change log to its end (else it may
    refresh records written just before a change, after the change, by chance)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = db.execute("SELECT (SELECT max(seq) FROM wds.events WHERE workspace_id = %s) <="
                         " (SELECT max(seq) FROM wds.embedding_marks WHERE workspace_id = %s)", (ws.id, ws.id)).fetchone()
        if row[0]:
            return
        time.sleep(0.1)
    raise AssertionError("the embeddings keeper did not read the change log to its end")


def _run_completes(ws: Workspace, run: dict[str, Any], timeout: float = 30) -> None:
    """``run`` (a column change's ``embeddings``) is listed at ``GET /runs/{run_id}`` and
    completes there, every record done."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = ws.api.get(f"/runs/{run['run_id']}").json()
        if got["status"] != "running":
            assert got["status"] == "completed" and got["done"] == got["total"] == run["total"], got
            return
        time.sleep(0.1)
    raise AssertionError(f"run {run['run_id']} still running")


def test_a_column_change_that_rewrites_embedded_text_embeds_again(cws: Workspace, db: psycopg.Connection[Any]) -> None:
    """A relabelled option and a type change rewrite what records say without writing a row
    (no event for the keeper): the column's PATCH starts an embeddings backfill. Before, the
    records stayed embedded as they read before the change."""
    t = cws.create_table("Topics", [
        {"name": "Kind", "type": "single_select", "options": ["alpha", "beta"]},
        {"name": "Code", "type": "text"},
    ], semantic_search={"columns": ["Kind", "Code"]})
    for kind, code in (("alpha", "A1"), ("beta", "volcano ash cloud")):
        assert cws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Kind": kind, "Code": code}}).status_code == 201
    kind = next(c for c in t["columns"] if c["name"] == "Kind")
    ids = {o["label"]: o["id"] for o in kind["options"]}
    assert _titles_of(_search(cws, t["id"], "volcano lava eruption", limit=1), "Code") == ["volcano ash cloud"]
    _keeper_caught_up(db, cws)
    r = cws.api.patch(f"/tables/{t['id']}/columns/{kind['id']}", json={"options": [
        {"id": ids["alpha"], "label": "volcano lava eruption"}, {"id": ids["beta"], "label": "beta"}]})
    assert r.status_code == 200, r.text
    _run_completes(cws, r.json()["embeddings"])  # the run the PATCH answers, and where to watch it
    assert _found_by(cws, t["id"], "volcano lava eruption", "Code", "A1")
    # a change that rewrites nothing the records say starts none
    r = cws.api.patch(f"/tables/{t['id']}/columns/{kind['id']}", json={"required": False})
    assert r.status_code == 200 and "embeddings" not in r.json(), r.text
    # a type change converts the stored values in place (ALTER ... USING): here it clears
    # the text that is no number, and the record no longer says "volcano lava eruption"
    retype = cws.create_table("Retype", [{"name": "Code", "type": "text"}, {"name": "Note", "type": "text"}],
                              semantic_search={"columns": ["Code", "Note"]})
    for code, note in (("volcano lava eruption", "first"), ("12", "volcano")):
        assert cws.api.post(f"/tables/{retype['id']}/records", json={"fields": {"Code": code, "Note": note}}).status_code == 201
    assert _titles_of(_search(cws, retype["id"], "volcano lava eruption", limit=1), "Note") == ["first"]
    _keeper_caught_up(db, cws)
    col = next(c for c in retype["columns"] if c["name"] == "Code")
    r = cws.api.patch(f"/tables/{retype['id']}/columns/{col['id']}", json={"type": "number", "allow_loss": True})
    assert r.status_code == 200 and r.json()["conversion"], r.text
    assert _found_by(cws, retype["id"], "volcano lava eruption", "Note", "volcano")


def test_an_embedded_column_deleted_with_force_embeds_the_rest_again(cws: Workspace, db: psycopg.Connection[Any]) -> None:
    """Deleting one of the embedded columns (``force``: semantic search depends on it)
    leaves the records saying less, with no row written: the delete starts an embeddings
    backfill, and a record is no longer found by what only the deleted column said."""
    t = cws.create_table("Two", [{"name": "Title", "type": "text"}, {"name": "Note", "type": "text"}],
                         semantic_search={"columns": ["Title", "Note"]})
    for title, note in (("alpha", "volcano lava eruption"), ("volcano", "x")):
        assert cws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Title": title, "Note": note}}).status_code == 201
    assert _titles(_search(cws, t["id"], "volcano lava eruption", limit=1)) == ["alpha"]
    _keeper_caught_up(db, cws)
    note = next(c for c in t["columns"] if c["name"] == "Note")
    assert cws.api.delete(f"/tables/{t['id']}/columns/{note['id']}").json()["code"] == "COLUMN_IN_USE"
    r = cws.api.delete(f"/tables/{t['id']}/columns/{note['id']}?force=true")
    assert r.status_code == 200 and r.json()["detached"][0]["kind"] == "semantic_search", r.text
    _run_completes(cws, r.json()["embeddings"])
    assert _found(cws, t["id"], "volcano lava eruption", "volcano")
    # the last embedded column deleted: search is off and its index is dropped, as with null
    title = next(c for c in t["columns"] if c["name"] == "Title")
    assert cws.api.delete(f"/tables/{t['id']}/columns/{title['id']}?force=true").status_code == 200
    assert cws.api.get(f"/tables/{t['id']}").json()["semantic_search"] is None
    assert db.execute("SELECT to_regclass(%s) IS NULL", (f"ws_{cws.id}.e_{t['id']}",)).fetchone()[0] is True
    r = _search(cws, t["id"], "volcano")
    assert (r.status_code, r.json()["code"]) == (400, "NOT_CONFIGURED")


def test_an_embedded_formula_recomputed_by_its_backfill_is_embedded_again(cws: Workspace) -> None:
    """The embedded column is a formula; editing it recomputes every record in a backfill
    run (a workflow, not a write of the API): the records are found by the new values."""
    table = cws.create_table("Labels", [{"name": "Title", "type": "text"},
                                        {"name": "Label", "type": "formula", "formula": "{Title}"}],
                             semantic_search={"columns": ["Label"]})
    rows = [{"fields": {"Title": t}} for t in ("cats kittens", "dogs puppies", "bread yeast", "volcano ash")]
    assert cws.api.post(f"/tables/{table['id']}/records/batch", json={"rows": rows}).status_code == 200
    assert _found(cws, table["id"], "kittens", "cats kittens")
    # before the edit the best "lava volcano" is the ash (a tie could not pass the test)
    assert _titles(_search(cws, table["id"], "lava volcano", limit=1)) == ["volcano ash"]
    label = next(c for c in cws.api.get(f"/tables/{table['id']}").json()["columns"] if c["name"] == "Label")
    r = cws.api.patch(f"/tables/{table['id']}/columns/{label['id']}",
                      json={"formula": 'IF({Title} = "bread yeast", "volcano lava", {Title})'})
    assert r.status_code == 200, r.text
    assert _found(cws, table["id"], "lava volcano", "bread yeast")


def test_enabling_on_a_table_with_records_backfills_as_a_run(cws: Workspace) -> None:
    table = _docs_table(cws, semantic=False)
    r = cws.api.patch(f"/tables/{table['id']}", json={"semantic_search": {"columns": ["Body"]}})
    assert r.status_code == 200, r.text
    run = r.json()["backfill"]
    assert run["status"] == "running" and run["total"] == len(DOCS)
    deadline = time.monotonic() + 30
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = cws.api.get(f"/runs/{run['run_id']}").json()
        if body["status"] != "running":
            break
        time.sleep(0.1)
    assert (body["status"], body["done"], body["failed"]) == ("completed", len(DOCS), 0)
    assert _titles(_search(cws, table["id"], "flour and yeast", limit=1)) == ["Baking bread"]


def test_turning_search_off_drops_the_index(cws: Workspace, db: psycopg.Connection[Any]) -> None:
    table = _docs_table(cws)
    where = f"ws_{cws.id}.e_{table['id']}"
    assert db.execute("SELECT to_regclass(%s) IS NOT NULL", (where,)).fetchone()[0] is True
    assert cws.api.patch(f"/tables/{table['id']}", json={"semantic_search": None}).status_code == 200
    assert db.execute("SELECT to_regclass(%s) IS NOT NULL", (where,)).fetchone()[0] is False
    r = _search(cws, table["id"], "cats")
    assert (r.status_code, r.json()["code"]) == (400, "NOT_CONFIGURED")
    table2 = cws.create_table("More", [{"name": "T", "type": "text"}], semantic_search={"columns": ["T"]})
    where2 = f"ws_{cws.id}.e_{table2['id']}"
    assert cws.api.delete(f"/tables/{table2['id']}").status_code == 200
    assert db.execute("SELECT to_regclass(%s) IS NOT NULL", (where2,)).fetchone()[0] is False


@pytest.mark.parametrize("body,status,code", [
    ({"query": ""}, 400, "VALIDATION_ERROR"),
    ({"query": "x", "limit": 0}, 400, "VALIDATION_ERROR"),
    ({"query": "x", "limit": 101}, 400, "LIMIT_TOO_LARGE"),  # as a list's limit (errors.md)
    ({"query": "x", "limit": 1000}, 400, "LIMIT_TOO_LARGE"),
    ({"query": "x", "filters": {"Nope": "eq.1"}}, 400, "UNKNOWN_COLUMN"),
    ({"query": "x", "filters": {"Score": "near.1"}}, 400, "UNKNOWN_OPERATOR"),
    ({"query": "x" * 8001}, 413, "PAYLOAD_TOO_LARGE"),
    ({"query": "x", "other": 1}, 400, "VALIDATION_ERROR"),
])
def test_bad_search_requests(cws: Workspace, body: dict[str, Any], status: int, code: str) -> None:
    table = _docs_table(cws)
    r = cws.api.post(f"/tables/{table['id']}/search", json=body)
    assert (r.status_code, r.json()["code"]) == (status, code)


def test_search_needs_read_permission(cws: Workspace) -> None:
    table = _docs_table(cws)
    other = cws.create_table("Other", [{"name": "T", "type": "text"}])
    reader = cws.token("rest_api", profile_id=cws.profile([{"table_id": other["id"], "read": True}])["id"])
    client = cws.client(reader["token"])
    r = client.post(f"/tables/{table['id']}/search", json={"query": "cats"})
    assert (r.status_code, r.json()["code"]) == (403, "FORBIDDEN")
    allowed = cws.token("rest_api", profile_id=cws.profile([{"table_id": table["id"], "read": True}])["id"])
    assert _titles(cws.client(allowed["token"]).post(f"/tables/{table['id']}/search",
                                                     json={"query": "cats kittens", "limit": 1})) == ["Caring for cats"]
    r = cws.client(None).post(f"/tables/{table['id']}/search", json={"query": "cats"})
    assert (r.status_code, r.json()["code"]) == (401, "UNAUTHORIZED")
    r = cws.api.post("/tables/999999999/search", json={"query": "cats"})
    assert (r.status_code, r.json()["code"]) == (404, "NOT_FOUND")


def test_the_mcp_tool_searches_with_the_same_rules(cws: Workspace, ai_api: ApiProcess) -> None:
    table = _docs_table(cws)
    other = cws.create_table("Other", [{"name": "T", "type": "text"}])
    granted = cws.token("user_mcp", profile_id=cws.profile([{"table_id": table["id"], "read": True}])["id"])
    denied = cws.token("user_mcp", profile_id=cws.profile([{"table_id": other["id"], "read": True}])["id"])

    async def go() -> tuple[Any, Any]:
        async with connect(ai_api.base_url, granted["token"]) as client:
            ok = await client.call_tool("semantic_search", {"table_id": "Docs", "query": "yeast dough", "limit": 1,
                                                            "filters": {"Category": "eq.food"}})
        async with connect(ai_api.base_url, denied["token"]) as client:
            refused = await client.call_tool("semantic_search", {"table_id": "Docs", "query": "yeast"})
        return ok, refused

    ok, refused = asyncio.run(go())
    assert not ok.is_error
    assert [h["record"]["fields"]["Title"] for h in ok.structured_content["results"]] == ["Baking bread"]
    assert error_code(refused) == "FORBIDDEN"


def test_an_agent_searches_its_tables_only(cws: Workspace, ai_api: ApiProcess) -> None:
    table = _docs_table(cws)
    secret = cws.create_table("Secret", [{"name": "T", "type": "text"}], semantic_search={"columns": ["T"]})
    bot = make_agent(cws, [table["id"]])
    call = f"CALL semantic_search {json.dumps({'table_id': 'Docs', 'query': 'puppies leash', 'limit': 1})}"
    body = post(ai_api.base_url, bot["token"], {"message": call, "session_id": "s"}).json()
    assert body["tool_calls"][0]["result_summary"] == "1 results" and "Walking dogs" in body["reply"]
    call = f"CALL semantic_search {json.dumps({'table_id': secret['id'], 'query': 'x'})}"
    body = post(ai_api.base_url, bot["token"], {"message": call, "session_id": "s"}).json()
    assert body["tool_calls"][0]["result_summary"].startswith("FORBIDDEN")


@pytest.mark.parametrize("setting,base,expected", [
    ("openai", "http://ai", "openai"),
    ("openai", None, NotConfigured),
    ("bogus", "http://ai", NotConfigured),
    ("", "http://ai", "local-or-openai"),
])
def test_choosing_the_provider(setting: str, base: str | None, expected: Any) -> None:
    if expected is NotConfigured:
        with pytest.raises(NotConfigured) as exc:
            choose_provider(setting, ai_base_url=base)
        assert (exc.value.status, exc.value.code) == (503, "NOT_CONFIGURED")
    elif expected == "local-or-openai":
        assert choose_provider(setting, ai_base_url=base) in ("local", "openai")
    else:
        assert choose_provider(setting, ai_base_url=base) == expected


def test_semantic_search_over_no_column_is_refused(cws: Workspace) -> None:
    """``{"columns": []}`` was taken: a backfill embedded empty text for every record and
    every search scored 0. ``null`` is how it is turned off."""
    t = cws.create_table("NoCols", [{"name": "Title", "type": "text"}])
    r = cws.api.patch(f"/tables/{t['id']}", json={"semantic_search": {"columns": []}})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", r.text
    assert cws.api.get(f"/tables/{t['id']}").json()["semantic_search"] is None
    r = cws.api.post("/tables", json={"name": "NoCols2", "columns": [{"name": "T", "type": "text"}],
                                      "semantic_search": {"columns": []}})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", r.text


def test_results_past_16_mib_are_refused_with_how_many_fit(cws: Workspace) -> None:
    """As a list's page (tests/api/test_page_cap.py): measured in the search's statement,
    the values of the results past the cap are never read."""
    table = cws.create_table("LongDocs", [{"name": "Title", "type": "text"}, {"name": "Body", "type": "text"}],
                             semantic_search={"columns": ["Title"]})
    body = "lorem ipsum " * 83_333  # 999,996 characters
    for start in range(0, 18, 4):
        rows = [{"fields": {"Title": f"cats and kittens {i}", "Body": body}} for i in range(start, min(start + 4, 18))]
        r = cws.api.post(f"/tables/{table['id']}/records/batch", json={"rows": rows})
        assert r.status_code == 200, r.text
    deadline = time.monotonic() + 30
    while len(_search(cws, table["id"], "cats", limit=16).json().get("results", [])) < 16:
        assert time.monotonic() < deadline, "the records were not embedded"
        time.sleep(0.2)
    r = _search(cws, table["id"], "cats", limit=18)
    assert r.status_code == 400 and r.json()["code"] == "RESULT_TOO_LARGE" and r.json()["fit"] == 16, r.text
    r = _search(cws, table["id"], "cats", limit=16)
    assert r.status_code == 200 and len(r.json()["results"]) == 16, r.text
    assert all(hit["record"]["fields"]["Body"] == body for hit in r.json()["results"])
