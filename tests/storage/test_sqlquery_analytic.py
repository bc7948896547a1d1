"""Analytic SQL (issue #25) against PostgreSQL, checked by an independent computation.

Generated data (a seeded random CRM: Companies, and Deals linked to them by a relation
column) is written straight into a scratch workspace built with the project's DDL; each
analytic query's answer is compared with the same question answered in Python over the
same rows. Needs ``WDS_TEST_SCRATCH_DSN`` (the session PostgreSQL of tests/conftest.py).

The fuzz test (hypothesis) builds random sqlglot trees mixing the grammar with what it
must refuse (other functions, catalogs, schema-qualified names, writes, another
workspace's and a hidden table) and checks every query the translator accepts: the
statement it emits reads only the workspace's readable tables and calls only the
curated functions, and running it either answers or fails with INVALID_SQL/SQL_TIMEOUT,
never writing anything.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import re
import secrets
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import orjson
import psycopg
import pytest
import pytest_asyncio
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql
from psycopg.rows import dict_row
from sqlglot import exp

from storage import ddl
from storage.errors import InvalidSQL, PayloadTooLarge, ServiceError, SQLTimeout
from storage.schema import ColumnMeta, ColumnType, Option, TableMeta
from storage.sqlquery import AnalyticPlan, SqlPlan, run_sql, table_resolver, translate

DSN = os.environ.get("WDS_TEST_SCRATCH_DSN", "")
pytestmark = pytest.mark.skipif(not DSN, reason="WDS_TEST_SCRATCH_DSN is not set")

TIMEOUT_S = 5.0
STAGES = tuple(Option(f"opt_{n.lower()}", n, "gray") for n in ("Lead", "Open", "Won", "Lost"))
TAGS = (Option("tag_hot", "Hot", "red"), Option("tag_cold", "Cold", "blue"), Option("tag_vip", "VIP", "gold"))
COUNTRIES = (Option("c_fr", "France", "blue"), Option("c_de", "Germany", "red"), Option("c_jp", "Japan", "white"))
N_COMPANIES = 30
N_DEALS = 400


def _col(table_id: int, cid: int, name: str, type_: ColumnType, **kw: Any) -> ColumnMeta:
    return ColumnMeta(id=cid, table_id=table_id, name=name, type=type_, position=cid, **kw)


@dataclass(frozen=True)
class World:
    ws: int
    other_ws: int
    companies: TableMeta
    deals: TableMeta
    secret: TableMeta  # in the workspace, not readable by the token
    other: TableMeta  # another workspace's table
    company_rows: list[dict[str, Any]]
    deal_rows: list[dict[str, Any]]

    def resolver(self) -> Callable[[str], TableMeta | None]:
        return table_resolver([self.companies, self.deals, self.secret])

    def can_read(self, table_id: int) -> bool:
        return table_id != self.secret.id

    def plan(self, query: str) -> SqlPlan | AnalyticPlan:
        return translate(query, resolve_table=self.resolver(), can_read=self.can_read)


def _metas(ws: int, other_ws: int) -> tuple[TableMeta, TableMeta, TableMeta, TableMeta]:
    companies = TableMeta(id=1, workspace_id=ws, name="Companies", icon=None, columns=(
        _col(1, 1, "Name", ColumnType.TEXT),
        _col(1, 2, "Country", ColumnType.SINGLE_SELECT, options=COUNTRIES),
        _col(1, 3, "Size", ColumnType.NUMBER),
        _col(1, 4, "Active", ColumnType.CHECKBOX),
    ))
    deals = TableMeta(id=2, workspace_id=ws, name="Deals", icon=None, columns=(
        _col(2, 11, "Title", ColumnType.TEXT),
        _col(2, 12, "Amount", ColumnType.NUMBER),
        _col(2, 13, "Stage", ColumnType.SINGLE_SELECT, options=STAGES),
        _col(2, 14, "Closed", ColumnType.DATE),
        _col(2, 15, "Company", ColumnType.RELATION, relation_table_id=1, relation_label_column_id=1),
        _col(2, 16, "Tags", ColumnType.MULTI_SELECT, options=TAGS),
        _col(2, 17, "Won", ColumnType.CHECKBOX),
        _col(2, 18, "Calc", ColumnType.FORMULA, formula="{Amount} / 10"),
        _col(2, 19, "Files", ColumnType.FILE),
    ))
    secret = TableMeta(id=3, workspace_id=ws, name="Salaries", icon=None, columns=(
        _col(3, 21, "Person", ColumnType.TEXT), _col(3, 22, "Pay", ColumnType.NUMBER),
    ))
    other = TableMeta(id=1, workspace_id=other_ws, name="Leads", icon=None, columns=(
        _col(1, 1, "Name", ColumnType.TEXT),
    ))
    return companies, deals, secret, other


def _generate(seed: int = 25) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rnd = random.Random(seed)
    companies = []
    for i in range(1, N_COMPANIES + 1):
        companies.append({
            "id": i, "Name": f"Company {i:02d}",
            "Country": rnd.choice([*COUNTRIES, None]),
            "Size": rnd.choice([None, float(rnd.randint(1, 500))]),
            "Active": rnd.choice([True, False, None]),
        })
    # beyond ASCII too: ILIKE, lower and upper fold by Unicode's simple case mapping, as REST's ilike
    words = ["alpha", "Beta", "GAMMA", "delta", " padded", "tail ", "Alpha Co", "Épée", "ÉCOLE ünï"]
    start = datetime(2024, 1, 1, tzinfo=UTC)
    deals = []
    for i in range(1, N_DEALS + 1):
        amount = rnd.choice([None, float(rnd.randint(0, 1000)), rnd.randint(0, 100000) / 100])
        calc: Any = rnd.choice([None, rnd.randint(0, 90), str(rnd.randint(0, 90)), "n/a", rnd.randint(0, 50) / 4])
        deals.append({
            "id": i, "Title": f"{rnd.choice(words)} {i}" if i % 7 else rnd.choice(words),
            "Amount": amount,
            "Stage": rnd.choice([*STAGES, STAGES[1], None]),
            "Closed": rnd.choice([None, start + timedelta(days=rnd.randint(0, 500), hours=rnd.randint(0, 23))]),
            "Company": rnd.choice([None, rnd.randint(1, N_COMPANIES)]),
            "Tags": rnd.sample(TAGS, rnd.randint(0, 2)) if rnd.random() > 0.2 else None,
            "Won": rnd.choice([True, False, None]),
            "Calc": calc,
        })
    return companies, deals


async def _create(world: World, companies: list[dict[str, Any]], deals: list[dict[str, Any]]) -> None:
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as c:
        for meta in (world.companies, world.other):
            await ddl.create_workspace_schema(c, meta.workspace_id)
        for meta in (world.companies, world.deals, world.secret, world.other):
            await ddl.create_table(c, meta.workspace_id, meta.id)
            for col in meta.columns:
                await ddl.add_column(c, meta.workspace_id, col)
        async with c.cursor() as cur:
            await cur.executemany(
                sql.SQL("INSERT INTO {} (id, c_1, c_2, c_3, c_4) VALUES (%s, %s, %s, %s, %s)").format(
                    ddl.qualified(world.ws, 1)),
                [(r["id"], r["Name"], r["Country"] and r["Country"].id, r["Size"], r["Active"]) for r in companies],
            )
            await cur.executemany(
                sql.SQL("INSERT INTO {} (id, c_11, c_12, c_13, c_14, c_15, c_16, c_17, c_18)"
                        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)").format(ddl.qualified(world.ws, 2)),
                [(r["id"], r["Title"], r["Amount"], r["Stage"] and r["Stage"].id, r["Closed"], r["Company"],
                  None if r["Tags"] is None else [t.id for t in r["Tags"]], r["Won"],
                  None if r["Calc"] is None else psycopg.types.json.Jsonb(r["Calc"])) for r in deals],
            )
            await cur.execute(sql.SQL("INSERT INTO {} (c_21, c_22) VALUES ('Ann', 100000)").format(
                ddl.qualified(world.ws, 3)))
            await cur.execute(sql.SQL("INSERT INTO {} (c_1) VALUES ('foreign')").format(
                ddl.qualified(world.other_ws, 1)))


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    ws, other_ws = (900_000_000 + secrets.randbelow(99_999_999) for _ in range(2))
    companies_meta, deals_meta, secret, other = _metas(ws, other_ws)
    companies, deals = _generate()
    # Python's view of the rows: labels for selects, the related id for relations
    c_rows = [{**r, "Country": r["Country"] and r["Country"].label, "Active": bool(r["Active"])} for r in companies]
    d_rows = [{**r, "Stage": r["Stage"] and r["Stage"].label, "Won": bool(r["Won"]),
               "Tags": [t.label for t in r["Tags"] or []]} for r in deals]
    made = World(ws, other_ws, companies_meta, deals_meta, secret, other, c_rows, d_rows)
    try:
        asyncio.run(_create(made, companies, deals))
        yield made
    finally:
        async def drop() -> None:
            async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as c:
                for w in (ws, other_ws):
                    await ddl.drop_workspace_schema(c, w)
        asyncio.run(drop())


@pytest_asyncio.fixture
async def conn() -> AsyncIterator[psycopg.AsyncConnection[dict[str, object]]]:
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True, row_factory=dict_row,
                                                     options="-c timezone=UTC") as c:
        yield c


async def _run(conn: Any, world: World, query: str, **kw: Any) -> dict[str, Any]:
    plan = world.plan(query)
    return await run_sql(conn, plan, workspace_id=world.ws, timeout_s=TIMEOUT_S, **kw)


# ---------------------------------------------------------------------- the reference


def _norm(v: Any) -> Any:
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, float, Decimal)):
        return round(float(v), 6)
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, list):
        return [_norm(x) for x in v]
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    return v


def _iso(d: datetime | None) -> str | None:
    return None if d is None else d.isoformat()


def _month(d: datetime) -> datetime:
    return d.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _quarter(d: datetime) -> datetime:
    return _month(d).replace(month=(d.month - 1) // 3 * 3 + 1)


def _num(calc: Any) -> float | None:
    """A computed value as a number (JSON numbers and numeric strings)."""
    if isinstance(calc, (int, float)) and not isinstance(calc, bool):
        return float(calc)
    if isinstance(calc, str):
        try:
            return float(calc)
        except ValueError:
            return None
    return None


def _group(rows: list[dict[str, Any]], key: Callable[[dict[str, Any]], Any]) -> dict[Any, list[dict[str, Any]]]:
    out: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        out[key(r)].append(r)
    return out


def _vals(rows: list[dict[str, Any]], f: str) -> list[Any]:
    return [r[f] for r in rows if r[f] is not None]


def _sum(xs: list[Any]) -> float | None:
    return sum(xs) if xs else None


def _avg(xs: list[Any]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _pg_round(x: float, n: int = 0) -> float:
    q = Decimal(repr(x)).quantize(Decimal(1).scaleb(-n), rounding="ROUND_HALF_UP")
    return float(q)


def _round_double(x: float) -> float:
    # round(double precision) rounds half to even (the platform's rint)
    return float(round(x))


def _by_company(world: World) -> dict[int, dict[str, Any]]:
    return {c["id"]: c for c in world.company_rows}


def _cases() -> list[tuple[str, Callable[[World], list[dict[str, Any]]], bool]]:
    """(query, expected rows from Python, ordered)."""
    D = lambda w: w.deal_rows  # noqa: E731
    C = lambda w: w.company_rows  # noqa: E731
    cases: list[tuple[str, Callable[[World], list[dict[str, Any]]], bool]] = []

    def case(query: str, ordered: bool = False) -> Callable[[Callable[[World], list[dict[str, Any]]]], None]:
        def add(fn: Callable[[World], list[dict[str, Any]]]) -> None:
            cases.append((query, fn, ordered))
        return add

    case("SELECT Stage, COUNT(*) AS n FROM Deals GROUP BY Stage")(
        lambda w: [{"Stage": k, "n": len(v)} for k, v in _group(D(w), lambda r: r["Stage"]).items()])
    case("SELECT Stage, SUM(Amount) AS s FROM Deals GROUP BY Stage")(
        lambda w: [{"Stage": k, "s": _sum(_vals(v, "Amount"))} for k, v in _group(D(w), lambda r: r["Stage"]).items()])
    case("SELECT Stage, AVG(Amount) a, MIN(Amount) mn, MAX(Amount) mx FROM Deals GROUP BY Stage")(
        lambda w: [{"Stage": k, "a": _avg(_vals(v, "Amount")), "mn": min(_vals(v, "Amount"), default=None),
                    "mx": max(_vals(v, "Amount"), default=None)}
                   for k, v in _group(D(w), lambda r: r["Stage"]).items()])
    case("SELECT COUNT(Amount) c, COUNT(DISTINCT Stage) d, COUNT(*) n FROM Deals")(
        lambda w: [{"c": len(_vals(D(w), "Amount")), "d": len(set(_vals(D(w), "Stage"))), "n": len(D(w))}])
    case("SELECT Stage, COUNT(*) n FROM Deals GROUP BY Stage HAVING COUNT(*) > 80")(
        lambda w: [{"Stage": k, "n": len(v)} for k, v in _group(D(w), lambda r: r["Stage"]).items() if len(v) > 80])
    case("SELECT date_trunc('month', Closed) AS m, SUM(Amount) s FROM Deals WHERE Closed IS NOT NULL GROUP BY 1")(
        lambda w: [{"m": _iso(k), "s": _sum(_vals(v, "Amount"))}
                   for k, v in _group([r for r in D(w) if r["Closed"]], lambda r: _month(r["Closed"])).items()])
    case('SELECT extract(year FROM "Closed") y, COUNT(*) n FROM Deals GROUP BY 1')(
        lambda w: [{"y": k, "n": len(v)}
                   for k, v in _group(D(w), lambda r: r["Closed"] and r["Closed"].year).items()])
    case("SELECT Title FROM Deals WHERE Amount > 500 OR Stage = 'Won'")(
        lambda w: [{"Title": r["Title"]} for r in D(w)
                   if (r["Amount"] is not None and r["Amount"] > 500) or r["Stage"] == "Won"])
    case("SELECT id FROM Deals WHERE NOT (Amount > 500)")(
        lambda w: [{"id": r["id"]} for r in D(w) if r["Amount"] is not None and not r["Amount"] > 500])
    case("SELECT id FROM Deals WHERE Amount BETWEEN 100 AND 300")(
        lambda w: [{"id": r["id"]} for r in D(w) if r["Amount"] is not None and 100 <= r["Amount"] <= 300])
    case("SELECT id FROM Deals WHERE Title ILIKE '%ALPHA%'")(
        lambda w: [{"id": r["id"]} for r in D(w) if "alpha" in r["Title"].lower()])
    case("SELECT id FROM Deals WHERE Title ILIKE '%épée%' OR Title NOT ILIKE '%Ü%'")(
        lambda w: [{"id": r["id"]} for r in D(w) if "épée" in r["Title"].lower() or "ü" not in r["Title"].lower()])
    case("SELECT id FROM Deals WHERE lower(Title) = 'école ünï' OR upper(Title) LIKE 'ÉPÉE%'")(
        lambda w: [{"id": r["id"]} for r in D(w)
                   if r["Title"].lower() == "école ünï" or r["Title"].upper().startswith("ÉPÉE")])
    case("SELECT id, Amount * 2 + 1 AS x FROM Deals WHERE Amount IS NOT NULL")(
        lambda w: [{"id": r["id"], "x": r["Amount"] * 2 + 1} for r in D(w) if r["Amount"] is not None])
    # PostgreSQL has no % for double precision: mod over numeric (the sign follows the dividend)
    case("SELECT id, Amount % 7 AS m, SUM(Amount) % 1000 AS t FROM Deals WHERE Amount IS NOT NULL GROUP BY id, Amount")(
        lambda w: [{"id": r["id"], "m": math.fmod(r["Amount"], 7), "t": math.fmod(r["Amount"], 1000)}
                   for r in D(w) if r["Amount"] is not None])
    case("SELECT id FROM Deals WHERE Amount % 2 = 0")(
        lambda w: [{"id": r["id"]} for r in D(w) if r["Amount"] is not None and math.fmod(r["Amount"], 2) == 0])
    case("SELECT id, lower(Title) l, upper(Title) u, length(Title) n FROM Deals")(
        lambda w: [{"id": r["id"], "l": r["Title"].lower(), "u": r["Title"].upper(), "n": len(r["Title"])}
                   for r in D(w)])
    case("SELECT id, coalesce(Amount, 0) a FROM Deals")(
        lambda w: [{"id": r["id"], "a": r["Amount"] if r["Amount"] is not None else 0} for r in D(w)])
    case("SELECT id, nullif(Stage, 'Lead') s FROM Deals")(
        lambda w: [{"id": r["id"], "s": None if r["Stage"] == "Lead" else r["Stage"]} for r in D(w)])
    case("SELECT id, round(Amount) r, round(Amount, 1) r1, abs(Amount - 500) d FROM Deals WHERE Amount IS NOT NULL")(
        lambda w: [{"id": r["id"], "r": _round_double(r["Amount"]), "r1": _pg_round(r["Amount"], 1),
                    "d": abs(r["Amount"] - 500)} for r in D(w) if r["Amount"] is not None])
    case("SELECT c.Name, COUNT(*) n FROM Deals d JOIN Companies c ON d.Company = c.id GROUP BY c.Name")(
        lambda w: [{"Name": _by_company(w)[k]["Name"], "n": len(v)}
                   for k, v in _group([r for r in D(w) if r["Company"]], lambda r: r["Company"]).items()])
    case('SELECT c."Name", SUM(d.Amount) s FROM "Deals" AS d JOIN "Companies" AS c ON c.id = d."Company"'
         " WHERE d.Stage = 'Won' GROUP BY c.Name")(
        lambda w: [{"Name": _by_company(w)[k]["Name"], "s": _sum(_vals(v, "Amount"))}
                   for k, v in _group([r for r in D(w) if r["Company"] and r["Stage"] == "Won"],
                                      lambda r: r["Company"]).items()])
    case("SELECT Companies.Country, COUNT(*) n FROM Deals JOIN Companies GROUP BY Companies.Country")(
        lambda w: [{"Country": k, "n": len(v)}
                   for k, v in _group([r for r in D(w) if r["Company"]],
                                      lambda r: _by_company(w)[r["Company"]]["Country"]).items()])
    case("SELECT d.id, c.Name FROM Deals d LEFT JOIN Companies c ON d.Company = c.id")(
        lambda w: [{"id": r["id"], "Name": r["Company"] and _by_company(w)[r["Company"]]["Name"]} for r in D(w)])
    case("SELECT Name FROM Companies WHERE id IN"
         " (SELECT Company FROM Deals WHERE Stage = 'Open' GROUP BY Company HAVING COUNT(*) > 3)")(
        lambda w: [{"Name": c["Name"]} for c in C(w)
                   if sum(1 for r in D(w) if r["Company"] == c["id"] and r["Stage"] == "Open") > 3])
    case("SELECT Name FROM Companies WHERE id NOT IN (SELECT Company FROM Deals WHERE Company IS NOT NULL)")(
        lambda w: [{"Name": c["Name"]} for c in C(w) if not any(r["Company"] == c["id"] for r in D(w))])
    case("SELECT id, Tags AS t FROM Deals WHERE Tags = 'Hot'")(
        lambda w: [{"id": r["id"], "t": r["Tags"]} for r in D(w) if "Hot" in r["Tags"]])
    case("SELECT id FROM Deals WHERE Tags IN ('Hot', 'tag_cold') OR id < 0")(
        lambda w: [{"id": r["id"]} for r in D(w) if {"Hot", "Cold"} & set(r["Tags"])])
    case("SELECT id FROM Deals WHERE Tags IS NULL OR Tags != 'VIP' AND Won")(
        lambda w: [{"id": r["id"]} for r in D(w) if not r["Tags"] or ("VIP" not in r["Tags"] and r["Won"])])
    case("SELECT id FROM Deals WHERE Won = true AND (Stage = 'Won' OR Stage IS NULL)")(
        lambda w: [{"id": r["id"]} for r in D(w) if r["Won"] and r["Stage"] in ("Won", None)])
    case("SELECT DISTINCT Stage FROM Deals")(
        lambda w: [{"Stage": s} for s in {r["Stage"] for r in D(w)}])
    case("SELECT Stage, COUNT(*) FILTER (WHERE Won) w FROM Deals GROUP BY Stage")(
        lambda w: [{"Stage": k, "w": sum(1 for r in v if r["Won"])}
                   for k, v in _group(D(w), lambda r: r["Stage"]).items()])
    case("SELECT SUM(CASE WHEN Won THEN Amount ELSE 0 END) s FROM Deals")(
        lambda w: [{"s": sum((r["Amount"] or 0) if r["Won"] else 0 for r in D(w)
                             if not (r["Won"] and r["Amount"] is None))}])
    case("SELECT id, Title FROM Deals WHERE Amount IS NOT NULL OR Won ORDER BY Amount DESC NULLS LAST, id"
         " LIMIT 10 OFFSET 5", ordered=True)(
        lambda w: [{"id": r["id"], "Title": r["Title"]} for r in sorted(
            [r for r in D(w) if r["Amount"] is not None or r["Won"]],
            key=lambda r: (r["Amount"] is None, -(r["Amount"] or 0), r["id"]))][5:15])
    case("SELECT Stage, COUNT(*) n FROM Deals GROUP BY Stage ORDER BY n DESC, Stage", ordered=True)(
        lambda w: sorted([{"Stage": k, "n": len(v)} for k, v in _group(D(w), lambda r: r["Stage"]).items()],
                         key=lambda x: (-x["n"], x["Stage"] is None, x["Stage"] or "")))
    case("SELECT SUM(Calc) s, AVG(Calc) a, COUNT(Calc) c FROM Deals")(
        lambda w: [{"s": _sum([n for r in D(w) if (n := _num(r["Calc"])) is not None]),
                    "a": _avg([n for r in D(w) if (n := _num(r["Calc"])) is not None]),
                    "c": sum(1 for r in D(w) if r["Calc"] is not None)}])
    case("SELECT id FROM Deals WHERE Calc > 10 OR id < 0")(
        lambda w: [{"id": r["id"]} for r in D(w) if (n := _num(r["Calc"])) is not None and n > 10])
    case("SELECT id, Calc FROM Deals WHERE Calc IS NOT NULL AND Calc = 'n/a' OR id = 3")(
        lambda w: [{"id": r["id"], "Calc": r["Calc"]} for r in D(w) if r["Calc"] == "n/a" or r["id"] == 3])
    case("SELECT c.Country, AVG(d.Amount) a, MAX(d.Closed) last FROM Deals d JOIN Companies c ON d.Company = c.id"
         " GROUP BY c.Country HAVING AVG(d.Amount) > 100")(
        lambda w: [{"Country": k, "a": _avg(_vals(v, "Amount")),
                    "last": _iso(max(_vals(v, "Closed"), default=None))}
                   for k, v in _group([r for r in D(w) if r["Company"]],
                                      lambda r: _by_company(w)[r["Company"]]["Country"]).items()
                   if (_avg(_vals(v, "Amount")) or 0) > 100])
    case("SELECT id FROM Deals WHERE Closed >= '2024-04-01' AND Closed < '2024-07-01' OR id < 0")(
        lambda w: [{"id": r["id"]} for r in D(w) if r["Closed"]
                   and datetime(2024, 4, 1, tzinfo=UTC) <= r["Closed"] < datetime(2024, 7, 1, tzinfo=UTC)])
    case("SELECT id, Title || ' (' || Stage || ')' AS t FROM Deals WHERE Stage IS NOT NULL")(
        lambda w: [{"id": r["id"], "t": f"{r['Title']} ({r['Stage']})"} for r in D(w) if r["Stage"]])
    case("SELECT COUNT(*) AS n FROM Deals d JOIN Companies c ON d.Company = c.id WHERE c.Active AND d.Amount > 200")(
        lambda w: [{"n": sum(1 for r in D(w) if r["Company"] and _by_company(w)[r["Company"]]["Active"]
                             and r["Amount"] is not None and r["Amount"] > 200)}])
    case("SELECT Stage, Won, COUNT(*) n FROM Deals GROUP BY Stage, Won")(
        lambda w: [{"Stage": k[0], "Won": k[1], "n": len(v)}
                   for k, v in _group(D(w), lambda r: (r["Stage"], r["Won"])).items()])
    case("SELECT id, trim(Title) t FROM Deals WHERE Title LIKE ' %' OR Title LIKE '% '")(
        lambda w: [{"id": r["id"], "t": r["Title"].strip(" ")} for r in D(w)
                   if r["Title"].startswith(" ") or r["Title"].endswith(" ")])
    case("SELECT MIN(Closed) a, MAX(Closed) b, MIN(Title) t FROM Deals")(
        lambda w: [{"a": _iso(min(_vals(D(w), "Closed"))), "b": _iso(max(_vals(D(w), "Closed"))),
                    "t": None}])  # text order is the database collation's: checked apart below
    case("SELECT id, Amount / 4 AS q FROM Deals WHERE Amount IS NOT NULL")(
        lambda w: [{"id": r["id"], "q": r["Amount"] / 4} for r in D(w) if r["Amount"] is not None])
    case("SELECT c.Name, COUNT(d.id) n FROM Companies c LEFT JOIN Deals d ON d.Company = c.id GROUP BY c.Name")(
        lambda w: [{"Name": c["Name"], "n": sum(1 for r in D(w) if r["Company"] == c["id"])} for c in C(w)])
    case("SELECT id FROM Deals WHERE Stage IN ('Lead', 'opt_open') AND NOT Won")(
        lambda w: [{"id": r["id"]} for r in D(w) if r["Stage"] in ("Lead", "Open") and not r["Won"]])
    case("SELECT date_trunc('quarter', Closed) q, Stage, SUM(Amount) revenue FROM Deals"
         " WHERE Closed IS NOT NULL GROUP BY 1, 2")(
        lambda w: [{"q": _iso(k[0]), "Stage": k[1], "revenue": _sum(_vals(v, "Amount"))}
                   for k, v in _group([r for r in D(w) if r["Closed"]],
                                      lambda r: (_quarter(r["Closed"]), r["Stage"])).items()])
    case("SELECT Companies.Name, Deals.Title FROM Companies JOIN Deals ON Deals.Company = Companies.id"
         " WHERE Companies.Size > 250 AND Deals.Tags = 'VIP'")(
        lambda w: [{"Name": _by_company(w)[r["Company"]]["Name"], "Title": r["Title"]} for r in D(w)
                   if r["Company"] and (_by_company(w)[r["Company"]]["Size"] or 0) > 250 and "VIP" in r["Tags"]])
    case("SELECT COUNT(*) n, SUM(Amount) FILTER (WHERE Stage = 'Won') won FROM Deals"
         " WHERE Closed >= date_trunc('year', '2024-06-15')")(
        lambda w: [{"n": len(rs := [r for r in D(w) if r["Closed"] and r["Closed"].year >= 2024]),
                    "won": _sum([r["Amount"] for r in rs if r["Stage"] == "Won" and r["Amount"] is not None])}])
    case("SELECT extract(month FROM Closed) m, COUNT(*) n FROM Deals WHERE Closed >= '2024-01-01'"
         " AND Closed < '2025-01-01' GROUP BY 1 HAVING COUNT(*) >= 1 ORDER BY m", ordered=True)(
        lambda w: [{"m": k, "n": len(v)} for k, v in sorted(_group(
            [r for r in D(w) if r["Closed"] and r["Closed"].year == 2024], lambda r: r["Closed"].month).items())])
    case("SELECT Stage, round(AVG(Amount), 2) avg_amount FROM Deals WHERE Amount IS NOT NULL GROUP BY Stage")(
        lambda w: [{"Stage": k, "avg_amount": _pg_round(_avg(_vals(v, "Amount")), 2)}
                   for k, v in _group([r for r in D(w) if r["Amount"] is not None], lambda r: r["Stage"]).items()])
    case("SELECT id, label(Company) AS company FROM Deals WHERE Amount > 900")(
        lambda w: [{"id": r["id"], "company": r["Company"] and _by_company(w)[r["Company"]]["Name"]}
                   for r in D(w) if r["Amount"] is not None and r["Amount"] > 900])
    case('SELECT label("Company") AS company, COUNT(*) AS n FROM Deals GROUP BY "Company" HAVING COUNT(*) > 15')(
        lambda w: [{"company": k and _by_company(w)[k]["Name"], "n": len(v)}
                   for k, v in _group(D(w), lambda r: r["Company"]).items() if len(v) > 15])
    case("SELECT label(Company), SUM(Amount) AS s FROM Deals WHERE Company IS NOT NULL GROUP BY 1")(
        lambda w: [{"label": _by_company(w)[k]["Name"], "s": _sum(_vals(v, "Amount"))}
                   for k, v in _group([r for r in D(w) if r["Company"]], lambda r: r["Company"]).items()])
    case("SELECT Company, COUNT(*) n FROM Deals WHERE Company IS NOT NULL GROUP BY Company HAVING COUNT(*) > 15")(
        lambda w: [{"Company": k, "n": len(v)} for k, v in _group([r for r in D(w) if r["Company"]],
                                                                  lambda r: r["Company"]).items() if len(v) > 15])
    return cases


CASES = _cases()


def _approx_equal(got: list[dict[str, Any]], want: list[dict[str, Any]], ordered: bool) -> None:
    g = [_norm(r) for r in got]
    w = [_norm(r) for r in want]
    if not ordered:
        g, w = sorted(g, key=repr), sorted(w, key=repr)
    assert len(g) == len(w)
    for a, b in zip(g, w, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            x, y = a[k], b[k]
            if isinstance(x, float) and isinstance(y, float):
                assert x == pytest.approx(y, rel=1e-9, abs=1e-6), (k, a, b)
            else:
                assert x == y, (k, a, b)


def test_there_are_at_least_forty_analytic_queries() -> None:
    assert len(CASES) >= 40


@pytest.mark.asyncio
@pytest.mark.parametrize(("query", "expected", "ordered"), CASES, ids=[c[0][:60] for c in CASES])
async def test_analytic_query_matches_python_over_the_same_rows(conn, world, query, expected, ordered) -> None:
    plan = world.plan(query if "LIMIT" in query else query + " LIMIT 1000")
    assert isinstance(plan, AnalyticPlan)
    result = await run_sql(conn, plan, workspace_id=world.ws, timeout_s=TIMEOUT_S, count=True)
    want = expected(world)
    rows = result["rows"]
    if query.startswith("SELECT MIN(Closed)"):
        titles = sorted(r["Title"] for r in world.deal_rows)
        assert rows[0]["t"] in titles
        rows = [{**rows[0], "t": None}]
    if "LIMIT" not in query:
        assert result["total"] == len(want)
    _approx_equal(rows, want, ordered)
    assert [c["name"] for c in result["columns"]] == list(rows[0].keys()) if rows else True


# ---------------------------------------------------------------------- shape and types


@pytest.mark.asyncio
async def test_an_aggregate_answers_rows_with_typed_columns_and_a_total(conn, world) -> None:
    result = await _run(conn, world, "SELECT Stage, COUNT(*) AS n, SUM(Amount) revenue, MAX(Closed) last,"
                        " MAX(Company) c, Won FROM Deals GROUP BY Stage, Won ORDER BY Stage, Won LIMIT 3")
    assert result["columns"] == [
        {"name": "Stage", "type": "text"}, {"name": "n", "type": "number"}, {"name": "revenue", "type": "number"},
        {"name": "last", "type": "date"}, {"name": "c", "type": "id"}, {"name": "Won", "type": "boolean"},
    ]
    assert "table" not in result
    assert (result["limit"], result["offset"], result["has_more"], result["total"]) == (3, 0, True, None)
    first = result["rows"][0]
    assert first["Stage"] == "Lead" and isinstance(first["n"], int) and isinstance(first["Won"], bool)
    assert first["last"].endswith("+00:00")


@pytest.mark.asyncio
@pytest.mark.parametrize("json_rows", [False, True])
@pytest.mark.parametrize("in_transaction", [False, True])
async def test_pages_and_totals_of_an_analytic_query(conn, world, json_rows, in_transaction) -> None:
    query = "SELECT id FROM Deals WHERE Amount > 100 OR Won ORDER BY id LIMIT 7 OFFSET 3"
    want = [r["id"] for r in world.deal_rows if (r["Amount"] or 0) > 100 or r["Won"]]
    plan = world.plan(query)
    for count in (False, True):
        if in_transaction:
            async with conn.transaction():
                result = await run_sql(conn, plan, workspace_id=world.ws, timeout_s=TIMEOUT_S,
                                       json_rows=json_rows, count=count)
        else:
            result = await run_sql(conn, plan, workspace_id=world.ws, timeout_s=TIMEOUT_S,
                                   json_rows=json_rows, count=count)
        answer = json.loads(orjson.dumps(result))
        assert [r["id"] for r in answer["rows"]] == want[3:10]
        assert answer["table"] == "Deals"  # one table, no aggregate: the answer names it
        assert answer["has_more"] is True
        assert answer["total"] == (len(want) if count else None)
    end = await _run(conn, world, f"SELECT id FROM Deals WHERE Amount > 100 OR Won ORDER BY id OFFSET {len(want) - 2}")
    assert (len(end["rows"]), end["total"], end["has_more"]) == (2, len(want), False)


@pytest.mark.asyncio
async def test_select_columns_read_labels_relations_ids_and_computed_json(conn, world) -> None:
    result = await _run(conn, world, "SELECT * FROM Deals WHERE id = 1 OR id = 2 ORDER BY id")
    names = [c["name"] for c in result["columns"]]
    assert names == ["id", "created_at", "updated_at", "Title", "Amount", "Stage", "Closed", "Company", "Tags",
                     "Won", "Calc"]  # file columns are left out
    for got, row in zip(result["rows"], world.deal_rows[:2], strict=True):
        assert got["Stage"] == row["Stage"] and got["Tags"] == row["Tags"] and got["Company"] == row["Company"]
        assert got["Won"] is row["Won"] and got["Calc"] == row["Calc"]


@pytest.mark.asyncio
async def test_the_simple_grammar_keeps_its_shape_and_rest_values(conn, world) -> None:
    plan = world.plan("SELECT Stage, Tags FROM Deals WHERE id = 1")
    assert isinstance(plan, SqlPlan)
    result = await run_sql(conn, plan, workspace_id=world.ws, timeout_s=TIMEOUT_S)
    assert set(result) == {"rows", "total", "table", "limit", "offset", "has_more"}
    stage = world.deal_rows[0]["Stage"]
    assert result["rows"][0]["Stage"] == (stage and next(o.id for o in STAGES if o.label == stage))
    assert await _run(conn, world, "SELECT COUNT(*) FROM Deals") == {"count": N_DEALS}


# ---------------------------------------------------------------------- refusals


REFUSED = [
    ("SELECT Title, COUNT(*) FROM Deals", "must be in GROUP BY"),
    ("SELECT Stage FROM Deals GROUP BY Won", "must be in GROUP BY"),
    ("SELECT Stage FROM Deals WHERE COUNT(*) > 1 GROUP BY Stage", "HAVING"),
    ("SELECT SUM(COUNT(*)) FROM Deals", "nested"),
    ("SELECT id FROM Deals WHERE Won OR Amount > (SELECT MAX(Size) FROM Companies)", "subqueries"),
    ("SELECT pg_sleep(10) FROM Deals", "function not allowed"),
    ("SELECT id FROM Deals WHERE pg_sleep(10) IS NULL OR true", "function not allowed"),
    ("SELECT random() FROM Deals", "function not allowed"),
    ("SELECT current_setting('role') FROM Deals", "function not allowed"),
    ("SELECT id FROM Deals WHERE Title IN (SELECT rolname FROM pg_roles)", "unknown table"),
    ("SELECT COUNT(*) FROM Deals JOIN pg_catalog.pg_authid", "schema-qualified"),
    ("SELECT COUNT(*) FROM Deals JOIN Salaries", "no read access"),
    ("SELECT id FROM Deals WHERE Amount IN (SELECT Pay FROM Salaries)", "no read access"),
    ("SELECT COUNT(*) FROM Deals JOIN Leads", "unknown table"),
    ("SELECT id FROM Deals WHERE Title IN (SELECT Name FROM Leads)", "unknown table"),
    ("SELECT COUNT(*) FROM Deals d JOIN Companies c ON d.Title = c.Name", "relation"),
    ("SELECT COUNT(*) FROM Deals d JOIN Companies c ON d.Company = c.id OR true", "relation"),
    ("SELECT COUNT(*) FROM Deals d JOIN Companies c ON true", "relation"),
    ("SELECT COUNT(*) FROM Deals CROSS JOIN Companies", "relation"),
    ("SELECT COUNT(*) FROM Deals FULL JOIN Companies ON Deals.Company = Companies.id", "only JOIN"),
    ("SELECT COUNT(*) FROM Deals, Companies", "comma"),
    ("SELECT COUNT(*) FROM (SELECT * FROM Deals) x", "subqueries"),
    ("SELECT (SELECT COUNT(*) FROM Deals) FROM Deals", "subqueries"),
    ("SELECT id FROM Deals WHERE EXISTS (SELECT 1 FROM Companies)", "EXISTS"),
    ("SELECT Title FROM Deals UNION SELECT Name FROM Companies", "UNION"),
    ("WITH x AS (SELECT 1) SELECT COUNT(*) FROM Deals", "WITH"),
    ("SELECT Amount::text FROM Deals WHERE Won OR true", "casts"),
    ("SELECT id, id FROM Deals WHERE Won OR true", "two result columns"),
    ("SELECT Files FROM Deals WHERE Won OR true", "file column"),
    ("SELECT COUNT(*) FROM Deals GROUP BY Tags", "multi-select"),
    ("SELECT Tags > 'Hot' FROM Deals WHERE Won OR true", "multi-select"),
    ("SELECT COUNT(*) FROM Deals WHERE Stage = 'Nope' OR Won", "INVALID_OPTION"),
    ("SELECT COUNT(*) FROM Deals WHERE Tags = 'Nope' OR Won", "INVALID_OPTION"),
    ("SELECT date_trunc('fortnight', Closed) FROM Deals", "unit"),
    ("SELECT id FROM Deals WHERE Won OR true LIMIT 1001", "LIMIT_TOO_LARGE"),
    ("SELECT COUNT(*) FROM Deals WHERE Won OR Amount = $1", "parameters"),
    ("SELECT COUNT(*) FROM Deals WHERE Won OR Amount IN (" + ", ".join(map(str, range(201))) + ")",
     "TOO_MANY_VALUES"),
    ("SELECT COUNT(*) FROM Deals d JOIN Deals d2 ON d.Company = d2.id", "relation"),
    ("SELECT Nope, COUNT(*) FROM Deals GROUP BY 1", "unknown column"),
    ("SELECT Name FROM Deals JOIN Companies WHERE id > 1 OR true", "several tables"),
    ("SELECT COUNT(*) FROM Deals FOR UPDATE", "not allowed"),
    ("SELECT label(Title) FROM Deals", "relation column"),
    ("SELECT label(Company, 1) FROM Deals", "relation column"),
    ("DELETE FROM Deals WHERE Won OR true", "only SELECT"),
    ("SELECT * INTO x FROM Deals WHERE Won OR true", "not allowed"),
]


@pytest.mark.parametrize(("query", "fragment"), REFUSED)
def test_outside_the_allow_list_is_refused_before_running(world, query, fragment) -> None:
    with pytest.raises(ServiceError) as info:
        world.plan(query)
    err = info.value
    assert fragment in err.message or fragment == err.code, (err.code, err.message)


@pytest.mark.asyncio
async def test_type_errors_from_the_database_are_invalid_sql(conn, world) -> None:
    for query in ("SELECT SUM(Title) FROM Deals", "SELECT id FROM Deals WHERE Amount / 0 > 1 OR Won",
                  "SELECT id FROM Deals WHERE Closed > 'not a date' OR Won"):
        with pytest.raises(InvalidSQL):
            await _run(conn, world, query)


@pytest.mark.asyncio
async def test_large_queries_are_answered_or_refused(conn, world) -> None:
    ors = " OR ".join(f"Amount={i}" for i in range(700))
    result = await _run(conn, world, f"SELECT COUNT(*) AS n FROM Deals WHERE {ors}")
    assert result["rows"][0]["n"] == sum(1 for r in world.deal_rows if r["Amount"] in range(700))
    with pytest.raises(InvalidSQL, match="nested too deeply"):
        world.plan("SELECT " + "(" * 3000 + "1" + ")" * 3000 + " AS x FROM Deals")
    with pytest.raises(PayloadTooLarge):
        world.plan("SELECT COUNT(*) AS n FROM Deals WHERE " + " OR ".join(["Won"] * 3000))


@pytest.mark.asyncio
async def test_a_plan_runs_only_in_its_own_workspace(conn, world) -> None:
    plan = world.plan("SELECT Stage, COUNT(*) FROM Deals GROUP BY Stage")
    with pytest.raises(InvalidSQL, match="unknown table"):
        await run_sql(conn, plan, workspace_id=world.other_ws, timeout_s=TIMEOUT_S)


@pytest.mark.asyncio
async def test_a_long_analytic_query_stops_at_the_timeout(conn, world) -> None:
    # a join along the relation repeated over a large LIKE: each row costs real time
    plan = world.plan("SELECT COUNT(*) AS n FROM Deals a JOIN Companies b ON a.Company = b.id"
                      " WHERE a.Title || a.Title || a.Title LIKE '%" + "a%" * 300 + "b' OR a.id < 0")
    with pytest.raises(SQLTimeout):
        await run_sql(conn, plan, workspace_id=world.ws, timeout_s=0.001)
    assert (await _run(conn, world, "SELECT COUNT(*) FROM Deals"))["count"] == N_DEALS


# ---------------------------------------------------------------------- fuzz

_ALLOWED_EMITTED = {
    # the curated list, and what the translator itself writes around it
    "count", "sum", "avg", "min", "max", "lower", "upper", "length", "btrim", "coalesce", "nullif", "round",
    "abs", "date_trunc", "extract", "now", "array_to_json", "array_agg", "unnest", "jsonb_typeof",
    "cardinality", "timestamp_trunc", "date_trunc", "current_timestamp", "current_date", "unnest", "trim",
    "array_agg", "array_to_json", "regexp_like", "json_extract_path_text", "jsonb_extract_path_text",
    # the answer's size, measured row by row (storage/sqlquery/build.py guarded_page)
    "octet_length", "row_number",
}

# operator nodes sqlglot counts as functions; what the translator writes besides calls
_OPERATORS = (exp.Binary, exp.Connector, exp.Unary, exp.Cast, exp.Case, exp.If, exp.Array, exp.Bracket,
              exp.Paren, exp.Filter)
_COLUMN_NAMES = ["Title", "Amount", "Stage", "Closed", "Company", "Tags", "Won", "Calc", "id", "Files",
                 "Name", "Country", "Size", "Pay", "created_at", "rolname", "c_11", "nope"]
_LIKELY_COLUMNS = ["Title", "Amount", "Stage", "Closed", "Won", "Calc", "Tags", "Company"] * 4
_TABLES = ["Deals", "Companies", "Salaries", "Leads", "pg_roles", "pg_catalog.pg_authid", "wds.tokens",
           "information_schema.tables", "t_2", "deals"]
_FUNCS = ["lower", "upper", "length", "coalesce", "abs", "round", "pg_sleep", "random", "version",
          "current_setting", "set_config", "pg_read_file", "dblink", "generate_series", "txid_current",
          "nextval", "lo_import", "now", "count", "sum", "max", "query_to_xml", "label", "label"]


def _ident(name: str) -> exp.Expression:
    if "." in name:
        db, _, table = name.partition(".")
        return exp.Table(this=exp.to_identifier(table, quoted=True), db=exp.to_identifier(db, quoted=True))
    return exp.Table(this=exp.to_identifier(name, quoted=True))


@st.composite
def _exprs(draw: st.DrawFn, depth: int = 0) -> exp.Expression:
    leaves = [
        st.sampled_from(_LIKELY_COLUMNS + _COLUMN_NAMES).map(lambda n: exp.column(n, quoted=True)),
        st.integers(-5, 2000).map(lambda i: exp.Literal.number(i)),
        st.sampled_from(["Won", "Hot", "x'; DROP TABLE x; --", "%a%", "2024-03-01", "opt_won"]).map(exp.Literal.string),
        st.just(exp.Null()),
        st.booleans().map(lambda b: exp.Boolean(this=b)),
    ]
    if depth >= 2:
        return draw(st.one_of(*leaves))
    sub = _exprs(depth + 1)
    kind = draw(st.integers(0, 12))
    if kind <= 3:
        return draw(st.one_of(*leaves))
    if kind == 4:
        cls = draw(st.sampled_from([exp.EQ, exp.NEQ, exp.GT, exp.LT, exp.Add, exp.Mul, exp.Div, exp.And, exp.Or,
                                    exp.Like, exp.ILike, exp.DPipe]))
        return cls(this=draw(sub), expression=draw(sub))
    if kind == 5:
        return exp.Not(this=draw(sub))
    if kind == 6:
        name = draw(st.sampled_from(_FUNCS))
        args = draw(st.lists(sub, min_size=0, max_size=2))
        return exp.func(name, *args, dialect="postgres") if name in ("lower", "upper", "abs", "count", "sum", "max") \
            and len(args) == 1 else exp.Anonymous(this=name, expressions=args)
    if kind == 7:
        return exp.In(this=draw(sub), query=exp.Subquery(this=draw(_selects(depth + 1))))
    if kind == 8:
        return exp.In(this=draw(sub), expressions=draw(st.lists(sub, min_size=1, max_size=3)))
    if kind == 9:
        return exp.Between(this=draw(sub), low=draw(sub), high=draw(sub))
    if kind == 10:
        return exp.Paren(this=draw(sub))
    if kind == 11:
        unit = draw(st.sampled_from(["month", "quarter", "year", "x'); select 1; --"]))
        return exp.TimestampTrunc(this=draw(sub), unit=exp.Var(this=unit))
    return exp.Is(this=draw(sub), expression=exp.Null())


@st.composite
def _selects(draw: st.DrawFn, depth: int = 0) -> exp.Select:
    table = draw(st.sampled_from(["Deals"] * 12 + _TABLES))
    grouped = draw(st.integers(0, 3)) == 0
    items = draw(st.lists(_exprs(depth + 1), min_size=1, max_size=3))
    if grouped:
        agg = draw(st.sampled_from([exp.Count, exp.Sum, exp.Max, exp.Avg]))
        items = [agg(this=i) if n else i for n, i in enumerate(items)]
    select = exp.Select(expressions=[exp.alias_(e, f"c{i}", quoted=True) for i, e in enumerate(items)])
    select = select.from_(_ident(table))
    if draw(st.integers(0, 3)) == 0:
        other = draw(st.sampled_from(["Companies"] * 5 + _TABLES))
        on = draw(st.sampled_from([
            None,
            exp.EQ(this=exp.column("Company", table=table, quoted=True), expression=exp.column("id", table="j",
                                                                                               quoted=True)),
            exp.Boolean(this=True),
        ]))
        select = select.join(_ident(other).as_("j", quoted=True), on=on)
    if draw(st.booleans()):
        select = select.where(draw(_exprs(depth + 1)))
    if grouped:
        select = select.group_by(exp.Literal.number(1))
        if draw(st.booleans()):
            select = select.having(draw(_exprs(depth + 2)))
    if draw(st.booleans()):
        select = select.limit(draw(st.integers(0, 50)))
    return select


_WRITES = [
    "DELETE FROM Deals", "UPDATE Deals SET Title = 'x'", "INSERT INTO Deals (Title) VALUES ('x')",
    "DROP TABLE Deals", "TRUNCATE Deals", "CREATE TABLE x (a int)", "GRANT ALL ON Deals TO public",
    "SET ROLE postgres", "COPY Deals TO STDOUT", "CALL p()", "DO $$ BEGIN END $$", "VACUUM", "LOCK Deals",
]


@st.composite
def _queries(draw: st.DrawFn) -> str:
    text = draw(_selects()).sql(dialect="postgres")
    tail = draw(st.sampled_from(["", "", "", "; " + draw(st.sampled_from(_WRITES)), " FOR UPDATE"]))
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(_WRITES))
    return text + tail


def _check_emitted(world: World, plan: AnalyticPlan, statement: str) -> None:
    """The statement the translator wrote reads the workspace's readable tables only and
    calls only the curated functions (and what the translator itself writes)."""
    tree = sqlglot.parse_one(statement, read="postgres")
    assert isinstance(tree, exp.Select)
    readable = {f"t_{t.id}" for t in (world.companies, world.deals)}
    # the select columns' option maps, one VALUES of a JSON literal each (analytic.labels)
    maps = set()
    with_ = tree.args.get("with_") or tree.args.get("with")
    for cte in (with_.expressions if with_ is not None else ()):
        assert re.fullmatch(r"o\d+", cte.alias), statement
        body = cte.this  # sqlglot reads VALUES (…) as SELECT * FROM (VALUES (…))
        assert body.find(exp.Values) is not None and not list(body.find_all(exp.Column, exp.Table)), statement
        assert [type(n) for n in body.find(exp.Values).walk() if isinstance(n, exp.Func)
                and not isinstance(n, _OPERATORS)] == [], statement
        maps.add(cte.alias)
    for table in tree.find_all(exp.Table):
        if isinstance(table.this, exp.Identifier) and table.args.get("db") is not None:
            assert table.args["db"].name == f"ws_{world.ws}", statement
            assert table.name in readable, statement
        else:
            assert isinstance(table.this, exp.Unnest) or table.name in ("r", "q", "u", *maps), (table, statement)
    for node in tree.walk():
        assert not isinstance(node, (exp.Insert, exp.Update, exp.Delete, exp.Drop, exp.Create, exp.Command,
                                     exp.Lock, exp.Into)), statement
        if isinstance(node, exp.Anonymous) and node.name in ("concat_text", "answer_too_large"):
            # ||, bounded, and the answer's cap (storage/ddl.py)
            assert isinstance(node.parent, exp.Dot) and node.parent.this.name == "wds_sql", statement
        elif isinstance(node, exp.Anonymous):
            assert node.name.lower() in _ALLOWED_EMITTED, statement
        elif isinstance(node, exp.Func) and not isinstance(node, _OPERATORS):
            assert node.sql_name().lower() in _ALLOWED_EMITTED, (node.sql_name(), statement)
    assert plan.workspace_id == world.ws
    assert all(world.can_read(t.id) and t.workspace_id == world.ws for t in plan.tables)


_FUZZ_LOOP: dict[str, Any] = {}


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(query=_queries())
def test_fuzz_no_generated_query_escapes_the_allow_list(world, query) -> None:
    _fuzz_check_and_run(world, query)


def _fuzz_check_and_run(world: World, query: str) -> None:
    """Translate ``query``; an accepted analytic plan is checked statically
    (:func:`_check_emitted`) and run: it answers, or fails with INVALID_SQL/SQL_TIMEOUT,
    and leaves its connection idle."""
    try:
        plan = world.plan(query)
    except (InvalidSQL, PayloadTooLarge) as exc:
        assert exc.message
        _stat("refused")
        return
    except ServiceError as exc:
        assert exc.code in ("INVALID_OPTION", "LIMIT_TOO_LARGE", "TOO_MANY_VALUES"), exc
        return
    if isinstance(plan, SqlPlan):  # the simple grammar: its own tests cover it
        assert plan.table.workspace_id == world.ws and world.can_read(plan.table.id)
        _stat("simple")
        return
    loop = _FUZZ_LOOP.get("loop")
    if loop is None:
        loop = _FUZZ_LOOP["loop"] = asyncio.new_event_loop()
        _FUZZ_LOOP["conn"] = loop.run_until_complete(psycopg.AsyncConnection.connect(
            DSN, autocommit=True, options="-c timezone=UTC"))
    conn = _FUZZ_LOOP["conn"]
    statement = plan.probe.as_string(conn)
    _check_emitted(world, plan, statement)
    try:
        # the run is bounded by the plan's timeout (here 1 s); wait_for only guards the test
        loop.run_until_complete(asyncio.wait_for(
            run_sql(conn, plan, workspace_id=world.ws, timeout_s=1.0), timeout=30))
        _stat("ran")
    except InvalidSQL:
        _stat("refused by the database")
    except SQLTimeout:
        _stat("timeout")
    # whatever happened, the connection is left as it was found: idle, usable
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE, query


def _stat(outcome: str) -> None:
    _FUZZ_LOOP.setdefault("stats", Counter())[outcome] += 1


# ---------------------------------------------------------------------- the documentation's examples


def _doc_examples() -> list[str]:
    text = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "sql.md"), encoding="utf-8").read()
    blocks = text.split("```sql\n")[1:]
    return [b.split("```", 1)[0].strip() for b in blocks]


def test_the_documentation_has_examples() -> None:
    assert len(_doc_examples()) >= 8


@pytest.mark.asyncio
@pytest.mark.parametrize("query", _doc_examples())
async def test_every_documented_example_translates_and_runs(conn, world, query) -> None:
    tasks = TableMeta(id=4, workspace_id=world.ws, name="Tasks", icon=None, columns=(
        _col(4, 31, "Title", ColumnType.TEXT), _col(4, 32, "Due", ColumnType.DATE),
        _col(4, 33, "Done", ColumnType.CHECKBOX), _col(4, 34, "Owner", ColumnType.TEXT),
    ))
    plan = translate(query, resolve_table=table_resolver([world.companies, world.deals, tasks]),
                     can_read=world.can_read)
    assert isinstance(plan, AnalyticPlan)
    if tasks in plan.tables:
        return  # (no Tasks table in this workspace: translated only)
    result = await run_sql(conn, plan, workspace_id=world.ws, timeout_s=TIMEOUT_S)
    assert [c["name"] for c in result["columns"]] == (list(result["rows"][0]) if result["rows"] else
                                                      [c["name"] for c in result["columns"]])



@pytest.mark.asyncio
async def test_a_connection_stays_usable_after_queries_the_database_rejects(conn, world) -> None:
    """A pipeline failing mid-way must not leave psycopg believing its statements were
    prepared (PostgreSQL never saw their Parse): before the fix, once the transaction's
    statements reached psycopg's prepare threshold, the next failure broke the connection
    for good ("prepared statement … does not exist" on every later request; the simple
    path shares the code). Found by the fuzz test."""
    good = world.plan("SELECT COUNT(*) AS n FROM Deals WHERE Won OR Amount > 500")
    bad = world.plan("SELECT id FROM Deals WHERE Closed > 'not a date' OR Won")
    # (the rhythm matters: psycopg prepares a statement on its 6th use, which must fall in a
    # failing pipeline; every rhythm is covered within a few rounds)
    for rhythm in ("gbg", "ggb", "gb", "gbb"):
        for _ in range(4):
            for step in rhythm:
                if step == "g":
                    result = await run_sql(conn, good, workspace_id=world.ws, timeout_s=TIMEOUT_S)
                    assert result["rows"][0]["n"] > 0
                else:
                    with pytest.raises(InvalidSQL):
                        await run_sql(conn, bad, workspace_id=world.ws, timeout_s=TIMEOUT_S)
                assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE



@pytest.mark.asyncio
@pytest.mark.parametrize("in_transaction", [False, True])
@pytest.mark.parametrize(("sqlstate", "message", "fragment"), [
    ("XX000", "invalid memory alloc request size 1100000004", "larger than the database can hold"),
    ("53200", "out of memory", "more memory"),
    ("53400", "temporary file size exceeds temp_file_limit (1024kB)", "temporary space"),
    ("54000", "a text built with || would be longer than 1,000,000 characters", "1,000,000 characters"),
])
async def test_queries_the_database_cannot_afford_are_invalid_sql(conn, world, in_transaction, sqlstate, message,
                                                                   fragment) -> None:
    """What a query too large for the database raises (a value over its 1 GB per value:
    XX000 "invalid memory alloc request size", out of memory, temporary files, a program
    limit) was a 500: it is INVALID_SQL, and the connection stays usable. The errors are
    PostgreSQL's own, raised as the workspace's read-only role."""
    from storage.sqlquery.run import _execute, _Work  # the one place every SQL plan runs

    statement = (f"DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '{sqlstate}',"
                 f" MESSAGE = '{message}'; END $$").encode()
    if in_transaction:
        await conn.execute("BEGIN")
    try:
        with pytest.raises(InvalidSQL) as info:
            await _execute(conn, _Work((statement,), "json", False), workspace_id=world.ws, timeout_s=TIMEOUT_S)
        assert fragment in info.value.message and info.value.status == 400, info.value.message
    finally:
        if in_transaction:
            await conn.execute("ROLLBACK")
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert (await _run(conn, world, "SELECT COUNT(*) FROM Deals"))["count"] == N_DEALS


@pytest.mark.asyncio
async def test_concatenation_is_bounded_by_the_text_limit(conn, world) -> None:
    """``||`` is ``wds_sql.concat_text``: SQL's concatenation (NULL absorbs), refusing a
    result longer than a text may be (1,000,000 characters) before building it; the
    bomb over a long column is in tests/api/test_sql.py."""
    plan = world.plan("SELECT Title || '-' || Amount AS t, NULL || Title AS z FROM Deals ORDER BY id LIMIT 1")
    assert plan.probe.as_string(conn).count('"wds_sql"."concat_text"(') == 3
    row = (await _run(conn, world, "SELECT Title || '-' || Amount AS t, NULL || Title AS z, Title, Amount"
                                   " FROM Deals ORDER BY id LIMIT 1"))["rows"][0]
    assert row["t"] == f"{row['Title']}-{row['Amount']:g}" and row["z"] is None
    async with conn.transaction(force_rollback=True):
        await conn.execute(psycopg.sql.SQL("SET LOCAL ROLE {}").format(psycopg.sql.Identifier(ddl.ro_role(world.ws))))
        await conn.execute("SET LOCAL search_path TO pg_catalog")
        fits = await (await conn.execute("SELECT length(wds_sql.concat_text(repeat('é', 999999), 'a')) AS n")).fetchone()
        assert fits == {"n": 1_000_000}
        with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="1,000,000 characters"):
            await conn.execute("SELECT wds_sql.concat_text(repeat('é', 999999), 'ab')")


@pytest.mark.asyncio
async def test_a_long_chain_of_operators_is_refused_not_a_crash(conn, world) -> None:
    """400 ``+`` in a row nested the composed statement deeper than Python's recursion
    limit when it was written out: a RecursionError, a 500."""
    for query in ("SELECT " + " + ".join(["Amount"] * 400) + " AS x FROM Deals",
                  "SELECT " + " + ".join(["Calc"] * 400) + " AS x FROM Deals"):
        with pytest.raises(InvalidSQL, match="nested too deeply"):
            await _run(conn, world, query)
    short = await _run(conn, world, "SELECT " + " + ".join(["Amount"] * 50) + " AS x FROM Deals WHERE Amount = 1")
    assert all(r["x"] == 50 for r in short["rows"])


_TOKENS = [
    "SELECT", "FROM", "WHERE", "GROUP BY", "HAVING", "ORDER BY", "LIMIT", "OFFSET", "JOIN", "LEFT JOIN", "ON",
    "AS", "AND", "OR", "NOT", "IN", "IS", "NULL", "BETWEEN", "LIKE", "ILIKE", "CASE", "WHEN", "THEN", "ELSE",
    "END", "DISTINCT", "FILTER", "INTERVAL", "EXISTS", "UNION", "WITH", "OVER", "::", "||", "(", ")", ",", ".",
    "*", "+", "-", "/", "%", "=", "<>", "<", ">=", ";", "Deals", "Companies", "Salaries", "d", "c", '"Deals"',
    "Title", "Amount", "Stage", "Closed", "Company", "Tags", "Won", "Calc", "Files", "id", "Name", "Country",
    "COUNT", "SUM", "AVG", "MIN", "MAX", "lower", "round", "coalesce", "date_trunc", "extract", "now()",
    "current_date", "label", "pg_sleep", "'month'", "'x'", "'Won'", "'2024-01-01'", "1", "0", "2.5", "-3",
    "true", "$1", "ALL", "ANY", "ARRAY", "[1]", "year",
]


@settings(max_examples=800, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(_TOKENS), min_size=1, max_size=25))
def test_fuzz_any_token_soup_is_translated_or_refused_never_crashes(world, tokens) -> None:
    """Text an AI tool or a client might send, however broken: the translator answers a
    plan or one of the service's errors (a 4xx), never another exception (a 500)."""
    query = " ".join(["SELECT", *tokens]) if tokens[0] != "SELECT" else " ".join(tokens)
    try:
        world.plan(query)
    except ServiceError:
        pass


@st.composite
def _mutants(draw: st.DrawFn) -> str:
    """A query of the correctness cases with a few tokens replaced, inserted or dropped."""
    words = draw(st.sampled_from([c[0] for c in CASES])).replace("(", " ( ").replace(")", " ) ").split()
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(words) - 1))
        kind = draw(st.integers(0, 2))
        if kind == 0:
            words[i] = draw(st.sampled_from(_TOKENS))
        elif kind == 1:
            words.insert(i, draw(st.sampled_from(_TOKENS)))
        elif len(words) > 2:
            del words[i]
    return " ".join(words)


@settings(max_examples=800, deadline=None, suppress_health_check=list(HealthCheck))
@given(_mutants())
def test_fuzz_mutated_queries_are_translated_or_refused_never_crash(world, query) -> None:
    """Near-valid analytic queries (most are accepted): the same checks as the tree fuzz,
    run on the database."""
    _fuzz_check_and_run(world, query)


# ---------------------------------------------------------------------- after the fuzz (last in the file)


def test_after_the_fuzz_nothing_was_written(world) -> None:
    """Runs after the fuzz test (file order): the data is as written, and the fuzz did run
    accepted analytic queries (not only refusals)."""
    loop = _FUZZ_LOOP.pop("loop", None)
    if loop is not None:
        loop.run_until_complete(_FUZZ_LOOP.pop("conn").close())
        loop.close()
    stats = _FUZZ_LOOP.pop("stats", Counter())
    print("fuzz outcomes:", dict(stats))
    if stats:
        assert stats["ran"] + stats["refused by the database"] + stats["timeout"] > 0
    counts = {}
    with psycopg.connect(DSN, autocommit=True) as c:
        for meta in (world.companies, world.deals, world.secret):
            row = c.execute(sql.SQL("SELECT count(*) FROM {}").format(ddl.qualified(world.ws, meta.id))).fetchone()
            counts[meta.name] = row[0] if row else None
    assert counts == {"Companies": N_COMPANIES, "Deals": N_DEALS, "Salaries": 1}
