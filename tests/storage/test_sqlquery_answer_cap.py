"""An SQL answer is bounded in bytes, inside PostgreSQL (storage/sqlquery/build.py,
``guarded_page``): ``SELECT T AS a0, …, T AS a899`` over one 1,000,000-character row
answered a 900 MB page in 7.7 s with the backend at ~5 GB. The page is now measured row
by row as PostgreSQL reads it and refused (``RESULT_TOO_LARGE``) at the row that passes
the cap, before anything is rendered.

Needs a scratch database (``WDS_TEST_SCRATCH_DSN``, a superuser DSN); skipped otherwise.
The backend's memory is read from ``/proc`` (the scratch PostgreSQL runs on this host).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import orjson
import psycopg
import pytest
import pytest_asyncio
from psycopg import sql

from storage import ddl
from storage.errors import ServiceError
from storage.schema import ColumnMeta, ColumnType, TableMeta
from storage.sqlquery import run_sql, table_resolver, translate
from storage.sqlquery.build import MAX_ANSWER_BYTES

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")

TIMEOUT_S = 30.0
MILLION = 1_000_000
ROWS = 20  # of MILLION characters each: 20 MB, past the 16 MiB cap


def _table(ws: int) -> TableMeta:
    def col(cid: int, name: str, type_: ColumnType, **kw: object) -> ColumnMeta:
        return ColumnMeta(id=cid, table_id=1, name=name, type=type_, position=cid, **kw)  # type: ignore[arg-type]

    return TableMeta(id=1, workspace_id=ws, name="Long", icon=None, columns=(
        col(1, "T", ColumnType.TEXT),
        col(2, "F", ColumnType.FILE),
        col(3, "J", ColumnType.FORMULA, formula="{T}"),
        col(4, "N", ColumnType.NUMBER),
    ))


async def _create(meta: TableMeta) -> None:
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as c:
        await ddl.create_workspace_schema(c, meta.workspace_id)
        await ddl.create_table(c, meta.workspace_id, meta.id)
        for col in meta.columns:
            await ddl.add_column(c, meta.workspace_id, col)
        # ROWS texts of a million characters (TOASTed, compressed), a jsonb string as long,
        # then one short row and one of quotes (JSON writes each as two bytes)
        await c.execute(sql.SQL(
            "INSERT INTO {t} (c_1, c_3, c_4) SELECT repeat(chr(97 + i % 26), {m}), to_jsonb(repeat('j', {m})), i"
            " FROM generate_series(1, {n}) i").format(
            t=ddl.qualified(meta.workspace_id, meta.id), m=sql.Literal(MILLION), n=sql.Literal(ROWS)))
        await c.execute(sql.SQL("INSERT INTO {t} (c_1, c_4) VALUES ('short', 1000), (repeat('\"', 100000), 1001)")
                        .format(t=ddl.qualified(meta.workspace_id, meta.id)))


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


async def _run(conn: psycopg.AsyncConnection, table: TableMeta, query: str, *, max_bytes: int = MAX_ANSWER_BYTES,
               json_rows: bool = True, count: bool = False) -> dict[str, object]:
    plan = translate(query, resolve_table=table_resolver([table]), can_read=lambda _: True, max_bytes=max_bytes)
    return await run_sql(conn, plan, workspace_id=table.workspace_id, timeout_s=TIMEOUT_S, json_rows=json_rows,
                         count=count)


def _rows(result: dict[str, object]) -> list[dict[str, object]]:
    rows = result["rows"]
    return orjson.loads(bytes(orjson.dumps(rows))) if isinstance(rows, orjson.Fragment) else rows  # type: ignore[return-value]


def _page_bytes(result: dict[str, object]) -> int:
    return len(orjson.dumps(result["rows"]))


async def _backend_peak_kb(conn: psycopg.AsyncConnection) -> int:
    """The peak resident memory of ``conn``'s backend so far (VmHWM), in kB."""
    pid = (await (await conn.execute("SELECT pg_backend_pid()")).fetchone())[0]  # type: ignore[index]
    status = Path(f"/proc/{pid}/status")
    if not status.exists():
        pytest.skip("the scratch PostgreSQL does not run on this host")
    return next(int(line.split()[1]) for line in status.read_text().splitlines() if line.startswith("VmHWM"))


def _refused(info: pytest.ExceptionInfo[ServiceError], max_bytes: int = MAX_ANSWER_BYTES) -> None:
    assert info.value.code == "RESULT_TOO_LARGE" and info.value.status == 400, info.value.message
    assert f"{max_bytes:,} bytes" in info.value.message and "LIMIT/OFFSET" in info.value.message
    assert info.value.body()["max_bytes"] == max_bytes


ALIASES = "SELECT " + ", ".join(f"T AS a{i}" for i in range(100)) + " FROM Long WHERE N = 1"


@pytest.mark.asyncio
@pytest.mark.parametrize(("json_rows", "count"), [(True, False), (True, True), (False, False)])
async def test_many_aliases_of_a_long_text_are_refused_before_they_are_built(conn, long_table, json_rows,
                                                                              count) -> None:
    """100 aliases of one 1,000,000-character text (a 100 MB page; 900 made 900 MB and a
    ~5 GB backend): refused at once, the backend never near the page's size. REST
    (``json_rows``) and MCP (parsed rows) run the same statement."""
    before = await _backend_peak_kb(conn)
    started = time.monotonic()
    with pytest.raises(ServiceError) as info:
        await _run(conn, long_table, ALIASES, json_rows=json_rows, count=count)
    elapsed = time.monotonic() - started
    _refused(info)
    assert elapsed < 1.0, elapsed
    assert await _backend_peak_kb(conn) - before < 48 * 1024, "the backend built the page"
    # the connection is usable afterwards (the failed statement was rolled back)
    assert (await _run(conn, long_table, "SELECT N FROM Long WHERE N = 1000"))["total"] == 1


@pytest.mark.asyncio
async def test_aliases_of_a_long_json_value_are_measured_once_and_refused(conn, long_table) -> None:
    """A computed (jsonb) value is measured from its text: the same expression under 100
    names is rendered once per row to be measured, not 100 times."""
    before = await _backend_peak_kb(conn)
    query = "SELECT " + ", ".join(f"J AS a{i}" for i in range(100)) + " FROM Long WHERE N = 1"
    with pytest.raises(ServiceError) as info:
        await _run(conn, long_table, query)
    _refused(info)
    assert await _backend_peak_kb(conn) - before < 48 * 1024, "the backend built the page"


@pytest.mark.asyncio
@pytest.mark.parametrize("query", [
    "SELECT T FROM Long ORDER BY N",  # simple form, rendered by PostgreSQL
    "SELECT T, F FROM Long ORDER BY N",  # simple form with a file column: rows decoded in Python
    "SELECT T, N + 0 AS n FROM Long ORDER BY N",  # analytic form
])
@pytest.mark.parametrize("json_rows", [True, False])
async def test_a_page_just_under_the_cap_answers_in_full_and_one_row_more_is_refused(conn, long_table, query,
                                                                                      json_rows) -> None:
    """16 rows of a million characters (16.0 MB) fit in 16 MiB and answer in full, even
    though the row read past the page (for ``has_more``) would not fit; 17 do not."""
    result = await _run(conn, long_table, query + " LIMIT 16", json_rows=json_rows)
    rows = _rows(result)
    assert len(rows) == 16 and result["has_more"] is True
    assert [len(str(r["T"])) for r in rows] == [MILLION] * 16
    assert MAX_ANSWER_BYTES - 1024**2 < _page_bytes(result) <= MAX_ANSWER_BYTES
    with pytest.raises(ServiceError) as info:
        await _run(conn, long_table, query + " LIMIT 17", json_rows=json_rows)
    _refused(info)
    # and OFFSET pages through the rest
    rest = await _run(conn, long_table, query + " LIMIT 16 OFFSET 16", json_rows=json_rows)
    assert len(_rows(rest)) == ROWS + 2 - 16 and rest["has_more"] is False


@pytest.mark.asyncio
@pytest.mark.parametrize("query", ["SELECT T FROM Long WHERE N >= 1000 ORDER BY N",
                                   "SELECT T, N + 0 AS n FROM Long WHERE N >= 1000 ORDER BY N",
                                   "SELECT T, F FROM Long WHERE N >= 1000 ORDER BY N"])
async def test_the_cap_is_the_rendered_pages_bytes_exactly(conn, long_table, query) -> None:
    """The cap counts the rows as JSON, escapes included: 100,000 quotes are 200,000
    bytes of JSON (the measure taken before rendering counts 100,000; the rendered page is
    measured again). A page of exactly the cap answers; one byte less refuses it."""
    size = _page_bytes(await _run(conn, long_table, query))
    assert size > 200_000
    assert _page_bytes(await _run(conn, long_table, query, max_bytes=size)) == size
    for json_rows in (True, False):
        with pytest.raises(ServiceError) as info:
            await _run(conn, long_table, query, max_bytes=size - 1, json_rows=json_rows)
        _refused(info, size - 1)


@pytest.mark.asyncio
async def test_the_cap_does_not_change_normal_answers(conn, long_table) -> None:
    """Short rows, counts, empty pages, groups: as before."""
    short = await _run(conn, long_table, "SELECT T, N FROM Long WHERE N = 1000")
    assert _rows(short) == [{"T": "short", "N": 1000}] and short["total"] == 1
    empty = await _run(conn, long_table, "SELECT T FROM Long WHERE N = 5000", count=True)
    assert _rows(empty) == [] and empty["total"] == 0
    grouped = await _run(conn, long_table, "SELECT length(T) AS n, COUNT(*) AS c FROM Long GROUP BY 1 ORDER BY 1")
    assert _rows(grouped) == [{"n": 5, "c": 1}, {"n": 100_000, "c": 1}, {"n": MILLION, "c": ROWS}]
    assert (await _run(conn, long_table, "SELECT COUNT(*) FROM Long")) == {"count": ROWS + 2}
