"""JSON encoding of API values with orjson, exact for integers beyond 64 bits.

orjson refuses integers outside the 64-bit range ("Integer exceeds 64-bit range"), but
jsonb keeps any number exactly and gives it back as a Python ``int`` (a formula or
json_parser result of ``1e20`` reads back as ``100000000000000000000``); a client body
may hold one too. :func:`dumps` retries such a value with those integers embedded as raw
JSON digits (``orjson.Fragment``), so the output is byte for byte what orjson writes
otherwise, and exact. Everything that serialises record values uses it.

>>> dumps({"n": 10**20, "m": [1, -(2**70)]})
b'{"n":100000000000000000000,"m":[1,-1180591620717411303424]}'
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson

_MIN, _MAX = -(2**63), 2**64 - 1  # what orjson accepts


def dumps(value: Any, *, option: int = 0, default: Callable[[Any], Any] | None = None) -> bytes:
    """``orjson.dumps`` that also writes integers beyond 64 bits (exactly)."""
    try:
        return orjson.dumps(value, option=option, default=default)
    except TypeError as exc:
        if "64-bit" not in str(exc):
            raise
        return orjson.dumps(_big_ints_as_raw(value), option=option, default=default)


def _big_ints_as_raw(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return orjson.Fragment(str(value).encode()) if not _MIN <= value <= _MAX else value
    if isinstance(value, dict):
        return {k: _big_ints_as_raw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_big_ints_as_raw(v) for v in value]
    return value


def compact(text: str | bytes) -> bytes:
    """JSON text as orjson writes it: no blanks, floats in their shortest form.

    PostgreSQL renders ``json_build_object`` as ``{"id" : 1, "f" : 2}`` and jsonb as
    ``{"a": 1}``; every body the API writes itself is compact, so such text goes through
    here. Parsed with the standard library (exact for integers of any size, which orjson
    would read as floats) and written by :func:`dumps`.

    >>> compact('{"id" : 1, "fields" : {"T" : "a : b, c", "J" : {"x": [1, 2.50]}}}')
    b'{"id":1,"fields":{"T":"a : b, c","J":{"x":[1,2.5]}}}'
    >>> compact('[{"n" : 100000000000000000000}]')
    b'[{"n":100000000000000000000}]'
    """
    return dumps(json.loads(text))
