"""The record operations stand alone: called with a principal and typed inputs, with no
HTTP request, no route and no MCP session in between (api/ops, issue #23 item 9)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from api.ops import records as ops
from api.state import AppState
from service.config import Settings
from storage.access import Perms, Principal, TokenType
from storage.db import Database
from storage.errors import Forbidden, NotFound, ServiceError
from storage.query import parse_arguments
from storage.query.listing import CountMode


def principal(workspace_id: int, *, read_only: bool = False, grants: dict[int, Perms] | None = None) -> Principal:
    """The builder credential (every table), or a rest_api token with ``grants``."""
    kind = TokenType.VIBE_MCP if grants is None else TokenType.REST_API
    return Principal(token_id=0, workspace_id=workspace_id, type=kind, profile_id=None, plan="pro",
                     read_only=read_only, expires_at=None, grants=grants or {})


@pytest.fixture
async def state(services) -> AsyncIterator[AppState]:
    made = AppState(settings=Settings(database_url=services.pg.dsn), db=Database(services.pg.dsn))
    await made.db.open()
    try:
        yield made
    finally:
        await made.db.close()


def listing(**args) -> ops.ListRequest:
    return ops.ListRequest(("test", repr(sorted(args.items()))), lambda: parse_arguments(args))


async def test_create_list_get_update_delete_through_the_operations(make_workspace, state):
    ws = make_workspace()
    table = ws.create_table("Notes", [{"name": "Title", "type": "text"}, {"name": "Score", "type": "number"}])
    me = principal(ws.id)

    made = await ops.create_record(state, me, table["id"], {"Title": "a", "Score": 1})
    assert made["fields"] == {"Title": "a", "Score": 1} and "pipeline" not in made
    other = await ops.create_record(state, me, "Notes", None, row_data={"Title": "b", "Score": 2})

    page = await ops.list_records(state, me, table["id"], listing(order="Score.desc"), count=CountMode.EXACT)
    assert isinstance(page.records, ops.RawJson)  # as PostgreSQL rendered it, not decoded on the way
    assert [r["id"] for r in page.records.value()] == [other["id"], made["id"]]
    assert (page.n, page.total, page.limit, page.offset, page.next) == (2, 2, 100, 0, None)
    assert page.records.encoded() == page.records.encoded().replace(b" ", b"")  # compact JSON
    filtered = await ops.list_records(state, me, table["id"], listing(filters={"Score": "gt.1"}), count=None)
    assert [r["fields"]["Title"] for r in filtered.records.value()] == ["b"]  # type: ignore[union-attr]

    got = await ops.get_record(state, me, table["id"], str(made["id"]))
    assert got["fields"] == made["fields"]
    shaped = await ops.get_record(state, me, table["id"], str(made["id"]), [("select", "Score")])
    assert shaped["fields"] == {"Score": 1}

    changed = await ops.update_record(state, me, table["id"], str(made["id"]), {"Score": 5})
    assert changed["fields"] == {"Title": "a", "Score": 5}
    assert await ops.delete_record(state, me, table["id"], made["id"]) == {"id": made["id"], "deleted": True}
    with pytest.raises(NotFound):
        await ops.get_record(state, me, table["id"], str(made["id"]))


async def test_batch_create_answers_per_row_with_rendered_records(make_workspace, state):
    ws = make_workspace()
    table = ws.create_table("Rows", [{"name": "Score", "type": "number"}])
    out = await ops.create_records(state, principal(ws.id), table["id"],
                                   [{"Score": 1}, {"fields": {"Nope": 1}}, {"fields": {"Score": 3}}])
    first, bad, _ = out["results"]
    assert isinstance(first["record"], ops.RawJson) and first["record"].value()["fields"] == {"Score": 1}
    assert bad["index"] == 1 and bad["code"] == "UNKNOWN_COLUMN"
    assert ops.plain_results(out)["results"][2]["record"]["fields"] == {"Score": 3}


async def test_operations_raise_the_service_errors_doors_render(make_workspace, state):
    ws = make_workspace()
    table = ws.create_table("Errs", [{"name": "Title", "type": "text"}])
    me = principal(ws.id)
    with pytest.raises(NotFound) as err:
        await ops.get_record(state, me, table["id"], "12x")  # not an id: as an unknown record
    assert err.value.code == "NOT_FOUND"
    with pytest.raises(NotFound):
        await ops.update_record(state, me, "No such table", "1", {"Title": "x"})
    with pytest.raises(Forbidden) as err:
        await ops.create_record(state, principal(ws.id, read_only=True), table["id"], {"Title": "x"})
    assert err.value.code == "PLAN_READ_ONLY"
    with pytest.raises(ServiceError) as err:
        await ops.create_record(state, me, table["id"], {"Title": "x"}, row_data={"Title": "y"})
    assert err.value.code == "VALIDATION_ERROR"
    with pytest.raises(ServiceError) as err:
        await ops.list_records(state, me, table["id"], listing(filters={"Nope": "eq.1"}), count=None)
    assert err.value.code == "UNKNOWN_COLUMN"
    with pytest.raises(ServiceError) as err:
        await ops.create_records(state, me, table["id"], [{}] * (ops.MAX_BATCH + 1))
    assert err.value.code == "BATCH_TOO_LARGE"
    reader = principal(ws.id, grants={table["id"]: Perms(read=True)})
    assert (await ops.list_records(state, reader, table["id"], listing(), count=None)).n == 0
    with pytest.raises(Forbidden) as err:
        await ops.create_record(state, reader, table["id"], {"Title": "x"})
    assert err.value.code == "FORBIDDEN"
    other = principal(make_workspace().id)  # another workspace does not see the table
    with pytest.raises(NotFound):
        await ops.list_records(state, other, table["id"], listing(), count=None)


async def test_update_by_filter_sets_the_fields_of_every_match(make_workspace, state):
    ws = make_workspace()
    table = ws.create_table("Many", [{"name": "Score", "type": "number"}, {"name": "Title", "type": "text"}])
    me = principal(ws.id)
    ids = [(await ops.create_record(state, me, table["id"], {"Score": n}))["id"] for n in (1, 2, 3)]
    out = await ops.update_matching(state, me, table["id"], {"Score": "gte.2"}, {"Title": "big"})
    assert out == {"updated": 2, "ids": ids[1:]}
    page = await ops.list_records(state, me, table["id"], listing(filters={"Title": "eq.big"}), count=CountMode.EXACT)
    assert page.total == 2
    with pytest.raises(ServiceError) as err:
        await ops.update_matching(state, me, table["id"], [{"column": "Score", "op": "gt", "value": 0}], {})
    assert err.value.code == "VALIDATION_ERROR"
    with pytest.raises(Forbidden):
        await ops.update_matching(state, principal(ws.id, read_only=True), table["id"], {}, {"Title": "x"})


async def test_update_by_filter_reads_back_only_a_bounded_size(make_workspace, state, monkeypatch):
    """A pipeline (or embeddings) reads the updated rows back at once, and a stored row is
    bounded by nothing but its columns: past MATCHING_READ_BYTES of matching rows the
    update is refused and nothing changes; with nothing to read back, only ids are."""
    ws = make_workspace()
    table = ws.create_table("Big", [{"name": "Body", "type": "text"}, {"name": "Tag", "type": "text"},
                                    {"name": "Size", "type": "formula", "formula": "LEN({Body})"}])
    me = principal(ws.id)
    ids = [(await ops.create_record(state, me, table["id"], {"Body": c * 30_000, "Tag": "t"}, run_pipeline=False))["id"]
           for c in "abc"]
    monkeypatch.setattr(ops, "MATCHING_READ_BYTES", 50_000)
    with pytest.raises(ServiceError) as err:  # Size reads Body: three rows of 30 KB to read back
        await ops.update_matching(state, me, table["id"], {"Tag": "eq.t"}, {"Body": "short"})
    assert err.value.code == "BATCH_TOO_LARGE" and "narrow the filters" in err.value.message
    page = await ops.list_records(state, me, table["id"], listing(filters={"Body": "eq.short"}), count=CountMode.EXACT)
    assert page.total == 0  # nothing changed
    # Tag feeds no computed column and the table has no embeddings: nothing is read back
    out = await ops.update_matching(state, me, table["id"], {"Tag": "eq.t"}, {"Tag": "u"})
    assert out == {"updated": 3, "ids": ids}
    # one 30 KB row fits: it is updated and its pipeline queued (no Temporal here)
    out = await ops.update_matching(state, me, table["id"], {"Body": "like.a*"}, {"Body": "short"})
    assert out["updated"] == 1 and out["ids"] == ids[:1] and out["pipeline"]["status"] == "queued"
