"""Keyset cursors: the ``next`` of a list page and the ``after`` that continues it.

A cursor is ``base64url(payload || mac)`` (no padding) where ``payload`` is the JSON
``[fingerprint, [v1, ..., id]]``: the last row's value of each order term, in order,
ending with its id, and a fingerprint of the table, the order and the filters (a cursor
only continues the list it came from). ``mac`` is the first 16 bytes of HMAC-SHA256 over
the payload under a key derived from ``WDS_SECRET_KEY`` (:func:`set_key`; without one,
from the database URL, which every process of a deployment shares). The signature keeps
clients from hand-editing positions; it guards no data: the page's WHERE still holds the
caller's filters and read rights, so a forged position could only start a page the
caller can read anyway. Values are written in one canonical form whichever way the page was read
(rendered as JSON in PostgreSQL or decoded in Python), so both give the same bytes.

Anything that does not verify — garbage, a changed byte, another order or filter, a value
of the wrong type — is ``INVALID_CURSOR`` (400). docs/query.md describes the contract.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from storage.errors import ServiceError
from storage.query.targets import Kind
from storage.values import iso_text

# the kinds an order term may have for a cursor to continue it (multi_select, JSON and
# file columns order by values a cursor cannot carry exactly: those lists page by offset)
CURSOR_KINDS = frozenset({Kind.TEXT, Kind.NUMBER, Kind.DATE, Kind.BOOL, Kind.SELECT, Kind.INT})
MAX_CURSOR = 8192  # characters; a cursor carries one row's order keys
# a longer text key travels as its first characters and a digest (:func:`truncated_text`)
CURSOR_TEXT = 512
_MAC_BYTES = 16
_key: bytes = secrets.token_bytes(32)


def set_key(secret_key: str | None, fallback: str = "") -> None:
    """Derive the signing key from the service secret, else from ``fallback`` (the
    database URL: every process of one deployment shares it)."""
    global _key
    _key = hmac.new((secret_key or fallback).encode() or secrets.token_bytes(32), b"wds-list-cursor-v1",
                    hashlib.sha256).digest()


def invalid(message: str) -> ServiceError:
    return ServiceError(message, code="INVALID_CURSOR")


def fingerprint(table_id: int, order: Sequence[Any], filters: Sequence[Any], view: str | None) -> str:
    """A short digest of what a cursor is tied to: the table, the order as planned (the
    same order however it is written: :func:`storage.query.plan._order_identity`) and
    the filters as parsed (their ``repr``)."""
    text = repr((int(table_id), tuple(order), tuple(filters), view)).encode()
    return hashlib.sha256(text).hexdigest()[:22]


def canonical(kind: Kind, value: Any) -> Any:
    """One order key in the cursor's form: numbers as floats, timestamps as ISO text in
    UTC (as :func:`storage.values.iso_text` writes them), ids as ints, the rest as is."""
    if value is None:
        return None
    if kind is Kind.NUMBER:
        return float(value)
    if kind is Kind.INT:
        return int(value)
    if kind is Kind.DATE:
        ts = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
        return iso_text(ts.astimezone(UTC))
    if kind is Kind.BOOL:
        return bool(value)
    if kind is Kind.TEXT and isinstance(value, list):
        return value  # already cut (a cursor's own value)
    text = str(value)
    if kind is Kind.TEXT and len(text) > CURSOR_TEXT:
        # a text cell may hold 1M characters: the cursor carries its head and its MD5
        # (PostgreSQL's md5() of the same UTF-8), and the next page reads the row's text
        # back by id (storage/query/build.py ``_after``)
        return [text[:CURSOR_TEXT], hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()]
    return text


def truncated_text(value: Any) -> tuple[str, str] | None:
    """``(head, md5 hex)`` when a text order key came in a cursor cut (:func:`canonical`)."""
    if isinstance(value, list) and len(value) == 2:
        return value[0], value[1]
    return None


def encode(fp: str, kinds: Sequence[Kind], values: Sequence[Any]) -> str:
    """The cursor continuing after the row whose order keys are ``values``."""
    payload = orjson.dumps([fp, [canonical(k, v) for k, v in zip(kinds, values, strict=True)]])
    mac = hmac.digest(_key, payload, "sha256")[:_MAC_BYTES]  # one C call: ~1 µs less than hmac.new
    return base64.urlsafe_b64encode(payload + mac).rstrip(b"=").decode()


def decode(text: str, fp: str, kinds: Sequence[Kind]) -> tuple[Any, ...]:
    """The order keys of a cursor made by :func:`encode` for the same fingerprint.

    Raises:
        ServiceError: ``INVALID_CURSOR`` — not a cursor, tampered with, or made for
            another order, filter or table.
    """
    if not text or len(text) > MAX_CURSOR:
        raise invalid("after must be the next cursor of a page of this list")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise invalid("after is not a cursor: pass the next value of a list page as is") from None
    payload, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
    expected = hmac.digest(_key, payload, "sha256")[:_MAC_BYTES]
    if len(raw) <= _MAC_BYTES or not hmac.compare_digest(mac, expected):
        raise invalid("after is not a cursor this service issued (or it was changed)")
    try:
        got_fp, values = orjson.loads(payload)
    except (orjson.JSONDecodeError, ValueError, TypeError):
        raise invalid("after is not a cursor this service issued") from None
    if got_fp != fp:
        raise invalid("the cursor belongs to another order or filter: page with the same"
                      " order and filters the cursor's page had, or start again without after")
    if not isinstance(values, list) or len(values) != len(kinds):
        raise invalid("the cursor does not match this list's order")
    return tuple(_typed(k, v) for k, v in zip(kinds, values, strict=True))


def _typed(kind: Kind, value: Any) -> Any:
    if value is None:  # a row with a blank key (a relation's is an INT: NULL when empty)
        return None
    if kind is Kind.TEXT and isinstance(value, list):
        ok = (len(value) == 2 and all(isinstance(x, str) for x in value) and len(value[0]) == CURSOR_TEXT
              and len(value[1]) == 32)
        if not ok:
            raise invalid("the cursor does not match this list's order")
        return value
    ok = {
        Kind.NUMBER: isinstance(value, float) and math.isfinite(value),
        Kind.INT: isinstance(value, int) and not isinstance(value, bool),
        Kind.BOOL: isinstance(value, bool),
    }.get(kind, isinstance(value, str))
    if not ok:
        raise invalid("the cursor does not match this list's order")
    if kind is Kind.DATE:
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            raise invalid("the cursor does not match this list's order") from None
    return value
