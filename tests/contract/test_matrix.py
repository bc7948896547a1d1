"""The query contract matrix (docs/query.md): the same query expressions through every door.

Each case is a REST query string. It runs through

* REST, fast path (api/doors/fastpath.py) and slow path (an API process with
  ``WDS_FAST_READS=false``): same status, same body bytes, same count headers;
* MCP ``list_records`` with the same query as tool arguments: the same records, or the
  same ``{error, code}``;
* run-actions (filter-only cases): the run's ``total`` is the REST count, or the same
  ``{error, code}``;
* realtime (filter-only cases): a subscription with the same filter receives exactly the
  changes of the records REST lists, or the same ``{error, code}``;
* saved views (cases with filters or an order): the filters (object and list form) and the
  order saved as a grid view, listed with ``?view=`` and the rest of the query: the same
  records, paging and count, or the same ``{error, code}`` (on saving or on listing);
* the SDK (node, ``sdk_matrix.mjs``: one process for every case): the case written with
  the builder's methods (``_sdk_calls``), the same records and ``next``, or the same
  ``{error, code}``; ``SDK_SKIP`` says why a case cannot be written with the builder.
  Cursor pages (``after``) and whole walks (``pages()``) too.

``{p1}``, ``{id3}`` and ``{opt:done}`` in a case stand for ids known once the data exist.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from storage.query.lexer import parse_list
from storage.query.parse import parse_order, parse_select
from tests.conftest import ApiProcess, Services, Workspace, running_api
from tests.realtime.conftest import open_ws, recv, subscribe

MCP_PATH = "/functions/v1/mcp-server"
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}

# (name, REST query pairs). Cases whose first pair is a filter (and nothing but filters
# and groups) also run through run-actions and realtime.
CASES: list[tuple[str, list[tuple[str, str]]]] = [
    # operators
    ("eq", [("Title", "eq.alpha")]),
    ("neq", [("Title", "neq.alpha")]),
    ("gt", [("Score", "gt.2")]),
    ("gte decimal", [("Score", "gte.2.5")]),
    ("exponent", [("Score", "gte.1e6")]),
    ("lt", [("Score", "lt.0")]),
    ("lte", [("Score", "lte.0")]),
    ("like", [("Title", "like.*a*")]),
    ("like underscore is literal", [("Title", "like.a_b")]),
    ("like percent wildcard", [("Title", "like.50%")]),
    ("ilike unicode upper finds lower", [("Title", "ilike.*É*")]),
    ("ilike unicode lower finds upper", [("Title", "ilike.*é*")]),
    ("ilike greek", [("Title", "ilike.ωMEGA*")]),
    ("ilike titlecase digraph", [("Title", "ilike.ǆ*")]),
    ("in with quoted item", [("Title", 'in.(alpha,Beta,"a,b")')]),
    ("in with quotes and parentheses", [("Title", 'in.("say \\"hi\\"","(x)",alpha,"a\\\\b")')]),
    ("cs two", [("Tags", "cs.{red,blue}")]),
    ("cs one", [("Tags", "cs.{red}")]),
    ("is null text", [("Title", "is.null")]),
    ("is true", [("Done", "is.true")]),
    ("is false", [("Done", "is.false")]),
    ("eq false counts unset", [("Done", "eq.false")]),
    ("checkbox is never null", [("Done", "is.null")]),
    ("checkbox is not null", [("Done", "not.is.null")]),
    ("not eq", [("Title", "not.eq.alpha")]),
    ("not gt keeps nulls", [("Score", "not.gt.2")]),
    ("not ilike unicode", [("Title", "not.ilike.*é*")]),
    ("not is null", [("Title", "not.is.null")]),
    ("not cs", [("Tags", "not.cs.{red}")]),
    ("legacy form", [("filter[Score][gte]", "7")]),
    ("two filters and", [("Score", "gt.0"), ("Done", "is.true")]),
    ("same column twice", [("Score", "gt.0"), ("Score", "lt.10")]),
    # option ids and labels
    ("select label", [("Status", "eq.done")]),
    ("select option id", [("Status", "eq.{opt:done}")]),
    ("select in labels", [("Status", "in.(todo,Ärger)")]),
    ("select ilike unicode label", [("Status", "ilike.ä*")]),
    ("select neq", [("Status", "neq.todo")]),
    ("select is null", [("Status", "is.null")]),
    ("multi eq", [("Tags", "eq.red")]),
    ("multi in", [("Tags", "in.(red)")]),
    ("multi is null", [("Tags", "is.null")]),
    # dates
    ("date gte day", [("Due", "gte.2026-01-01")]),
    ("date lt instant", [("Due", "lt.2026-01-02T00:00:00Z")]),
    ("date eq day is midnight", [("Due", "eq.2026-01-01")]),
    ("date is null", [("Due", "is.null")]),
    ("date with an offset", [("Due", "gt.2026-01-02T13:00:00+02:00")]),
    ("date bad", [("Due", "gt.yesterday")]),
    # relations and system columns
    ("relation eq", [("Owner", "eq.{p1}")]),
    ("relation is null", [("Owner", "is.null")]),
    ("id in", [("id", "in.({id0},{id3})")]),
    ("created_at gte", [("created_at", "gte.2000-01-01")]),
    # a column name with a dot and non-ASCII letters (quoted where the grammar needs it)
    ("dotted unicode column", [("Größe.cm", "gt.1")]),
    ("dotted column in a group", [("or", '("Größe.cm".lt.1,"Größe.cm".is.null)')]),
    ("order and select a dotted column", [("select", 'Title,"Größe.cm"'), ("order", '"Größe.cm".desc,id')]),
    # null from JSON doors
    ("null score", [("Score", "is.null")]),
    # boolean groups
    ("or with nested and", [("or", "(Score.gte.10,and(Status.eq.done,Title.ilike.*e*))")]),
    ("not.or", [("not.or", "(Score.gte.10,Done.is.true)")]),
    ("and group", [("and", "(Score.gt.0,Score.lt.10)")]),
    ("or quoted value", [("or", '(Title.ilike.*É*,Title.eq."a,b")')]),
    ("or cs and is", [("or", "(Tags.cs.{red,blue},Owner.is.null)")]),
    ("or not inside", [("or", "(Title.not.ilike.*a*,Score.is.null)")]),
    ("not.and", [("not.and", "(Done.is.true,Score.gt.5)")]),
    ("two or groups", [("or", "(Score.gt.1,Title.is.null)"), ("or", "(Score.lt.50,Done.is.false)")]),
    ("or with filter", [("Done", "is.true"), ("or", "(Score.lt.2,Title.ilike.*ω*)")]),
    ("or unknown column", [("or", "(Nope.eq.1,Score.gt.1)")]),
    ("or bad value", [("or", "(Score.eq.abc)")]),
    ("or without parens", [("or", "Score.eq.1")]),
    ("or empty", [("or", "()")]),
    ("or bad condition", [("or", "(Score.zz.1)")]),
    # select, expand, order
    ("select two ordered", [("select", "Title,Score"), ("order", "Score.desc.nullslast")]),
    ("select empty", [("select", ""), ("order", "id")]),
    ("select embedding", [("select", "Title,Owner(Name)"), ("order", "id")]),
    ("expand", [("expand", "Owner"), ("order", "id")]),
    ("order text byte order", [("order", "Title.asc")]),
    ("order select by options", [("order", "Status.desc,id.asc")]),
    ("select unknown", [("select", "Nope")]),
    ("expand not a relation", [("expand", "Title")]),
    ("order unknown", [("order", "Nope.desc")]),
    # paging edges
    ("limit", [("limit", "3"), ("order", "id")]),
    ("limit offset", [("limit", "3"), ("offset", "8"), ("order", "id")]),
    ("limit zero", [("limit", "0")]),
    ("offset past end", [("offset", "100")]),
    ("limit maximum", [("limit", "1000")]),
    ("limit too large", [("limit", "1001")]),
    ("limit text", [("limit", "abc")]),
    ("limit negative", [("limit", "-1")]),
    ("limit fraction", [("limit", "10.5")]),
    ("offset text", [("offset", "x")]),
    ("count", [("count", "exact"), ("Score", "gt.1")]),
    ("count bad", [("count", "exactly")]),
    # client mistakes
    ("unknown column", [("Nope", "eq.1")]),
    ("unknown operator", [("Score", "zz.1")]),
    ("bad number", [("Score", "eq.abc")]),
    ("bad option", [("Status", "eq.maybe")]),
    ("bad is", [("Done", "is.maybe")]),
    ("operator not for type", [("Done", "gt.1")]),
    ("filter without value", [("Score", "eq")]),
    ("bad in list", [("Title", 'in.("a,b)')]),
    # REST only: repeats and unknown parameters
    ("repeated limit", [("limit", "5"), ("limit", "7")]),
    ("order and sort", [("order", "id"), ("sort", "-id")]),
    ("repeated select", [("select", "Title"), ("select", "Score")]),
    ("repeated view", [("view", "1"), ("view", "2")]),
    ("run_pipeline on a read", [("run_pipeline", "false")]),
]
REST_ONLY = {"count bad", "repeated limit", "order and sort", "repeated select", "repeated view", "run_pipeline on a read",
             "legacy form", "same column twice", "two or groups"}
GROUP_KEYS = {"or", "and", "not.or", "not.and"}
PAGING_KEYS = {"select", "expand", "order", "sort", "limit", "offset", "count", "view", "run_pipeline"}

ROWS: list[dict[str, Any]] = [
    {"Title": "alpha", "Score": 1, "Done": True, "Status": "todo", "Tags": ["red"], "Due": "2026-01-01", "Owner": "p1",
     "Größe.cm": 0.5},
    {"Title": "Beta", "Score": 2.5, "Done": False, "Status": "done", "Tags": ["blue"], "Due": "2026-01-02T12:00:00Z",
     "Größe.cm": 2},
    {"Title": "épsilon", "Score": 10, "Status": "Ärger", "Tags": ["red", "blue"], "Größe.cm": 3.5},
    {"Title": "ÉCOLE", "Score": -3, "Done": True, "Status": "done", "Tags": [], "Due": "2025-12-31"},
    {"Title": "Straße", "Score": 0, "Done": False, "Due": "2026-02-01"},
    {"Title": "50% off", "Score": 100, "Done": True, "Status": "todo", "Tags": ["blue"], "Due": "2026-01-01"},
    {"Score": None, "Done": False, "Status": "todo", "Tags": ["red"]},
    {"Title": "a_b", "Score": 7, "Done": True, "Status": "done", "Tags": ["red"], "Due": "2026-01-15", "Owner": "p2",
     "Größe.cm": 10},
    {"Title": "ǅemal", "Score": 7, "Done": False, "Status": "Ärger", "Tags": ["blue"]},
    {"Title": "Ωmega ω", "Score": 1e6, "Done": True, "Status": "todo", "Tags": []},
    {"Title": "axb", "Score": 3, "Status": "done"},
]


def _filter_only(pairs: list[tuple[str, str]]) -> bool:
    return all(k not in PAGING_KEYS for k, _ in pairs)


@pytest.fixture(scope="module")
def slow_api(services: Services) -> Iterator[ApiProcess]:
    yield from running_api(services, name="api-contract-slow", WDS_FAST_READS="false")


@pytest.fixture(scope="module")
def world(make_module_workspace: Any) -> dict[str, Any]:
    ws: Workspace = make_module_workspace("enterprise")
    people = ws.create_table("People", [{"name": "Name", "type": "text"}])
    p = [ws.api.post(f"/tables/{people['id']}/records", json={"fields": {"Name": n}}).json()["id"]
         for n in ("Ada", "Bob")]
    t = ws.create_table("Items", [
        {"name": "Title", "type": "text"},
        {"name": "Score", "type": "number"},
        {"name": "Done", "type": "checkbox"},
        {"name": "Status", "type": "single_select", "options": ["todo", "done", "Ärger"]},
        {"name": "Tags", "type": "multi_select", "options": ["red", "blue"]},
        {"name": "Due", "type": "date"},
        {"name": "Owner", "type": "relation", "relation_table_id": people["id"]},
        {"name": "Note", "type": "text"},
        {"name": "Größe.cm", "type": "number"},
    ])
    rows = []
    for row in ROWS:
        fields = {k: v for k, v in row.items() if v is not None}
        if "Owner" in fields:
            fields["Owner"] = p[0] if fields["Owner"] == "p1" else p[1]
        rows.append({"fields": fields})
    r = ws.api.post(f"/tables/{t['id']}/records/batch", json={"rows": rows, "run_pipeline": False})
    assert r.status_code == 200 and all("record" in x for x in r.json()["results"]), r.text
    ids = [x["record"]["id"] for x in r.json()["results"]]
    cols = ws.api.get(f"/tables/{t['id']}/columns").json()
    cols = cols.get("columns", cols) if isinstance(cols, dict) else cols
    status = next(c for c in cols if c["name"] == "Status")
    subs = {"p1": str(p[0]), "p2": str(p[1]), **{f"id{i}": str(v) for i, v in enumerate(ids)},
            **{f"opt:{o['label']}": o["id"] for o in status["options"]}}
    sentinel = ws.create_table("Sentinel", [{"name": "N", "type": "number"}])
    return {"ws": ws, "table": t["id"], "people": people["id"], "ids": ids, "subs": subs, "sentinel": sentinel["id"]}


@pytest.fixture(scope="module")
def make_module_workspace(admin: httpx.Client, base_url: str) -> Iterator[Any]:
    import secrets

    made: list[Workspace] = []

    def make(plan: str = "pro") -> Workspace:
        r = admin.post("/workspaces", json={"name": f"ws-{secrets.token_hex(4)}", "plan": plan})
        assert r.status_code == 201, r.text
        ws_id = r.json()["id"]
        tok = admin.post(f"/workspaces/{ws_id}/tokens", json={"type": "vibe_mcp", "name": "builder"})
        assert tok.status_code == 201, tok.text
        ws = Workspace(ws_id, base_url, admin, tok.json()["token"])
        made.append(ws)
        return ws

    yield make
    for ws in made:
        ws.close()


def _subst(pairs: list[tuple[str, str]], subs: dict[str, str]) -> list[tuple[str, str]]:
    return [(k, re.sub(r"\{(p\d|id\d+|opt:[^}]+)\}", lambda m: subs[m[1]], v)) for k, v in pairs]


def _qs(pairs: list[tuple[str, str]]) -> str:
    return "&".join(f"{quote(k, safe='[]')}={quote(v, safe='')}" for k, v in pairs)


def _rest(base_url: str, token: str, table: int, pairs: list[tuple[str, str]], **headers: str) -> httpx.Response:
    url = f"{base_url}/functions/v1/rest-api/tables/{table}/records?{_qs(pairs)}"
    return httpx.get(url, headers={"Authorization": f"Bearer {token}", **headers}, timeout=60)


def _mcp_args(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """The REST query as list_records arguments (the JSON doors' form of the same query)."""
    args: dict[str, Any] = {}
    filters: dict[str, Any] = {}
    for k, v in pairs:
        if k in ("limit", "offset"):
            args[k] = int(v) if re.fullmatch(r"-?\d+", v) else (float(v) if re.fullmatch(r"-?\d+\.\d+", v) else v)
        elif k == "count":
            args["count"] = True if v == "exact" else v
        elif k in ("select", "expand", "order", "view"):
            args[k] = v
        else:
            assert k not in filters, "one expression per column in this form"
            filters[k] = v
    if filters:
        args["filters"] = filters
    return args


def _mcp(base_url: str, token: str, tool: str, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}}
    r = httpx.post(base_url + MCP_PATH, content=json.dumps(body), timeout=60,
                   headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    result = r.json()["result"]
    return not result.get("isError"), result["structuredContent"]


def _error(body: dict[str, Any]) -> dict[str, Any]:
    return {"error": body["error"], "code": body["code"]}


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_rest_fast_and_slow_and_mcp_agree(name: str, world: dict[str, Any], base_url: str, slow_api: ApiProcess) -> None:
    pairs = _subst(dict(CASES)[name], world["subs"])
    token = world["ws"].builder_token
    fast = _rest(base_url, token, world["table"], pairs, Prefer="count=exact")
    slow = _rest(slow_api.base_url, token, world["table"], pairs, Prefer="count=exact")
    assert (fast.status_code, fast.content) == (slow.status_code, slow.content), name
    for h in ("content-type", "x-total-count", "content-range"):
        assert fast.headers.get(h) == slow.headers.get(h), (name, h)
    assert fast.status_code in (200, 400), fast.text
    if fast.status_code == 200:
        # compact JSON, as every body the API writes
        assert b'" : ' not in fast.content and b'", "' not in fast.content.replace(b'\\"', b"")
    if name in REST_ONLY:
        assert fast.status_code == 400 or name in ("legacy form", "same column twice", "two or groups")
        return
    ok, out = _mcp(base_url, token, "list_records", {"table_id": world["table"], **_mcp_args(pairs)})
    body = fast.json()
    if fast.status_code == 400:
        assert not ok and _error(out) == _error(body), (name, out, body)
        return
    assert ok, (name, out)
    assert (out["records"], out["limit"], out["offset"]) == (body["records"], body["limit"], body["offset"]), name
    if "count" in dict(pairs):
        assert out["total"] == int(fast.headers["x-total-count"])


EXPECTED_ROWS = {
    # a few cases pinned to the rows they must find (the doors could agree and all be wrong)
    "ilike unicode upper finds lower": {"épsilon", "ÉCOLE"},
    "ilike unicode lower finds upper": {"épsilon", "ÉCOLE"},
    "ilike greek": {"Ωmega ω"},
    "ilike titlecase digraph": {"ǅemal"},
    "like underscore is literal": {"a_b"},
    "checkbox is never null": set(),  # never set reads false, on every door (analytic SQL said so already)
    "or with nested and": {"épsilon", "50% off", "Ωmega ω", "Beta", "ÉCOLE"},
    "not.or": {"Beta", "Straße", None, "ǅemal", "axb"},  # an unknown OR is not true: not.or keeps it
    "eq false counts unset": {"Beta", "épsilon", "Straße", None, "ǅemal", "axb"},
    "select ilike unicode label": {"épsilon", "ǅemal"},
    "dotted unicode column": {"Beta", "épsilon", "a_b"},
    "in with quotes and parentheses": {"alpha"},
    "date with an offset": {"Beta", "Straße", "a_b"},
    "exponent": {"Ωmega ω"},
    "dotted column in a group": {"alpha", "ÉCOLE", "Straße", "50% off", None, "ǅemal", "Ωmega ω", "axb"},
}


@pytest.mark.parametrize("name", sorted(EXPECTED_ROWS))
def test_cases_find_the_rows_they_must(name: str, world: dict[str, Any], base_url: str) -> None:
    pairs = _subst(dict(CASES)[name], world["subs"]) + [("limit", "1000")]
    r = _rest(base_url, world["ws"].builder_token, world["table"], pairs)
    assert r.status_code == 200, r.text
    assert {rec["fields"]["Title"] for rec in r.json()["records"]} == EXPECTED_ROWS[name]


FILTER_CASES = [c[0] for c in CASES if _filter_only(c[1]) and c[0] not in REST_ONLY]


@pytest.mark.parametrize("name", FILTER_CASES)
def test_run_actions_count_what_the_list_counts(name: str, world: dict[str, Any], base_url: str) -> None:
    pairs = _subst(dict(CASES)[name], world["subs"])
    ws: Workspace = world["ws"]
    listed = _rest(base_url, ws.builder_token, world["table"], pairs, Prefer="count=exact")
    run = ws.api.post(f"/tables/{world['table']}/run-actions", json={"filters": _mcp_args(pairs)["filters"]})
    if listed.status_code == 400:
        assert run.status_code == 400 and _error(run.json()) == _error(listed.json()), (name, run.text)
        return
    assert run.status_code == 202, run.text
    assert run.json()["total"] == int(listed.headers["x-total-count"]), name


def test_realtime_delivers_what_the_list_lists(world: dict[str, Any], base_url: str) -> None:
    """One connection per filter case, subscribed with the case's filter; every record
    then changes once (a field no case filters on) and a sentinel table changes last:
    each connection must have received exactly the changes of the records REST lists."""
    ws: Workspace = world["ws"]
    token = ws.builder_token
    conns: dict[str, Any] = {}
    expected: dict[str, Any] = {}
    try:
        for name in FILTER_CASES:
            pairs = _subst(dict(CASES)[name], world["subs"])
            listed = _rest(base_url, token, world["table"], pairs + [("limit", "1000")])
            conn = open_ws(base_url, token)
            conn.send(json.dumps({"type": "subscribe", "table": world["table"],
                                  "filter": _mcp_args(pairs)["filters"]}))
            msg = recv(conn)
            if listed.status_code == 400:
                assert msg["type"] == "error" and _error(msg) == _error(listed.json()), (name, msg)
                conn.close()
                continue
            assert msg["type"] == "subscribed", (name, msg)
            subscribe(conn, world["sentinel"])
            conns[name] = conn
            expected[name] = sorted(rec["id"] for rec in listed.json()["records"])
        for rid in world["ids"]:
            r = ws.api.patch(f"/tables/{world['table']}/records/{rid}", json={"fields": {"Note": "touched"}})
            assert r.status_code == 200, r.text
        r = ws.api.post(f"/tables/{world['sentinel']}/records", json={"fields": {"N": 1}})
        assert r.status_code == 201, r.text
        for name, conn in conns.items():
            got: list[int] = []
            while True:
                msg = recv(conn, timeout=30)
                assert msg["type"] == "change", (name, msg)
                if msg["table_id"] == world["sentinel"]:
                    break
                got.append(msg["record"]["id"])
            assert sorted(got) == expected[name], name
    finally:
        for conn in conns.values():
            conn.close()


GET_CASES: list[tuple[str, list[tuple[str, str]], int, str | None]] = [
    # (name, query pairs, expected status, expected code)
    ("plain", [], 200, None),
    ("select", [("select", "Title")], 200, None),
    ("select embedding", [("select", "Title,Owner(Name)")], 200, None),
    ("expand", [("expand", "Owner")], 200, None),
    ("select empty", [("select", "")], 200, None),
    ("select unknown", [("select", "Nope")], 400, "UNKNOWN_COLUMN"),
    ("expand not a relation", [("expand", "Title")], 400, "VALIDATION_ERROR"),
    ("bogus", [("bogus", "1")], 400, "UNKNOWN_PARAMETER"),
    ("view", [("view", "abc")], 400, "UNKNOWN_PARAMETER"),
    ("filter", [("Title", "eq.alpha")], 400, "UNKNOWN_PARAMETER"),
    ("limit", [("limit", "1")], 400, "UNKNOWN_PARAMETER"),
    ("repeated select", [("select", "Title"), ("select", "Score")], 400, "REPEATED_PARAMETER"),
]


@pytest.mark.parametrize("name", [c[0] for c in GET_CASES])
def test_get_by_id_shapes_as_the_list_and_refuses_the_rest(name: str, world: dict[str, Any], base_url: str,
                                                             slow_api: ApiProcess) -> None:
    _, pairs, status, code = next(c for c in GET_CASES if c[0] == name)
    token = world["ws"].builder_token
    rid = world["ids"][0]
    path = f"/functions/v1/rest-api/tables/{world['table']}/records/{rid}"
    qs = f"?{_qs(pairs)}" if pairs else ""
    fast = httpx.get(base_url + path + qs, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    slow = httpx.get(slow_api.base_url + path + qs, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    assert (fast.status_code, fast.content) == (slow.status_code, slow.content), name
    assert fast.status_code == status, fast.text
    body = fast.json()
    mcp_args: dict[str, Any] = {"table_id": world["table"], "record_id": rid}
    if all(k in ("select", "expand") for k, _ in pairs) and len({k for k, _ in pairs}) == len(pairs):
        mcp_args.update(dict(pairs))
        ok, out = _mcp(base_url, token, "get_record", mcp_args)
        if status == 200:
            assert ok and {k: out[k] for k in ("id", "fields")} == {k: body[k] for k in ("id", "fields")}
        else:
            assert not ok and _error(out) == _error(body)
    if status != 200:
        assert body["code"] == code
        return
    assert b'" : ' not in fast.content
    if pairs:
        listed = _rest(base_url, token, world["table"], pairs + [("id", f"eq.{rid}")]).json()["records"]
        assert [body] == listed  # exactly the list's record


def test_a_subscription_refuses_what_it_cannot_honour(world: dict[str, Any], base_url: str) -> None:
    conn = open_ws(base_url, world["ws"].builder_token)
    try:
        for extra in ({"select": "Title"}, {"order": "id.desc"}, {"limit": 5}):
            conn.send(json.dumps({"type": "subscribe", "table": world["table"], **extra}))
            msg = recv(conn)
            assert msg["type"] == "error" and msg["code"] == "UNKNOWN_PARAMETER", msg
            assert next(iter(extra)) in msg["error"]
    finally:
        conn.close()


def test_get_by_id_embedding_checks_the_callers_grant_each_time(world: dict[str, Any], base_url: str) -> None:
    """The plan of ``?expand=`` is memoised per table and query: the builder warms it, a
    token that may read Items but not People is still refused the embedding."""
    ws: Workspace = world["ws"]
    rid = world["ids"][0]
    path = f"/functions/v1/rest-api/tables/{world['table']}/records/{rid}?expand=Owner"
    warm = httpx.get(base_url + path, headers={"Authorization": f"Bearer {ws.builder_token}"}, timeout=60)
    assert warm.status_code == 200 and warm.json()["fields"]["Owner"]["fields"]["Name"] == "Ada"
    reader = ws.token("rest_api", profile_id=ws.profile([{"table_id": world["table"], "read": True}])["id"])["token"]
    refused = httpx.get(base_url + path, headers={"Authorization": f"Bearer {reader}"}, timeout=60)
    assert refused.status_code == 403 and refused.json()["code"] == "FORBIDDEN", refused.text
    listed = _rest(base_url, reader, world["table"], [("expand", "Owner")])
    assert listed.status_code == 403 and listed.json() == refused.json()
    plain = httpx.get(base_url + path.partition("?")[0], headers={"Authorization": f"Bearer {reader}"}, timeout=60)
    assert plain.status_code == 200


def test_pages_with_computed_values_are_compact_too(world: dict[str, Any], base_url: str,
                                                     slow_api: ApiProcess) -> None:
    """A computed column holds jsonb, whose text PostgreSQL writes with blanks: the page is
    compacted, and both paths still answer the same bytes."""
    ws: Workspace = world["ws"]
    t = ws.create_table("Computed", [{"name": "Score", "type": "number"},
                                     {"name": "Double", "type": "formula", "formula": "{Score} * 2"},
                                     {"name": "Label", "type": "formula", "formula": "\"a : b, c\""}])
    r = ws.api.post(f"/tables/{t['id']}/records/batch",
                    json={"rows": [{"fields": {"Score": i + 0.5}} for i in range(3)]})
    assert r.status_code == 200, r.text
    assert b'" : ' not in r.content and b'", "' not in r.content
    fast = _rest(base_url, ws.builder_token, t["id"], [("order", "id")])
    slow = _rest(slow_api.base_url, ws.builder_token, t["id"], [("order", "id")])
    assert fast.status_code == 200 and fast.content == slow.content
    assert b'" : ' not in fast.content and b'"a : b, c"' in fast.content
    assert [rec["fields"]["Double"] for rec in fast.json()["records"]] == [1, 3, 5]


UNKNOWN_PARAMETER_CASES: list[tuple[str, str, str]] = [
    # (REST door, parameter, value): the MCP tool with the same argument answers the same code
    ("list", "run_pipeline", "false"),
    ("get", "view", "abc"),
    ("get", "bogus", "1"),
    ("get", "limit", "1"),
]


@pytest.mark.parametrize("door,key,value", UNKNOWN_PARAMETER_CASES)
def test_an_unknown_parameter_is_the_same_code_on_rest_and_mcp(door: str, key: str, value: str,
                                                                world: dict[str, Any], base_url: str) -> None:
    token, table, rid = world["ws"].builder_token, world["table"], world["ids"][0]
    path = f"/functions/v1/rest-api/tables/{table}/records" + (f"/{rid}" if door == "get" else "")
    rest = httpx.get(f"{base_url}{path}?{_qs([(key, value)])}", headers={"Authorization": f"Bearer {token}"},
                     timeout=60)
    assert rest.status_code == 400 and rest.json()["code"] == "UNKNOWN_PARAMETER", rest.text
    tool, args = ("get_record", {"record_id": rid}) if door == "get" else ("list_records", {})
    ok, out = _mcp(base_url, token, tool, {"table_id": table, **args, key: value})
    assert not ok and out["code"] == "UNKNOWN_PARAMETER", out
    assert repr(key) in out["error"] and repr(key) in rest.json()["error"]


# ------------------------------------------------------------------ the SDK (node)

NODE = shutil.which("node")
SDK_SCRIPT = Path(__file__).with_name("sdk_matrix.mjs")

# Cases the SDK's builder cannot write, and why. Every other case is expressed through the
# builder's methods (``_sdk_calls``) and must give REST's rows or REST's {error, code}.
SDK_SKIP: dict[str, str] = {
    "filter without value": "every filter method writes <op>.<value>: a bare `Score=eq` cannot be sent",
    "or without parens": "or()/and() take the conditions and always write the parentheses",
    "offset text": "range(from, to) takes numbers: a text offset cannot be sent",
    "count bad": "the count mode travels as `Prefer: count=<mode>`: `count=` in the query string cannot be sent",
    "repeated limit": "the builder holds one limit: a second limit() replaces the first",
    "repeated select": "the builder holds one select: a second select() replaces the first",
    "repeated view": "the builder holds one view: a second view() replaces the first",
    "order and sort": "the builder writes order= only (sort= is the REST shorthand)",
    "run_pipeline on a read": "reads have no run_pipeline option (it is a write option)",
}

# Cases written with a particular builder method rather than the generic translation, so
# that the builder's sugar is held to the contract too.
SDK_OVERRIDES: dict[str, list[list[Any]]] = {
    "eq": [["match", {"Title": "alpha"}]],
    "null score": [["eq", "Score", None]],  # eq(col, null) is is.null, as on the JSON doors
    "not is null": [["neq", "Title", None]],  # neq(col, null) is not.is.null
    "bad in list": [["filter", "Title", "in", '("a,b)']],  # in() quotes its items: only filter() can send this
    "select empty": [["select", []], ["order", "id"]],
}

_NUMBER = re.compile(r"-?\d+(\.\d+)?(e\d+)?")
_DATE = re.compile(r"\d{4}-\d\d-\d\d(T[0-9:.]+(Z|[+-]\d\d:\d\d))?")
_SDK_METHODS = {"eq", "neq", "gt", "gte", "lt", "lte", "like", "ilike", "in", "cs", "is"}


def _sdk_value(column: str, text: str) -> Any:
    """A REST value as the JavaScript value a caller would pass: numbers, booleans, dates."""
    if column in ("Due", "created_at", "updated_at") and _DATE.fullmatch(text):
        return {"$date": text}  # a Date: the SDK sends its ISO text
    if text in ("true", "false"):
        return text == "true"
    if _NUMBER.fullmatch(text):
        return float(text) if "." in text or "e" in text else int(text)
    return text


def _sdk_filter(column: str, expr: str) -> list[Any]:
    legacy = re.fullmatch(r"filter\[(.+)\]\[(.+)\]", column)
    if legacy:
        column, expr = legacy[1], f"{legacy[2]}.{expr}"
    negate = expr.startswith("not.")
    op, dot, raw = expr[4 if negate else 0:].partition(".")
    assert dot, (column, expr)
    if op not in _SDK_METHODS:
        return ["filter", column, f"not.{op}" if negate else op, raw]
    value: Any
    if op in ("in", "cs"):
        value = [_sdk_value(column, v) for v in parse_list(raw, "(" if op == "in" else "{", ")" if op == "in" else "}",
                                                          required=True)]
    elif op == "is":
        value = None if raw == "null" else (raw == "true" if raw in ("true", "false") else raw)
    elif op in ("like", "ilike"):
        value = raw
    else:
        value = _sdk_value(column, raw)
    if negate:
        return ["not", column, op, value]
    return ["contains" if op == "cs" else op, column, value]


def _sdk_calls(name: str, pairs: list[tuple[str, str]]) -> list[list[Any]]:
    """The case as builder calls: ``[[method, *args], ...]`` (sdk_matrix.mjs applies them)."""
    if name in SDK_OVERRIDES:
        return SDK_OVERRIDES[name]
    calls: list[list[Any]] = []
    query = dict(pairs)
    if "select" in query or "count" in query:
        select: Any = query.get("select", "*")
        if "," in select:
            # the array form: names unquoted (the SDK quotes them), embeddings as "Rel(A,B)"
            select = [item.name if item.fields is None else f"{item.name}({','.join(item.fields)})"
                      for item in parse_select(select)]
        calls.append(["select", select, {"count": query["count"]}] if "count" in query else ["select", select])
    for k, v in pairs:
        if k in GROUP_KEYS:
            negate = k.startswith("not.")
            assert v.startswith("(") and v.endswith(")"), name
            # or()/and() take the conditions without the outer parentheses; negate: not.or/not.and
            calls.append([k[4:], v[1:-1], {"negate": True}] if negate else [k, v[1:-1]])
        elif k not in PAGING_KEYS:
            calls.append(_sdk_filter(k, v))
    if "expand" in query:
        calls.append(["expand", query["expand"]])
    for term in parse_order(query["order"]) if "order" in query else ():
        options: dict[str, Any] = {}
        if term.desc:
            options["ascending"] = False
        if term.nulls is not None:
            options["nullsFirst"] = term.nulls == "first"
        calls.append(["order", term.column, options] if options else ["order", term.column])
    if "offset" in query:
        start = int(query["offset"])
        size = int(query.get("limit", "100"))  # without a limit, the server's default page
        calls.append(["range", start, start + size - 1])
    elif "limit" in query:
        calls.append(["limit", _sdk_value("limit", query["limit"])])
    return calls


SDK_CASES = [c[0] for c in CASES if c[0] not in SDK_SKIP]


# (name, query pairs, page size): walked page by page through REST's `next` and the SDK's pages()
SDK_WALKS: list[tuple[str, list[tuple[str, str]], int]] = [
    ("by id", [("order", "id")], 3),
    ("by score descending, nulls first", [("order", "Score.desc")], 4),
    ("by title, filtered", [("Title", "not.is.null"), ("order", "Title.asc")], 2),
    ("by option order, nulls first", [("order", "Status.desc.nullsfirst")], 5),
    ("by date, ascending", [("order", "Due.asc")], 4),
    ("an or group, default order", [("or", "(Score.gt.1,Done.is.true)")], 3),
]


def _cursor_cases(first: str) -> list[tuple[str, list[tuple[str, str]], list[list[Any]]]]:
    """Single pages by cursor: (name, REST pairs, SDK calls). ``first`` is the ``next`` of
    the first page of ``order=Score.desc&limit=3``."""
    page = [("order", "Score.desc"), ("limit", "3")]
    calls = _sdk_calls("", page)
    return [
        ("the second page", page + [("after", first)], calls + [["after", first]]),
        ("a cursor of another order", [("order", "Score.asc"), ("limit", "3"), ("after", first)],
         _sdk_calls("", [("order", "Score.asc"), ("limit", "3")]) + [["after", first]]),
        ("garbage", page + [("after", "garbage")], calls + [["after", "garbage"]]),
        ("with an offset", [("order", "Score.desc"), ("limit", "3"), ("offset", "3"), ("after", first)],
         _sdk_calls("", [("order", "Score.desc"), ("limit", "3"), ("offset", "3")]) + [["after", first]]),
    ]


@pytest.fixture(scope="module")
def sdk_results(world: dict[str, Any], base_url: str) -> dict[str, Any]:
    """Every SDK case in one node process (sdk_matrix.mjs): {name: {data, error, count, status, next}}."""
    if NODE is None:
        pytest.skip("node is not installed: the SDK door of the matrix needs Node 18+")
    cases = [{"name": name, "calls": _sdk_calls(name, _subst(dict(CASES)[name], world["subs"]))} for name in SDK_CASES]
    token = world["ws"].builder_token
    for name, pairs, size in SDK_WALKS:
        cases.append({"name": f"walk: {name}", "calls": _sdk_calls(name, pairs), "pages": size})
    first = _rest(base_url, token, world["table"], [("order", "Score.desc"), ("limit", "3")]).json()["next"]
    assert first, "the first page of three has a next page"
    for name, pairs, calls in _cursor_cases(first):
        cases.append({"name": f"cursor: {name}", "calls": calls})
    payload = {"url": base_url, "token": world["ws"].builder_token, "table": world["table"], "cases": cases}
    r = subprocess.run([NODE, str(SDK_SCRIPT)], input=json.dumps(payload), capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-4000:]
    out: dict[str, Any] = json.loads(r.stdout)
    return out


@pytest.mark.parametrize("name", SDK_CASES)
def test_the_sdk_gets_what_rest_gets(name: str, world: dict[str, Any], base_url: str,
                                     sdk_results: dict[str, Any]) -> None:
    pairs = _subst(dict(CASES)[name], world["subs"])
    rest = _rest(base_url, world["ws"].builder_token, world["table"], pairs, Prefer="count=exact")
    got = sdk_results[name]
    assert got["status"] == rest.status_code, (name, got, rest.text)
    body = rest.json()
    if rest.status_code != 200:
        assert got["data"] is None and {"error": got["error"]["message"], "code": got["error"]["code"]} == _error(body), \
            (name, got["error"], body)
        return
    assert got["error"] is None, (name, got["error"])
    assert got["data"] == body["records"], name
    assert got["next"] == body["next"], name
    if "count" in dict(pairs):
        assert got["count"] == int(rest.headers["x-total-count"])
    else:
        assert got["count"] is None


# ------------------------------------------------------------------ saved views

# A case is a view case when it has filters or an order: they become the view's
# ``config.filters`` and ``config.sort``, the rest of the query (select, expand, limit,
# offset, count) is sent beside ``?view=``. Not view cases: the REST-only repeats and
# parameters (a view holds one sort and no paging) and:
VIEW_SKIP: dict[str, str] = {
    "legacy form": "filter[col][op]= is query-string syntax; a view's filters are the object or list form",
}
_SINGLE_VALUED = {"order", "sort", "limit", "offset", "select", "expand", "view", "count"}


def _view_case(name: str, pairs: list[tuple[str, str]]) -> bool:
    keys = [k for k, _ in pairs]
    repeated = any(keys.count(k) > 1 for k in _SINGLE_VALUED)
    shaped = any(k not in PAGING_KEYS or k == "order" for k in keys)
    return shaped and not repeated and not {"sort", "view", "run_pipeline"} & set(keys) and name not in VIEW_SKIP


def _view_filters(pairs: list[tuple[str, str]]) -> list[tuple[str, Any]]:
    """The case's filters as a view holds them: the object form (when no key repeats) and
    the list form ``[{column, op, value}]`` / ``{"or": "(...)"}`` (when every filter has an
    ``<op>.<value>``), as (form, filters) pairs."""
    filters = [(k, v) for k, v in pairs if k not in PAGING_KEYS]
    if not filters:
        return [("none", None)]
    forms: list[tuple[str, Any]] = []
    if len({k for k, _ in filters}) == len(filters):
        forms.append(("object", dict(filters)))
    items: list[dict[str, Any]] = []
    for k, v in filters:
        if k in GROUP_KEYS:
            items.append({k: v})
            continue
        negate = v.startswith("not.")
        op, dot, value = v[4 if negate else 0:].partition(".")
        if not dot:
            break  # `Score=eq` has no list form
        items.append({"column": k, "op": f"not.{op}" if negate else op, "value": value})
    else:
        forms.append(("list", items))
    return forms


VIEW_CASES = [c[0] for c in CASES if _view_case(*c)]


@pytest.mark.parametrize("name", VIEW_CASES)
def test_a_view_lists_what_the_query_lists(name: str, world: dict[str, Any], base_url: str) -> None:
    """The case's filters and order saved as a grid view (object and list form), listed
    with ``?view=`` and the rest of the query: REST's rows, count and paging, or REST's
    {error, code} (when saving the view, or when listing with it)."""
    ws: Workspace = world["ws"]
    pairs = _subst(dict(CASES)[name], world["subs"])
    rest = _rest(base_url, ws.builder_token, world["table"], pairs, Prefer="count=exact")
    order = dict(pairs).get("order")
    beside = [(k, v) for k, v in pairs if k in PAGING_KEYS and k != "order"]
    for form, filters in _view_filters(pairs):
        config: dict[str, Any] = {}
        if filters is not None:
            config["filters"] = filters
        if order is not None:
            config["sort"] = order
        saved = ws.api.post(f"/tables/{world['table']}/views",
                            json={"name": f"{name} ({form})", "view_type": "grid", "config": config})
        if saved.status_code != 201:
            assert saved.status_code == 400 == rest.status_code, (name, form, saved.text, rest.text)
            assert _error(saved.json()) == _error(rest.json()), (name, form, saved.text, rest.text)
            continue
        view_id = saved.json()["id"]
        try:
            listed = _rest(base_url, ws.builder_token, world["table"], beside + [("view", str(view_id))],
                           Prefer="count=exact")
        finally:
            assert ws.api.delete(f"/tables/{world['table']}/views/{view_id}").status_code == 200
        assert listed.status_code == rest.status_code, (name, form, listed.text, rest.text)
        if rest.status_code != 200:
            assert _error(listed.json()) == _error(rest.json()), (name, form)
            continue
        got, want = listed.json(), rest.json()
        assert (got["records"], got["limit"], got["offset"]) == (want["records"], want["limit"], want["offset"]), \
            (name, form)
        assert (got["next"] is None) == (want["next"] is None), (name, form)
        assert listed.headers["x-total-count"] == rest.headers["x-total-count"], (name, form)


def test_the_sdk_pages_by_cursor_as_rest_does(world: dict[str, Any], base_url: str,
                                              sdk_results: dict[str, Any]) -> None:
    """A page by ``after(next)`` is REST's page for ``after=next``; a cursor REST refuses
    (another order's, garbage, with an offset) is refused alike."""
    token = world["ws"].builder_token
    first = _rest(base_url, token, world["table"], [("order", "Score.desc"), ("limit", "3")]).json()["next"]
    refused = 0
    for name, pairs, _ in _cursor_cases(first):
        rest = _rest(base_url, token, world["table"], pairs)
        got = sdk_results[f"cursor: {name}"]
        assert got["status"] == rest.status_code, (name, got, rest.text)
        if rest.status_code == 200:
            assert got["error"] is None and got["data"] == rest.json()["records"] and got["next"] == rest.json()["next"]
            assert got["data"], name
        else:
            refused += 1
            assert {"error": got["error"]["message"], "code": got["error"]["code"]} == _error(rest.json()), name
            assert got["error"]["code"] == "INVALID_CURSOR"
    assert refused == 3


@pytest.mark.parametrize("name", [w[0] for w in SDK_WALKS])
def test_the_sdk_walks_every_page_rest_walks(name: str, world: dict[str, Any], base_url: str,
                                             sdk_results: dict[str, Any]) -> None:
    _, pairs, size = next(w for w in SDK_WALKS if w[0] == name)
    token = world["ws"].builder_token
    pages: list[list[Any]] = []
    cursor = None
    while True:
        r = _rest(base_url, token, world["table"], pairs + [("limit", str(size))] + ([("after", cursor)] if cursor else []))
        assert r.status_code == 200, r.text
        pages.append(r.json()["records"])
        cursor = r.json()["next"]
        if cursor is None:
            break
    got = sdk_results[f"walk: {name}"]
    assert got["error"] is None, got["error"]
    assert got["data"] == pages, name
    assert len(pages) > 1
    whole = _rest(base_url, token, world["table"], pairs + [("limit", "1000")]).json()["records"]
    assert [rec for page in pages for rec in page] == whole
