"""A page of records holds at most ``PAGE_MAX_BYTES`` (16 MiB) of JSON; past it the list is
refused with ``RESULT_TOO_LARGE`` and how many of its records fit (``fit``), never cut short.

The hostile-tenant probe: text cells hold up to 1,000,000 characters, so a page of 1,000
of them was a gigabyte that PostgreSQL built in one string and the API, which every
workspace shares, then decoded, copied and sent. The cap is measured inside PostgreSQL
before the page is built (``storage/query/render.py``, ``storage/query/listing.py``): by
the rendered record on the fast path, by the values' JSON on the decoded one (embedded
records, files).
"""

from __future__ import annotations

import secrets

PAGE_MAX_BYTES = 16 * 1024 * 1024  # storage.query.listing.PAGE_MAX_BYTES

MIB = 1024 * 1024
MILLION = 1_000_000


def _text(n: int = MILLION) -> str:
    return secrets.token_urlsafe(n)[:n]


def _fill(ws, table_id: int, rows: list[dict], per: int = 4) -> list[int]:
    """Create ``rows`` ``per`` at a time (a body holds at most 10 MiB)."""
    ids: list[int] = []
    for start in range(0, len(rows), per):
        r = ws.api.post(f"/tables/{table_id}/records/batch", json={"rows": rows[start:start + per]})
        assert r.status_code == 200, r.text
        ids.extend(x["record"]["id"] for x in r.json()["results"])
    return ids


def _too_large(r, fit: int) -> None:
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["code"] == "RESULT_TOO_LARGE" and body["fit"] == fit and body["max_bytes"] == PAGE_MAX_BYTES, body
    assert "16 MiB" in body["error"], body


def test_a_page_past_16_mib_is_refused_with_how_many_fit_and_pages_at_that_limit(ws):
    t = ws.create_table("Big", [{"name": "Body", "type": "text"}, {"name": "N", "type": "number"}])
    ids = _fill(ws, t["id"], [{"fields": {"Body": _text(), "N": i}} for i in range(20)])
    records = f"/tables/{t['id']}/records"
    # 16 records of ~1,000,080 bytes fit in 16 MiB (16,777,216), 17 do not
    fit = PAGE_MAX_BYTES // (MILLION + 200)
    assert fit == 16
    for params in ({}, {"limit": "20"}, {"order": "N.desc"}, {"N": "gte.0"}, {"Body": "like.*"}):
        _too_large(ws.api.get(records, params=params), fit)
    # the same with a count: the count is not read when the page is refused
    _too_large(ws.api.get(records, headers={"Prefer": "count=exact"}), fit)
    # asked as the error says, the table pages whole, by cursor and by offset
    seen: list[int] = []
    params = {"limit": str(fit), "order": "N.asc"}
    while True:
        r = ws.api.get(records, params=params)
        assert r.status_code == 200, r.text
        page = r.json()
        assert all(len(x["fields"]["Body"]) == MILLION for x in page["records"])
        seen.extend(x["id"] for x in page["records"])
        if not page["next"]:
            break
        params = {"limit": str(fit), "order": "N.asc", "after": page["next"]}
    assert seen == ids
    r = ws.api.get(records, params={"limit": str(fit), "offset": str(fit), "order": "N.asc"})
    assert [x["id"] for x in r.json()["records"]] == ids[fit:]
    # fewer fields: the whole table in one page
    r = ws.api.get(records, params={"select": "N", "limit": "100"})
    assert r.status_code == 200 and len(r.json()["records"]) == 20, r.text


def test_the_cap_counts_the_json_written_not_the_characters_stored(ws):
    """A control character is one byte stored and six written (``\\u0001``): three such
    1,000,000-character cells are 18 MB of JSON. Measured as rendered, two fit."""
    t = ws.create_table("Ctl", [{"name": "Body", "type": "text"}])
    _fill(ws, t["id"], [{"fields": {"Body": "\x01" * MILLION}} for _ in range(3)], per=1)
    _too_large(ws.api.get(f"/tables/{t['id']}/records"), 2)
    r = ws.api.get(f"/tables/{t['id']}/records", params={"limit": "2"})
    assert r.status_code == 200 and [x["fields"]["Body"] for x in r.json()["records"]] == ["\x01" * MILLION] * 2


def test_a_page_with_one_long_record_among_short_ones_is_served_whole(ws):
    """A record longer than its share of the cap (16 MiB over the rows read) takes the
    measured path; the page is the same as without it, cursor included."""
    t = ws.create_table("Mixed", [{"name": "Body", "type": "text"}, {"name": "N", "type": "number"}])
    rows = [{"fields": {"Body": "short", "N": i}} for i in range(150)]
    rows[3]["fields"]["Body"] = _text()
    rows[60]["fields"]["Body"] = _text(400_000)
    ids = _fill(ws, t["id"], rows)
    records = f"/tables/{t['id']}/records"
    r = ws.api.get(records, params={"order": "N.asc"})
    assert r.status_code == 200, r.text
    page = r.json()
    assert [x["id"] for x in page["records"]] == ids[:100]
    assert [len(x["fields"]["Body"]) for x in page["records"][:5]] == [5, 5, 5, MILLION, 5]
    r = ws.api.get(records, params={"order": "N.asc", "after": page["next"]})
    assert [x["id"] for x in r.json()["records"]] == ids[100:] and r.json()["next"] is None


def test_a_record_past_the_cap_alone_after_the_page_is_left_to_the_next_page(ws):
    """The row read past the page (the one that tells a next page exists) may be too long
    to be part of the page's text: the page is served, and the next page refused with
    ``fit`` 0 and the way out (fewer fields, or the record by id)."""
    names = [f"T{i}" for i in range(17)]
    t = ws.create_table("Wide", [{"name": n, "type": "text"} for n in names] + [{"name": "N", "type": "number"}])
    records = f"/tables/{t['id']}/records"
    small = _fill(ws, t["id"], [{"fields": {"T0": "a", "N": 0}}])[0]
    big = _fill(ws, t["id"], [{"fields": {"N": 1}}])[0]
    for start in range(0, len(names), 8):  # 17 MB over three PATCHes
        r = ws.api.patch(f"{records}/{big}", json={"fields": {n: _text() for n in names[start:start + 8]}})
        assert r.status_code == 200, r.text
    r = ws.api.get(records, params={"limit": "1", "order": "N.asc"})
    assert r.status_code == 200, r.text
    assert [x["id"] for x in r.json()["records"]] == [small] and r.json()["next"]
    r2 = ws.api.get(records, params={"limit": "1", "order": "N.asc", "after": r.json()["next"]})
    _too_large(r2, 0)
    assert "by id" in r2.json()["error"]
    assert ws.api.get(f"{records}/{big}").status_code == 200
    r = ws.api.get(records, params={"limit": "5", "order": "N.asc", "select": "N,T0"})
    assert [x["id"] for x in r.json()["records"]] == [small, big]


def test_pages_decoded_in_python_are_capped_too(ws):
    """Embedded related records and file columns are decoded in Python: measured by their
    values' JSON, the related records' included."""
    people = ws.create_table("People", [{"name": "Bio", "type": "text"}])
    pids = _fill(ws, people["id"], [{"fields": {"Bio": _text()}} for _ in range(3)])
    t = ws.create_table("Tasks", [{"name": "N", "type": "number"},
                                  {"name": "Owner", "type": "relation", "relation_table_id": people["id"]}])
    _fill(ws, t["id"], [{"fields": {"N": i, "Owner": pids[i % 3]}} for i in range(20)])
    records = f"/tables/{t['id']}/records"
    r = ws.api.get(records, params={"limit": "5", "order": "N.asc"})
    assert r.status_code == 200 and len(r.json()["records"]) == 5  # ids only: small
    for params in ({"expand": "Owner"}, {"select": "N,Owner(Bio)"}):
        _too_large(ws.api.get(records, params={**params, "order": "N.asc"}), 16)
        r = ws.api.get(records, params={**params, "order": "N.asc", "limit": "16"})
        assert r.status_code == 200, r.text
        assert len(r.json()["records"]) == 16 and r.json()["next"]

