"""Domain errors with stable codes.

Every client-facing failure is a :class:`ServiceError` carrying a stable ``code`` and the
HTTP status the API answers with. Storage, activities and the API raise these; one
exception handler in ``api/errors.py`` renders them as ``{"error", "code"}``. A retired
code is never reused.

Hierarchy::

    ServiceError (400 VALIDATION_ERROR)
    ├── InvalidValue        400 INVALID_VALUE / INVALID_OPTION / REQUIRED_FIELD / READ_ONLY_COLUMN
    ├── (ServiceError)      400 SIGNUP_FIELD_NOT_ALLOWED (a field the workspace's sign-up does not take)
    ├── UnknownColumn       400 UNKNOWN_COLUMN
    ├── UnknownOperator     400 UNKNOWN_OPERATOR
    ├── ResultTooLarge      400 RESULT_TOO_LARGE       (a page past its byte cap; adds "fit")
    ├── InvalidSQL          400 INVALID_SQL
    ├── InvalidFormula      400 INVALID_FORMULA
    ├── CircularReference   400 CIRCULAR_REFERENCE
    ├── Unauthorized        401 UNAUTHORIZED
    ├── Forbidden           403 FORBIDDEN / WRONG_PROTOCOL / PLAN_READ_ONLY
    ├── NotFound            404 NOT_FOUND
    ├── Conflict            409 CONFLICT
    ├── SchemaChanged       409 SCHEMA_CHANGED         (a column or table changed under a request's statement)
    ├── ColumnInUse         409 COLUMN_IN_USE          (adds "dependents": [{kind, id, name}])
    │   └── LossyChange     409 LOSSY_CHANGE           (adds "count", "record_ids")
    ├── PlanLimit           402 PLAN_LIMIT_*           (adds "upgrade": true)
    ├── RateLimited         429 PLAN_RATE_LIMIT_API / TOKEN_RATE_LIMIT / AUTH_RATE_LIMIT / SIGNUP_RATE_LIMIT
    ├── Unavailable         503 UNAVAILABLE / WORKSPACE_BUSY
    └── QueryTimeout        503 QUERY_TIMEOUT
"""

from __future__ import annotations

from typing import Any

import psycopg


class ServiceError(Exception):
    """A failure the client caused or must be told about, rendered as ``{error, code}``."""

    status: int = 400
    code: str = "VALIDATION_ERROR"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.extra = extra or {}
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": self.message, "code": self.code, **self.extra}


class ValidationError(ServiceError):
    code = "VALIDATION_ERROR"


class InvalidValue(ServiceError):
    code = "INVALID_VALUE"


class UnknownColumn(ServiceError):
    code = "UNKNOWN_COLUMN"


class UnknownOperator(ServiceError):
    code = "UNKNOWN_OPERATOR"


class ResultTooLarge(ServiceError):
    """An answer past its byte cap (a page of records): the caller asks for less."""

    code = "RESULT_TOO_LARGE"


class InvalidSQL(ServiceError):
    code = "INVALID_SQL"


class InvalidFormula(ServiceError):
    code = "INVALID_FORMULA"


class CircularReference(ServiceError):
    code = "CIRCULAR_REFERENCE"


class Unauthorized(ServiceError):
    status = 401
    code = "UNAUTHORIZED"


class Forbidden(ServiceError):
    status = 403
    code = "FORBIDDEN"


class NotFound(ServiceError):
    status = 404
    code = "NOT_FOUND"


class Conflict(ServiceError):
    status = 409
    code = "CONFLICT"


class SchemaChanged(ServiceError):
    """A request's statement named a column or table that a schema change removed or
    converted after the request read the table's shape: the statement wrote nothing."""

    status = 409
    code = "SCHEMA_CHANGED"


class ColumnInUse(ServiceError):
    status = 409
    code = "COLUMN_IN_USE"
class LossyChange(Conflict):
    """A schema change would drop stored values; the caller may ask for it (``allow_loss``)."""

    code = "LOSSY_CHANGE"

    def __init__(self, message: str, *, count: int, record_ids: list[int]) -> None:
        super().__init__(message, extra={"count": count, "record_ids": record_ids})


class PayloadTooLarge(ServiceError):
    status = 413
    code = "PAYLOAD_TOO_LARGE"


class SQLTimeout(ServiceError):
    status = 408
    code = "SQL_TIMEOUT"


class PlanLimit(ServiceError):
    status = 402

    def __init__(self, message: str, *, kind: str, **kw: Any) -> None:
        super().__init__(message, code=f"PLAN_LIMIT_{kind.upper()}", **kw)
        self.extra["upgrade"] = True


class RateLimited(ServiceError):
    status = 429
    code = "PLAN_RATE_LIMIT_API"


class Unavailable(ServiceError):
    status = 503
    code = "UNAVAILABLE"


class LimitExceeded(ServiceError):
    """A statement went past one of PostgreSQL's fixed limits (SQLSTATE class 54,
    ``program_limit_exceeded`` and its kin): the request is too large or too complex, and
    retrying it unchanged fails the same way (storage/db.py)."""

    status = 400
    code = "DATABASE_LIMIT_EXCEEDED"


class QueryTimeout(ServiceError):
    """A statement ran past the database's ``statement_timeout`` (every request has one; a schema change has 5 minutes)."""

    status = 503
    code = "QUERY_TIMEOUT"


# what a request's statement raises when a schema change committed between the request
# reading the table's shape and running it: a column or table it names is gone, or a
# column it reads or writes was converted to another type (a function or cast of the old
# type no longer applies). Our statements are composed from that shape, so these mean it
# was stale. A statement psycopg had prepared names its table by OID: when the table was
# dropped while the statement waited for its lock, PostgreSQL answers XX000 "could not
# open relation with OID …" (an InternalError, otherwise a 500): only that message counts
SCHEMA_RACES = (psycopg.errors.UndefinedColumn, psycopg.errors.UndefinedTable, psycopg.errors.DatatypeMismatch,
                psycopg.errors.UndefinedFunction, psycopg.errors.CannotCoerce, psycopg.errors.InternalError_)
# PostgreSQL's internal errors when the relation a statement planned for is dropped under
# it (relation_open, the syscache): a race with a schema change, not a fault of ours
_DROPPED_RELATION = ("could not open relation with OID", "cache lookup failed for relation",
                     "cache lookup failed for type")


def is_schema_race(exc: BaseException) -> bool:
    """Whether ``exc`` is what a statement composed from a table's shape raises when a schema
    change committed after the shape was read (:data:`SCHEMA_RACES`)."""
    if isinstance(exc, psycopg.errors.InternalError_):
        message = (exc.diag.message_primary if exc.diag else None) or str(exc)
        return message.startswith(_DROPPED_RELATION)
    return isinstance(exc, SCHEMA_RACES)
