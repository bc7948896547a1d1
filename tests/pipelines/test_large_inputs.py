"""Steps over records whose fields are large (docs/decisions.md "A step's input fits").

A step's input (and the load of a batch's records) travels as one Temporal payload,
refused over 2 MiB ("[TMPRL1103]"): the workflow task failed again and again and a batch
of three 800 KB rows before an http_request column answered after 125 s with
``budget_exceeded``; a run of a delay column over them answered ``ok`` while its workflow
never completed. A step is now handed only the fields it reads, in sub-batches that fit,
and a record that cannot fit alone fails that step with an error naming the limit.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from temporalio.client import Client

from activities.ledger import input_too_large
from tests.pipelines.test_backfill import wait_run

BIG = 800_000  # characters: three such rows pass Temporal's 2 MiB


class _Receiver(BaseHTTPRequestHandler):
    """GET answers its path; POST answers the lengths of the JSON body's values."""

    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        self._answer({"path": self.path})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._answer({k: len(v) for k, v in body.items()})

    def _answer(self, value: Any) -> None:
        raw = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def batch(ws: Any, table: dict[str, Any], rows: list[dict[str, Any]]) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    r = ws.api.post(f"/tables/{table['id']}/records/batch", json={"rows": rows}, timeout=60)
    assert r.status_code == 200, r.text[:500]
    return r.json(), time.monotonic() - started


def completed(services: Any, workflow_id: str, timeout: float = 20) -> str:
    """The workflow's final status as Temporal has it (it must end, not retry its task)."""
    async def go() -> str:
        client = await Client.connect(services.temporal.address)
        handle = client.get_workflow_handle(workflow_id)
        deadline = time.monotonic() + timeout
        while True:
            desc = await handle.describe()
            if desc.status is not None and desc.status.name != "RUNNING" or time.monotonic() > deadline:
                return desc.status.name if desc.status else "?"
            await asyncio.sleep(0.2)
    return asyncio.run(go())


def test_a_batch_of_large_rows_runs_a_step_that_reads_a_small_field(ws, receiver, services):
    t = ws.create_table("Big", [
        {"name": "N", "type": "number"}, {"name": "Long", "type": "text"},
        {"name": "Call", "type": "http_request", "config": {"method": "GET", "url": receiver + "/n/{{ N }}"}},
    ])
    out, took = batch(ws, t, [{"N": i, "Long": "x" * BIG} for i in range(3)])
    assert out["pipeline"]["status"] == "ok", out["pipeline"]
    assert [x["record"]["fields"]["Call"] for x in out["results"]] == [{"path": f"/n/{i}"} for i in range(3)]
    assert took < 30
    assert completed(services, out["pipeline"]["run_id"]) == "COMPLETED"


def test_a_step_reading_large_fields_of_a_batch_runs_in_sub_batches(ws, receiver, services):
    t = ws.create_table("Big", [
        {"name": "N", "type": "number"}, {"name": "Long", "type": "text"},
        {"name": "Call", "type": "http_request",
         "config": {"method": "POST", "url": receiver + "/len", "body": {"long": "{{ Long }}"}}},
        {"name": "After", "type": "formula", "formula": "{N} + 1"},
    ])
    out, took = batch(ws, t, [{"N": i, "Long": "x" * BIG} for i in range(3)])
    assert out["pipeline"]["status"] == "ok", out["pipeline"]
    assert [x["record"]["fields"]["Call"] for x in out["results"]] == [{"long": BIG}] * 3
    assert [x["record"]["fields"]["After"] for x in out["results"]] == [1, 2, 3]
    assert took < 30
    assert completed(services, out["pipeline"]["run_id"]) == "COMPLETED"


def test_a_record_whose_input_alone_is_too_large_fails_that_step_naming_the_limit(ws, receiver, services):
    t = ws.create_table("Big", [
        {"name": "N", "type": "number"},
        {"name": "A", "type": "text"}, {"name": "B", "type": "text"}, {"name": "C", "type": "text"},
        {"name": "Call", "type": "http_request", "config": {
            "method": "POST", "url": receiver + "/len", "body": {"a": "{{ A }}", "b": "{{ B }}", "c": "{{ C }}"}}},
        {"name": "After", "type": "formula", "formula": "LEN({Call})"},
        {"name": "Twice", "type": "formula", "formula": "{N} * 2"},
    ])
    big = {"A": "x" * BIG, "B": "y" * BIG, "C": "z" * BIG}  # 2.4 MB read by one step
    out, took = batch(ws, t, [{"N": 1, "A": "a", "B": "b", "C": "c"}, {"N": 2, **big}, {"N": 3, "A": "a"}])
    assert took < 30
    small, large, last = (x["record"] for x in out["results"])
    per = {str(x["record"]["id"]): x["record"]["pipeline"] for x in out["results"]}
    assert out["pipeline"]["status"] == "error"
    assert per[str(small["id"])]["status"] == "ok" and small["fields"]["Call"] == {"a": 1, "b": 1, "c": 1}
    assert per[str(last["id"])]["status"] == "ok" and last["fields"]["Call"] == {"a": 1, "b": 4, "c": 4}  # null: "None"
    errors = per[str(large["id"])]["errors"]
    assert errors["Call"].startswith("input too large: the fields this step reads of this record take 2.3 MiB")
    assert "at most 1.5 MiB" in errors["Call"] and errors["Call"] == input_too_large(3 * (BIG + 4))
    assert large["fields"]["Call"] is None and "After" in errors
    assert large["fields"]["Twice"] == 4 and "Twice" not in errors  # a step reading N still ran
    assert completed(services, out["pipeline"]["run_id"]) == "COMPLETED"
    # the stored record says the same
    stored = ws.api.get(f"/tables/{t['id']}/records/{large['id']}").json()
    assert stored["fields"]["Call"] is None


def test_a_single_record_of_one_large_non_ascii_cell_fails_its_step_not_the_run(ws, receiver, services):
    # 400,000 × "é" is 800 KB as UTF-8 but 2.4 MB as Temporal's JSON (\u00e9)
    t = ws.create_table("Big", [
        {"name": "Long", "type": "text"},
        {"name": "Call", "type": "http_request",
         "config": {"method": "POST", "url": receiver + "/len", "body": {"long": "{{ Long }}"}}},
    ])
    started = time.monotonic()
    r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"Long": "é" * 400_000}}, timeout=60)
    assert r.status_code == 201, r.text[:500]
    assert time.monotonic() - started < 30
    rec = r.json()
    assert rec["pipeline"]["status"] == "error"
    assert rec["pipeline"]["errors"]["Call"].startswith("input too large: the fields this step reads of this record take 2.3 MiB")
    assert completed(services, rec["pipeline"]["run_id"]) == "COMPLETED"


def test_a_run_over_large_rows_that_reads_none_of_them_completes(ws, services):
    # it answered "ok" at once, but its workflow task failed on the load's 2.4 MB and was
    # retried (writing again) until the run's time ran out
    t = ws.create_table("Big", [
        {"name": "N", "type": "number"}, {"name": "Long", "type": "text"},
        {"name": "Wait", "type": "delay", "config": {"seconds": 0}},
    ])
    out, _ = batch(ws, t, [{"N": i, "Long": "x" * BIG} for i in range(3)])
    assert out["pipeline"]["status"] == "ok"
    assert completed(services, out["pipeline"]["run_ids"][0]) == "COMPLETED"


def backfill_len_calls(ws: Any, rows: list[dict[str, Any]], receiver: str) -> tuple[dict[str, Any], str]:
    """A table ``Big`` (N, Long) holding ``rows``, written one by one (the batch body stays
    small), and a ``Call`` http column posting each row's Long to the receiver, added with a
    backfill: (the table, the backfill's run id)."""
    t = ws.create_table("Big", [{"name": "N", "type": "number"}, {"name": "Long", "type": "text"}])
    for row in rows:
        r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": [row], "run_pipeline": False})
        assert r.status_code == 200, r.text[:500]
    r = ws.api.post(f"/tables/{t['id']}/columns", json={
        "name": "Call", "type": "http_request", "backfill": True,
        "config": {"method": "POST", "url": receiver + "/len", "body": {"long": "{{ Long }}"}}})
    assert r.status_code == 201, r.text
    return t, r.json()["backfill"]["run_id"]


def test_a_backfill_of_large_rows_completes_and_counts_the_row_that_cannot_fit(ws, receiver):
    rows = [{"N": i, "Long": "x" * BIG} for i in range(4)] + [{"N": 4, "Long": "é" * 400_000}]
    t, run_id = backfill_len_calls(ws, rows, receiver)
    run = wait_run(ws, run_id, timeout=60)
    assert run["status"] == "completed_with_errors" and run["done"] == 4 and run["failed"] == 1, run
    assert run["failed_rows"][0]["errors"]["Call"].startswith("input too large")
    got = ws.api.get(f"/tables/{t['id']}/records?order=N.asc&select=N,Call").json()["records"]
    assert [x["fields"]["Call"] for x in got] == [{"long": BIG}] * 4 + [None]


def test_what_a_step_is_handed_is_what_it_may_read():
    from activities.records_io import load_page
    from storage.refs import fields_read

    assert fields_read("http_request", None, {"url": "http://x/{{ A }}?b={{ fields['B c'] }}",
                                              "body": {"k": "{% if C %}{{ D * 2 }}{% endif %}"}}) == {"A", "B c", "C", "D"}
    assert fields_read("formula", "{A} & {B}", {}) == {"A", "B"}
    assert fields_read("loop", None, {"source_column": "L", "step": {"type": "ai_agent", "config": {"prompt": "{{ item }} {{ X }}"}}}) >= {"L", "X"}
    assert fields_read("delay", None, {"seconds": 1}) == frozenset()
    # anything that may read any field is handed every field
    for kind, formula, config in [
        ("ai_agent", None, {"prompt": "{{ fields | tojson }}"}),
        ("http_request", None, {"url": "http://x/{{ fields[A] }}"}),
        ("http_request", None, {"url": "http://x/{{ fields.get('A') }}"}),
        ("formula", "fields.A", {"language": "javascript"}),
        ("loop", None, {"source_column": "L", "step": {"type": "formula", "config": {"formula": "x", "language": "javascript"}}}),
        ("create_record", None, {"table_id": 1, "fields": {"T": "{{ broken "}}),
    ]:
        assert fields_read(kind, formula, config) is None, (kind, config)

    # a load keeps records in order while they fit; a record too large alone keeps its id
    # and the fields that fit, the others listed with their size
    fields = {"1": {"id": 1, "T": "x" * 600}, "2": {"id": 2, "T": "é" * 200, "U": "u"}, "3": {"id": 3, "T": "y"}}
    page = load_page(fields, 1000)
    assert list(page) == ["1", "_more"] and page["_more"] == [2, 3]
    page = load_page({k: fields[k] for k in ("2", "3")}, 1000)
    assert page["2"] == {"id": 2, "U": "u"} and page["3"] == fields["3"]
    assert page["_unloaded"] == {"2": {"T": 1207}}  # "T": and 200 × \u00e9
    assert load_page(fields, 10_000) == fields
