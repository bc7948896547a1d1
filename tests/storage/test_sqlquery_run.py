"""Running translated SQL against PostgreSQL: results, the read-only role, timeouts.

Needs a scratch database (``WDS_TEST_SCRATCH_DSN``, a superuser DSN); skipped otherwise.
Each module run creates two workspaces with random ids through ``storage.ddl`` (schema
``ws_<n>``, read-only role ``wds_ro_<n>``, tables and columns) and drops them afterwards. The ``conn`` fixture is the only way tests get a
connection, so it can be swapped for the project's database fixture later.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from typing import Any

import orjson
import psycopg
import pytest
import pytest_asyncio
from psycopg import sql
from psycopg.rows import dict_row

from storage import ddl
from storage.errors import ServiceError
from storage.schema import ColumnMeta, ColumnType, Option, TableMeta
from storage.sqlquery import SqlPlan, run_sql, table_resolver, translate

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")

TIMEOUT_S = 5.0
STATUS = (Option("opt_open", "Open", "red"), Option("opt_done", "Done", "green"))
TAGS = (Option("t_a", "Alpha", "blue"), Option("t_b", "Beta", "gray"))


@dataclass(frozen=True)
class Scratch:
    workspace_id: int
    other_workspace_id: int
    tasks: TableMeta
    big: TableMeta
    other: TableMeta  # a table of the other workspace


def _tasks_meta(ws: int, *, table_id: int, name: str) -> TableMeta:
    def col(cid: int, name: str, type_: ColumnType, **kw: Any) -> ColumnMeta:
        return ColumnMeta(id=cid, table_id=table_id, name=name, type=type_, position=cid, **kw)

    return TableMeta(
        id=table_id,
        workspace_id=ws,
        name=name,
        icon=None,
        columns=(
            col(1, "Name", ColumnType.TEXT),
            col(2, "Due Date", ColumnType.DATE),
            col(3, "Status", ColumnType.SINGLE_SELECT, options=STATUS),
            col(4, "Tags", ColumnType.MULTI_SELECT, options=TAGS),
            col(5, "Score", ColumnType.NUMBER),
            col(6, "Done", ColumnType.CHECKBOX),
            col(7, "Files", ColumnType.FILE),
            col(8, "Total", ColumnType.FORMULA, formula="{Score} * 2"),
        ),
    )


_TASKS_ROWS = """
INSERT INTO {t} (created_at, updated_at, _pipeline, c_1, c_2, c_3, c_4, c_5, c_6, c_7, c_8) VALUES
  ({c}, {u}, '{{"x": 1}}', 'Alpha task', '2024-01-10T00:00:00Z', 'opt_open', '{{t_a}}', 1, true,
   '[{{"url": "https://files.example/a.png"}}]', '2'),
  ({c}, {u}, NULL, 'Beta task', '2024-02-10T00:00:00Z', 'opt_done', '{{t_a,t_b}}', 2.5, false, NULL, '5'),
  ({c}, {u}, NULL, 'Gamma', NULL, NULL, NULL, NULL, NULL, '[]', NULL),
  ({c}, {u}, NULL, 'delta', '2024-03-01T00:00:00Z', 'opt_open', '{{}}', 10, true, NULL, '"x"')
"""
_BIG_ROWS = "INSERT INTO {t} (c_1) SELECT repeat(md5(i::text), 10) FROM generate_series(1, 100000) i"


async def _create(scratch: Scratch) -> None:
    """Build both workspaces with the project's own DDL (schema, read-only role, grants)."""
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as c:
        for meta in (scratch.tasks, scratch.other, scratch.big):
            if meta is not scratch.big:
                await ddl.create_workspace_schema(c, meta.workspace_id)
            await ddl.create_table(c, meta.workspace_id, meta.id)
            for col in meta.columns:
                await ddl.add_column(c, meta.workspace_id, col)
        for meta in (scratch.tasks, scratch.other):
            await c.execute(sql.SQL(_TASKS_ROWS).format(
                t=ddl.qualified(meta.workspace_id, meta.id),
                c=sql.Literal("2024-05-01T00:00:00Z"),
                u=sql.Literal("2024-05-02T00:00:00Z"),
            ))
        big = ddl.qualified(scratch.big.workspace_id, scratch.big.id)
        await c.execute(sql.SQL(_BIG_ROWS).format(t=big))
        await c.execute(sql.SQL("ANALYZE {}").format(big))


async def _drop(scratch: Scratch) -> None:
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as c:
        for ws in (scratch.workspace_id, scratch.other_workspace_id):
            await ddl.drop_workspace_schema(c, ws)  # drops the read-only role too


@pytest.fixture(scope="module")
def scratch() -> Iterator[Scratch]:
    ws, other_ws = (900_000_000 + secrets.randbelow(99_999_999) for _ in range(2))
    tasks = _tasks_meta(ws, table_id=1, name="Tasks")
    big = TableMeta(id=2, workspace_id=ws, name="Big", icon=None, columns=(
        ColumnMeta(id=1, table_id=2, name="Body", type=ColumnType.TEXT),
    ))
    made = Scratch(ws, other_ws, tasks, big, _tasks_meta(other_ws, table_id=1, name="Other"))
    # Sync fixture with its own event loops: setup runs once per module, outside the
    # per-test loops of pytest-asyncio.
    try:
        asyncio.run(_create(made))
        yield made
    finally:
        asyncio.run(_drop(made))


@pytest_asyncio.fixture
async def conn() -> AsyncIterator[psycopg.AsyncConnection[dict[str, object]]]:
    """An autocommit dict-row connection, like the ones ``storage.db.Database`` hands out."""
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True, row_factory=dict_row) as c:
        yield c


def _plan(scratch: Scratch, query: str) -> SqlPlan:
    return translate(
        query, resolve_table=table_resolver([scratch.tasks, scratch.big]), can_read=lambda table_id: True
    )


async def _run(
    conn: psycopg.AsyncConnection[dict[str, object]], scratch: Scratch, query: str, *, count: bool = False,
) -> dict[str, object]:
    return await run_sql(conn, _plan(scratch, query), workspace_id=scratch.workspace_id, timeout_s=TIMEOUT_S,
                         count=count)


def _names(result: dict[str, object]) -> list[object]:
    rows = result["rows"]
    assert isinstance(rows, list)
    return [row["Name"] for row in rows]


@pytest.mark.asyncio
async def test_star_returns_flat_rows_keyed_by_human_names_with_rest_values(conn, scratch) -> None:
    result = await _run(conn, scratch, "SELECT * FROM Tasks ORDER BY id")
    assert (result["total"], result["table"], result["limit"], result["offset"]) == (4, "Tasks", 100, 0)
    first, _, third, fourth = result["rows"]
    assert first == {
        "id": first["id"],
        "created_at": "2024-05-01T00:00:00+00:00",
        "updated_at": "2024-05-02T00:00:00+00:00",
        "Name": "Alpha task",
        "Due Date": "2024-01-10T00:00:00+00:00",
        "Status": "opt_open",
        "Tags": ["t_a"],
        "Score": 1,
        "Done": True,
        "Files": ["https://files.example/a.png"],
        "Total": 2,
    }
    assert isinstance(first["id"], int)
    assert (third["Done"], third["Tags"], third["Files"], third["Status"]) == (False, [], [], None)
    assert fourth["Total"] == "x"


@pytest.mark.asyncio
async def test_field_list_returns_only_those_fields(conn, scratch) -> None:
    result = await _run(conn, scratch, 'SELECT "Due Date", name FROM tasks WHERE Score = 2.5')
    assert result["rows"] == [{"Due Date": "2024-02-10T00:00:00+00:00", "Name": "Beta task"}]


@pytest.mark.asyncio
async def test_counting_totals_every_match_while_limit_and_offset_page(conn, scratch) -> None:
    # DESC puts the NULL score (Gamma) first, as PostgreSQL does by default.
    query = "SELECT Name FROM Tasks ORDER BY Score DESC LIMIT 2 OFFSET 1"
    counted = await _run(conn, scratch, query, count=True)
    assert _names(counted) == ["delta", "Beta task"]
    assert (counted["total"], counted["limit"], counted["offset"], counted["has_more"]) == (4, 2, 1, True)
    # without counting the same page says more rows match, and the total is not known
    uncounted = await _run(conn, scratch, query)
    assert uncounted == {**counted, "total": None}


# Tasks has 4 rows: (limit, offset) → has_more, and the total known without counting
_PAGES = [
    ((2, 0), True, None),   # more rows match: how many is not known without a count
    ((3, 1), False, 4),     # the last page: offset + rows read
    ((2, 2), False, 4),     # a page ending exactly at the last row
    ((100, 0), False, 4),
    ((2, 4), False, None),  # past the end: nothing read, the total is ≤ offset but unknown
    ((1, 9), False, None),
    ((0, 0), True, None),   # LIMIT 0 still says whether rows match
    ((0, 4), False, None),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("page", "more", "known"), _PAGES)
@pytest.mark.parametrize("json_rows", [False, True])
@pytest.mark.parametrize("in_transaction", [False, True])
async def test_pages_say_whether_more_match_and_the_total_when_they_reach_the_end(
    conn, scratch, page: tuple[int, int], more: bool, known: int | None, json_rows: bool, in_transaction: bool,
) -> None:
    """Without counting the page reads one row past itself (``has_more``), and ``total`` is
    exact when the page shows where the result ends; counting always gives the total. The
    pipelined and in-transaction paths, rendered and decoded rows, answer alike."""
    await conn.execute("SET timezone = 'UTC'")
    limit, offset = page
    everything = _names(await _run(conn, scratch, "SELECT Name FROM Tasks ORDER BY id"))
    assert len(everything) == 4
    plan = _plan(scratch, f"SELECT Name FROM Tasks ORDER BY id LIMIT {limit} OFFSET {offset}")
    for count in (False, True):
        if in_transaction:
            async with conn.transaction():
                result = await run_sql(conn, plan, workspace_id=scratch.workspace_id, timeout_s=TIMEOUT_S,
                                       json_rows=json_rows, count=count)
        else:
            result = await run_sql(conn, plan, workspace_id=scratch.workspace_id, timeout_s=TIMEOUT_S,
                                   json_rows=json_rows, count=count)
        answer = json.loads(orjson.dumps(result))
        assert [r["Name"] for r in answer["rows"]] == everything[offset:offset + limit]
        assert (answer["limit"], answer["offset"], answer["has_more"]) == (limit, offset, more)
        assert answer["total"] == (4 if count else known)


@pytest.mark.asyncio
async def test_no_match_totals_zero_without_counting(conn, scratch) -> None:
    result = await _run(conn, scratch, "SELECT Name FROM Tasks WHERE Name LIKE 'nothing%'")
    assert (result["rows"], result["total"], result["has_more"]) == ([], 0, False)


@pytest.mark.asyncio
async def test_count_form_answers_only_the_count(conn, scratch) -> None:
    assert await _run(conn, scratch, "SELECT COUNT(*) FROM Tasks WHERE Done = true") == {"count": 2}
    assert await _run(conn, scratch, "SELECT count(*) FROM Tasks LIMIT 1") == {"count": 4}


@pytest.mark.parametrize(
    ("where", "names"),
    [
        ("Status = 'Open'", ["Alpha task", "delta"]),
        ("Status = 'opt_done'", ["Beta task"]),
        ("Status != 'Open'", ["Beta task"]),
        ("Status IS NULL", ["Gamma"]),
        ("Tags = 'Alpha'", ["Alpha task", "Beta task"]),
        ("Tags = 'Beta'", ["Beta task"]),
        ("Tags != 'Beta'", ["Alpha task", "Gamma", "delta"]),
        ("Tags IN ('Beta', 'Alpha')", ["Alpha task", "Beta task"]),
        ("Tags NOT IN ('Alpha')", ["Gamma", "delta"]),
        ("Tags IS NULL", ["Gamma", "delta"]),
        ("Done = false", ["Beta task", "Gamma"]),
        ("Done IS NULL", []),  # never blank: unset reads (and filters) as false
        ("Done IS NOT NULL", ["Alpha task", "Beta task", "Gamma", "delta"]),
        ("Score >= 2.5", ["Beta task", "delta"]),
        ("Score IN (1, 10)", ["Alpha task", "delta"]),
        ("\"Due Date\" < '2024-02-10'", ["Alpha task"]),
        ("\"Due Date\" >= '2024-02-10T00:00:00Z' AND \"Due Date\" <= '2024-03-01'", ["Beta task", "delta"]),
        ("Name LIKE '%task'", ["Alpha task", "Beta task"]),
        ("Name NOT LIKE '%task'", ["Gamma", "delta"]),
        ("Files IS NULL", ["Beta task", "Gamma", "delta"]),
        ("Total = 5", ["Beta task"]),
        ("Total > 1", ["Alpha task", "Beta task"]),
        ("Total = 'x'", ["delta"]),
        ("Total IS NULL", ["Gamma"]),
        ("created_at < '2024-06-01'", ["Alpha task", "Beta task", "Gamma", "delta"]),
    ],
)
@pytest.mark.asyncio
async def test_conditions_filter_as_the_api_shows_values(conn, scratch, where: str, names: list[str]) -> None:
    result = await _run(conn, scratch, f"SELECT Name FROM Tasks WHERE {where} ORDER BY id")
    assert _names(result) == names
    assert result["total"] == len(names)


@pytest.mark.asyncio
async def test_a_value_the_database_rejects_is_invalid_sql(conn, scratch) -> None:
    with pytest.raises(ServiceError) as info:
        await _run(conn, scratch, "SELECT Name FROM Tasks WHERE Name LIKE '%\\'")
    assert info.value.code == "INVALID_SQL"


@pytest.mark.asyncio
async def test_a_plan_for_another_workspace_is_refused_as_an_unknown_table(conn, scratch) -> None:
    other_plan = translate("SELECT * FROM Other", resolve_table=table_resolver([scratch.other]), can_read=lambda _: True)
    with pytest.raises(ServiceError) as info:
        await run_sql(conn, other_plan, workspace_id=scratch.workspace_id, timeout_s=TIMEOUT_S)
    assert info.value.code == "INVALID_SQL"


def _hand_built(scratch: Scratch, query: sql.Composable) -> SqlPlan:
    base = _plan(scratch, "SELECT COUNT(*) FROM Tasks")
    return replace(base, count_query=query, where_params=())


@pytest.mark.parametrize(
    ("statement", "error"),
    [
        ("INSERT INTO {own}.t_1 (c_1) VALUES ('x') RETURNING 1", psycopg.errors.ReadOnlySqlTransaction),
        ("UPDATE {own}.t_1 SET c_1 = 'x' RETURNING 1", psycopg.errors.ReadOnlySqlTransaction),
        ("SELECT count(*) FROM {other}.t_1", psycopg.errors.InsufficientPrivilege),
        ("SELECT count(*) FROM wds.workspaces", psycopg.errors.Error),  # metadata: no grant (or absent)
    ],
)
@pytest.mark.asyncio
async def test_a_hand_built_plan_cannot_write_or_leave_the_workspace(conn, scratch, statement, error) -> None:
    query = sql.SQL(statement).format(
        own=sql.Identifier(f"ws_{scratch.workspace_id}"), other=sql.Identifier(f"ws_{scratch.other_workspace_id}")
    )
    with pytest.raises(error):
        await run_sql(conn, _hand_built(scratch, query), workspace_id=scratch.workspace_id, timeout_s=TIMEOUT_S)
    cur = await conn.execute("SELECT count(*) AS n FROM {}.t_1".format(f"ws_{scratch.workspace_id}"))
    assert (await cur.fetchone()) == {"n": 4}


@pytest.mark.asyncio
async def test_the_readonly_role_has_no_write_privilege_even_outside_read_only_mode(conn, scratch) -> None:
    role = sql.Identifier(ddl.ro_role(scratch.workspace_id))
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        async with conn.transaction():
            await conn.execute(sql.SQL("SET LOCAL ROLE {}").format(role))
            await conn.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(f"ws_{scratch.workspace_id}", "t_1")))


@pytest.mark.asyncio
async def test_a_slow_query_times_out_as_sql_timeout(conn, scratch) -> None:
    # Sixty substring scans over 100k rows of 320 characters take ~2 s; 0.2 s is the budget.
    conditions = " AND ".join(f"Body NOT LIKE '%zz{i}%'" for i in range(60))
    plan = _plan(scratch, f"SELECT COUNT(*) FROM Big WHERE {conditions}")
    with pytest.raises(ServiceError) as info:
        await run_sql(conn, plan, workspace_id=scratch.workspace_id, timeout_s=0.2)
    assert (info.value.code, info.value.status) == ("SQL_TIMEOUT", 408)
    # The connection is usable afterwards and the settings did not leak.
    cur = await conn.execute("SELECT current_setting('statement_timeout') AS t, current_user = session_user AS me")
    assert (await cur.fetchone()) == {"t": "0", "me": True}


@pytest.mark.asyncio
async def test_a_hand_built_sleep_is_cut_by_the_timeout(conn, scratch) -> None:
    plan = _hand_built(scratch, sql.SQL("SELECT count(*) FROM pg_sleep(5)"))
    with pytest.raises(ServiceError) as info:
        await run_sql(conn, plan, workspace_id=scratch.workspace_id, timeout_s=0.1)
    assert info.value.code == "SQL_TIMEOUT"


@pytest.mark.asyncio
async def test_inside_an_open_transaction_the_caller_keeps_its_role_and_write_mode(conn, scratch) -> None:
    async with conn.transaction(force_rollback=True):
        await conn.execute("SELECT 1")
        result = await _run(conn, scratch, "SELECT COUNT(*) FROM Tasks")
        assert result == {"count": 4}
        cur = await conn.execute(
            "SELECT current_user = session_user AS me, current_setting('transaction_read_only') AS ro,"
            " current_setting('statement_timeout') AS t"
        )
        assert (await cur.fetchone()) == {"me": True, "ro": "off", "t": "0"}


@pytest.mark.asyncio
@pytest.mark.parametrize("query", [
    'SELECT * FROM Tasks',
    'SELECT Name, "Due Date", Status, Tags, Score, Done, Total FROM Tasks ORDER BY Score DESC NULLS LAST',
    "SELECT id, created_at, Name FROM Tasks WHERE Status = 'Open' AND Score >= 1 ORDER BY Name LIMIT 1 OFFSET 1",
    "SELECT Name FROM Tasks WHERE Name LIKE 'nothing%'",
    'SELECT Name, Status FROM Tasks ORDER BY Status, id DESC',
])
@pytest.mark.parametrize("in_transaction", [False, True])
@pytest.mark.parametrize("count", [False, True])
async def test_rows_rendered_by_postgresql_equal_the_decoded_rows(
    conn: psycopg.AsyncConnection[dict[str, object]], scratch: Scratch, query: str, in_transaction: bool,
    count: bool,
) -> None:
    """``json_rows``: the page (with the count, or with one row more) in one statement,
    rendered as JSON by PostgreSQL, gives exactly the rows, total and shape of the
    decoding path (file columns fall back to it)."""
    await conn.execute("SET timezone = 'UTC'")  # as the pool's sessions do
    plan = _plan(scratch, query)
    run = {"workspace_id": scratch.workspace_id, "timeout_s": TIMEOUT_S, "count": count}
    decoded = await run_sql(conn, plan, **run)
    if in_transaction:
        async with conn.transaction():
            rendered = await run_sql(conn, plan, json_rows=True, **run)
    else:
        rendered = await run_sql(conn, plan, json_rows=True, **run)
    has_files = query.startswith("SELECT *")
    assert isinstance(rendered["rows"], list) == has_files
    as_json = json.loads(orjson.dumps(rendered))
    assert as_json == json.loads(orjson.dumps(decoded))
    assert as_json["total"] == decoded["total"] and len(as_json["rows"]) == len(decoded["rows"])  # type: ignore[arg-type]
