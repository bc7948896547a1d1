"""One place that renders every failure as ``{"error", "code"}`` (DESIGN §4).

Never FastAPI's ``{"detail": ...}``, never a traceback: validation errors become 400
``VALIDATION_ERROR`` with the offending location named, unknown routes 404
``NOT_FOUND``, and an unexpected exception a logged 500 ``INTERNAL`` with no detail.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from storage.errors import SCHEMA_RACES, InvalidValue, SchemaChanged, ServiceError, is_schema_race

log = logging.getLogger("wds.api")

_HTTP_CODES = {
    400: "VALIDATION_ERROR",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "CONFLICT",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    422: "VALIDATION_ERROR",
}


def error_response(status: int, message: str, code: str, headers: dict[str, str] | None = None, **extra: Any) -> Response:
    return Response(
        orjson.dumps({"error": message, "code": code, **extra}),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


def _describe(errors: list[dict[str, Any]]) -> str:
    parts = []
    for err in errors[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body",))
        msg = err.get("msg", "invalid")
        if err.get("type") == "json_invalid":
            return "the request body is not valid JSON"
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts) or "invalid request"


def service_error_response(exc: ServiceError) -> Response:
    return error_response(exc.status, exc.message, exc.code, exc.headers or None, **exc.extra)


def database_error(exc: psycopg.Error) -> ServiceError | None:
    """The error every door answers for a database error of a request's own statement
    (REST's routes and fast path, MCP's tools alike), or ``None``: unexpected (a 500)."""
    if isinstance(exc, psycopg.DataError):
        # SQLSTATE class 22 (and psycopg's own check for NUL characters): a value the
        # client sent cannot be stored as sent, e.g. "\u0000" in text or JSON
        reason = (exc.diag.message_primary if exc.diag else None) or str(exc).splitlines()[0]
        return InvalidValue(f"a value cannot be stored: {reason}")
    if is_schema_race(exc):
        # logged: were it a bug of ours rather than a race, this is where it would show
        log.warning("statement refused after a schema change (%s): %s", exc.sqlstate,
                    exc.diag.message_primary if exc.diag else type(exc).__name__)
        return SchemaChanged("the table changed while this request ran (a column or the table was removed, or a"
                             " column converted); nothing was written by it: retry the request")
    return None


async def table_gone(state: Any, table_id: int) -> bool:
    """Whether table ``table_id`` no longer exists (a statement failed as it was dropped)."""
    try:
        async with state.db.connection() as conn:
            cur = await conn.execute("SELECT 1 FROM wds.tables WHERE id = %s", (table_id,))
            return await cur.fetchone() is None
    except Exception:  # the database is away too: not a race we can name
        return False


async def database_error_on(state: Any, exc: psycopg.Error, table_id: Any) -> ServiceError | None:
    """:func:`database_error`, and for any other error of a statement on table ``table_id``
    (a request's path parameter or a tool's argument; anything else is ignored) when that
    table no longer exists: 409 ``SCHEMA_CHANGED``. A drop's locks make PostgreSQL fail
    the statements queued behind it in ways that vary with timing (one full-suite run in
    three answered such a create 500)."""
    mapped = database_error(exc)
    if mapped is None and isinstance(table_id, (int, str)) and str(table_id).isdigit() \
            and await table_gone(state, int(table_id)):
        log.warning("a statement on table %s failed as the table was deleted: %s", table_id, type(exc).__name__)
        mapped = SchemaChanged("the table was deleted while this request ran; nothing was written by it")
    return mapped


def data_error_response(exc: psycopg.Error) -> Response:
    mapped = database_error(exc)
    if mapped is None:
        raise exc
    return service_error_response(mapped)


def install(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service(_: Request, exc: ServiceError) -> Response:
        return service_error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> Response:
        return error_response(400, _describe(list(exc.errors())), "VALIDATION_ERROR")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> Response:
        code = _HTTP_CODES.get(exc.status_code, "ERROR")
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        if exc.status_code == 404 and message == "Not Found":
            message = "no such endpoint"
        return error_response(exc.status_code, message, code, dict(exc.headers or {}) or None)

    @app.exception_handler(psycopg.DataError)
    async def _data(_: Request, exc: psycopg.DataError) -> Response:
        return data_error_response(exc)

    for race in SCHEMA_RACES:
        app.add_exception_handler(race, _data)  # type: ignore[arg-type]

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        if isinstance(exc, psycopg.Error):
            mapped = await database_error_on(request.app.state.wds, exc, request.path_params.get("table_id"))
            if mapped is not None:
                return service_error_response(mapped)
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal error; the request was not completed", "INTERNAL")
