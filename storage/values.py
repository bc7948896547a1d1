"""Value coercion between the API's JSON values and PostgreSQL storage, per column type.

``encode_value`` turns a client's JSON value into what the physical column stores (and
raises a typed error for anything that does not fit); ``decode_value`` turns a stored
value back into the API representation (DESIGN §3, spec "Value representation").
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import orjson
from psycopg.types.json import Jsonb

from storage.errors import InvalidValue, ServiceError
from storage.formula.values import short
from storage.schema import ColumnMeta, ColumnType

MAX_TEXT = 1_000_000  # characters per text cell
_URL_RE = re.compile(r"^https?://[^\s]+$", re.IGNORECASE)

# Base URL used to render stored object references as URLs; set once by the API at start.
_file_base_url: str = ""


# Signs ``(bucket_id, path)`` of an authenticated bucket into an expiring URL query
# (``token=...``); set by the API at start (storage.objects), None → token-only URL.
_file_url_signer: Callable[[int, str], str] | None = None


def set_file_base_url(base_url: str) -> None:
    """Set the public base URL used to turn ``{bucket, path}`` file refs into URLs."""
    global _file_base_url
    _file_base_url = base_url.rstrip("/")


def file_base_url() -> str:
    """The public base URL file refs render under (``""`` until the API sets it)."""
    return _file_base_url


def set_file_url_signer(signer: Callable[[int, str], str] | None) -> None:
    """Set how file refs of authenticated buckets get their signed-URL query string."""
    global _file_url_signer
    _file_url_signer = signer


def invalid_option(col: ColumnMeta, value: Any) -> ServiceError:
    return ServiceError(
        f"{value!r} is not an option of column {col.name!r}",
        code="INVALID_OPTION",
    )


def parse_datetime(value: str) -> datetime:
    """Parse an ISO date or datetime; naive values are taken as UTC.

    >>> parse_datetime("2024-03-01").isoformat()
    '2024-03-01T00:00:00+00:00'
    >>> parse_datetime("2024-03-01T10:20:30Z").isoformat()
    '2024-03-01T10:20:30+00:00'
    """
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        if len(text) == 10:
            d = date.fromisoformat(text)
            return datetime(d.year, d.month, d.day, tzinfo=UTC)
        dt = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ValueError(f"not an ISO date: {value!r}") from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt


# numeric text a write takes: JSON's number syntax (ASCII digits; a leading "+", a bare
# ".5" or "5." too), not Python's float() extras (underscores, other scripts' digits)
_NUMBER_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _encode_number(col: ColumnMeta, value: Any) -> float:
    if isinstance(value, bool):
        raise InvalidValue(f"column {col.name!r} expects a number, got a boolean")
    if isinstance(value, (int, float)):
        try:
            num = float(value)
        except OverflowError:  # an integer of 309+ digits
            raise InvalidValue(f"column {col.name!r} expects a finite number (a double holds at most"
                               " ±1.8e308)") from None
    elif isinstance(value, str):
        text = value.strip()
        if not _NUMBER_TEXT.fullmatch(text):
            raise InvalidValue(f"column {col.name!r} expects a number, got {short(value)}")
        num = float(text)
        if num == 0 and any(c in "123456789" for c in re.split("[eE]", text)[0]):
            # never stored as 0 without a word: the client sent a number other than 0
            raise InvalidValue(f"column {col.name!r}: {short(value)} is too small for a double"
                               " (it would be stored as 0)")
    else:
        raise InvalidValue(f"column {col.name!r} expects a number")
    if not math.isfinite(num):
        raise InvalidValue(f"column {col.name!r} expects a finite number")
    return num



def _encode_date(col: ColumnMeta, value: Any) -> datetime:
    if not isinstance(value, str):
        raise InvalidValue(f"column {col.name!r} expects an ISO date string")
    try:
        return parse_datetime(value)
    except ValueError:
        raise InvalidValue(f"column {col.name!r} expects an ISO date, got {value!r}") from None


def _encode_checkbox(col: ColumnMeta, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if value in (0, 1) and not isinstance(value, float):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise InvalidValue(f"column {col.name!r} expects true or false")


def _encode_option(col: ColumnMeta, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidValue(f"column {col.name!r} expects an option id or label")
    opt = col.option_by_id_or_label(value)
    if opt is None:
        raise invalid_option(col, value)
    return opt.id


def _encode_multi(col: ColumnMeta, value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise InvalidValue(f"column {col.name!r} expects a list of option ids or labels")
    out: list[str] = []
    for item in value:
        oid = _encode_option(col, item)
        if oid not in out:
            out.append(oid)
    return out


def _encode_relation(col: ColumnMeta, value: Any) -> int:
    if isinstance(value, dict) and "id" in value:
        value = value["id"]
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool):
        raise InvalidValue(f"column {col.name!r} expects a record id")
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value.strip())
    if not isinstance(value, int) or value <= 0 or value > 2**63 - 1:
        raise InvalidValue(f"column {col.name!r} expects a record id")
    return value


def _encode_file_item(col: ColumnMeta, item: Any) -> dict[str, str]:
    if isinstance(item, str):
        if _URL_RE.match(item):
            return {"url": item}
        raise InvalidValue(f"column {col.name!r} expects URLs or {{bucket, path}} references")
    if isinstance(item, dict):
        if isinstance(item.get("url"), str) and _URL_RE.match(item["url"]):
            return {"url": item["url"]}
        bucket, path = item.get("bucket"), item.get("path")
        if isinstance(bucket, (str, int)) and isinstance(path, str) and path and ".." not in path.split("/"):
            return {"bucket": str(bucket), "path": path.lstrip("/")}
    raise InvalidValue(f"column {col.name!r} expects URLs or {{bucket, path}} references")


def _encode_file(col: ColumnMeta, value: Any) -> Jsonb:
    items = value if isinstance(value, list) else [value]
    if len(items) > 100:
        raise InvalidValue(f"column {col.name!r} holds at most 100 files")
    return Jsonb([_encode_file_item(col, it) for it in items])


def _encode_text(col: ColumnMeta, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InvalidValue(f"column {col.name!r} expects text")
    text = value if isinstance(value, str) else _number_text(value)
    if len(text) > MAX_TEXT:
        raise InvalidValue(f"column {col.name!r} holds at most {MAX_TEXT} characters")
    if "\x00" in text:
        raise InvalidValue(f"column {col.name!r} cannot hold NUL characters")
    return text


def _number_text(value: float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return str(value)


_ENCODERS = {
    ColumnType.TEXT: _encode_text,
    ColumnType.NUMBER: _encode_number,
    ColumnType.DATE: _encode_date,
    ColumnType.CHECKBOX: _encode_checkbox,
    ColumnType.SINGLE_SELECT: _encode_option,
    ColumnType.MULTI_SELECT: _encode_multi,
    ColumnType.RELATION: _encode_relation,
    ColumnType.FILE: _encode_file,
}


def encode_value(col: ColumnMeta, value: Any) -> Any:
    """Convert a client JSON value for ``col`` into its stored form.

    ``None`` always clears the cell. Computed columns store JSON as-is (the engine writes
    them; the API refuses client writes before this point).

    Raises:
        InvalidValue: the value does not fit the column type.
        ServiceError: code ``INVALID_OPTION`` for an unknown select option.
    """
    if value is None:
        return None
    if col.type.computed:
        return Jsonb(value)
    return _ENCODERS[col.type](col, value)


def _decode_number(raw: float) -> int | float:
    if raw.is_integer() and abs(raw) < 2**53:
        return int(raw)
    return raw


def file_url(ref: dict[str, Any]) -> str | None:
    """Render a stored file reference as a URL (external URLs pass through).

    References resolved at write time (``{bucket_id, path, public}``) render as the
    anonymous public URL or as a signed, expiring URL; an unresolved ``{bucket, path}``
    renders as the token-authenticated object URL.
    """
    if "url" in ref:
        return str(ref["url"])
    if "bucket_id" in ref and "path" in ref:
        bucket_id, path = int(ref["bucket_id"]), str(ref["path"])
        quoted = quote(path, safe="/")
        if ref.get("public"):
            return f"{_file_base_url}/storage/v1/object/public/{bucket_id}/{quoted}"
        if _file_url_signer is not None:
            return f"{_file_base_url}/storage/v1/object/sign/{bucket_id}/{quoted}?{_file_url_signer(bucket_id, path)}"
        return f"{_file_base_url}/storage/v1/object/{bucket_id}/{quoted}"
    if "bucket" in ref and "path" in ref:
        path = quote(str(ref["path"]), safe="/")
        return f"{_file_base_url}/storage/v1/object/{quote(str(ref['bucket']), safe='')}/{path}"
    return None


def decode_value(col: ColumnMeta, raw: Any) -> Any:
    """Convert a stored value of ``col`` into the API's JSON value.

    >>> from storage.schema import ColumnMeta, ColumnType
    >>> decode_value(ColumnMeta(1, 1, "n", ColumnType.NUMBER), 3.0)
    3
    >>> decode_value(ColumnMeta(2, 1, "c", ColumnType.CHECKBOX), None)
    False
    """
    t = col.type
    if raw is None:
        if t is ColumnType.CHECKBOX:
            return False
        if t in (ColumnType.MULTI_SELECT, ColumnType.FILE):
            return []
        return None
    if t is ColumnType.NUMBER or (col.value_type == "number" and t.computed and _is_number(raw)):
        # a computed number comes from jsonb (numeric): 1e307 read as a 308-digit integer
        if type(raw) is int and abs(raw) > sys.float_info.max:
            # one no double holds (storable in jsonb, written by no step of ours): its digits,
            # as jsonb writes them and the PostgreSQL-rendered page does (storage/query/render.py)
            return orjson.Fragment(str(raw))
        return _decode_number(float(raw))
    if t is ColumnType.DATE:
        return iso_text(raw) if isinstance(raw, datetime) else str(raw)
    if t is ColumnType.MULTI_SELECT:
        return list(raw)
    if t is ColumnType.FILE:
        return [u for u in (file_url(r) for r in raw if isinstance(r, dict)) if u is not None]
    return raw


def _is_number(raw: Any) -> bool:
    return isinstance(raw, (int, float, Decimal)) and not isinstance(raw, bool)


def _same(raw: Any) -> Any:
    return raw


def _number_or_none(raw: Any) -> Any:
    return None if raw is None else _decode_number(float(raw))


def value_decoder(col: ColumnMeta) -> Callable[[Any], Any]:
    """:func:`decode_value` for one column, resolved once: loops over many rows (a
    pipeline batch) skip the per-value dispatch. Same results as ``decode_value``."""
    t = col.type
    if t is ColumnType.NUMBER:
        return _number_or_none
    if t in (ColumnType.DATE, ColumnType.CHECKBOX, ColumnType.MULTI_SELECT, ColumnType.FILE) or (
            t.computed and col.value_type == "number"):
        return lambda raw: decode_value(col, raw)
    return _same  # every other type stores what the API shows (None stays None)


def iso(ts: datetime | None) -> str | None:
    """ISO-8601 text of a timestamp (system columns); see :func:`iso_text`."""
    return iso_text(ts) if ts is not None else None


def iso_text(ts: datetime) -> str:
    """ISO-8601 text as PostgreSQL writes a timestamptz in JSON: the fraction without
    trailing zeros, none when it is zero. Pages rendered by PostgreSQL, realtime events
    (``to_jsonb``) and rows decoded here all show the same text for the same instant.

    >>> from datetime import timezone
    >>> iso_text(datetime(2026, 3, 1, 10, 0, 30, 120000, tzinfo=timezone.utc))
    '2026-03-01T10:00:30.12+00:00'
    >>> iso_text(datetime(2026, 3, 1, 10, 0, 30, tzinfo=timezone.utc))
    '2026-03-01T10:00:30+00:00'
    """
    text = ts.isoformat()
    if not ts.microsecond:
        return text
    head, _, rest = text.partition(".")
    return f"{head}.{rest[:6].rstrip('0')}{rest[6:]}"
