"""Property test of schema changes (issue #21): random sequences of create / rename /
retype / delete / formula edit on a table with data. After each step every computed value
equals a fresh recompute from the data, and no non-null value has disappeared without
``allow_loss`` (a refused change changes nothing).

Formulas are linear combinations of number columns (``{A} * 2 + {B} * 3 + 1``), so the
expected value is computed here independently of the service's formula engine.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TERMINAL = ("completed", "completed_with_errors", "failed", "superseded", "cancelled")

op = st.one_of(
    st.tuples(st.just("add_formula"), st.lists(st.tuples(st.integers(0, 9), st.integers(-3, 3)), min_size=1, max_size=3),
              st.integers(-5, 5)),
    st.tuples(st.just("edit_formula"), st.integers(0, 9),
              st.lists(st.tuples(st.integers(0, 9), st.integers(-3, 3)), min_size=1, max_size=3)),
    st.tuples(st.just("rename"), st.integers(0, 9), st.sampled_from(["X", "Qty", "Price }", "Fee.2", "é"])),
    st.tuples(st.just("delete"), st.integers(0, 9), st.booleans()),
    st.tuples(st.just("retype"), st.integers(0, 9), st.sampled_from(["text", "number"]), st.booleans()),
    st.tuples(st.just("add_number"), st.lists(st.one_of(st.none(), st.integers(-100, 100)), min_size=4, max_size=4)),
)


def _wait_backfill(api: httpx.Client, body: dict[str, Any]) -> None:
    backfill = body.get("backfill") if isinstance(body, dict) else None
    if not backfill or not backfill.get("run_id"):
        return
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        run = api.get(f"/runs/{backfill['run_id']}").json()
        if run.get("status") in TERMINAL:
            assert run["status"] == "completed", run
            return
        time.sleep(0.1)
    raise AssertionError(f"backfill {backfill} did not finish")


class Model:
    """What the table should hold: data columns' values and formula definitions by id."""

    def __init__(self, ws: Any) -> None:
        self.api = ws.api
        t = ws.create_table(None, [{"name": "A", "type": "number"}, {"name": "B", "type": "number"},
                                   {"name": "T", "type": "text"}])
        self.tid = t["id"]
        self.data: dict[int, dict[str, Any]] = {c["id"]: {"type": c["type"]} for c in t["columns"]}
        self.formulas: dict[int, tuple[list[tuple[int, int]], int]] = {}
        self.names = {c["id"]: c["name"] for c in t["columns"]}
        rows = [{"A": 1, "B": 2, "T": "12"}, {"A": None, "B": 5, "T": "x"}, {"A": -4, "B": None, "T": None},
                {"A": 7, "B": 0, "T": " 3.5 "}]
        got = self.api.post(f"/tables/{self.tid}/records/batch", json={"rows": [{"fields": r} for r in rows]}).json()
        self.ids = [r["record"]["id"] for r in got["results"]]
        a, b, tcol = (c["id"] for c in t["columns"])
        self.values: dict[int, dict[int, Any]] = {
            a: dict(zip(self.ids, [1, None, -4, 7])), b: dict(zip(self.ids, [2, 5, None, 0])),
            tcol: dict(zip(self.ids, ["12", "x", None, " 3.5 "]))}

    def fresh(self, prefix: str) -> str:
        """A column name no column has (counting columns would repeat one after a delete)."""
        n = len(self.names)
        while f"{prefix}{n}" in self.names.values():
            n += 1
        return f"{prefix}{n}"

    def columns(self) -> list[int]:
        return sorted(self.names)

    def numbers(self) -> list[int]:
        return [c for c in self.columns() if c in self.data and self.data[c]["type"] == "number"]

    def pick(self, i: int, among: list[int]) -> int | None:
        return among[i % len(among)] if among else None

    def formula_text(self, terms: list[tuple[int, int]], const: int) -> str:
        parts = [f"{{{self.escape(self.names[c])}}} * {k}" for c, k in terms]
        return " + ".join(parts + [str(const)])

    @staticmethod
    def escape(name: str) -> str:
        return name.replace("\\", "\\\\").replace("}", "\\}")

    def expected(self, fid: int, rid: int) -> Any:
        terms, const = self.formulas[fid]
        total = const
        for c, k in terms:
            v = self.values[c][rid] if c in self.values else self.formula_value(c, rid)
            total += (v or 0) * k
        return total

    def formula_value(self, fid: int, rid: int) -> Any:
        return self.expected(fid, rid)

    # ------------------------------------------------------------------ steps
    def apply(self, step: tuple[Any, ...]) -> None:
        kind = step[0]
        if kind == "add_number":
            name = self.fresh("N")
            r = self.api.post(f"/tables/{self.tid}/columns", json={"name": name, "type": "number"})
            assert r.status_code == 201, r.text
            cid = r.json()["id"]
            self.names[cid], self.data[cid] = name, {"type": "number"}
            for rid, v in zip(self.ids, step[1]):
                self.api.patch(f"/tables/{self.tid}/records/{rid}", json={"fields": {name: v}})
            self.values[cid] = dict(zip(self.ids, step[1]))
            return
        if kind == "add_formula":
            nums = self.numbers() + list(self.formulas)
            terms = [(c, k) for i, k in step[1] if (c := self.pick(i, nums)) is not None]
            if not terms:
                return
            name = self.fresh("F")
            r = self.api.post(f"/tables/{self.tid}/columns", json={
                "name": name, "type": "formula", "formula": self.formula_text(terms, step[2])})
            assert r.status_code == 201, r.text
            self.names[r.json()["id"]] = name
            self.formulas[r.json()["id"]] = (terms, step[2])
            _wait_backfill(self.api, r.json())
            return
        if kind == "edit_formula":
            fid = self.pick(step[1], sorted(self.formulas))
            if fid is None:
                return
            nums = self.numbers() + [f for f in self.formulas if f != fid]
            terms = [(c, k) for i, k in step[2] if (c := self.pick(i, nums)) is not None]
            if not terms:
                return
            r = self.api.patch(f"/tables/{self.tid}/columns/{fid}", json={"formula": self.formula_text(terms, 0)})
            if r.status_code == 400 and r.json()["code"] == "CIRCULAR_REFERENCE":
                return
            assert r.status_code == 200, r.text
            self.formulas[fid] = (terms, 0)
            _wait_backfill(self.api, r.json())
            return
        if kind == "rename":
            cid = self.pick(step[1], self.columns())
            new = step[2]
            if cid is None or new in self.names.values():
                return
            r = self.api.patch(f"/tables/{self.tid}/columns/{cid}", json={"name": new})
            assert r.status_code == 200, r.text
            self.names[cid] = new
            return
        if kind == "delete":
            cid = self.pick(step[1], self.columns())
            if cid is None:
                return
            users = [f for f, (terms, _) in self.formulas.items() if any(c == cid for c, _ in terms)]
            r = self.api.delete(f"/tables/{self.tid}/columns/{cid}" + ("?force=true" if step[2] else ""))
            if users and not step[2]:
                assert r.status_code == 409 and r.json()["code"] == "COLUMN_IN_USE", r.text
                return
            assert r.status_code == 200, r.text
            self.names.pop(cid)
            self.data.pop(cid, None)
            self.values.pop(cid, None)
            self.formulas.pop(cid, None)
            for f in users:  # broken now: null until fixed; drop it from the model's checks
                self.formulas.pop(f, None)
                self.names.pop(f, None)
                self.api.delete(f"/tables/{self.tid}/columns/{f}?force=true")
            return
        if kind == "retype":
            cid = self.pick(step[1], [c for c in self.columns() if c in self.data])
            new_type, allow = step[2], step[3]
            if cid is None or self.data[cid]["type"] == new_type:
                return
            if any(c == cid for terms, _ in self.formulas.values() for c, _ in terms):
                return  # formulas read numbers; retyping what they read is another property
            r = self.api.patch(f"/tables/{self.tid}/columns/{cid}",
                               json={"type": new_type, **({"allow_loss": True} if allow else {})})
            before = self.values[cid]
            converted = {rid: _convert(v, new_type) for rid, v in before.items()}
            lost = [rid for rid, v in before.items() if v is not None and converted[rid] is None]
            if lost and not allow:
                assert r.status_code == 409 and r.json()["code"] == "LOSSY_CHANGE", r.text
                return
            assert r.status_code == 200, r.text
            self.data[cid]["type"] = new_type
            self.values[cid] = converted
            return
        raise AssertionError(kind)

    def check(self) -> None:
        rows = {r["id"]: r["fields"] for r in
                self.api.get(f"/tables/{self.tid}/records?limit=1000").json()["records"]}
        for cid, vals in self.values.items():
            for rid, v in vals.items():
                got = rows[rid][self.names[cid]]
                assert _same(got, v), (self.names[cid], rid, got, v)
        for fid in self.formulas:
            for rid in self.ids:
                got = rows[rid][self.names[fid]]
                assert _same(got, self.expected(fid, rid)), (self.names[fid], rid, got, self.expected(fid, rid))


def _convert(value: Any, to: str) -> Any:
    if value is None:
        return None
    if to == "text":
        return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
    try:
        return float(str(value).strip().replace(",", ""))
    except ValueError:
        return None


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return abs(got - want) < 1e-9
    if want == "" and got is None:
        return True
    return got == want


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(op, min_size=1, max_size=6))
def test_schema_changes_keep_values_and_computed_columns_right(ws, steps):
    model = Model(ws)
    for step in steps:
        model.apply(step)
        model.check()
