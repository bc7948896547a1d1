"""The list query against an oracle: random filters (plain, negated, ``or``/``and`` groups)
and orders over a table of every scalar type with blanks, answered by the REST list
(paged by cursor with a random page size, and by offset) and by a saved view, each compared
with a Python evaluation of docs/query.md over the records the API shows.

The rules the oracle applies are the documented ones: a negation is the exact complement
of its condition (blank rows included); a checkbox never set is false (in filters and in
order); ``is.null`` on a multi_select matches the empty list; a single_select pattern
matches labels; text compares and sorts in byte order; an order ends with ``id`` in its
first term's direction, ascending puts blanks last and descending first unless written.
Found by it (session 26): never-set checkboxes sorted apart from the false ones, and
``ilike.*a*`` on a single_select matched options by their random ids.
"""

from __future__ import annotations

import functools
import random
import re
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

TEXTS = [None, "", "a", "A", "ab", "Ab", "abc", "b", "ba", "Z", "z", "100% off", "a*b", "a_b", "C:\\temp",
         "épsilon", "Épée", "naïve", "日本語", "row-001", "row-010", "Row-2", "straße", "x" * 200 + "a",
         "x" * 200 + "b", "x" * 250, "z" * 600 + "1", "z" * 600 + "2"]
NUMS = [None, 0, -1, 1, 1.5, -2.25, 10, 100, 3, 0.1]
DATES = [None, "2026-01-01", "2026-01-02", "2025-12-31", "2026-06-15T12:30:00Z", "1999-03-04"]
SELECTS, TAGS = ["a", "b", "c"], ["x", "y", "z"]
Fields = dict[str, Any]
Pred = Callable[[Fields], bool]


def _instant(text: str) -> datetime:
    return datetime.fromisoformat((text + "T00:00:00+00:00") if len(text) == 10 else text.replace("Z", "+00:00"))


def _like(pattern: str, text: str, fold: bool) -> bool:
    """The filter grammar's pattern: ``*``/``%`` any text, a backslash before ``*``, ``%``
    or a backslash makes it literal, everything else is itself."""
    out, i = "", 0
    pattern = pattern.lower() if fold else pattern
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and pattern[i + 1:i + 2] in ("*", "%", "\\"):
            out, i = out + re.escape(pattern[i + 1]), i + 2
            continue
        out, i = out + (".*" if ch in "*%" else re.escape(ch)), i + 1
    return re.fullmatch(out, text.lower() if fold else text, re.S) is not None


def _holds(col: str, op: str, val: Any, f: Fields) -> bool:
    """The positive condition on one record's fields (a blank makes it false)."""
    v = f.get(col)
    if op == "is":
        if col == "C":
            return bool(v) is (val == "true") if val != "null" else False
        return v is None or (col == "M" and v == [])
    if col == "C":
        return bool(v) in ([x == "true" for x in val] if op == "in" else [val == "true"])
    if col == "M":
        tags = v or []
        return {"eq": val in tags, "cs": all(x in tags for x in val), "in": any(x in tags for x in val)}[op]
    if v is None:
        return False
    if col == "S":
        return v in val if op == "in" else (v == val if op == "eq" else _like(val, v, op == "ilike"))
    if op in ("like", "ilike"):
        return _like(val, v, op == "ilike")
    typed: Callable[[Any], Any] = {"Name": lambda x: x.encode(), "N": float, "F": float, "D": _instant}[col]
    if op == "in":
        return typed(v) in [typed(x) for x in val]
    a, b = typed(v), typed(val)
    return {"eq": a == b, "gt": a > b, "gte": a >= b, "lt": a < b, "lte": a <= b}[op]


def _condition(rnd: random.Random) -> tuple[str, str, Any, str]:
    """(column, op, typed value, the filter's text after the column)."""
    col = rnd.choice(["Name", "N", "D", "C", "S", "M", "F"])
    if rnd.random() < 0.12:
        val = rnd.choice(["null", "true", "false"] if col == "C" else ["null"])
        return col, "is", val, f"is.{val}"
    if col == "C":
        if rnd.random() < 0.5:
            vals = rnd.sample(["true", "false"], rnd.randint(1, 2))
            return col, "in", vals, f"in.({','.join(vals)})"
        val = rnd.choice(["true", "false"])
        return col, "eq", val, f"eq.{val}"
    if col == "M":
        op = rnd.choice(["eq", "cs", "in"])
        if op == "eq":
            val = rnd.choice(TAGS)
            return col, op, val, f"eq.{val}"
        vals = rnd.sample(TAGS, rnd.randint(1, 2))
        return col, op, vals, f"cs.{{{','.join(vals)}}}" if op == "cs" else f"in.({','.join(vals)})"
    if col == "S":
        op = rnd.choice(["eq", "in", "like", "ilike"])
        if op == "in":
            vals = rnd.sample(SELECTS, 2)
            return col, op, vals, f"in.({','.join(vals)})"
        val = rnd.choice(["a*", "*A*", "b", "*", "B", "c*"]) if op.endswith("like") else rnd.choice(SELECTS)
        return col, op, val, f"{op}.{val}"
    if col == "Name":
        op = rnd.choice(["eq", "gt", "gte", "lt", "lte", "in", "like", "ilike"])
        if op.endswith("like"):
            val = rnd.choice(["*a*", "a*", "*b", "A*", "*É*", "*é*", "100\\%*", "a\\*b", "C:\\\\*", "*_*", "*",
                              "r*0*", "*SS*", "*日*", "x*a", "z*2"])
            return col, op, val, f"{op}.{val}"
        if op == "in":
            vals = rnd.sample([t for t in TEXTS if t and re.fullmatch(r"[\w\- %.é]+", t)], 3)
            return col, op, vals, "in.(" + ",".join(f'"{x}"' for x in vals) + ")"
        val = rnd.choice([t for t in TEXTS if t])
        return col, op, val, f"{op}.{val}"
    op = rnd.choice(["eq", "gt", "gte", "lt", "lte", "in"])
    pool = [d for d in DATES if d] if col == "D" else [str(x) for x in (0, -1, 1, 1.5, 10, 3, 2, 20, 0.2, -4.5)]
    if op == "in":
        vals = rnd.sample(pool, 2)
        return col, op, vals, f"in.({','.join(vals)})"
    val = rnd.choice(pool)
    return col, op, val, f"{op}.{val}"


def _filters(rnd: random.Random) -> tuple[list[tuple[str, str]], Pred]:
    """Query parameters and the oracle's predicate for them."""
    params: list[tuple[str, str]] = []
    preds: list[Pred] = []
    for _ in range(rnd.randint(0, 3)):
        col, op, val, text = _condition(rnd)
        negate = rnd.random() < 0.3
        params.append((col, ("neq." + text[3:]) if negate and op == "eq" and col != "M" and rnd.random() < 0.5
                       else ("not." if negate else "") + text))
        preds.append(lambda f, c=col, o=op, v=val, n=negate: _holds(c, o, v, f) is not n)
    if rnd.random() < 0.35:
        kind = rnd.choice(["or", "and", "not.or", "not.and"])
        parts, inner = [], []
        for _ in range(rnd.randint(1, 3)):
            col, op, val, text = _condition(rnd)
            if any(ch in text for ch in ',()"\\') or text != text.strip():  # group syntax: quoting not drawn here
                continue
            negate = rnd.random() < 0.3
            parts.append(f"{col}.{'not.' if negate else ''}{text}")
            inner.append(lambda f, c=col, o=op, v=val, n=negate: _holds(c, o, v, f) is not n)
        if parts:
            params.append((kind, f"({','.join(parts)})"))
            join = any if kind.endswith("or") else all
            preds.append(lambda f, j=join, ps=tuple(inner), neg=kind.startswith("not."):
                         j(p(f) for p in ps) is not neg)
    return params, lambda f: all(p(f) for p in preds)


def _order(rnd: random.Random) -> tuple[str, list[tuple[str, bool, bool]]]:
    """The ``order`` text and its terms (column, descending, blanks first), ``id`` last."""
    terms, texts = [], []
    for col in rnd.sample(["Name", "N", "D", "C", "S", "F"], rnd.randint(0, 2)):
        desc, nulls = rnd.random() < 0.5, rnd.choice([None, "nullsfirst", "nullslast"])
        terms.append((col, desc, nulls == "nullsfirst" if nulls else desc))
        texts.append(f"{col}.{'desc' if desc else 'asc'}" + (f".{nulls}" if nulls else ""))
    terms.append(("id", terms[0][1] if terms else False, False))
    return ",".join(texts), terms


def _sorted(records: dict[int, Fields], ids: list[int], terms: list[tuple[str, bool, bool]]) -> list[int]:
    def key(col: str, rid: int) -> Any:
        v = rid if col == "id" else records[rid].get(col)
        if v is None:
            return None
        return {"Name": lambda x: x.encode(), "D": _instant, "S": SELECTS.index, "C": bool}.get(col, lambda x: x)(v)

    def cmp(a: int, b: int) -> int:
        for col, desc, nulls_first in terms:
            x, y = key(col, a), key(col, b)
            if x == y:
                continue
            if x is None or y is None:
                return (-1 if nulls_first else 1) * (1 if x is None else -1)
            return (-1 if x < y else 1) * (-1 if desc else 1)
        return 0

    return sorted(ids, key=functools.cmp_to_key(cmp))


@pytest.fixture
def oracle_table(make_workspace: Callable[..., Any]) -> tuple[Any, int, dict[int, Fields]]:
    ws = make_workspace(plan="enterprise")
    rnd = random.Random(26)
    t = ws.create_table("Oracle", [
        {"name": "Name", "type": "text"}, {"name": "N", "type": "number"}, {"name": "D", "type": "date"},
        {"name": "C", "type": "checkbox"},
        {"name": "S", "type": "single_select", "options": [{"label": s} for s in SELECTS]},
        {"name": "M", "type": "multi_select", "options": [{"label": s} for s in TAGS]},
        {"name": "F", "type": "formula", "formula": "{N} * 2"}])
    labels = {o["id"]: o["label"] for c in t["columns"] for o in c.get("options") or []}
    rows = []
    for _ in range(60):
        fields: Fields = {}
        for col, pool in (("Name", TEXTS), ("N", NUMS), ("D", DATES), ("C", [None, True, False]),
                          ("S", [None, *SELECTS]), ("M", [None, [], ["x"], ["y"], ["x", "y"], ["z"], ["x", "z"]])):
            value = rnd.choice(pool)
            if value is not None or rnd.random() < 0.5:  # a blank sent as null, or never sent
                fields[col] = value
        rows.append({"fields": fields})
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows})
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 60
    while True:  # until the formula has run over every row
        got = ws.api.get(f"/tables/{t['id']}/records", params={"limit": "1000"}).json()["records"]
        if all(rec["fields"].get("F") is not None for rec in got):  # a blank N reads as 0
            break
        assert time.monotonic() < deadline, got
        time.sleep(0.2)
    records = {}
    for rec in got:  # the oracle reads what the API shows, select ids as their labels
        f = dict(rec["fields"])
        f["S"] = labels.get(f.get("S"))
        f["M"] = [labels[o] for o in f.get("M") or []]
        records[rec["id"]] = f
    assert len(records) == 60
    return ws, t["id"], records


def test_lists_by_cursor_offset_and_view_answer_what_the_records_say(oracle_table) -> None:
    ws, table_id, records = oracle_table
    rnd = random.Random(2026)
    wrong: list[Any] = []
    for i in range(90):
        params, pred = _filters(rnd)
        order, terms = _order(rnd)
        want = _sorted(records, [rid for rid, f in records.items() if pred(f)], terms)
        limit = rnd.choice([1, 3, 7, 25, 100])
        base = [*params, ("limit", str(limit)), *([("order", order)] if order else [])]
        got, after, total = [], None, None
        while True:  # by cursor; the first page also counts
            r = ws.api.get(f"/tables/{table_id}/records", params=[*base, *([("after", after)] if after else [])],
                           headers={} if after else {"Prefer": "count=exact"})
            assert r.status_code == 200, (params, order, r.text)
            total = r.headers.get("x-total-count", total)
            got += [rec["id"] for rec in r.json()["records"]]
            after = r.json()["next"]
            if after is None:
                break
        if got != want or total != str(len(want)):
            wrong.append(("cursor", params, order, limit, got, want, total))
        if i % 3 == 0:  # by offset
            got, offset = [], 0
            while offset <= len(want):
                r = ws.api.get(f"/tables/{table_id}/records", params=[*base, ("offset", str(offset))])
                got += [rec["id"] for rec in r.json()["records"]]
                offset += limit
            if got != want:
                wrong.append(("offset", params, order, limit, got, want))
        if i % 5 == 0 and params:  # a saved view holding the filters (list form; groups as items)
            items = [{k: v} if k in ("or", "and", "not.or", "not.and") else
                     {"column": k, "op": v.split(".")[1] if v.startswith("not.") else v.split(".")[0],
                      "value": _list_value(v.split(".", 2)[2] if v.startswith("not.") else v.split(".", 1)[1]),
                      **({"negate": True} if v.startswith("not.") else {})} for k, v in params]
            r = ws.api.post(f"/tables/{table_id}/views", json={"name": f"v{i}", "view_type": "grid",
                                                                "config": {"filters": items}})
            assert r.status_code == 201, (items, r.text)
            seen = ws.api.get(f"/tables/{table_id}/records", params={"view": r.json()["id"], "limit": "1000"})
            if sorted(rec["id"] for rec in seen.json()["records"]) != sorted(want):
                wrong.append(("view", params, items, want))
    assert not wrong, wrong[:5]


def _list_value(text: str) -> Any:
    """A list-form filter value from the query-string form's value: lists as lists."""
    if text[:1] in "({" and text[-1:] in ")}":
        return [x.strip('"') for x in text[1:-1].split(",")]
    return text
