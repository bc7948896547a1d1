"""Column type changes convert the stored values (issue 21 item 5; docs/type-conversions.md).

Every ordered pair of the 8 data types, through the REST API on the real PostgreSQL: the
converted values, a lossy change refused with 409 LOSSY_CHANGE (count, record ids, nothing
changed), the same change with ``allow_loss``, and the per-type index after the change.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import psycopg
import pytest

from storage.schema import OPTION_COLORS

DATA_TYPES = ("text", "number", "date", "checkbox", "single_select", "multi_select", "relation", "file")


class Rec:
    """A record id of the related table ("Target": Acme is 0, Globex is 1)."""

    def __init__(self, index: int) -> None:
        self.index = index


U1, U2 = "https://a.example/x.pdf", "https://b.example/y.png"
D = "2024-03-05T00:00:00+00:00"


def epoch(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat()


# (from, to, values before, values after (select values by label, Rec for related ids), lost indices)
CASES: list[tuple[str, str, list[Any], list[Any], list[int]]] = [
    ("text", "number", ["12", " 3.5 ", " 7 ", "-4", "1,234.5", "1e3", "$12", "abc", "", None],
     [12, 3.5, 7, -4, 1234.5, 1000, 12, None, None, None], [7]),
    ("text", "date", ["2024-03-05", "2024-03-05 14:30", "2024-03-05T14:30:00Z", "03/05/2024", "5 March 2024",
                      "March 5, 2024", "soon", "2024-02-30"],
     [D, "2024-03-05T14:30:00+00:00", "2024-03-05T14:30:00+00:00", D, D, D, None, None], [6, 7]),
    ("text", "checkbox", ["yes", "Off", "1", "CHECKED", "maybe", " "], [True, False, True, True, False, False], [4]),
    ("text", "single_select", ["red", " blue ", "red", "", None], ["red", "blue", "red", None, None], []),
    ("text", "multi_select", ["a, b", "b", "c,a,", None], [["a", "b"], ["b"], ["c", "a"], []], []),
    ("text", "relation", ["REC0", "Globex", "999999", "nobody"], [Rec(0), Rec(1), None, None], [2, 3]),
    ("text", "file", [U1, f"{U1}, {U2}", "not a url"], [[U1], [U1, U2], []], [2]),
    ("number", "text", [42, 3.5, -0.25, None], ["42", "3.5", "-0.25", None], []),
    ("number", "date", [0, 1709649000.5], [epoch(0), "2024-03-05T14:30:00.5+00:00"], []),
    ("number", "checkbox", [1, 0, 2], [True, False, False], [2]),
    ("number", "single_select", [1, 2.5, 1], ["1", "2.5", "1"], []),
    ("number", "multi_select", [7, None], [["7"], []], []),
    ("number", "relation", [Rec(0), 999999, 1.5], [Rec(0), None, None], [1, 2]),
    ("number", "file", [1, None], [[], []], [0]),
    ("date", "text", ["2024-03-05", "2024-03-05T14:30:00Z", "2024-03-05T14:30:00.25Z"],
     ["2024-03-05", "2024-03-05T14:30:00+00:00", "2024-03-05T14:30:00.25+00:00"], []),
    ("date", "number", ["1970-01-02T00:00:00Z", "2024-03-05T14:30:00.5Z"], [86400, 1709649000.5], []),
    ("date", "checkbox", ["2024-03-05", None], [False, False], [0]),
    ("date", "single_select", ["2024-03-05", "2024-03-05"], ["2024-03-05", "2024-03-05"], []),
    ("date", "multi_select", ["2024-03-05"], [["2024-03-05"]], []),
    ("date", "relation", ["2024-03-05"], [None], [0]),
    ("date", "file", ["2024-03-05"], [[]], [0]),
    ("checkbox", "text", [True, False, None], ["true", "false", None], []),
    ("checkbox", "number", [True, False, None], [1, 0, None], []),
    ("checkbox", "date", [True, None], [None, None], [0]),
    ("checkbox", "single_select", [True, False], ["true", "false"], []),
    ("checkbox", "multi_select", [True], [["true"]], []),
    ("checkbox", "relation", [True], [None], [0]),
    ("checkbox", "file", [True], [[]], [0]),
    ("single_select", "text", ["Alpha", "Beta", None], ["Alpha", "Beta", None], []),
    ("single_select", "number", ["12", "x"], [12, None], [1]),
    ("single_select", "date", ["2024-03-05", "x"], [D, None], [1]),
    ("single_select", "checkbox", ["yes", "no", "x"], [True, False, False], [2]),
    ("single_select", "multi_select", ["a", None], [["a"], []], []),
    ("single_select", "relation", ["Acme", "x"], [Rec(0), None], [1]),
    ("single_select", "file", [U1, "x"], [[U1], []], [1]),
    ("multi_select", "text", [["a", "b"], [], None], ["a, b", None, None], []),
    ("multi_select", "number", [["12"], ["1", "2"], []], [12, None, None], [1]),
    ("multi_select", "date", [["2024-03-05"], ["x"]], [D, None], [1]),
    ("multi_select", "checkbox", [["yes"], ["yes", "no"]], [True, False], [1]),
    ("multi_select", "single_select", [["a"], ["a", "b"], []], ["a", None, None], [1]),
    ("multi_select", "relation", [["Acme"], ["Acme", "Globex"]], [Rec(0), None], [1]),
    ("multi_select", "file", [[U1, U2], ["x"]], [[U1, U2], []], [1]),
    ("relation", "text", [Rec(0), None], ["REC0", None], []),
    ("relation", "number", [Rec(1)], [Rec(1)], []),
    ("relation", "date", [Rec(0), None], [None, None], [0]),
    ("relation", "checkbox", [Rec(0)], [False], [0]),
    ("relation", "single_select", [Rec(0), Rec(0)], ["REC0", "REC0"], []),
    ("relation", "multi_select", [Rec(1)], [["REC1"]], []),
    ("relation", "file", [Rec(0)], [[]], [0]),
    ("file", "text", [[U1, U2], [], None], [f"{U1}, {U2}", None, None], []),
    ("file", "number", [[U1]], [None], [0]),
    ("file", "date", [[U1]], [None], [0]),
    ("file", "checkbox", [[U1], []], [False, False], [0]),
    ("file", "single_select", [[U1]], [None], [0]),
    ("file", "multi_select", [[U1]], [[]], [0]),
    ("file", "relation", [[U1]], [None], [0]),
]


def test_every_ordered_pair_has_a_case():
    assert {(a, b) for a, b, *_ in CASES} == {(a, b) for a in DATA_TYPES for b in DATA_TYPES if a != b}


def _resolve(value: Any, recs: list[int]) -> Any:
    if isinstance(value, Rec):
        return recs[value.index]
    if isinstance(value, str) and value.startswith("REC"):
        return str(recs[int(value[3:])])
    if isinstance(value, list):
        return [_resolve(v, recs) for v in value]
    return value


def _labels(col: dict[str, Any], value: Any) -> Any:
    """Select values as labels (the API returns option ids)."""
    by_id = {o["id"]: o["label"] for o in col["options"]}
    if col["type"] == "single_select":
        return by_id[value] if value is not None else None
    if col["type"] == "multi_select":
        return [by_id[v] for v in value]
    return value


def _source_options(from_type: str, values: list[Any]) -> list[str]:
    labels: list[str] = []
    for v in values:
        for label in (v if isinstance(v, list) else [v]):
            if isinstance(label, str) and label not in labels:
                labels.append(label)
    return labels


def _index_of(dsn: str, ws_id: int, table_id: int, col_id: int) -> str | None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = %s",
            (f"ws_{ws_id}", f"t_{table_id}_c_{col_id}"),
        ).fetchone()
    return row[0] if row else None


def _setup(ws, from_type: str, values: list[Any]) -> tuple[dict[str, Any], dict[str, Any], list[int], list[int], dict[str, Any]]:
    target = ws.create_table("Target", [{"name": "Name", "type": "text"}])
    recs = [ws.api.post(f"/tables/{target['id']}/records", json={"fields": {"Name": n}}).json()["id"]
            for n in ("Acme", "Globex")]
    spec: dict[str, Any] = {"name": "V", "type": from_type}
    if from_type in ("single_select", "multi_select"):
        spec["options"] = _source_options(from_type, values) or ["unused"]
    if from_type == "relation":
        spec["relation_table_id"] = target["id"]
    t = ws.create_table("Src", [spec, {"name": "Other", "type": "text"}])
    col = t["columns"][0]
    ids = []
    for i, v in enumerate(values):
        r = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"V": _resolve(v, recs), "Other": f"r{i}"}})
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    return t, col, ids, recs, target


def _blank(v: Any) -> bool:
    return v is None or v == [] or (isinstance(v, str) and not v.strip())


def _values(ws, t: dict[str, Any], ids: list[int]) -> tuple[dict[str, Any], list[Any]]:
    col = next(c for c in ws.api.get(f"/tables/{t['id']}/columns").json() if c["name"] == "V")
    got = [ws.api.get(f"/tables/{t['id']}/records/{i}").json()["fields"] for i in ids]
    assert [g["Other"] for g in got] == [f"r{i}" for i in range(len(ids))]
    return col, [_labels(col, g["V"]) for g in got]


@pytest.mark.parametrize(("from_type", "to_type", "before", "after", "lost"), CASES,
                         ids=[f"{a}->{b}" for a, b, *_ in CASES])
def test_type_change_converts_values(ws, services, from_type, to_type, before, after, lost):
    t, col, ids, recs, target = _setup(ws, from_type, before)
    body: dict[str, Any] = {"type": to_type}
    if to_type == "relation":
        body["relation_table_id"] = target["id"]
    url = f"/tables/{t['id']}/columns/{col['id']}"
    col_before, values_before = _values(ws, t, ids)
    if lost:
        r = ws.api.patch(url, json=body)
        assert r.status_code == 409, r.text
        err = r.json()
        assert err["code"] == "LOSSY_CHANGE" and err["count"] == len(lost)
        assert err["record_ids"] == [ids[i] for i in lost] and "error" in err
        # nothing changed: the type, the options, the values
        col_now, values_now = _values(ws, t, ids)
        assert col_now == col_before and values_now == values_before
        body["allow_loss"] = True
    r = ws.api.patch(url, json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["type"] == to_type
    assert out["conversion"] == {"converted": sum(not _blank(v) for v in before) - len(lost), "lost": len(lost)}
    _, values_after = _values(ws, t, ids)
    assert values_after == _resolve(after, recs)
    index = _index_of(services.pg.dsn, ws.id, t["id"], col["id"])
    if to_type == "file":
        assert index is None
    else:
        assert index is not None and ("USING gin" in index) == (to_type == "multi_select")
    # the column still takes writes of its new type
    if to_type in ("text", "number", "checkbox"):
        sample = {"text": "new", "number": 5, "checkbox": True}[to_type]
        w = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"V": sample}})
        assert w.status_code == 201 and w.json()["fields"]["V"] == sample


def test_text_to_select_creates_options_with_palette_colors(ws):
    t = ws.create_table("S", [{"name": "V", "type": "text"}])
    for v in ["x", "y", "x", " z "]:
        ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"V": v}})
    r = ws.api.patch(f"/tables/{t['id']}/columns/{t['columns'][0]['id']}",
                     json={"type": "single_select", "options": [{"label": "y", "color": "pink"}]})
    assert r.status_code == 200, r.text
    opts = r.json()["options"]
    assert [o["label"] for o in opts] == ["y", "x", "z"]
    assert [o["color"] for o in opts] == ["pink", OPTION_COLORS[1], OPTION_COLORS[2]]
    assert r.json()["conversion"] == {"converted": 4, "lost": 0}


def test_labels_first_seen_in_one_value_become_options_in_their_order_there(ws):
    """type-conversions.md: options are made in the order the values first appear (lowest
    record id first). Two labels first seen in one record came out in alphabetical order."""
    t = ws.create_table("M", [{"name": "V", "type": "text"}])
    for v in ["zulu, alpha", "mike", "alpha, kilo"]:
        ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"V": v}})
    r = ws.api.patch(f"/tables/{t['id']}/columns/{t['columns'][0]['id']}", json={"type": "multi_select"})
    assert r.status_code == 200, r.text
    assert [o["label"] for o in r.json()["options"]] == ["zulu", "alpha", "mike", "kilo"]
    # a formula's list, as the report found it
    f = ws.create_table("FL", [{"name": "A", "type": "text"},
                               {"name": "L", "type": "formula", "formula": 'SPLIT({A}, ",")'}])
    for v in ["zulu,alpha", "mike"]:
        ws.api.post(f"/tables/{f['id']}/records", json={"fields": {"A": v}})
    r = ws.api.patch(f"/tables/{f['id']}/columns/{f['columns'][1]['id']}", json={"type": "multi_select"})
    assert r.status_code == 200, r.text
    assert [o["label"] for o in r.json()["options"]] == ["zulu", "alpha", "mike"]


def test_relation_to_another_table_is_a_loss(ws):
    a = ws.create_table("A", [{"name": "Name", "type": "text"}])
    b = ws.create_table("B", [{"name": "Name", "type": "text"}])
    rid = ws.api.post(f"/tables/{a['id']}/records", json={"fields": {"Name": "n"}}).json()["id"]
    t = ws.create_table("R", [{"name": "L", "type": "relation", "relation_table_id": a["id"]}])
    rec = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"L": rid}}).json()
    url = f"/tables/{t['id']}/columns/{t['columns'][0]['id']}"
    r = ws.api.patch(url, json={"relation_table_id": b["id"]})
    assert r.status_code == 409 and r.json()["code"] == "LOSSY_CHANGE" and r.json()["record_ids"] == [rec["id"]]
    r = ws.api.patch(url, json={"relation_table_id": b["id"], "allow_loss": True})
    assert r.status_code == 200 and r.json()["relation_table"] == b["id"]
    assert ws.api.get(f"/tables/{t['id']}/records/{rec['id']}").json()["fields"]["L"] is None
    rid_b = ws.api.post(f"/tables/{b['id']}/records", json={"fields": {"Name": "m"}}).json()["id"]
    assert ws.api.patch(f"/tables/{t['id']}/records/{rec['id']}", json={"fields": {"L": rid_b}}).status_code == 200
    # the foreign key points at B now: a missing record is refused
    assert ws.api.patch(f"/tables/{t['id']}/records/{rec['id']}", json={"fields": {"L": 99999999}}).status_code == 400


def test_computed_to_data_keeps_the_computed_values(ws):
    t = ws.create_table("C", [{"name": "A", "type": "number"},
                              {"name": "F", "type": "formula", "formula": "{A} * 2"},
                              {"name": "G", "type": "formula", "formula": "\"n=\" & {A}"}])
    rec = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 3}}).json()
    assert rec["fields"]["F"] == 6
    f, g = t["columns"][1], t["columns"][2]
    r = ws.api.patch(f"/tables/{t['id']}/columns/{f['id']}", json={"type": "number"})
    assert r.status_code == 200, r.text
    assert r.json()["computed"] is False and r.json()["conversion"] == {"converted": 1, "lost": 0}
    r = ws.api.patch(f"/tables/{t['id']}/columns/{g['id']}", json={"type": "number"})
    assert r.status_code == 409 and r.json()["count"] == 1
    r = ws.api.patch(f"/tables/{t['id']}/columns/{g['id']}", json={"type": "text"})
    assert r.status_code == 200
    got = ws.api.get(f"/tables/{t['id']}/records/{rec['id']}").json()["fields"]
    assert got["F"] == 6 and got["G"] == "n=3"
    # now ordinary data: a write to it is taken
    assert ws.api.patch(f"/tables/{t['id']}/records/{rec['id']}", json={"fields": {"F": 7}}).json()["fields"]["F"] == 7


def test_data_to_computed_is_a_loss(ws):
    t = ws.create_table("C", [{"name": "A", "type": "number"}, {"name": "T", "type": "text"}])
    rec = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 2, "T": "keep me"}}).json()
    ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"A": 5, "T": "  "}})
    url = f"/tables/{t['id']}/columns/{t['columns'][1]['id']}"
    r = ws.api.patch(url, json={"type": "formula", "formula": "{A} + 1"})
    assert r.status_code == 409 and r.json() | {"error": ""} == {
        "error": "", "code": "LOSSY_CHANGE", "count": 1, "record_ids": [rec["id"]]}
    assert ws.api.get(url).json()["type"] == "text"
    r = ws.api.patch(url, json={"type": "formula", "formula": "{A} + 1", "allow_loss": True})
    assert r.status_code == 200 and r.json()["computed"] is True and r.json()["conversion"]["lost"] == 1


def test_removing_an_option_in_use_is_a_loss(ws):
    t = ws.create_table("O", [{"name": "S", "type": "single_select", "options": ["a", "b", "c"]},
                              {"name": "M", "type": "multi_select", "options": ["x", "y"]}])
    s, m = t["columns"]
    a_id = s["options"][0]["id"]
    rec = ws.api.post(f"/tables/{t['id']}/records", json={"fields": {"S": "b", "M": ["x", "y"]}}).json()
    # an unused option goes freely
    r = ws.api.patch(f"/tables/{t['id']}/columns/{s['id']}", json={"options": [{"id": a_id, "label": "a"}, "b"]})
    assert r.status_code == 200 and r.json()["conversion"] == {"converted": 0, "lost": 0}
    r = ws.api.patch(f"/tables/{t['id']}/columns/{s['id']}", json={"options": [{"id": a_id, "label": "a"}]})
    assert r.status_code == 409 and r.json()["code"] == "LOSSY_CHANGE"
    assert r.json()["count"] == 1 and r.json()["record_ids"] == [rec["id"]]
    assert len(ws.api.get(f"/tables/{t['id']}/columns/{s['id']}").json()["options"]) == 2
    r = ws.api.patch(f"/tables/{t['id']}/columns/{m['id']}", json={"options": ["x"]})
    assert r.status_code == 409 and r.json()["count"] == 1
    r = ws.api.patch(f"/tables/{t['id']}/columns/{m['id']}", json={"options": ["x"], "allow_loss": True})
    assert r.status_code == 200 and r.json()["conversion"] == {"converted": 0, "lost": 1}
    got = ws.api.get(f"/tables/{t['id']}/records/{rec['id']}").json()["fields"]
    assert got["M"] == [m["options"][0]["id"]] and got["S"] == s["options"][1]["id"]


def test_openapi_shows_allow_loss_and_the_conversion_report(base_url):
    import httpx

    spec = httpx.get(f"{base_url}/openapi.json").json()
    schemas = spec["components"]["schemas"]
    assert "allow_loss" in schemas["ColumnPatch"]["properties"]
    assert "conversion" in schemas["ColumnPatchOut"]["properties"]
    assert set(schemas["ConversionOut"]["properties"]) == {"converted", "lost"}
    patch = spec["paths"]["/functions/v1/rest-api/tables/{table_id}/columns/{column_id}"]["patch"]
    assert patch["responses"]["409"]["content"]["application/json"]["schema"]["$ref"].endswith("/LossyChangeOut")
    assert {"count", "record_ids"} <= set(schemas["LossyChangeOut"]["properties"])


def test_a_conversion_needing_more_than_1000_options_is_refused(ws):
    t = ws.create_table("Many", [{"name": "V", "type": "text"}])
    for start in range(0, 1001, 500):
        rows = [{"fields": {"V": f"v{i}"}} for i in range(start, min(start + 500, 1001))]
        assert ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows}).status_code == 200
    url = f"/tables/{t['id']}/columns/{t['columns'][0]['id']}"
    r = ws.api.patch(url, json={"type": "single_select", "allow_loss": True})
    assert r.status_code == 400 and r.json()["code"] == "VALIDATION_ERROR" and "1000 options" in r.json()["error"]
    col = ws.api.get(url).json()
    assert col["type"] == "text" and col["options"] == []
