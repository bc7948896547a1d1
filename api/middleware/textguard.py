"""Refuse JSON bodies whose strings cannot be text: lone UTF-16 surrogates.

JSON may write any UTF-16 code unit as an escape, so ``"\\ud800"`` is valid JSON, and
Python's ``json`` (which FastAPI parses bodies with) turns it into a ``str`` that holds an
unpaired surrogate. No UTF-8 text can hold one: PostgreSQL, hashing, and every encoder
along the way would fail on it, deep inside a route (a 500, or a half-done request). This
layer answers such a body with 400 ``INVALID_VALUE`` before any route sees it, so the
request changes nothing.

Object uploads (``/storage/v1/object/…``) are file bytes streamed to the store under its
size limit, whatever their content type: they pass untouched and unbuffered.

It costs one substring search per JSON body: only a body with an escape in the surrogate
range (``\\uD800``–``\\uDFFF``) is parsed with orjson, which refuses unpaired surrogates and
accepts pairs (an emoji written as two escapes); when orjson refuses it, Python's parse
decides whether a lone surrogate is the reason (other leniencies of Python's parser, such
as ``NaN``, are left to the routes as before).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from api.errors import error_response
from api.middleware.bodies import read_body, replay

_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# object uploads are file bytes, streamed to the store under a size limit: never buffered here
_UPLOADS = "/storage/v1/object/"
_SIGN = "/storage/v1/object/sign/"
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class TextGuard:
    """See the module docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _METHODS or _upload(scope["path"]) or not _json_body(scope):
            await self.app(scope, receive, send)
            return
        read = await read_body(receive)
        if read is None:  # the client left
            return
        body, _ = read
        if b"\\u" in body and _SURROGATE_ESCAPE.search(body) and _lone_surrogate(body):
            await error_response(
                400, "a value cannot be stored: a string holds an unpaired UTF-16 surrogate escape"
                " (\\ud800–\\udfff without its pair), which is not text", "INVALID_VALUE",
            )(scope, receive, send)
            return
        await self.app(scope, replay(body, False, receive), send)


def _upload(path: str) -> bool:
    return path.startswith(_UPLOADS) and not path.startswith(_SIGN)


def _json_body(scope: Scope) -> bool:
    """Whether FastAPI would read the body as JSON: a JSON media type, or none at all."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            media = value.partition(b";")[0].strip().lower()
            return media == b"application/json" or media.endswith(b"+json")
    return True


def _lone_surrogate(body: bytes) -> bool:
    try:
        orjson.loads(body)  # strict: refuses unpaired surrogates, accepts pairs
        return False
    except orjson.JSONDecodeError:
        pass
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return False  # not JSON for the routes either: they answer it
    return _holds_surrogate(value)


def _holds_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode()
                except UnicodeEncodeError:
                    return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
