"""PostgreSQL-rendered pages (storage/query/render.py) equal the Python-decoded ones."""

from __future__ import annotations

import json
from typing import Any

import pytest
from psycopg import sql

from storage.query import list_page, list_records, parse_params, plan_query
from storage.query.render import list_records_json, renderable
from tests.storage.test_query_sql import DSN, Dataset, ds, scratch_conn  # noqa: F401,F811 (fixtures)

pytestmark = [pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set"), pytest.mark.asyncio]

ALL_BUT_FILES = "Title,Score,Due,Done,Status,Tags,Owner,Calc,Code"


@pytest.mark.parametrize("params", [
    [("select", ALL_BUT_FILES)],
    [("select", ALL_BUT_FILES), ("order", "Score.desc.nullslast")],
    [("select", ALL_BUT_FILES), ("Score", "gt.0"), ("limit", "2"), ("offset", "1")],
    [("select", "Title,Calc"), ("Tags", "cs.{Red}")],
    [("select", ALL_BUT_FILES), ("offset", "100")],
    [("select", ALL_BUT_FILES), ("order", "Status.asc,updated_at.desc")],
    [("select", ALL_BUT_FILES), ("order", "Status.asc,Due.desc,Score.asc,Done.desc,Title.asc"), ("limit", "2")],
    [("select", "Title"), ("order", "created_at.desc"), ("limit", "1")],
])
async def test_sql_rendered_page_equals_the_python_decoded_page(ds: Dataset, params: list[tuple[str, str]]) -> None:  # noqa: F811
    await ds.conn.execute("SET timezone = 'UTC'")  # as the pool's sessions do
    plan = plan_query(parse_params(params), ds.main, can_read=lambda _id: True, get_table=ds.get_table)
    assert renderable(plan)
    decoded, total, after = await list_page(ds.conn, plan, count=True)
    text, n, total_json, after_json, _ = await list_records_json(ds.conn, plan, count=True)
    rendered: list[dict[str, Any]] = json.loads(text)
    assert rendered == decoded
    assert n == len(decoded) and total_json == total
    assert after_json == after  # the same next cursor, byte for byte
    assert (after is not None) == (plan.offset + n < (total or 0))
    for a, b in zip(rendered, decoded):  # integers stay integers (3, not 3.0)
        for name, value in b["fields"].items():
            assert type(a["fields"][name]) is type(value), (name, value, a["fields"][name])


async def test_embedding_and_file_columns_use_the_python_path(ds: Dataset) -> None:  # noqa: F811
    for params in ([("expand", "Owner")], [("select", "Title,Files")], []):
        plan = plan_query(parse_params(params), ds.main, can_read=lambda _id: True, get_table=ds.get_table)
        assert not renderable(plan)


async def test_timestamps_read_the_same_rendered_and_decoded(ds: Dataset) -> None:  # noqa: F811
    """PostgreSQL's JSON form trims trailing fraction zeros (``…30.12+00:00``); the decoded
    paths (by id, embeds, files) must write the same text for the same instant."""
    await ds.conn.execute("SET timezone = 'UTC'")  # as the pool's sessions do
    table = sql.Identifier(ds.main.schema, ds.main.physical)
    due = sql.Identifier(ds.main.column("Due").physical)
    await ds.conn.execute(sql.SQL(
        "UPDATE {t} SET created_at = '2026-03-01 10:00:30.120000+00', updated_at = '2026-03-01 10:00:31+00',"
        " {due} = '2026-03-01 23:59:59.500000+00' WHERE id = 1").format(t=table, due=due))
    await ds.conn.execute(sql.SQL(
        "UPDATE {t} SET created_at = '2026-03-01 10:00:30.000001+00' WHERE id = 2").format(t=table))
    plan = plan_query(parse_params([("select", ALL_BUT_FILES), ("order", "id.asc")]), ds.main,
                      can_read=lambda _id: True, get_table=ds.get_table)
    decoded, _ = await list_records(ds.conn, plan, count=False)
    text, _, _, _, _ = await list_records_json(ds.conn, plan, count=False)
    rendered = json.loads(text)
    assert rendered == decoded
    assert rendered[0]["created_at"] == "2026-03-01T10:00:30.12+00:00"
    assert rendered[0]["updated_at"] == "2026-03-01T10:00:31+00:00"
    assert rendered[0]["fields"]["Due"] == "2026-03-01T23:59:59.5+00:00"
    assert rendered[1]["created_at"] == "2026-03-01T10:00:30.000001+00:00"


@pytest.mark.parametrize("limit", ["0", "1", "2", "3", "100"])
async def test_record_separators_inside_values_do_not_split_the_page(ds: Dataset, limit: str) -> None:  # noqa: F811
    """The page's records travel joined by U+001E (render.SEPARATOR) and the extra record
    read for the next cursor is cut at the last one: a value holding that character, or
    text that looks like a record's start, must come back whole, at every page size."""
    await ds.conn.execute("SET timezone = 'UTC'")  # as the pool's sessions do
    table = sql.Identifier(ds.main.schema, ds.main.physical)
    title = sql.Identifier(ds.main.column("Title").physical)
    await ds.conn.execute(sql.SQL("UPDATE {t} SET {c} = %s WHERE id IN (1, 3)").format(t=table, c=title),
                          ('a\x1eb,{"id":9}\x1e',))
    await ds.conn.execute(sql.SQL("UPDATE {t} SET {c} = %s WHERE id = 2").format(t=table, c=title), ("\x1e",))
    plan = plan_query(parse_params([("select", ALL_BUT_FILES), ("order", "id.asc"), ("limit", limit)]), ds.main,
                      can_read=lambda _id: True, get_table=ds.get_table)
    decoded, total, after = await list_page(ds.conn, plan, count=True)
    text, n, _, after_json, _ = await list_records_json(ds.conn, plan, count=True)
    assert json.loads(text) == decoded
    assert n == len(decoded) == min(int(limit), total or 0)
    assert after_json == after
    titles = {r["id"]: r["fields"]["Title"] for r in json.loads(text)}
    assert all(titles[i] == 'a\x1eb,{"id":9}\x1e' for i in (1, 3) if i in titles)
    assert titles.get(2, "\x1e") == "\x1e"
