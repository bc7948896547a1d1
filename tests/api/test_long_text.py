"""Long text in data text columns (up to storage/values.py ``MAX_TEXT``) is stored by every
writer, and equality, ranges, ``in``, sort and keyset cursors stay exact on it.

A btree entry must stay under ~2.7 kB: a text column's value index holds the first
characters only (``storage/ddl.py text_key_expr``) and the query compiler bounds that
prefix before comparing the whole text (``storage/query/build.py``).
"""

from __future__ import annotations

import secrets

import httpx


def _long(n: int = 4000, head: str = "") -> str:
    """``n`` characters of incompressible text (random base64) after ``head``."""
    return head + secrets.token_urlsafe(n)[: n - len(head)]


def _ids(ws, t, params):
    r = ws.api.get(f"/tables/{t['id']}/records", params={**params, "select": ""})
    assert r.status_code == 200, r.text
    return [x["id"] for x in r.json()["records"]]


def test_long_text_is_stored_by_create_update_batch_and_mcp(ws, base_url):
    t = ws.create_table("Texts", [{"name": "A", "type": "text"}, {"name": "B", "type": "text"}])
    records = f"/tables/{t['id']}/records"
    one, two, three = _long(), _long(), _long(20_000)
    r = ws.api.post(records, json={"fields": {"A": one}})
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    assert ws.api.get(f"{records}/{rid}").json()["fields"]["A"] == one
    r = ws.api.patch(f"{records}/{rid}", json={"fields": {"A": two, "B": three}})
    assert r.status_code == 200, r.text
    assert ws.api.get(f"{records}/{rid}").json()["fields"] == {"A": two, "B": three}
    rows = [{"fields": {"A": _long(), "B": _long(5000)}} for _ in range(3)]
    r = ws.api.post(f"{records}/batch", json={"rows": rows})
    assert r.status_code == 200, r.text
    value = _long()
    r = httpx.post(f"{base_url}/functions/v1/mcp-server", json={
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "create_record", "arguments": {"table_id": "Texts", "fields": {"A": value}}}},
        headers={"Authorization": f"Bearer {ws.builder_token}", "Accept": "application/json, text/event-stream"})
    assert r.status_code == 200, r.text
    assert not r.json()["result"].get("isError"), r.text
    stored = sorted(x["fields"]["A"] for x in ws.api.get(records, params={"limit": "100"}).json()["records"])
    assert stored == sorted([two, value] + [row["fields"]["A"] for row in rows])


def test_filters_sort_and_cursors_are_exact_on_long_text(ws):
    t = ws.create_table("Long", [{"name": "A", "type": "text"}])
    head = "p" * 250  # longer than the indexed prefix: these differ only past it
    values = [_long(3000, head) for _ in range(5)] + [_long(3000) for _ in range(3)]
    values += [values[0], head, head + "a", "short", "", None]  # a duplicate, short ones and a NULL
    rows = [{"fields": {"A": v}} for v in values]
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows})
    assert r.status_code == 200, r.text
    listed = ws.api.get(f"/tables/{t['id']}/records", params={"limit": "100"}).json()["records"]
    by_id = {x["id"]: x["fields"]["A"] for x in listed}
    assert sorted(by_id.values(), key=lambda v: (v is None, v or "")) == sorted(
        values, key=lambda v: (v is None, v or ""))

    def expected(pred, desc=False):
        keep = [(v, i) for i, v in by_id.items() if v is not None and pred(v)]
        return [i for _, i in sorted(keep, reverse=desc)]

    for v in (values[0], values[3], head, values[6]):
        assert sorted(_ids(ws, t, {"A": f"eq.{v}"})) == expected(lambda x, v=v: x == v)
        assert _ids(ws, t, {"A": f"gt.{v}", "order": "A.asc"}) == expected(lambda x, v=v: x > v)
        assert _ids(ws, t, {"A": f"gte.{v}", "order": "A.asc"}) == expected(lambda x, v=v: x >= v)
        assert _ids(ws, t, {"A": f"lt.{v}", "order": "A.desc"}) == expected(lambda x, v=v: x < v, desc=True)
        assert _ids(ws, t, {"A": f"lte.{v}", "order": "A.desc"}) == expected(lambda x, v=v: x <= v, desc=True)
        assert sorted(_ids(ws, t, {"A": f"neq.{v}"})) == sorted(i for i, x in by_id.items() if x != v)
    # contains search reads the trigram index (GIN: no entry-size limit), on long text too
    middle = values[2][1500:1520]
    assert sorted(_ids(ws, t, {"A": f"ilike.*{middle.upper()}*"})) == sorted(
        expected(lambda x: middle.lower() in x.lower()))
    assert sorted(_ids(ws, t, {"A": f"like.*{middle}*"})) == sorted(expected(lambda x: middle in x))
    pick = [values[1], values[7], "short"]
    assert sorted(_ids(ws, t, {"A": "in.(" + ",".join(pick) + ")"})) == sorted(expected(lambda x: x in pick))

    nulls_last = sorted(by_id.items(), key=lambda kv: (kv[1] is None, kv[1] or "", kv[0]))
    for order, want in [("A.asc", [i for i, _ in nulls_last]),
                        ("A.desc", [i for i, _ in reversed(nulls_last)])]:
        assert _ids(ws, t, {"order": order, "limit": "100"}) == want
        seen: list[int] = []
        params = {"order": order, "limit": "2", "select": ""}
        for _ in range(20):
            page = ws.api.get(f"/tables/{t['id']}/records", params=params)
            assert page.status_code == 200, page.text
            seen.extend(x["id"] for x in page.json()["records"])
            if not page.json()["next"]:
                break
            assert len(page.json()["next"]) < 8192
            params = {**params, "after": page.json()["next"]}
        assert seen == want, order
