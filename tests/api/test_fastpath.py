"""The direct dispatch of GET record / GET records (api/doors/fastpath.py) answers exactly as
FastAPI's routes do: the same requests against an API process with ``WDS_FAST_READS=false``
give the same status, body bytes and headers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import ApiProcess, Services, running_api

HEADERS = ("content-type", "x-total-count", "content-range", "www-authenticate")


@pytest.fixture(scope="module")
def slow_api(services: Services) -> Iterator[ApiProcess]:
    yield from running_api(services, name="api-no-fast-reads", WDS_FAST_READS="false")


@pytest.fixture
def setup(ws: Any) -> dict[str, Any]:
    people = ws.create_table("People", [{"name": "Name", "type": "text"}])
    p = ws.api.post(f"/tables/{people['id']}/records", json={"fields": {"Name": "Ada"}}).json()
    t = ws.create_table("Tasks", [
        {"name": "Title", "type": "text"},
        {"name": "Score", "type": "number"},
        {"name": "Done", "type": "checkbox"},
        {"name": "Status", "type": "single_select", "options": ["todo", "done"]},
        {"name": "Tags", "type": "multi_select", "options": ["red", "blue"]},
        {"name": "Due", "type": "date"},
        {"name": "Owner", "type": "relation", "relation_table_id": people["id"]},
        {"name": "Files", "type": "file"},
    ])
    rows = [{"fields": {"Title": f"t{i}", "Score": i * 1.5, "Done": i % 2 == 0, "Status": "todo" if i % 3 else "done",
                        "Tags": ["red"] if i % 2 else [], "Due": f"2026-01-{i + 1:02d}T10:00:00.5Z",
                        **({"Owner": p["id"]} if i == 1 else {})}} for i in range(6)]
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows})
    assert r.status_code == 200 and all("record" in x for x in r.json()["results"]), r.text
    ids = [x["record"]["id"] for x in r.json()["results"]]
    hidden = ws.create_table("Hidden", [{"name": "Code", "type": "text"}])
    prof = ws.profile([{"table_id": t["id"], "read": True}])
    view = ws.api.post(f"/tables/{t['id']}/views", json={
        "name": "high", "view_type": "grid", "config": {"filters": [{"column": "Score", "op": "gte", "value": 3}]}})
    return {
        "table": t["id"], "people": people["id"], "hidden": hidden["id"], "ids": ids,
        "view": view.json().get("id") if view.status_code in (200, 201) else None,
        "tokens": {
            "builder": ws.builder_token,
            "reader": ws.token("rest_api", profile_id=prof["id"])["token"],
            "user_mcp": ws.token("user_mcp")["token"],
        },
    }


def _requests(s: dict[str, Any]) -> list[tuple[str | None, str, dict[str, str]]]:
    t, ids, tok = s["table"], s["ids"], s["tokens"]
    base = f"/functions/v1/rest-api/tables/{t}/records"
    reqs: list[tuple[str | None, str, dict[str, str]]] = [
        (tok["builder"], f"{base}/{ids[1]}", {}),
        (tok["builder"], f"{base}/{ids[0]}?ignored=1", {}),
        (tok["builder"], f"{base}/999999999", {}),
        (tok["builder"], f"{base}/abc", {}),
        (tok["builder"], f"{base}/batch", {}),
        (tok["builder"], f"{base}/{'9' * 30}", {}),
        (tok["builder"], f"/functions/v1/rest-api/tables/999999/records/{ids[0]}", {}),
        (tok["builder"], f"/functions/v1/rest-api/tables/{s['people']}/records/{ids[0]}", {}),
        (tok["reader"], f"{base}/{ids[2]}", {}),
        (tok["reader"], f"/functions/v1/rest-api/tables/{s['hidden']}/records/1", {}),
        (tok["reader"], f"/functions/v1/rest-api/tables/{s['hidden']}/records", {}),
        (tok["user_mcp"], f"{base}/{ids[0]}", {}),
        (tok["user_mcp"], base, {}),
        (None, f"{base}/{ids[0]}", {}),
        ("wds_not_a_token", f"{base}/{ids[0]}", {}),
        ("wds_not_a_token", base, {}),
        (tok["builder"], base, {}),
        (tok["builder"], f"{base}?Score=gt.2&Status=eq.todo&limit=2&offset=1&order=Score.desc", {"Prefer": "count=exact"}),
        (tok["builder"], f"{base}?Score=gt.2&order=id.asc", {"Prefer": "count=exact"}),
        (tok["builder"], f"{base}?Title=like.t*&select=Title,Due,Tags", {}),
        (tok["builder"], f"{base}?filter[Score][gte]=3&Done=is.true", {}),
        (tok["builder"], f"{base}?offset=100", {"Prefer": "count=exact"}),
        (tok["builder"], f"{base}?Score=gt.2&limit=2", {"Prefer": "count=planned"}),
        (tok["builder"], f"{base}?Score=gt.2&limit=2", {"Prefer": "count=estimated"}),
        (tok["builder"], f"{base}?limit=2", {"Prefer": "return=minimal, count=estimated"}),
        (tok["builder"], f"{base}?select=Title,Owner(Name)", {"Prefer": "count=planned"}),
        (tok["builder"], f"{base}?select=Title,Owner(Name)", {}),
        (tok["builder"], f"{base}?expand=Owner", {}),
        (tok["builder"], f"{base}?select=Title,Files", {}),
        (tok["reader"], f"{base}?expand=Owner", {}),
        (tok["builder"], f"{base}?limit=abc", {}),
        (tok["builder"], f"{base}?limit=1001", {}),
        (tok["builder"], f"{base}?limit=-1", {}),
        (tok["builder"], f"{base}?Nope=eq.1", {}),
        (tok["builder"], f"{base}?Score=zz.1", {}),
        (tok["builder"], f"{base}?Score=eq.notanumber", {}),
        (tok["builder"], f"{base}?Title=eq.%00", {}),
        (tok["builder"], f"{base}?order=Nope.asc", {}),
        (tok["builder"], f"{base}?view=999999", {}),
        (tok["builder"], f"{base}/", {}),
    ]
    if s["view"] is not None:
        reqs.append((tok["builder"], f"{base}?view={s['view']}&order=id.desc", {"Prefer": "count=exact"}))
    return reqs


def test_fast_reads_answer_exactly_like_fastapi(setup: dict[str, Any], base_url: str, slow_api: ApiProcess) -> None:
    with httpx.Client(base_url=base_url, timeout=30) as fast, httpx.Client(base_url=slow_api.base_url, timeout=30) as slow:
        for token, path, extra in _requests(setup):
            headers = {**extra, **({"Authorization": f"Bearer {token}"} if token else {})}
            a = fast.get(path, headers=headers)
            b = slow.get(path, headers=headers)
            assert (a.status_code, a.content) == (b.status_code, b.content), path
            assert a.status_code < 500, (path, a.text)
            for h in HEADERS:
                assert a.headers.get(h) == b.headers.get(h), (path, h)


def _sql_requests(s: dict[str, Any]) -> list[tuple[str | None, bytes | Iterator[bytes], dict[str, str]]]:
    tok = s["tokens"]
    js = {"Content-Type": "application/json"}
    page = b'{"query": "SELECT Title, Score, Due, Tags FROM Tasks WHERE Score > 1 ORDER BY Score DESC LIMIT 2"}'
    counted = b'{"query": "SELECT Title, Score, Due, Tags FROM Tasks WHERE Score > 1 ORDER BY Score DESC LIMIT 2", "count": true}'

    def chunks() -> Iterator[bytes]:
        yield counted[:20]
        yield counted[20:]

    reqs: list[tuple[str | None, bytes | Iterator[bytes], dict[str, str]]] = [
        (tok["builder"], page, js),
        (tok["builder"], counted, js),
        (tok["builder"], page, {**js, "Prefer": "count=exact"}),
        (tok["builder"], b'{"query": "SELECT * FROM Tasks ORDER BY id"}', js),  # file column: decoded rows
        (tok["builder"], b'{"query": "SELECT COUNT(*) FROM Tasks WHERE Done = true"}', js),
        # analytic queries (issue #25)
        (tok["builder"], b'{"query": "SELECT Score, COUNT(*) AS n FROM Tasks GROUP BY Score ORDER BY Score"}', js),
        (tok["builder"], b'{"query": "SELECT Title, Due FROM Tasks WHERE Score > 1 OR Done LIMIT 2", "count": true}',
         js),
        (tok["builder"], b'{"query": "SELECT Title, COUNT(*) FROM Tasks"}', js),
        (tok["builder"], b'{"query": "SELECT SUM(Title) FROM Tasks"}', js),
        (tok["reader"], b'{"query": "SELECT COUNT(*) AS n FROM Tasks WHERE Title IN (SELECT Code FROM Hidden)"}', js),
        (tok["builder"], b'{"query": "SELECT Title FROM Tasks WHERE Title = \'t1\'", "count": false}', js),
        (tok["builder"], b'{"query": "SELECT Title FROM Tasks", "query": "SELECT Score FROM Tasks"}', js),
        (tok["builder"], b'{"query": "DELETE FROM Tasks"}', js),
        (tok["builder"], b'{"query": "SELECT * FROM Nope"}', js),
        (tok["builder"], b'{"query": "SELECT Title FROM Tasks WHERE Title LIKE \'%\\\\\'"}', js),
        (tok["builder"], b'{"query": "SELECT Title FROM Tasks LIMIT 5000"}', js),
        (tok["builder"], b'{"query": "SELECT Title FROM Tasks WHERE Title = \'' + b"x" * 12_000 + b'\'"}', js),
        (tok["builder"], b'{"query": "SELECT Title FROM Tasks", "limit": 2}', js),
        (tok["builder"], b'{"query": "SELECT Title FROM Tasks", "count": "true"}', js),
        (tok["builder"], b'{"query": "SELECT Title FROM Tasks", "count": 1}', js),
        (tok["builder"], b'{"query": "SELECT Title FROM Tasks", "count": null}', js),
        (tok["builder"], b'{"query": 5}', js),
        (tok["builder"], b'{"count": true}', js),
        (tok["builder"], b'["SELECT Title FROM Tasks"]', js),
        (tok["builder"], b'{"query": "SELECT Title FROM Tasks", "count": NaN}', js),
        (tok["builder"], b'{"query": "SELECT Title FROM Tasks"', js),
        (tok["builder"], b"", js),
        (tok["builder"], b'{"query": "SELECT Title FROM Tasks"}', {"Content-Type": "text/plain"}),
        (tok["builder"], b'{"query": "SELECT Title FROM Tasks"}', {}),
        (tok["builder"], b'{"query": "SELECT Title FROM Tasks"}', {"Content-Type": "application/json; charset=utf-8"}),
        (tok["builder"], b'{"query": "SELECT Title FROM Tasks WHERE Title = \'\\ud800\'"}', js),
        (tok["builder"], b'{"query": "SELECT Title FROM Tasks", "pad": "' + b"p" * 70_000 + b'"}', js),
        (tok["builder"], chunks(), js),
        (tok["reader"], b'{"query": "SELECT Code FROM Hidden"}', js),
        (tok["reader"], page, js),
        (tok["user_mcp"], page, js),
        (None, page, js),
        ("wds_not_a_token", page, js),
        ("wds_not_a_token", b'{"nope": 1}', js),
    ]
    return reqs


def test_fast_sql_answers_exactly_like_fastapi(setup: dict[str, Any], base_url: str, slow_api: ApiProcess) -> None:
    with httpx.Client(base_url=base_url, timeout=30) as fast, httpx.Client(base_url=slow_api.base_url, timeout=30) as slow:
        for i, (token, body, extra) in enumerate(_sql_requests(setup)):
            headers = {**extra, **({"Authorization": f"Bearer {token}"} if token else {})}
            parts = [body] if isinstance(body, bytes) else list(body)  # several parts: sent chunked
            a = fast.post("/functions/v1/rest-api/sql", content=parts[0] if len(parts) == 1 else iter(parts),
                          headers=headers)
            b = slow.post("/functions/v1/rest-api/sql", content=parts[0] if len(parts) == 1 else iter(parts),
                          headers=headers)
            assert (a.status_code, a.content) == (b.status_code, b.content), (i, a.text[:300], b.text[:300])
            assert a.status_code < 500, (i, a.text)
            for h in HEADERS:
                assert a.headers.get(h) == b.headers.get(h), (i, h)


def test_metrics_see_the_route_template_on_the_fast_path(setup: dict[str, Any], base_url: str) -> None:
    """The fast path marks the request with its FastAPI route, so metrics and the usage log keep the template."""
    with httpx.Client(base_url=base_url, timeout=30) as c:
        t, rid = setup["table"], setup["ids"][0]
        h = {"Authorization": f"Bearer {setup['tokens']['builder']}"}
        assert c.get(f"/functions/v1/rest-api/tables/{t}/records/{rid}", headers=h).status_code == 200
        assert c.post("/functions/v1/rest-api/sql", json={"query": "SELECT COUNT(*) FROM Tasks"}, headers=h).status_code == 200
        metrics = c.get("/metrics").text
    assert 'route="/functions/v1/rest-api/tables/{table_id}/records/{record_id}"' in metrics
    assert 'route="/functions/v1/rest-api/sql"' in metrics


def _masked(body: bytes) -> Any:
    """A create's answer without what differs between two creates of the same record."""
    data = json.loads(body)
    if isinstance(data, dict) and "created_at" in data:
        data = {**data, "id": "<id>", "created_at": "<t>", "updated_at": "<t>"}
        if isinstance(data.get("pipeline"), dict):
            data["pipeline"] = {**data["pipeline"], "run_id": "<run>"}
    if isinstance(data, dict) and isinstance(data.get("results"), list):  # a batch's answer
        data = {**data, "results": [{**r, "record": _masked(json.dumps(r["record"]).encode())}
                                    if isinstance(r, dict) and isinstance(r.get("record"), dict) else r
                                    for r in data["results"]]}
        if isinstance(data.get("pipeline"), dict):
            data["pipeline"] = {**data["pipeline"], "run_id": "<run>",
                                "run_ids": ["<run>" for _ in data["pipeline"].get("run_ids") or ()]}
    return data


def _post_both(fast: httpx.Client, slow: httpx.Client, i: int, path: str, token: str | None, body: bytes,
               extra: dict[str, str]) -> tuple[httpx.Response, httpx.Response, dict[str, str]]:
    """POST ``body`` to the fast path and to FastAPI's route; both must answer alike (what
    differs between two writes aside). Returns both answers and the headers sent."""
    headers = {**extra, **({"Authorization": f"Bearer {token}"} if token else {})}
    a = fast.post(path, content=body, headers=headers)
    b = slow.post(path, content=body, headers=headers)
    assert a.status_code == b.status_code, (i, a.text[:300], b.text[:300])
    assert a.status_code < 500, (i, a.text)
    assert _masked(a.content) == _masked(b.content), (i, a.text[:600], b.text[:600])
    for h in HEADERS:
        assert a.headers.get(h) == b.headers.get(h), (i, h)
    return a, b, headers


def _callers(s: dict[str, Any], good: bytes, hidden: bytes) -> list[tuple[str | None, int, str, bytes, dict[str, str]]]:
    """The writes of callers who may not make them: ``good`` by a reader, by an MCP token,
    without and with a bad token; ``hidden`` into a table the reader cannot see."""
    tok, t, js = s["tokens"], s["table"], {"Content-Type": "application/json"}
    return [(tok["reader"], t, "", good, js), (tok["reader"], s["hidden"], "", hidden, js),
            (tok["user_mcp"], t, "", good, js), (None, t, "", good, js), ("wds_not_a_token", t, "", good, js)]


@pytest.fixture
def calc(ws: Any) -> int:
    """A table with a required number and a formula over it."""
    return int(ws.create_table("Calc", [{"name": "N", "type": "number", "required": True},
                                        {"name": "Double", "type": "formula", "formula": "{N}*2"}])["id"])


def _create_requests(s: dict[str, Any], calc: int) -> list[tuple[str | None, int, str, bytes, dict[str, str]]]:
    tok, t, people = s["tokens"], s["table"], s["people"]
    js = {"Content-Type": "application/json"}
    good = b'{"fields": {"Title": "n", "Score": 2.5, "Done": true, "Status": "todo", "Tags": ["red"], "Due": "2026-02-01"}}'
    return [
        (tok["builder"], t, "", good, js),
        (tok["builder"], t, "?run_pipeline=false", good, js),
        (tok["builder"], t, "?run_pipeline=true", good, js),
        (tok["builder"], t, "?run_pipeline=no", good, js),
        (tok["builder"], t, "?run_pipeline=maybe", good, js),
        (tok["builder"], t, "?other=1", good, js),
        (tok["builder"], t, "?run_pipline=false", good, js),  # a typo: refused, never ignored
        (tok["builder"], t, "?run_pipeline=false&run_pipeline=true", good, js),
        (None, t, "?run_pipline=false", good, js),
        (tok["builder"], t, "", b'{"fields": {}}', js),
        (tok["builder"], t, "", b'{"fields": {"Nope": 1}}', js),
        (tok["builder"], t, "", b'{"fields": {"Score": "abc"}}', js),
        (tok["builder"], t, "", b'{"fields": {"Status": "nope"}}', js),
        (tok["builder"], t, "", b'{"fields": {"Owner": 999999}}', js),
        (tok["builder"], t, "", b'{"fields": {"Score": 1e400}}', js),
        (tok["builder"], t, "", b'{"fields": {"Score": NaN}}', js),
        (tok["builder"], t, "", b'{"fields": {"Score": 123456789012345678901234567890}}', js),
        (tok["builder"], t, "", b'{"fields": {"Title": "a"}, "row_data": {"Title": "b"}}', js),
        (tok["builder"], t, "", b'{"row_data": {"Title": "r"}}', js),
        (tok["builder"], t, "", b'{"fields": null}', js),
        (tok["builder"], t, "", b'{"fields": []}', js),
        (tok["builder"], t, "", b'{"fields": {"Title": "x"}, "extra": 1}', js),
        (tok["builder"], t, "", b'[]', js),
        (tok["builder"], t, "", b'{"fields": {"Title": "x"}', js),
        (tok["builder"], t, "", b"", js),
        (tok["builder"], t, "", b'{"fields": {"Title": "x"}}', {"Content-Type": "text/plain"}),
        (tok["builder"], t, "", b'{"fields": {"Title": "x"}}', {}),
        (tok["builder"], t, "", b'{"fields": {"Title": "x"}}', {"Content-Type": "application/json; charset=utf-8"}),
        (tok["builder"], t, "", b'{"fields": {"Title": "\\ud800"}}', js),
        # integers beyond 64 bits: orjson reads them as floats, the standard parser keeps them
        (tok["builder"], t, "", b'{"fields": {"Title": 123456789012345678901234567890}}', js),
        (tok["builder"], t, "", b'{"fields": {"Title": -9223372036854775809}}', js),
        (tok["builder"], t, "", b'{"fields": {"Title": 18446744073709551616, "Score": 1}}', js),
        (tok["builder"], 999999, "", good, js),
        (tok["builder"], calc, "", b'{"fields": {"N": 4}}', js),
        (tok["builder"], calc, "?run_pipeline=false", b'{"fields": {"N": 4}}', js),
        (tok["builder"], calc, "", b'{"fields": {"Double": 4}}', js),
        (tok["builder"], calc, "", b'{"fields": {"Double": null}}', js),
        (tok["builder"], people, "", b'{"fields": {"Name": "x"}}', js),
        *_callers(s, good, b'{"fields": {"Code": "x"}}'),
    ]


def test_fast_create_answers_like_fastapi(calc: int, setup: dict[str, Any], base_url: str, slow_api: ApiProcess) -> None:
    """One record's create on the fast path: the same status, headers and body as FastAPI's
    route, the new record's id and timestamps (and its run's id) aside; both wrote it."""
    with httpx.Client(base_url=base_url, timeout=30) as fast, httpx.Client(base_url=slow_api.base_url, timeout=30) as slow:
        for i, (token, table, query, body, extra) in enumerate(_create_requests(setup, calc)):
            a, b, headers = _post_both(fast, slow, i, f"/functions/v1/rest-api/tables/{table}/records{query}",
                                       token, body, extra)
            if a.status_code == 201:
                assert a.json()["id"] != b.json()["id"]
                again = fast.get(f"/functions/v1/rest-api/tables/{table}/records/{a.json()['id']}", headers=headers)
                assert again.status_code == 200 and again.json()["fields"] == a.json()["fields"], (i, again.text)


def test_metrics_see_the_create_route_on_the_fast_path(setup: dict[str, Any], base_url: str) -> None:
    with httpx.Client(base_url=base_url, timeout=30) as c:
        h = {"Authorization": f"Bearer {setup['tokens']['builder']}"}
        r = c.post(f"/functions/v1/rest-api/tables/{setup['table']}/records", json={"fields": {"Title": "m"}}, headers=h)
        assert r.status_code == 201, r.text
        metrics = c.get("/metrics").text
    assert any('method="POST"' in line and 'route="/functions/v1/rest-api/tables/{table_id}/records"' in line
               for line in metrics.splitlines()), metrics[:2000]


def _batch_requests(s: dict[str, Any], calc: int) -> list[tuple[str | None, int, str, bytes, dict[str, str]]]:
    tok, t, people = s["tokens"], s["table"], s["people"]
    js = {"Content-Type": "application/json"}
    good = (b'{"rows": [{"fields": {"Title": "n", "Score": 2.5, "Done": true, "Status": "todo", "Tags": ["red"],'
            b' "Due": "2026-02-01"}}, {"Title": "plain", "Score": -1}, {"fields": {"Nope": 1}}, {"fields": {}},'
            b' {"fields": {"Owner": 999999}}, {"fields": {"Score": "abc"}}]}')
    return [
        (tok["builder"], t, "", good, js),
        (tok["builder"], t, "", good[:-1] + b', "run_pipeline": false}', js),
        (tok["builder"], t, "", good[:-1] + b', "run_pipeline": true}', js),
        (tok["builder"], t, "", good[:-1] + b', "run_pipeline": "false"}', js),
        (tok["builder"], t, "", good[:-1] + b', "run_pipeline": null}', js),
        (tok["builder"], t, "", good[:-1] + b', "extra": 1}', js),
        (tok["builder"], t, "?run_pipeline=false", good, js),
        (tok["builder"], t, "?run_pipline=false", good, js),
        (tok["builder"], t, "", b'{"rows": []}', js),
        (tok["builder"], t, "", b'{"rows": {}}', js),
        (tok["builder"], t, "", b'{"rows": [1, "a"]}', js),
        (tok["builder"], t, "", b'{"rows": [{"fields": {"Title": "a"}, "extra": 1}]}', js),
        (tok["builder"], t, "", b'{"rows": [{"fields": {"Title": "a"}, "row_data": {"Title": "b"}}]}', js),
        (tok["builder"], t, "", b'{"rows": [{"row_data": {"Title": "r"}}]}', js),
        (tok["builder"], t, "", b'{"rows": [{"fields": null}]}', js),
        (tok["builder"], t, "", b'{"rows": [{"fields": {"Score": NaN}}]}', js),
        (tok["builder"], t, "", b'{"rows": [{"fields": {"Score": 1e400}}]}', js),
        (tok["builder"], t, "", b'{"rows": [{"fields": {"Title": "\\ud800"}}]}', js),
        (tok["builder"], t, "", b'{"rows": [{"fields": {"Title": 123456789012345678901234567890}}]}', js),
        (tok["builder"], t, "", b'{"rows": [{"fields": {"Title": -9223372036854775809}}]}', js),
        (tok["builder"], t, "", b'{"rows": [' + b", ".join([b'{"fields": {"Title": "x"}}'] * 501) + b"]}", js),
        (tok["builder"], t, "", b"{}", js),
        (tok["builder"], t, "", b"[]", js),
        (tok["builder"], t, "", b'{"rows": [{"fields": {"Title": "x"}}]', js),
        (tok["builder"], t, "", b"", js),
        (tok["builder"], t, "", b'{"rows": [{"fields": {"Title": "x"}}]}', {"Content-Type": "text/plain"}),
        (tok["builder"], t, "", b'{"rows": [{"fields": {"Title": "x"}}]}', {}),
        (tok["builder"], t, "", b'{"rows": [{"fields": {"Title": "x"}}]}',
         {"Content-Type": "application/json; charset=utf-8"}),
        (tok["builder"], 999999, "", good, js),
        (tok["builder"], calc, "", b'{"rows": [{"fields": {"N": 4}}, {"fields": {}}, {"fields": {"N": "x"}}]}', js),
        (tok["builder"], calc, "", b'{"rows": [{"fields": {"N": 4}}], "run_pipeline": false}', js),
        (tok["builder"], calc, "", b'{"rows": [{"fields": {"N": 4, "Double": 1}}]}', js),
        (tok["builder"], people, "", b'{"rows": [{"fields": {"Name": "x"}}]}', js),
        *_callers(s, good, b'{"rows": [{"fields": {"Code": "x"}}]}'),
    ]


def test_fast_batch_answers_like_fastapi(calc: int, setup: dict[str, Any], base_url: str, slow_api: ApiProcess) -> None:
    """A batch create on the fast path: the same status, headers and body as FastAPI's
    route (new ids, timestamps and run ids aside), every stored record as a read gives it."""
    with httpx.Client(base_url=base_url, timeout=30) as fast, httpx.Client(base_url=slow_api.base_url, timeout=30) as slow:
        for i, (token, table, query, body, extra) in enumerate(_batch_requests(setup, calc)):
            a, _, headers = _post_both(fast, slow, i, f"/functions/v1/rest-api/tables/{table}/records/batch{query}",
                                       token, body, extra)
            if a.status_code == 200:
                for result in a.json()["results"]:
                    if "record" in result:
                        again = fast.get(f"/functions/v1/rest-api/tables/{table}/records/{result['record']['id']}",
                                         headers=headers)
                        assert again.status_code == 200, (i, again.text)
                        assert again.json()["fields"] == result["record"]["fields"], (i, again.text)


def test_metrics_see_the_batch_route_on_the_fast_path(setup: dict[str, Any], base_url: str) -> None:
    with httpx.Client(base_url=base_url, timeout=30) as c:
        h = {"Authorization": f"Bearer {setup['tokens']['builder']}"}
        r = c.post(f"/functions/v1/rest-api/tables/{setup['table']}/records/batch",
                   json={"rows": [{"fields": {"Title": "m"}}]}, headers=h)
        assert r.status_code == 200, r.text
        metrics = c.get("/metrics").text
    assert any('method="POST"' in line and 'route="/functions/v1/rest-api/tables/{table_id}/records/batch"' in line
               for line in metrics.splitlines()), metrics[:2000]
