"""A run keeps at most ``RUN_VALUE_BYTES`` (64 MiB) of computed values, every column together.

The hostile-tenant probe (docs/decisions.md, "A run's values are bounded in bytes"): a
formula such as ``REPT({Name}, 500000)`` turns a 2-character field into 1,000,000
characters, so a 500-row batch made 500 MB of values from a body of a few KB. They were
held in the sandbox child, in the API (the values, the INSERT's JSON, the records PostgreSQL
rendered back, the answer) at once: the API's RSS went from 200 MB to 3 GB and another
workspace's reads stalled up to 0.7 s. Past the budget a value is not kept: its record gets
``BUDGET_EXCEEDED`` for the column (its dependants are skipped), the run's status says
``error``, and running the column again for that record computes it.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from activities import formula
from activities.ledger import SKIPPED
from activities.records_io import evaluate_pure
from activities.sandbox import sandbox
from activities.types import Caller, ColumnSnap, FusedInput, PipelineInput, TableSnap

NOW = datetime.now(UTC)


def _records(n: int) -> dict[str, dict[str, Any]]:
    return {str(i): {"id": i, "Name": "ab"} for i in range(n)}


def _budget(value_bytes: int) -> formula.Budget:
    return formula.Budget(deadline=time.monotonic() + 30, value_bytes=value_bytes)


@pytest.mark.parametrize("where", ["inline", "sandbox"])
def test_a_column_keeps_values_while_the_run_has_bytes_for_them(where: str) -> None:
    budget = _budget(2_500)
    records = _records(5)
    source = "REPT({Name}, 500)"  # 1,000 characters a value
    if where == "inline":
        values, errors, rest = formula.run_budgeted(source, "excel", records, NOW, budget)
        assert rest == {}
    else:
        values, errors = asyncio.run(sandbox().formula(source, "excel", records, NOW, budget))
    assert values == {"0": "ab" * 500, "1": "ab" * 500}
    assert errors == {r: formula.TOO_MANY_BYTES for r in ("2", "3", "4")}
    assert budget.value_bytes == 500  # charged what was kept, in the child's case too
    assert "64 MiB" in formula.TOO_MANY_BYTES and formula.TOO_MANY_BYTES.startswith("BUDGET_EXCEEDED")


def test_a_small_value_still_fits_after_a_large_one_did_not() -> None:
    budget = _budget(1_500)
    values, errors, _ = formula.run_budgeted('IF({id} = 1, REPT("x", 2000), "small")', "excel", _records(3), NOW, budget)
    assert values == {"0": "small", "2": "small"} and errors == {"1": formula.TOO_MANY_BYTES}
    assert budget.value_bytes == 1_500 - 10


def test_lists_count_by_their_json() -> None:
    assert formula.value_size([1, "ab", None]) == len(b'[1,"ab",null]')
    assert formula.value_size({"a": [1]}) == len(b'{"a":[1]}')
    assert formula.value_size("é" * 10) == 10 and formula.value_size(12.5) == 8


B, C = 2, 3


def test_a_whole_run_shares_the_bytes_and_what_reads_a_dropped_value_is_skipped(monkeypatch) -> None:
    """``evaluate_pure`` (a create's precompute, the fused activity): the heavy column goes to
    the sandbox with the run's budget, the cheap one that reads it runs inline."""
    real = formula.Budget.for_run
    monkeypatch.setattr(formula.Budget, "for_run", classmethod(
        lambda cls, s, **kw: _replace_bytes(real(s, **kw), 3_500)))
    cols = [ColumnSnap(id=1, name="Name", type="text"),
            ColumnSnap(id=B, name="B", type="formula", formula="REPT({Name}, 500)"),  # heavy: the sandbox
            ColumnSnap(id=C, name="C", type="formula", formula="LEN({B})")]  # cheap: inline
    inp = PipelineInput(
        table=TableSnap(id=1, workspace_id=1, name="T", columns=cols), record_ids=[0, 1, 2, 3, 4], mode="create",
        levels=[[B], [C]], caller=Caller(token_id=1, token_type="vibe_mcp", plan="free"), time_budget_s=10.0,
        step_budget=10, dependants={"1": [B, C], str(B): [C], str(C): []})
    fields = {str(i): {"id": i, "Name": "ab", "B": None, "C": None} for i in range(5)}
    ledger = asyncio.run(evaluate_pure(FusedInput(pipeline=inp, run_id="run-1", now=NOW.isoformat()), fields))
    for r in ("0", "1", "2"):
        assert ledger.values[r] == {B: "ab" * 500, C: 1000} and ledger.errors[r] == {}
    for r in ("3", "4"):
        assert ledger.values[r] == {B: None, C: None}
        assert ledger.errors[r] == {"B": formula.TOO_MANY_BYTES, "C": SKIPPED}


def _replace_bytes(budget: formula.Budget, n: int) -> formula.Budget:
    budget.value_bytes = n
    return budget


def test_a_batch_past_the_budget_stores_every_record_and_says_which_values_were_not_kept(ws) -> None:
    """The API: 70 values of 1,000,000 characters pass 64 MiB (67 fit). Every record is
    written; the last three carry the error, the run's status is ``error``, the answer is
    bounded by the budget, and running the column again for one of them computes it."""
    t = ws.create_table("Big", [{"name": "Name", "type": "text"},
                                {"name": "F", "type": "formula", "formula": "REPT({Name}, 500000)"}])
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": [{"fields": {"Name": "ab"}}] * 70})
    assert r.status_code == 200, r.text[:500]
    assert len(r.content) < formula.RUN_VALUE_BYTES + 1_000_000
    body = r.json()
    assert body["pipeline"]["status"] == "error"
    kept = formula.RUN_VALUE_BYTES // 1_000_000
    assert kept == 67
    records = [x["record"] for x in body["results"]]
    assert len(records) == 70 and all(rec["id"] for rec in records)
    ids = [rec["id"] for rec in records]
    for rec in records[:kept]:
        assert len(rec["fields"]["F"]) == 1_000_000
    for i in ids[kept:]:
        got = ws.api.get(f"/tables/{t['id']}/records/{i}").json()
        assert got["fields"].get("F") is None
        assert got["pipeline"]["status"] == "error"
        assert got["pipeline"]["errors"]["F"] == formula.TOO_MANY_BYTES
    # run again for one record, the column computes it
    again = ws.api.patch(f"/tables/{t['id']}/records/{ids[-1]}", json={"fields": {"Name": "cd"}})
    assert again.status_code == 200, again.text[:300]
    assert again.json()["fields"]["F"] == "cd" * 500_000


# ---------------------------------------------------------------- stored bytes read at once

def _db_and_snap(services, ws, table_id: int):
    from storage import meta
    from storage.db import Database

    async def go():
        db = Database(services.pg.dsn, min_size=1, max_size=2)
        await db.open()
        async with db.connection() as conn:
            return db, (await meta.load_schema(conn, workspace_id=ws.id)).tables[table_id]
    return go


async def _pure_run(db, snap, ids: list[int], levels: list[list[int]], run_id: str):
    """``pure_pipeline`` (an edit's run, a builder's rights) of ``levels`` over ``ids`` by ``snap``."""
    from activities.records_io import RecordIO

    inp = PipelineInput(table=snap, record_ids=ids, mode="edit", levels=levels,
                        caller=Caller(token_id=1, token_type="vibe_mcp", plan="enterprise"),
                        time_budget_s=30.0, step_budget=10)
    return await RecordIO(db).pure_pipeline(FusedInput(pipeline=inp, run_id=run_id, now=NOW.isoformat()))


def test_rows_are_read_while_their_stored_bytes_fit(ws, services) -> None:
    """``get_record_rows_within``: rows in id order while their values' bytes (a text's
    uncompressed length, read from its header) sum to the budget, the first whatever its
    size; the others come back as ids only. A text that compresses to almost nothing counts
    as the bytes it expands to."""
    from storage import records as rec

    t = ws.create_table("Sizes", [{"name": "Body", "type": "text"}, {"name": "N", "type": "number"}])
    bodies = ["ab" * 50_000, "x" * 10, "y" * 30_000, "z" * 5]  # 100,000 (compresses to little), 10, 30,000, 5
    ids = [ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Body": b, "N": i}}).json()["id"]
           for i, b in enumerate(bodies)]

    async def go(record_ids, budget):
        db, table = await _db_and_snap(services, ws, t["id"])()
        try:
            async with db.connection() as conn:
                return await rec.get_record_rows_within(conn, table=table, record_ids=record_ids, max_bytes=budget)
        finally:
            await db.close()

    number = len("0")  # each N is one digit as text
    rows, rest = asyncio.run(go(list(reversed(ids)), 100_000 + 10 + 2 * number))
    assert [r["id"] for r in rows] == ids[:2] and rest == ids[2:]
    assert rows[0]["c_%d" % t["columns"][0]["id"]] == bodies[0]
    rows, rest = asyncio.run(go(ids, 10))  # the first row alone passes the budget: read alone
    assert [r["id"] for r in rows] == ids[:1] and rest == ids[1:]
    rows, rest = asyncio.run(go([*ids, 10 ** 12], 10 ** 9))  # a missing id is left out
    assert [r["id"] for r in rows] == ids and rest == []
    assert asyncio.run(go([], 10)) == ([], [])


def test_a_bulk_run_over_large_records_computes_every_one_in_parts(ws, services, monkeypatch) -> None:
    """``pure_pipeline`` over records that do not fit in ``PURE_LOAD_BYTES`` together:
    loaded, evaluated and written part by part, every record computed, one result."""
    from activities import records_io
    from activities.snap import table_snap

    t = ws.create_table("Large", [{"name": "Body", "type": "text"},
                                  {"name": "Len", "type": "formula", "formula": "LEN({Body})"}])
    sizes = [40_000, 25_000, 70_000, 5_000, 30_000]
    ids = [ws.api.post(f"/tables/{t['id']}/records?run_pipeline=false",
                       json={"fields": {"Body": "q" * n}}).json()["id"] for n in sizes]
    monkeypatch.setattr(records_io, "PURE_LOAD_BYTES", 60_000)  # parts: [40k], [25k], [70k], [5k, 30k]
    reads: list[list[int]] = []
    real = records_io.rec.get_record_rows_within

    async def counted(conn, **kw):
        rows, rest = await real(conn, **kw)
        reads.append([r["id"] for r in rows])
        return rows, rest
    monkeypatch.setattr(records_io.rec, "get_record_rows_within", counted)
    len_id = next(c["id"] for c in t["columns"] if c["name"] == "Len")

    async def go():
        db, table = await _db_and_snap(services, ws, t["id"])()
        try:
            return await _pure_run(db, table_snap(table), ids, [[len_id]], "run-parts")
        finally:
            await db.close()

    result = asyncio.run(go())
    assert reads == [[ids[0]], [ids[1]], [ids[2]], ids[3:]]
    assert result.status == "ok" and sorted(result.ok) == sorted(str(i) for i in ids) and not result.records
    for rid, n in zip(ids, sizes, strict=True):
        got = ws.api.get(f"/tables/{t['id']}/records/{rid}").json()
        assert got["fields"]["Len"] == n and got["pipeline"]["run_id"] == "run-parts", got["pipeline"]


@pytest.mark.parametrize("change", [
    # text → checkbox: reading it as text named octet_length(boolean), which does not exist
    ("Note", {"type": "checkbox", "allow_loss": True}),
    # number → text: reading a text of words as a double failed the cast
    ("N", {"type": "text"}),
    # number → checkbox, an input of the run's formula: the write-back's check locked the
    # rows reading N as a double ("cannot cast type boolean to double precision")
    ("N", {"type": "checkbox", "allow_loss": True}),
])
def test_a_run_whose_table_snapshot_predates_a_column_conversion_reads_the_rows_as_stored(ws, services, change) -> None:
    """A run's table snapshot is taken when the run starts; a column converted before it
    reads the rows (``PATCH …/columns/{id}`` with another type) is read as it is stored now,
    keeping the run's own definitions. Before, the read composed from the snapshot failed
    (``UndefinedFunction`` or a cast's ``InvalidTextRepresentation``) on every attempt: the
    run's records failed for a schema change that had nothing to do with what they
    compute. Both the fused read (``pure_pipeline``, in parts) and ``load_records``."""
    from activities.records_io import RecordIO
    from activities.snap import table_snap
    from activities.types import LoadInput

    t = ws.create_table("Converted", [{"name": "N", "type": "number"}, {"name": "Note", "type": "text"},
                                      {"name": "Twice", "type": "formula", "formula": "{N} * 2"}])
    ids = [ws.api.post(f"/tables/{t['id']}/records?run_pipeline=false",
                       json={"fields": {"N": i, "Note": "yes" if i % 2 else "no"}}).json()["id"] for i in range(1, 4)]
    twice = next(c["id"] for c in t["columns"] if c["name"] == "Twice")
    name, body = change
    col = next(c for c in t["columns"] if c["name"] == name)

    async def go():
        db, table = await _db_and_snap(services, ws, t["id"])()
        try:
            snap = table_snap(table)  # the run's snapshot, before the conversion
            assert ws.api.patch(f"/tables/{t['id']}/columns/{col['id']}", json=body).status_code == 200
            io = RecordIO(db)
            loaded = await io.load_records(LoadInput(table=snap, record_ids=ids))
            return loaded, await _pure_run(db, snap, ids, [[twice]], "run-converted")
        finally:
            await db.close()

    loaded, result = asyncio.run(go())
    # read as stored now: the converted column's values in their new type
    now = {r["id"]: r["fields"] for r in ws.api.get(f"/tables/{t['id']}/records").json()["records"]}
    assert sorted(int(k) for k in loaded) == ids
    for rid in ids:
        assert loaded[str(rid)][name] == now[rid].get(name), (loaded[str(rid)], now[rid])
    if body["type"] == "checkbox" and name == "N":
        # the formula's input converted: the run's values were computed from what it read,
        # the check refused them (an input's type changed), and the run evaluated those
        # records again with the table as it is; each record says how it went
        assert sorted([*result.ok, *result.records]) == sorted(str(i) for i in ids), result
        return
    # every record computed: from N untouched, or from N's text as stored now ("1" * 2 is
    # 2, as a formula reads a number's text)
    assert result.status == "ok" and sorted(result.ok) == sorted(str(i) for i in ids), result
    assert [now[rid]["Twice"] for rid in ids] == [2, 4, 6]


def test_a_bulk_runs_filter_on_a_column_converted_while_it_runs_is_planned_again(ws, services) -> None:
    """``page_ids`` pages a bulk run's records through its filters, planned against the
    run's table snapshot. A column they name converted since then made every page fail
    (``text >= double precision`` does not exist) until the run died of retries. Now the
    filters are planned again against the table as it is; a filter that no longer applies
    ends the run at once with that reason."""
    from temporalio.exceptions import ApplicationError

    from activities.bulk import BulkSteps
    from activities.snap import table_snap
    from activities.types import PageInput

    t = ws.create_table("Paged", [{"name": "N", "type": "number"}, {"name": "Note", "type": "text"}])
    ids = [ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"N": i, "Note": "yes" if i % 2 else "no"}}).json()["id"]
           for i in range(1, 7)]
    cols = {c["name"]: c["id"] for c in t["columns"]}

    async def go(filters, change):
        db, table = await _db_and_snap(services, ws, t["id"])()
        try:
            snap = table_snap(table)
            for cid, body in change:
                assert ws.api.patch(f"/tables/{t['id']}/columns/{cid}", json=body).status_code == 200
            try:
                return await BulkSteps(db).page_ids(PageInput(table=snap, filters=filters, after_id=0, limit=100))
            except ApplicationError as exc:
                return exc
        finally:
            await db.close()

    # a text converted to a select holds option ids: the snapshot's plan compared them with
    # "yes" and found nothing, silently; planned again, "yes" is the option's label
    yes = [{"column": "Note", "op": "eq", "value": "yes"}]
    assert asyncio.run(go(yes, [(cols["Note"], {"type": "single_select"})])) == ids[0::2]
    # a number converted to text: the snapshot's plan (>= 3 as a number) fails on text;
    # planned again, the comparison is the text's
    assert asyncio.run(go([{"column": "N", "op": "gte", "value": "3"}], [(cols["N"], {"type": "text"})])) == ids[2:]
    # a filter the converted column no longer takes ends the run, saying why
    got = asyncio.run(go([{"column": "N", "op": "gte", "value": "3"}],
                         [(cols["N"], {"type": "checkbox", "allow_loss": True})]))
    assert isinstance(got, ApplicationError) and got.type == "FILTER_STALE" and got.non_retryable, got
    assert "no longer applies" in str(got)


def test_a_run_whose_computed_column_became_a_data_column_writes_nothing_into_it(ws, services) -> None:
    """A formula column converted to text while a run of it runs (its values kept as
    text): the run's values are refused by the write-back's check (the definition
    changed), and evaluated again with the table as it is, where the column is no longer
    computed: nothing of the run is written into it. Before, the second evaluation still
    computed it, the check took a data column's empty definition as unchanged, and the
    write failed on every attempt (``CASE types text and jsonb cannot be matched``)."""
    from activities.snap import table_snap

    t = ws.create_table("Frozen", [{"name": "N", "type": "number"},
                                   {"name": "Twice", "type": "formula", "formula": "{N} * 2"}])
    ids = [ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"N": i}}).json()["id"] for i in range(1, 4)]
    twice = next(c["id"] for c in t["columns"] if c["name"] == "Twice")

    async def go():
        db, table = await _db_and_snap(services, ws, t["id"])()
        try:
            snap = table_snap(table)
            r = ws.api.patch(f"/tables/{t['id']}/columns/{twice}", json={"type": "text", "allow_loss": True})
            assert r.status_code == 200, r.text
            return await _pure_run(db, snap, ids, [[twice]], "run-frozen")
        finally:
            await db.close()

    asyncio.run(go())
    rows = ws.api.get(f"/tables/{t['id']}/records").json()["records"]
    assert [r["fields"]["Twice"] for r in rows] == ["2", "4", "6"]  # the converted values, as text
    assert all((r.get("pipeline") or {}).get("run_id") != "run-frozen" for r in rows)


def test_a_write_back_whose_input_now_stores_words_is_refused_not_unstorable(ws, services) -> None:
    """The run's snapshot has ``N`` a number; since, ``N`` was converted to text and a
    record's ``N`` set to a word. The write-back's check locked the rows reading ``N`` as a
    number: ``invalid input syntax for type double precision``, which ended the run as
    values the database refuses (``UNSTORABLE``, non-retryable). Now the check reads the
    rows as stored, refuses the values computed from the converted input, and the run
    evaluates them again with the table as it is: each record says how it went."""
    from activities.snap import table_snap

    t = ws.create_table("Worded", [{"name": "N", "type": "number"},
                                   {"name": "Twice", "type": "formula", "formula": "{N} * 2"}])
    ids = [ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"N": i}}).json()["id"] for i in range(1, 4)]
    n = next(c["id"] for c in t["columns"] if c["name"] == "N")
    twice = next(c["id"] for c in t["columns"] if c["name"] == "Twice")

    async def go():
        db, table = await _db_and_snap(services, ws, t["id"])()
        try:
            snap = table_snap(table)
            assert ws.api.patch(f"/tables/{t['id']}/columns/{n}", json={"type": "text"}).status_code == 200
            r = ws.api.patch(f"/tables/{t['id']}/records/{ids[0]}?run_pipeline=false", json={"fields": {"N": "many"}})
            assert r.status_code == 200, r.text
            return await _pure_run(db, snap, ids, [[twice]], "run-worded")
        finally:
            await db.close()

    result = asyncio.run(go())
    # computed again from what N stores now: "many" is no number, "2" and "3" are
    assert result.ok == [str(i) for i in ids[1:]], result
    assert result.records[str(ids[0])].errors == {"Twice": "#VALUE! not a number: 'many'"}, result
    rows = {r["id"]: r["fields"] for r in ws.api.get(f"/tables/{t['id']}/records").json()["records"]}
    assert [rows[i]["Twice"] for i in ids[1:]] == [4, 6]
