"""Every failure is {error, code}: never FastAPI's {"detail"}, never a traceback or a 500."""

from __future__ import annotations

import httpx


def test_malformed_json_is_a_validation_error(ws):
    t = ws.create_table("E", [{"name": "A", "type": "text"}])
    r = ws.api.post(f"/tables/{t['id']}/records", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR" and "detail" not in r.json()


def test_wrong_body_shapes_are_validation_errors(ws):
    t = ws.create_table("E", [{"name": "A", "type": "text"}])
    for body in ([], "x", {"fields": []}, {"fields": {"A": "x"}, "extra": 1}, {"fields": {"A": "x"}, "row_data": {}}, {}):
        r = ws.api.post(f"/tables/{t['id']}/records", json=body)
        assert r.status_code == 400, (body, r.text)
        assert set(r.json()) == {"error", "code"}


def test_unknown_route_and_method_use_the_error_shape(ws, base_url):
    r = httpx.get(f"{base_url}/functions/v1/rest-api/nope")
    assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"
    r = ws.api.put("/tables")
    assert r.status_code == 405 and r.json()["code"] == "METHOD_NOT_ALLOWED"


def test_non_numeric_table_id_is_a_validation_error(ws):
    r = ws.api.get("/tables/abc/records")
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR"


def test_openapi_lists_every_endpoint(base_url):
    spec = httpx.get(f"{base_url}/openapi.json").json()
    paths = spec["paths"]
    for path in ("/functions/v1/rest-api/tables", "/functions/v1/rest-api/tables/{table_id}",
                 "/functions/v1/rest-api/tables/{table_id}/columns",
                 "/functions/v1/rest-api/tables/{table_id}/columns/{column_id}",
                 "/functions/v1/rest-api/tables/{table_id}/records",
                 "/functions/v1/rest-api/tables/{table_id}/records/{record_id}",
                 "/functions/v1/rest-api/tables/{table_id}/records/batch",
                 "/functions/v1/admin/workspaces", "/healthz"):
        assert path in paths, path
    create = paths["/functions/v1/rest-api/tables"]["post"]
    assert "requestBody" in create and "201" in create["responses"]


def test_healthz_is_ok_when_everything_is_ready(base_url):
    r = httpx.get(f"{base_url}/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_lone_surrogate_escapes_are_refused_before_any_route(ws, base_url):
    """JSON may escape a lone UTF-16 surrogate ("\\ud800"); no text can hold one. Every JSON
    body carrying one is 400 INVALID_VALUE and changes nothing, on every door; a surrogate
    pair (an emoji as two escapes) and an escaped backslash are ordinary text."""
    t = ws.create_table("Texts", [{"name": "A", "type": "text"}])
    records = f"/tables/{t['id']}/records"
    js = {"Content-Type": "application/json"}
    lone = [b'"\\ud800"', b'"\\uDC00 tail"', b'"x\\ud83dy"', b'"\\ud83d\\u0041"']
    for value in lone:
        for path, body in [
            (records, b'{"fields": {"A": ' + value + b'}}'),
            (f"{records}/batch", b'{"rows": [{"fields": {"A": "fine"}}, {"fields": {"A": ' + value + b'}}]}'),
            ("/tables", b'{"name": ' + value + b', "columns": []}'),
            (f"/tables/{t['id']}/columns", b'{"name": "B", "type": "single_select", "options": [' + value + b']}'),
            ("/sql", b'{"query": "SELECT A FROM Texts WHERE A = \'' + value[1:-1] + b'\'"}'),
        ]:
            for headers in (js, {}):  # FastAPI reads a body without a content type as JSON too
                r = ws.api.post(path, content=body, headers=headers)
                assert r.status_code == 400 and r.json()["code"] == "INVALID_VALUE", (path, body, r.text)
        r = httpx.post(f"{base_url}/functions/v1/mcp-server", content=b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call",'
                       b' "params": {"name": "create_record", "arguments": {"table_id": "Texts", "fields": {"A": ' + value + b'}}}}',
                       headers={**js, "Authorization": f"Bearer {ws.builder_token}", "Accept": "application/json, text/event-stream"})
        assert r.status_code == 400 and r.json()["code"] == "INVALID_VALUE", r.text
    assert ws.api.get(records).json()["records"] == []
    assert [x["name"] for x in ws.api.get("/tables").json()] == ["Texts"]
    assert [c["name"] for c in ws.api.get(f"/tables/{t['id']}").json()["columns"]] == ["A"]
    # a pair is one character; an escaped backslash is a backslash
    for body, stored in [(b'{"fields": {"A": "\\ud83d\\ude00 ok"}}', "\U0001F600 ok"),
                         (b'{"fields": {"A": "\\\\ud800"}}', "\\ud800")]:
        r = ws.api.post(records, content=body, headers=js)
        assert r.status_code == 201 and r.json()["fields"]["A"] == stored, r.text


def test_bodies_that_are_not_utf8_are_refused_before_any_route(ws, base_url):
    """Python's json reads bytes with "surrogatepass": the three bytes of a lone surrogate
    (ED A0 80) became a str no encoder can write, and every route that stored or hashed it
    answered 500 (even the token-less signup and public form). A body that is not UTF-8 is
    400 and changes nothing: INVALID_VALUE when it holds a surrogate's bytes, else
    VALIDATION_ERROR (UTF-16, Latin-1)."""
    t = ws.create_table("Raw", [{"name": "A", "type": "text"}])
    records = f"/tables/{t['id']}/records"
    made = ws.api.post(records, json={"fields": {"A": "kept"}}).json()
    js = {"Content-Type": "application/json"}
    raw = b'"\xed\xa0\x80"'
    for path, body, method in [
        (records, b'{"fields": {"A": ' + raw + b'}}', "POST"),
        (f"{records}/batch", b'{"rows": [{"fields": {"A": "fine"}}, {"fields": {"A": ' + raw + b'}}]}', "POST"),
        (f"{records}/{made['id']}", b'{"fields": {"A": ' + raw + b'}}', "PATCH"),
        ("/tables", b'{"name": ' + raw + b', "columns": []}', "POST"),
        (f"/tables/{t['id']}/columns", b'{"name": ' + raw + b', "type": "text"}', "POST"),
        ("/agents", b'{"name": ' + raw + b'}', "POST"),
    ]:
        r = ws.api.request(method, path, content=body, headers=js)
        assert r.status_code == 400 and r.json()["code"] == "INVALID_VALUE", (path, r.text)
    for url in (f"{base_url}/functions/v1/auth/signup", f"{base_url}/p/no-such-share"):  # no token needed
        r = httpx.post(url, content=b'{"workspace_id": 1, "email": ' + raw + b', "password": "Correct-Horse-9"}',
                       headers=js)
        assert r.status_code == 400 and r.json()["code"] == "INVALID_VALUE", (url, r.text)
    for body in ('{"fields": {"A": "é"}}'.encode("latin-1"), '{"fields": {"A": "é"}}'.encode("utf-16")):
        r = ws.api.post(records, content=body, headers=js)
        assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR", r.text
        assert "UTF-8" in r.json()["error"]
    # nothing changed; UTF-8 text (with a BOM-less emoji) still goes in
    assert [x["fields"]["A"] for x in ws.api.get(records).json()["records"]] == ["kept"]
    assert [x["name"] for x in ws.api.get("/tables").json()] == ["Raw"]
    r = ws.api.post(records, content='{"fields": {"A": "é😀"}}'.encode(), headers=js)
    assert r.status_code == 201 and r.json()["fields"]["A"] == "é😀", r.text


def test_a_body_that_is_not_json_is_415_on_rest_and_sql(ws):
    """REST and SQL take JSON bodies only: another media type was answered with the body
    model's validation message ("Input should be a valid dictionary ..."); it is 415
    UNSUPPORTED_MEDIA_TYPE, naming what to send, and changes nothing."""
    t = ws.create_table("Media", [{"name": "A", "type": "text"}])
    records = f"/tables/{t['id']}/records"
    for media, body in [("text/plain", b'{"fields": {"A": "x"}}'), ("application/xml", b"<a/>"),
                        ("application/x-www-form-urlencoded", b'{"fields": {"A": "x"}}'),
                        ("multipart/form-data; boundary=x", b"--x--")]:
        for path in (records, f"{records}/batch", "/sql", "/tables"):
            r = ws.api.post(path, content=body, headers={"Content-Type": media})
            assert r.status_code == 415, (media, path, r.text)
            assert r.json()["code"] == "UNSUPPORTED_MEDIA_TYPE" and "application/json" in r.json()["error"]
    assert ws.api.get(records).json()["records"] == []
    # JSON media types are read as before; an empty body (curl -X POST -d '') goes on to the route
    for headers in ({"Content-Type": "application/json; charset=utf-8"}, {"Content-Type": "application/merge+json"}):
        r = ws.api.post(records, content=b'{"fields": {"A": "x"}}', headers=headers)
        assert r.status_code == 201, (headers, r.text)
    rid = ws.api.get(records).json()["records"][0]["id"]
    r = ws.api.post(f"{records}/{rid}/run", content=b"", headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code != 415, r.text


async def test_a_statement_racing_a_schema_change_is_409_schema_changed_on_every_door(ws, services):
    """A column deleted after a request read the table's shape (here: its physical column
    dropped under the API's cached shape, the window a concurrent delete leaves) made the
    request's statement fail with an unhandled error: 500 ``INTERNAL`` on REST, on MCP too.
    Every door now answers 409 ``SCHEMA_CHANGED``, and the failed statement wrote nothing."""
    import psycopg
    from psycopg import sql

    from tests.mcp.conftest import connect, error_code

    t = ws.create_table("Racy", [{"name": "A", "type": "number"}, {"name": "X", "type": "number"},
                                 {"name": "F", "type": "formula", "formula": "{A} * 2"}])
    x = next(c for c in t["columns"] if c["name"] == "X")
    assert ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 1}}).status_code == 201  # shape read
    target = sql.SQL("{}.{}").format(sql.Identifier(f"ws_{ws.id}"), sql.Identifier(f"t_{t['id']}"))
    with psycopg.connect(services.pg.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN {}").format(target, sql.Identifier(f"c_{x['id']}")))
    answers = [
        ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 2}}),
        ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": [{"fields": {"A": 3}}, {"fields": {"A": 4}}]}),
        ws.api.post(f"/tables/{t['id']}/records/batch",
                    json={"rows": [{"fields": {"A": 5}}], "run_pipeline": False}),
        ws.api.get(f"/tables/{t['id']}/records"),
        ws.api.get(f"/tables/{t['id']}/records", params={"A": "gt.0", "order": "F.desc"}),
    ]
    for r in answers:
        assert r.status_code == 409 and r.json()["code"] == "SCHEMA_CHANGED", r.text
        assert "retry" in r.json()["error"]
    async with connect(ws.base_url, ws.builder_token) as c:
        assert error_code(await c.call_tool("create_record", {"table_id": t["id"], "fields": {"A": 6}})) == "SCHEMA_CHANGED"
        assert error_code(await c.call_tool("list_records", {"table_id": t["id"]})) == "SCHEMA_CHANGED"
    with psycopg.connect(services.pg.dsn) as conn:
        assert conn.execute(sql.SQL("SELECT count(*) FROM {}").format(target)).fetchone()[0] == 1  # nothing written


def test_a_create_waiting_for_a_table_being_dropped_is_409_not_500(ws, services):
    """A create takes its record ids with ``nextval('<sequence>'::regclass)``: the cast
    finds the sequence's OID, then ``nextval`` waits for the lock of a DELETE of the table
    running meanwhile, and once that commits the sequence is gone: psycopg's
    ``InternalError`` "could not open relation with OID", answered 500 ``INTERNAL``. It is
    a statement racing a schema change like any other: 409 ``SCHEMA_CHANGED``."""
    import threading
    import time

    import psycopg
    from psycopg import sql

    t = ws.create_table("Dropped", [{"name": "A", "type": "number"},
                                    {"name": "F", "type": "formula", "formula": "{A} * 2"}])
    records = f"/tables/{t['id']}/records"
    assert ws.api.post(records, json={"fields": {"A": 1}}).status_code == 201  # the API has the shape
    target = sql.SQL("{}.{}").format(sql.Identifier(f"ws_{ws.id}"), sql.Identifier(f"t_{t['id']}"))
    answers: list[httpx.Response] = []
    with psycopg.connect(services.pg.dsn) as conn:  # a table delete, not yet committed
        conn.execute(sql.SQL("DROP TABLE {} CASCADE").format(target))
        writer = threading.Thread(target=lambda: answers.append(
            ws.client(ws.builder_token).post(records, json={"fields": {"A": 2}})))
        writer.start()
        time.sleep(1.0)  # the create waits for the sequence's lock
        conn.commit()
    writer.join(30)
    r = answers[0]
    assert r.status_code == 409 and r.json()["code"] == "SCHEMA_CHANGED", r.text


def test_numbers_no_double_holds_or_written_oddly_are_refused_never_a_500(ws):
    """An integer of 309+ digits made ``float()`` raise: 500 ``INTERNAL`` on every write
    (and failed a whole batch) and on ``POST /sql``. Numeric text takes JSON's syntax
    only (``float()`` also took ``1_000`` and other scripts' digits), and text too small
    for a double is refused rather than stored as 0."""
    t = ws.create_table("Nums", [{"name": "A", "type": "number"}])
    big = int("1" + "0" * 400)
    rec = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 1}}).json()
    for r in (ws.api.post(f"/tables/{t['id']}/records", content=f'{{"fields": {{"A": {big}}}}}',
                          headers={"Content-Type": "application/json"}),
              ws.api.patch(f"/tables/{t['id']}/records/{rec['id']}", content=f'{{"fields": {{"A": {big}}}}}',
                           headers={"Content-Type": "application/json"})):
        assert r.status_code == 400 and r.json()["code"] == "INVALID_VALUE", r.text
        assert "finite number" in r.json()["error"]
    batch = ws.api.post(f"/tables/{t['id']}/records/batch",
                        content=f'{{"rows": [{{"fields": {{"A": 2}}}}, {{"fields": {{"A": {big}}}}}]}}',
                        headers={"Content-Type": "application/json"})
    assert batch.status_code == 200, batch.text  # the bad row has its own error
    results = batch.json()["results"]
    assert results[0]["record"]["fields"]["A"] == 2 and results[1]["code"] == "INVALID_VALUE"
    for text, stored in (("12", 12), (" 12 ", 12), ("+3", 3), (".5", 0.5), ("5.", 5), ("1e3", 1000), ("-0", 0)):
        r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": text}})
        assert r.status_code == 201 and r.json()["fields"]["A"] == stored, (text, r.text)
    for text in ("1_000", "\u0661\u0662", "1,234.5", "$12", "0x10", "1e-400", "-2.5e-330", "nan", "inf", ""):
        r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": text}})
        assert r.status_code == 400 and r.json()["code"] == "INVALID_VALUE", (text, r.text)
    assert ws.api.get(f"/tables/{t['id']}/records", params={"limit": "1000"}).json()["records"].__len__() == 9
    for query in (f'SELECT id FROM "Nums" WHERE A > {big}', f'SELECT id FROM "Nums" WHERE A IN (1, {big})',
                  f'SELECT id FROM "Nums" WHERE id = {big}'):
        r = ws.api.post("/sql", json={"query": query})
        assert r.status_code == 400 and r.json()["code"] == "INVALID_SQL", (query, r.text)
