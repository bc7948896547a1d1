"""REST's answers to the record reads and the batch create, shared by the two REST doors:
the FastAPI routes (:mod:`api.doors.rest.records`) and the direct dispatch of the hot calls
(:mod:`api.doors.fastpath`), which must answer byte for byte alike. Each turns the request
into an operation of :mod:`api.ops.records` and renders its result."""

from __future__ import annotations

import re
from typing import Any

import orjson
from starlette.responses import Response

from api.ops import records as ops
from api.responses import JSON
from api.state import AppState
from storage.access import Principal
from storage.query import parse_params
from storage.query.parse import COUNT_MODES, count_param, parse_count
from storage.query.listing import CountMode

_PREFER_COUNT = re.compile(r"(?:^|[\s,;])count=(exact|planned|estimated)(?![\w-])")


def prefer_count(prefer: str) -> CountMode | None:
    """The count a ``Prefer`` header asks for (``count=exact|planned|estimated``), if any."""
    found = _PREFER_COUNT.search(prefer)
    return CountMode(found[1]) if found else None


async def list_response(
    state: AppState, principal: Principal, table_id: int, params: list[tuple[str, str]], *,
    prefer: str, view: str | None,
) -> Response:
    """``GET {rest}/tables/{id}/records``: the page, with ``X-Total-Count`` and
    ``Content-Range`` when a count was asked (``view``: the request's ``view`` parameter)."""
    want_count = prefer_count(prefer)
    if want_count is None:
        # the count parameter names a mode as Prefer does (checked when the parameters parse;
        # a memo hit means these exact parameters parsed before)
        named = count_param(params)
        if named in COUNT_MODES:
            want_count = CountMode(named)
        elif named is not None:
            parse_count(named)  # raises: not a mode
    memoise = view is None and not any(k == "after" for k, _ in params)
    req = ops.ListRequest(("rest", tuple(params)), lambda: parse_params(params), memoise=memoise)
    page = await ops.list_records(state, principal, table_id, req, count=want_count)
    headers: dict[str, str] = {}
    if page.total is not None:
        # X-Total-Count and Content-Range: first-last/total (*/total when empty)
        headers["X-Total-Count"] = str(page.total)
        # a page after a cursor has no known position (it is not counted): the total only
        keyset = not memoise and any(k == "after" for k, _ in params)
        headers["Content-Range"] = (f"{page.offset}-{page.offset + page.n - 1}/{page.total}" if page.n and not keyset
                                    else f"*/{page.total}")
    if isinstance(page.records, ops.RawJson):
        body = b'{"records":%s,"limit":%d,"offset":%d,"next":%s}' % (
            page.records.encoded(), page.limit, page.offset, orjson.dumps(page.next))
        return Response(body, media_type="application/json", headers=headers)
    return JSON({"records": page.records, "limit": page.limit, "offset": page.offset, "next": page.next},
                headers=headers)


async def record_response(state: AppState, principal: Principal, table_id: int, record_id: str,
                          params: list[tuple[str, str]] | None = None) -> Response:
    """``GET {rest}/tables/{id}/records/{record_id}`` (``params``: its query string)."""
    return JSON(await ops.get_record(state, principal, table_id, record_id, params))


async def batch_response(state: AppState, principal: Principal, table_id: int, rows: list[Any], *,
                         run_pipeline: bool) -> Response:
    """``POST {rest}/tables/{id}/records/batch``: one result per row, in input order. A
    record PostgreSQL rendered goes into the body as its text, without being parsed."""
    out = await ops.create_records(state, principal, table_id, rows, run_pipeline=run_pipeline)
    for result in out["results"]:
        record = result.get("record")
        if isinstance(record, ops.RawJson):
            result["record"] = orjson.Fragment(record.encoded())
    return JSON(out)
