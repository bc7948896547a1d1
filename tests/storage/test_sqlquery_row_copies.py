"""What one row of an SQL query may copy of long values is bounded before anything runs
(storage/sqlquery/budget.py): ``700 × lower(T) aN`` over one 1,000,000-character row took
the backend to 3.4 GB (7.9 s) and ``400 × lower(T) <> 'a'`` in WHERE 0.8 GB per row, only
the query's 10,000 characters bounding them; ``J IN (200 numbers)`` on a computed column
of the simple form, 1.15 GB per row. Past 64 copies a query is refused (``INVALID_SQL``)
at translation; under it, it answers as before.

Needs a scratch database (``WDS_TEST_SCRATCH_DSN``, a superuser DSN); skipped otherwise.
The backend's memory is read from ``/proc`` (the scratch PostgreSQL runs on this host).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
import pytest_asyncio
from psycopg import sql

from storage import ddl
from storage.errors import ServiceError
from storage.schema import ColumnMeta, ColumnType, TableMeta
from storage.sqlquery import run_sql, table_resolver, translate
from storage.sqlquery.budget import MAX_COPIES
from tests.storage.test_sqlquery_answer_cap import _backend_peak_kb, _rows

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")

TIMEOUT_S = 30.0
MILLION = 1_000_000
MB = 1024  # kB


def _table(ws: int) -> TableMeta:
    def col(cid: int, name: str, type_: ColumnType, **kw: object) -> ColumnMeta:
        return ColumnMeta(id=cid, table_id=1, name=name, type=type_, position=cid, **kw)  # type: ignore[arg-type]

    return TableMeta(id=1, workspace_id=ws, name="Long", icon=None, columns=(
        col(1, "T", ColumnType.TEXT),
        col(2, "J", ColumnType.FORMULA, formula="{T}"),
        col(3, "N", ColumnType.NUMBER),
        col(4, "S", ColumnType.TEXT),
    ))


async def _create(meta: TableMeta) -> None:
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as c:
        await ddl.create_workspace_schema(c, meta.workspace_id)
        await ddl.create_table(c, meta.workspace_id, meta.id)
        for col in meta.columns:
            await ddl.add_column(c, meta.workspace_id, col)
        t = ddl.qualified(meta.workspace_id, meta.id)
        # N 1-3: a million characters in T and in J (a jsonb string); then short rows whose
        # J is a number, a numeric string and a word
        await c.execute(sql.SQL(
            "INSERT INTO {t} (c_1, c_2, c_3, c_4) SELECT repeat(chr(96 + i), {m}), to_jsonb(repeat('j', {m})), i,"
            " 'Short ' || i FROM generate_series(1, 3) i").format(t=t, m=sql.Literal(MILLION)))
        await c.execute(sql.SQL(
            "INSERT INTO {t} (c_1, c_2, c_3, c_4) VALUES ('x', '5'::jsonb, 10, ' Alpha  '), ('y', '\"7\"'::jsonb, 11,"
            " 'beta'), ('z', '\"word\"'::jsonb, 12, 'Gamma ray'), (NULL, NULL, 13, NULL)").format(t=t))


async def _drop(ws: int) -> None:
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as c:
        await ddl.drop_workspace_schema(c, ws)


@pytest.fixture(scope="module")
def long_table() -> Iterator[TableMeta]:
    meta = _table(900_000_000 + secrets.randbelow(99_999_999))
    try:
        asyncio.run(_create(meta))
        yield meta
    finally:
        asyncio.run(_drop(meta.workspace_id))


@pytest_asyncio.fixture
async def conn() -> AsyncIterator[psycopg.AsyncConnection[tuple[object, ...]]]:
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as c:
        yield c


async def _run(conn: psycopg.AsyncConnection, table: TableMeta, query: str, *, json_rows: bool = True,
               count: bool = False) -> dict[str, object]:
    plan = translate(query, resolve_table=table_resolver([table]), can_read=lambda _: True)
    return await run_sql(conn, plan, workspace_id=table.workspace_id, timeout_s=TIMEOUT_S, json_rows=json_rows,
                         count=count)


def _over_budget(info: pytest.ExceptionInfo[ServiceError], copies: int) -> None:
    assert info.value.code == "INVALID_SQL" and info.value.status == 400, info.value.message
    assert f"{copies} times per row, more than the {MAX_COPIES} allowed" in info.value.message, info.value.message


async def _refused_at_once(conn: psycopg.AsyncConnection, table: TableMeta, query: str, copies: int,
                           **kw: bool) -> None:
    before = await _backend_peak_kb(conn)
    started = time.monotonic()
    with pytest.raises(ServiceError) as info:
        await _run(conn, table, query, **kw)
    elapsed = time.monotonic() - started
    _over_budget(info, copies)
    assert elapsed < 1.0, elapsed
    assert await _backend_peak_kb(conn) - before < 16 * MB, "the query ran"
    # the connection is usable afterwards
    assert _rows(await _run(conn, table, "SELECT N FROM Long WHERE N = 10")) == [{"N": 10}]


SELECT_LOWERS = "SELECT " + ",".join(f"lower(T) a{i}" for i in range(700)) + " FROM Long WHERE N = 1"
WHERE_LOWERS = "SELECT N + 0 AS n FROM Long WHERE N = 1 AND " + " AND ".join("lower(T)<>'a'" for _ in range(400))


@pytest.mark.asyncio
@pytest.mark.parametrize(("json_rows", "count"), [(True, False), (True, True), (False, False)])
async def test_hundreds_of_lowers_of_a_long_text_are_refused_before_running(conn, long_table, json_rows,
                                                                             count) -> None:
    """700 × ``lower(T)`` in the select list (3.4 GB in the backend, 7.9 s) and 400 in
    WHERE (0.8 GB per row): refused at translation, the backend untouched. REST
    (``json_rows``) and MCP (parsed rows) translate alike."""
    assert len(SELECT_LOWERS) <= 10_000 and len(WHERE_LOWERS) <= 10_000
    # each lower copies the stored text and builds one; a built result column is copied
    # into the result row and the page's window: 4 per column, 2 per condition
    await _refused_at_once(conn, long_table, SELECT_LOWERS, 700 * 4, json_rows=json_rows, count=count)
    await _refused_at_once(conn, long_table, WHERE_LOWERS, 400 * 2, json_rows=json_rows, count=count)


@pytest.mark.asyncio
@pytest.mark.parametrize(("query", "copies"), [
    # the simple form: each LIKE copies the stored text
    ("SELECT N FROM Long WHERE " + " AND ".join("T NOT LIKE '%zz%'" for _ in range(MAX_COPIES + 1)), MAX_COPIES + 1),
    # a computed column compared as text (2) or as a number and as text (4 + 2)
    ("SELECT N FROM Long WHERE " + " AND ".join("J != 'a'" for _ in range(40)), 80),
    ("SELECT N FROM Long WHERE " + " AND ".join("J != 1" for _ in range(11)), 66),
    # analytic: length, ILIKE, ||, MIN/MAX, computed columns in arithmetic, subqueries
    ("SELECT " + ", ".join(f"length(T) AS a{i}" for i in range(MAX_COPIES + 1)) + " FROM Long", MAX_COPIES + 1),
    ("SELECT N + 0 AS n FROM Long WHERE " + " OR ".join("T ILIKE '%zz%'" for _ in range(33)), 66),
    ("SELECT " + ", ".join(f"length(S || S) AS a{i}" for i in range(MAX_COPIES + 1)) + " FROM Long", MAX_COPIES + 1),
    ("SELECT " + ", ".join(f"length(MAX(T)) AS a{i}" for i in range(22)) + " FROM Long", 66),
    ("SELECT " + ", ".join(f"J * {i} AS a{i}" for i in range(17)) + " FROM Long", 68),
    ("SELECT N FROM Long WHERE N IN (SELECT N FROM Long WHERE "
     + " AND ".join("T NOT LIKE '%zz%'" for _ in range(65)) + ")", 65),
    ("SELECT upper(T) AS u, COUNT(*) FROM Long GROUP BY upper(T) HAVING "
     + " AND ".join("MIN(lower(T)) <> 'a'" for _ in range(21)), 4 + 21 * 3),
])
async def test_every_kind_of_copy_counts(conn, long_table, query, copies) -> None:
    """Both forms, every allowed function and operator that copies a long value."""
    await _refused_at_once(conn, long_table, query, copies)


@pytest.mark.asyncio
async def test_a_query_at_the_budget_answers_within_it_and_one_copy_more_is_refused(conn, long_table) -> None:
    """64 × ``length(T)`` over a row of a million characters answers, the backend growing
    by about 64 copies of the text (64 MB), not more; a 65th is refused. A realistic report
    (a dozen string functions, GROUP BY lower(x), several LIKE filters) is well inside."""
    at_budget = "SELECT " + ", ".join(f"length(T) AS a{i}" for i in range(MAX_COPIES)) + " FROM Long WHERE N = 2"
    before = await _backend_peak_kb(conn)
    rows = _rows(await _run(conn, long_table, at_budget))
    assert rows == [{f"a{i}": MILLION for i in range(MAX_COPIES)}]
    assert await _backend_peak_kb(conn) - before < MAX_COPIES * 1.25 * MB
    with pytest.raises(ServiceError) as info:
        await _run(conn, long_table, at_budget.replace(" FROM", ", length(T) AS extra FROM"))
    _over_budget(info, MAX_COPIES + 1)

    report = (
        "SELECT lower(trim(S)) AS name, upper(S) AS shout, length(S) AS n, trim(S) || '!' AS loud,"
        " coalesce(upper(trim(S)), 'none') AS up, MIN(lower(S)) AS first, COUNT(*) AS c"
        " FROM Long WHERE (S LIKE '%a%' OR S ILIKE '%BETA%' OR lower(S) LIKE 'g%') AND S NOT LIKE 'Short%'"
        " AND length(trim(S)) > 1 GROUP BY lower(trim(S)), upper(S), length(S), trim(S) || '!',"
        " coalesce(upper(trim(S)), 'none') ORDER BY lower(trim(S))")
    assert _rows(await _run(conn, long_table, report)) == [
        {"name": "alpha", "shout": " ALPHA  ", "n": 8, "loud": "Alpha!", "up": "ALPHA", "first": " alpha  ", "c": 1},
        {"name": "beta", "shout": "BETA", "n": 4, "loud": "beta!", "up": "BETA", "first": "beta", "c": 1},
        {"name": "gamma ray", "shout": "GAMMA RAY", "n": 9, "loud": "Gamma ray!", "up": "GAMMA RAY",
         "first": "gamma ray", "c": 1},
    ]
    # a dozen string functions in the select list (44 copies), grouped by position
    dozen = ("SELECT lower(S) AS a, upper(T) AS b, trim(S) AS c, length(S) AS d, length(T) AS e, lower(T) AS f,"
             " upper(S) AS g, trim(T) AS h, S || T AS i, length(trim(S)) AS j, lower(trim(S)) AS k,"
             " upper(trim(T)) AS l, COUNT(*) AS n FROM Long WHERE S LIKE '%e%' AND T ILIKE 'Y%' AND T NOT LIKE '%z'"
             " GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12")
    assert _rows(await _run(conn, long_table, dozen)) == [
        {"a": "beta", "b": "Y", "c": "beta", "d": 4, "e": 1, "f": "y", "g": "BETA", "h": "y", "i": "betay", "j": 4,
         "k": "beta", "l": "Y", "n": 1}]


@pytest.mark.asyncio
async def test_a_computed_column_in_a_long_in_list_is_read_once_per_form(conn, long_table) -> None:
    """The simple form wrote ``J IN (v1, …, v200)`` as 200 comparisons, each reading J as a
    number and as text: 1.15 GB per row of a million characters. It is now one IN per
    form (the same test), whatever the list's length, and answers as before."""
    numbers = ", ".join(str(i) for i in range(1000, 1198))
    before = await _backend_peak_kb(conn)
    rows = _rows(await _run(conn, long_table, f"SELECT N FROM Long WHERE J IN ({numbers}, 5, 7) ORDER BY N"))
    assert rows == [{"N": 10}, {"N": 11}]
    assert await _backend_peak_kb(conn) - before < 32 * MB, "J was read once per value"
    # as many copies as one comparison, whatever the number of values
    cases = {
        "J IN (5, 7)": [10, 11], "J IN ('5', 'word')": [10, 12], "J IN ('7', 5.0)": [10, 11],
        "J NOT IN (5, 'word')": [1, 2, 3, 11], "J IN ('nothing')": [], "J = 5": [10], "J != 7": [1, 2, 3, 10, 12],
    }
    for cond, expected in cases.items():
        got = _rows(await _run(conn, long_table, f"SELECT N FROM Long WHERE {cond} ORDER BY N"))
        assert [r["N"] for r in got] == expected, cond
