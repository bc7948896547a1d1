"""Staged creates (api/services/pipelines.py ``create_computed``): a batch create whose computed
columns are all formulas/parsers has them computed by its run before its one INSERT.

Checked against an API process on the same database with ``WDS_PIPELINE_PRECOMPUTE=false``
(insert, then run and update): the same answers, the same stored records, the same
outcomes; and what only the staged path does — one realtime INSERT per record, already
complete, and no second write.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import struct
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import psycopg
import pytest

from tests.conftest import api_process

COLUMNS = [
    {"name": "A", "type": "number"},
    {"name": "Json", "type": "text"},
    {"name": "When", "type": "date"},
    {"name": "Pick", "type": "single_select", "options": ["red", "blue"]},
    {"name": "Double", "type": "formula", "formula": "{A} * 2"},
    {"name": "Inv", "type": "formula", "formula": "1 / {A}"},
    {"name": "After", "type": "formula", "formula": "{Inv} + 1"},
    {"name": "Label", "type": "formula", "formula": "{Pick} & \"-\" & DATETIME_FORMAT({When}, 'YYYY-MM-DD')"},
    {"name": "Parsed", "type": "json_parser", "config": {"source_column": "Json", "path": "a.b"}},
]


def rows_for(n: int) -> list[dict[str, Any]]:
    return [{"fields": {"A": i, "Json": f'{{"a": {{"b": [{i}, "x"]}}, "z": null}}', "When": f"2026-03-{1 + i % 28:02d}",
                        "Pick": "red" if i % 2 else "blue"}} for i in range(n)]


@pytest.fixture(scope="module")
def insert_first_url(services: Any) -> Iterator[str]:
    """An API process on the same database that inserts first and runs after."""
    with api_process(services, name="api-insert-first", WDS_PIPELINE_PRECOMPUTE="false") as url:
        yield url


def _normal(result: dict[str, Any]) -> dict[str, Any]:
    """A batch result without what differs between two writes (ids, times, run ids)."""
    if "record" not in result:
        return result
    rec = result["record"]
    pipeline = rec.get("pipeline") or {}
    return {"fields": rec["fields"], "status": pipeline.get("status"), "errors": pipeline.get("errors")}


def _both_ways(ws: Any, insert_first_url: str, table_id: int, rows: list[dict[str, Any]]) -> tuple[Any, Any]:
    """The batch written by this API (staged) and by the insert-first one: both answers,
    checked to say the same of every row."""
    staged = ws.api.post(f"/tables/{table_id}/records/batch", json={"rows": rows})
    with ws.client(ws.builder_token) as c:
        c.base_url = f"{insert_first_url}/functions/v1/rest-api"
        first = c.post(f"/tables/{table_id}/records/batch", json={"rows": rows})
    assert staged.status_code == first.status_code == 200, (staged.text, first.text)
    a, b = staged.json(), first.json()
    assert [_normal(r) for r in a["results"]] == [_normal(r) for r in b["results"]]
    return a, b


def test_staged_and_insert_first_batches_answer_alike(ws, insert_first_url):
    other = ws.create_table("Other", [{"name": "N", "type": "text"}])
    linked = ws.api.post(f"/tables/{other['id']}/records", json={"fields": {"N": "x"}}).json()["id"]
    t = ws.create_table("Staged", [*COLUMNS, {"name": "Link", "type": "relation", "relation_table_id": other["id"]}])
    rows = rows_for(40)
    rows[3]["fields"]["Link"] = linked
    rows[7]["fields"]["Link"] = 987654  # a missing record: this row alone fails
    rows.append({"fields": {"A": "not a number"}})  # refused before anything runs
    a, b = _both_ways(ws, insert_first_url, t["id"], rows)
    assert a["results"][7]["code"] == "INVALID_VALUE" and a["results"][40]["code"] == "INVALID_VALUE"
    assert a["pipeline"]["status"] == b["pipeline"]["status"] == "error"  # 1 / 0 in row 0
    assert len(a["pipeline"]["run_ids"]) == 1 and a["pipeline"]["run_id"] == a["pipeline"]["run_ids"][0]
    zero = a["results"][0]["record"]
    assert zero["fields"]["Inv"] is None and set(zero["pipeline"]["errors"]) == {"Inv", "After"}
    two = a["results"][2]["record"]
    blue = next(o["id"] for c in t["columns"] if c["name"] == "Pick" for o in c["options"] if o["label"] == "blue")
    assert two["fields"] == {"A": 2, "Json": rows[2]["fields"]["Json"], "When": "2026-03-03T00:00:00+00:00",
                             "Pick": blue, "Double": 4, "Inv": 0.5, "After": 1.5, "Label": "blue-2026-03-03",
                             "Parsed": [2, "x"], "Link": None}
    assert a["results"][3]["record"]["fields"]["Link"] == linked
    # what the answer says is what is stored, and what a read returns (pipeline included)
    for res in a["results"]:
        if "record" in res:
            got = ws.api.get(f"/tables/{t['id']}/records/{res['record']['id']}").json()
            assert got == res["record"]
    ids = [r["record"]["id"] for r in a["results"] if "record" in r]
    assert ids == sorted(ids)  # ids ascend with the input, as an INSERT gives them


LOCAL_COLUMNS = [  # types stage_locally types itself: the ids' round trip overlaps the evaluation
    {"name": "A", "type": "number"},
    {"name": "Name", "type": "text"},
    {"name": "Inv", "type": "formula", "formula": "1 / {A}"},
    {"name": "After", "type": "formula", "formula": "{Inv} + 1"},
    {"name": "Tag", "type": "formula", "formula": "{Name} & \"#\" & {A}"},
]


def test_a_batch_evaluated_before_its_ids_exist_lands_on_the_right_records(ws, services, insert_first_url):
    """Computed under provisional keys while its ids are allocated, a batch's values,
    errors, run id and recorded result name the records they belong to, and answer as the
    insert-first path answers."""
    t = ws.create_table("Overlap", LOCAL_COLUMNS)
    order = list(range(30))
    random.Random(4).shuffle(order)  # values unrelated to the ids' order
    rows = [{"fields": {"A": a, "Name": f"n{a}"}} for a in order]
    a, _ = _both_ways(ws, insert_first_url, t["id"], rows)
    ids = [r["record"]["id"] for r in a["results"]]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    run_id = a["pipeline"]["run_id"]
    assert f"/create/r{ids[0]}+{len(ids) - 1}/" in run_id  # named by the real first id
    for a_value, res in zip(order, a["results"], strict=True):
        got = ws.api.get(f"/tables/{t['id']}/records/{res['record']['id']}").json()
        assert got == res["record"]
        assert got["fields"]["Tag"] == f"n{a_value}#{a_value}"
        if a_value == 0:
            assert got["fields"]["Inv"] is None and set(got["pipeline"]["errors"]) == {"Inv", "After"}
            assert got["pipeline"]["run_id"] == run_id and got["pipeline"]["status"] == "error"
            zero = str(got["id"])
        else:
            assert got["fields"]["After"] == pytest.approx(1 / a_value + 1) and got["pipeline"]["status"] == "ok"
    result = _run_result(services, run_id)
    assert set(result.records) == {zero} and set(result.records[zero].errors) == {"Inv", "After"}
    assert sorted(result.ok, key=int) == [str(i) for i in ids if str(i) != zero]


def test_which_computed_columns_need_the_record_id_first():
    """Only a formula or parser that may read ``id`` (a JavaScript formula: its reads are
    not all known) makes a create allocate its ids before evaluating."""
    from api.services.pipelines import _reads_record_id
    from storage.schema import ColumnMeta, ColumnType

    def col(kind: ColumnType, formula: str | None = None, **config: Any) -> ColumnMeta:
        return ColumnMeta(id=1, table_id=1, name="X", type=kind, formula=formula, config=config)

    assert not _reads_record_id([[col(ColumnType.FORMULA, "{A} + 1")]])
    assert not _reads_record_id([[col(ColumnType.JSON_PARSER, source_column="Json", path="a")]])
    assert _reads_record_id([[col(ColumnType.FORMULA, "{A} + 1")], [col(ColumnType.FORMULA, "{id} & 'x'")]])
    assert _reads_record_id([[col(ColumnType.FORMULA, "fields.A + 1", language="javascript")]])
    assert _reads_record_id([[col(ColumnType.JSON_PARSER, source_column="id", path="a")]])


def test_a_staged_batch_writes_each_record_once_with_its_values(ws, services):
    """One realtime INSERT event per record, already complete; no UPDATE follows."""
    t = ws.create_table("Once", COLUMNS)
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows_for(25)})
    assert r.status_code == 200 and r.json()["pipeline"]["status"] == "error", r.text
    ids = [x["record"]["id"] for x in r.json()["results"]]
    with psycopg.connect(services.pg.dsn) as conn:
        events = conn.execute(
            "SELECT event, record FROM wds.events WHERE workspace_id = %s AND table_id = %s ORDER BY seq",
            (ws.id, t["id"])).fetchall()
        stored = conn.execute(f"SELECT count(*), count(_pipeline) FROM ws_{ws.id}.t_{t['id']}").fetchone()
    assert [e for e, _ in events] == ["INSERT"] * 25
    assert [rec["id"] for _, rec in events] == ids
    double = next(f"c_{c['id']}" for c in t["columns"] if c["name"] == "Double")
    assert events[5][1][double] == 10 and "_pipeline" not in events[5][1]  # stored rows, as captured
    assert stored == (25, 25)


def test_a_staged_batch_counts_its_automation_runs_once(ws, services):
    from tests.limits.conftest import counter, wait_for

    t = ws.create_table("Runs", COLUMNS[:5])
    with psycopg.connect(services.pg.dsn, autocommit=True) as db:
        before = counter(db, ws.id, "automation_runs")
        r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows_for(12)})
        assert r.status_code == 200 and r.json()["pipeline"]["status"] == "ok", r.text
        assert wait_for(lambda: counter(db, ws.id, "automation_runs") == before + 12)
        r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows_for(3)})
        assert wait_for(lambda: counter(db, ws.id, "automation_runs") == before + 15)
        assert counter(db, ws.id, "automation_runs") == before + 15


def _run_result(services: Any, run_id: str) -> Any:
    """The run's workflow result from Temporal (it is recorded after the answer)."""
    from temporalio.client import Client
    from temporalio.service import RPCError

    from activities.types import PipelineResult

    async def fetch() -> Any:
        client = await Client.connect(services.temporal.address)
        for _ in range(300):
            try:
                return await client.get_workflow_handle(run_id, result_type=PipelineResult).result()
            except RPCError:  # not recorded yet
                await asyncio.sleep(0.1)
        raise AssertionError(f"run {run_id} never recorded in Temporal")

    return asyncio.run(fetch())


def test_a_computed_create_is_recorded_as_its_temporal_run(ws, services):
    """The run is a PipelineWorkflow whose result is what the write stored: the failed
    records with their errors, the others ok; its outbox row is gone once recorded."""
    from tests.limits.conftest import wait_for

    other = ws.create_table("Other2", [{"name": "N", "type": "text"}])
    t = ws.create_table("Recorded", [*COLUMNS, {"name": "Link", "type": "relation", "relation_table_id": other["id"]}])
    rows = rows_for(6)
    rows[4]["fields"]["Link"] = 987654  # refused by the database: not stored
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows})
    assert r.status_code == 200, r.text
    body = r.json()
    run_id = body["pipeline"]["run_id"]
    ids = [x["record"]["id"] if "record" in x else None for x in body["results"]]
    assert ids[4] is None and body["results"][4]["code"] == "INVALID_VALUE"
    result = _run_result(services, run_id)
    assert result.run_id == run_id and result.status == "error"
    assert set(result.records[str(ids[0])].errors) == {"Inv", "After"}  # 1 / 0: an outcome, stored
    assert sorted(result.ok) == sorted(str(i) for i in ids[1:4] + ids[5:])
    missing = [k for k, o in result.records.items() if o.errors.get("_record")]
    assert len(missing) == 1  # the record the database refused, under the id it would have had
    with psycopg.connect(services.pg.dsn) as conn:
        assert wait_for(lambda: conn.execute(
            "SELECT count(*) FROM wds.outbox WHERE payload->>'workflow_id' = %s", (run_id,)).fetchone()[0] == 0)


def test_the_relay_records_a_computed_run_the_api_did_not(ws, services):
    """A computed create's outbox row (the API died before recording its run) is started
    by the relay as the same recorded run."""
    from temporalio.client import Client

    from activities.types import PipelineInput, PipelineResult, RecordOutcome
    from service.relay import decode_input, encode_input, relay_once
    from storage.db import Database

    t = ws.create_table("Relayed", COLUMNS[:5])
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows_for(2)})
    assert r.status_code == 200, r.text
    run_id = r.json()["pipeline"]["run_id"]
    recorded = _run_result(services, run_id)
    # the same run's input, as the write committed it, under a new id: the relay's copy
    again = f"{run_id}-relayed"

    async def relay() -> Any:
        client = await Client.connect(services.temporal.address)
        handle = client.get_workflow_handle(run_id)
        history = await handle.fetch_history()
        first = history.events[0].workflow_execution_started_event_attributes.input.payloads[0]
        inp: PipelineInput = decode_input(json.loads(first.data))
        assert inp.recorded is not None
        inp.recorded = PipelineResult(run_id=again, status="error",
                                      records={"1": RecordOutcome(status="error", errors={"_record": "x"})})
        db = Database(services.pg.dsn)
        await db.open()
        try:
            async with db.connection() as conn:
                await conn.execute(
                    "INSERT INTO wds.outbox (workspace_id, table_id, payload, created_at)"
                    " VALUES (%s, %s, %s, now() - interval '1 minute')",
                    (ws.id, t["id"], psycopg.types.json.Jsonb({"workflow_id": again, "input": encode_input(inp)})))
            assert await relay_once(client, db, task_queue=inp_queue(history), search_attributes=False) >= 1
        finally:
            await db.close()
        return await client.get_workflow_handle(again, result_type=PipelineResult).result()

    def inp_queue(history: Any) -> str:
        return history.events[0].workflow_execution_started_event_attributes.task_queue.name

    assert recorded.status == "ok"
    res = asyncio.run(relay())
    assert res.run_id == again and res.records["1"].errors == {"_record": "x"}


def test_the_one_statement_stores_records_and_outbox_row_or_neither(ws, services):
    """``insert_computed_json`` with ``outbox``: the records (ok rows under the run's one
    shared outcome, the others under their own) and the run's outbox row go in as ONE
    statement; a row the database refuses leaves neither a record nor an outbox row."""
    from psycopg.rows import dict_row

    from storage import meta
    from storage import records as rec

    other = ws.create_table("Target", [{"name": "N", "type": "text"}])
    t = ws.create_table("OneStatement", [{"name": "A", "type": "number"},
                                         {"name": "Link", "type": "relation", "relation_table_id": other["id"]},
                                         {"name": "B", "type": "formula", "formula": "{A} + 1"}])
    b_id = next(c["id"] for c in t["columns"] if c["name"] == "B")
    ok = {"status": "ok", "run_id": "run-1", "errors": {}}
    bad = {"status": "error", "run_id": "run-1", "errors": {"B": "#DIV/0!"}}

    async def go() -> tuple[Any, ...]:
        async with await psycopg.AsyncConnection.connect(services.pg.dsn, autocommit=True, row_factory=dict_row) as conn:
            table = (await meta.load_schema(conn, workspace_id=ws.id)).tables[t["id"]]
            rows = [rec.prepare_fields(table, {"A": i}, creating=True) for i in range(3)]
            ids = await rec.allocate_ids(conn, table=table, n=3)
            texts, spaced, outbox_id = await rec.insert_computed_json(
                conn, table=table, rows=rows, ids=ids, computed=[{b_id: i + 1} for i in range(3)],
                outcomes=[None, bad, None], ok_outcome=ok, outbox_payload={"workflow_id": "run-1"})
            stored = await (await conn.execute(
                f"SELECT id, _pipeline FROM ws_{ws.id}.t_{t['id']} ORDER BY id")).fetchall()
            payload = await (await conn.execute("SELECT table_id, payload FROM wds.outbox WHERE id = %s",
                                                (outbox_id,))).fetchone()
            refused = [rec.prepare_fields(table, {"A": 9}, creating=True),
                       rec.prepare_fields(table, {"A": 10, "Link": 987654}, creating=True)]
            more = await rec.allocate_ids(conn, table=table, n=2)
            with pytest.raises(Exception) as caught:
                await rec.insert_computed_json(conn, table=table, rows=refused, ids=more, computed=[{}, {}],
                                               outcomes=[None, None], ok_outcome=ok,
                                               outbox_payload={"workflow_id": "run-2"})
            from storage.errors import NotFound

            async with conn.transaction(force_rollback=True):  # the table deleted meanwhile
                await conn.execute("DELETE FROM wds.tables WHERE id = %s", (t["id"],))
                with pytest.raises(NotFound):  # the outbox row's table is gone: not a relation error
                    await rec.insert_computed_json(conn, table=table, rows=refused[:1], ids=more[:1], computed=[{}],
                                                   outcomes=[None], ok_outcome=ok, outbox_payload={})
            after = await (await conn.execute(f"SELECT count(*) AS n FROM ws_{ws.id}.t_{t['id']}")).fetchone()
            left = await (await conn.execute(
                "SELECT count(*) AS n FROM wds.outbox WHERE payload->>'workflow_id' = 'run-2'")).fetchone()
            await conn.execute("DELETE FROM wds.outbox WHERE id = %s", (outbox_id,))
            return texts, spaced, ids, stored, payload, caught.value, after["n"], left["n"]

    texts, spaced, ids, stored, payload, refusal, count_after, outbox_left = asyncio.run(go())
    assert [json.loads(x)["id"] for x in texts] == ids
    # the rows under the shared outcome are compact as they are; the one with its own is spaced
    assert spaced == [False, True, False]
    assert [orjson.dumps(json.loads(x)).decode() for x in (texts[0], texts[2])] == [texts[0], texts[2]]
    assert [json.loads(x)["pipeline"] for x in texts] == [ok, bad, ok]
    assert [json.loads(x)["fields"]["B"] for x in texts] == [1, 2, 3]
    assert [(r["id"], r["_pipeline"]) for r in stored] == list(zip(ids, [ok, bad, ok]))
    assert payload == {"table_id": t["id"], "payload": {"workflow_id": "run-1"}}
    assert getattr(refusal, "code", None) == "INVALID_VALUE"
    assert count_after == 3 and outbox_left == 0  # neither the good row nor the outbox row of the refused statement


def test_rows_staged_here_are_what_postgresql_stages(ws, services):
    """``stage_locally`` answers exactly what ``stage_records`` reads back from PostgreSQL
    (same keys, same Python types and values, bit for bit), and declines what it cannot be
    sure of (a date, a multi-select, a 2**64 integer)."""
    from psycopg.rows import dict_row

    from storage import meta
    from storage import records as rec

    other = ws.create_table("StageTarget", [{"name": "N", "type": "text"}])
    linked = ws.api.post(f"/tables/{other['id']}/records", json={"fields": {"N": "x"}}).json()["id"]
    t = ws.create_table("StageHere", [
        {"name": "N", "type": "number"}, {"name": "T", "type": "text"}, {"name": "C", "type": "checkbox"},
        {"name": "S", "type": "single_select", "options": ["red", "blue"]},
        {"name": "L", "type": "relation", "relation_table_id": other["id"]},
        {"name": "D", "type": "date"}, {"name": "M", "type": "multi_select", "options": ["a"]},
        {"name": "F", "type": "formula", "formula": "{N} + 1"}])
    numbers = [0, -0.0, 1, -1, 0.1, 1 / 3, 2**53 + 1, 2**63 - 1, -(2**63), 12345678901234567890 % 2**63, 1e300,
               -1e-300, 5e-324, 1.7976931348623157e308, 123456789.123456789]
    rng = random.Random(24)  # and floats of every magnitude, from random bits
    numbers += [x for x in (struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(400))
                if math.isfinite(x)]
    numbers += [rng.randrange(-(2**63), 2**63) for _ in range(100)]
    fields = [{"N": n, "T": f"té✓ {i} \"q\" \\ \u2028", "C": i % 2 == 0, "S": ["red", "blue"][i % 2],
               "L": linked if i % 3 == 0 else None} for i, n in enumerate(numbers)]
    fields += [{"T": ""}, {"N": None, "C": False}, {}]

    async def go() -> tuple[Any, ...]:
        async with await psycopg.AsyncConnection.connect(services.pg.dsn, autocommit=True, row_factory=dict_row) as conn:
            table = (await meta.load_schema(conn, workspace_id=ws.id)).tables[t["id"]]
            rows = [rec.prepare_fields(table, f, creating=True) for f in fields]
            remote = await rec.stage_records(conn, table=table, rows=rows)
            local = rec.stage_locally(table, rows)
            declined = [rec.stage_locally(table, [rec.prepare_fields(table, f, creating=True)])
                        for f in ({"D": "2026-01-02"}, {"M": ["a"]})]
            n_id = next(c.id for c in table.columns if c.name == "N")
            huge = rec.stage_locally(table, [rec.PreparedRow(values={n_id: 2**64})])
            return remote, local, declined, huge

    remote, local, declined, huge = asyncio.run(go())
    assert local is not None and len(local) == len(remote)
    for mine, theirs in zip(local, remote):
        assert mine.keys() == theirs.keys()
        assert [(type(v), repr(v)) for v in mine.values()] == [(type(v), repr(v)) for v in theirs.values()]
    assert declined == [None, None] and huge is None


ARITHMETIC_COLUMNS = [
    {"name": "A", "type": "number"},
    {"name": "N", "type": "number"},
    {"name": "Name", "type": "text"},
    {"name": "Sum", "type": "formula", "formula": "{A} * 3 + {N} - 0.1"},
    {"name": "Neg", "type": "formula", "formula": "-{Sum} * 0.5"},
    {"name": "Same", "type": "formula", "formula": "{N}"},
    {"name": "Per", "type": "formula", "formula": "({A} + {N}) / -4"},
]


def _in_sql(base_url: str) -> float:
    """The API's count of formula values PostgreSQL computed in a create's INSERT."""
    for line in httpx.get(f"{base_url}/metrics").text.splitlines():
        if line.startswith("wds_formula_values_in_sql_total "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _typed(results: list[dict[str, Any]]) -> list[Any]:
    """Each record's fields with each value's JSON type (1 and 1.0 are different answers)."""
    return [sorted((k, type(v).__name__, v) for k, v in r["record"]["fields"].items()) if "record" in r else r
            for r in results]


def test_arithmetic_formulas_are_computed_by_postgresql_as_the_evaluator_computes_them(
        ws, services, base_url, insert_first_url):
    """A create whose formulas are all plain arithmetic over number columns has PostgreSQL
    compute them in its INSERT (storage/formula/insql.py): the same values, of the same
    JSON type, as the insert-first path's Python evaluator; the same run recorded in Temporal."""
    t = ws.create_table("InSql", ARITHMETIC_COLUMNS)
    rng = random.Random(24)
    values = [0.0, -0.0, 0.1, 0.2, 1.5, -7, 2**40 + 0.5, 1e-7, None, 123456.789, 3]
    rows = [{"fields": {"A": rng.choice(values), "N": rng.choice(values), "Name": f"n{i}"}} for i in range(40)]
    rows.append({"fields": {"Name": "only text"}})  # every number blank
    before = _in_sql(base_url)
    a, b = _both_ways(ws, insert_first_url, t["id"], rows)
    assert _in_sql(base_url) - before == len(rows) * 4  # computed by PostgreSQL, four columns a row
    assert _typed(a["results"]) == _typed(b["results"])
    assert a["pipeline"]["status"] == "ok" and all(r["record"]["pipeline"]["status"] == "ok" for r in a["results"])
    blank = a["results"][-1]["record"]["fields"]
    assert (blank["Sum"], blank["Neg"], blank["Same"], blank["Per"]) == (-0.1, 0.05, None, 0)
    for res in a["results"][:5]:  # what the answer says is what a read returns
        assert ws.api.get(f"/tables/{t['id']}/records/{res['record']['id']}").json() == res["record"]
    result = _run_result(services, a["pipeline"]["run_id"])
    assert result.status == "ok" and not result.records
    assert result.ok == [str(r["record"]["id"]) for r in a["results"]]


def test_arithmetic_that_could_leave_2_53_or_underflows_is_evaluated_in_python(ws, base_url, insert_first_url):
    """Past ±2^53 the two would store different text (``9007199254740994.0``), and past the
    largest double Python answers ``#NUM!`` where PostgreSQL fails: the bound keeps such a
    batch in Python. A product that underflows makes PostgreSQL refuse the statement:
    nothing is stored by it, and the batch is evaluated in Python."""
    t = ws.create_table("Edges", [{"name": "A", "type": "number"},
                                  {"name": "Sq", "type": "formula", "formula": "{A} * {A}"},
                                  {"name": "Same", "type": "formula", "formula": "{A}"}])
    for rows in ([{"fields": {"A": 2.0**53 + 2}}, {"fields": {"A": 3}}],  # past the bound
                 [{"fields": {"A": 1e200}}, {"fields": {"A": 2}}],  # Sq overflows: #NUM!
                 [{"fields": {"A": 1e-200}}, {"fields": {"A": 2}}]):  # Sq underflows in PostgreSQL
        before = _in_sql(base_url)
        a, b = _both_ways(ws, insert_first_url, t["id"], rows)
        assert _in_sql(base_url) == before, rows
        assert _typed(a["results"]) == _typed(b["results"])
    assert a["results"][0]["record"]["fields"]["Sq"] == 0  # 1e-400 is 0 to Python
    overflow = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 1e200}}).json()
    assert overflow["fields"]["Sq"] is None and overflow["pipeline"]["errors"]["Sq"].startswith("#NUM!")
    before = _in_sql(base_url)  # within the bound: PostgreSQL again
    within = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": [{"fields": {"A": 2.0**26}}]}).json()
    assert within["results"][0]["record"]["fields"]["Sq"] == 2**52 and _in_sql(base_url) == before + 2
