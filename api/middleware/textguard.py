"""Refuse JSON bodies whose strings cannot be text: lone UTF-16 surrogates, and bodies
that are not UTF-8.

JSON may write any UTF-16 code unit as an escape, so ``"\\ud800"`` is valid JSON, and
Python's ``json`` (which FastAPI parses bodies with) turns it into a ``str`` that holds an
unpaired surrogate. No UTF-8 text can hold one: PostgreSQL, hashing, and every encoder
along the way would fail on it, deep inside a route (a 500, or a half-done request). This
check (a step of the front layer, :mod:`api.middleware.front`, after auth and limits)
answers such a body with 400 ``INVALID_VALUE`` before any route sees it, so the request
changes nothing.

Object uploads (``/storage/v1/object/…``) are file bytes streamed to the store under its
size limit, whatever their content type: they pass untouched and unbuffered.

A body that is not ASCII must decode as UTF-8: Python's ``json`` reads bytes with
``surrogatepass``, so the three bytes of a surrogate (``ED A0 80``) became one in a
``str`` the same way (400 ``INVALID_VALUE``); other encodings are refused with 400
``VALIDATION_ERROR`` (RFC 8259: JSON between systems is UTF-8).

It costs one substring search per JSON body (and a UTF-8 check of a body that is not
ASCII): only a body with an escape in the surrogate
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
from starlette.responses import Response

from api.errors import error_response
from storage.schema import encodable, strings_in

_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_JSON_DOORS = frozenset({"rest", "sql"})  # every body of theirs is JSON (api.middleware.usage.door_of)
# object uploads are file bytes, streamed to the store under a size limit: never buffered here
_UPLOADS = "/storage/v1/object/"
_SIGN = "/storage/v1/object/sign/"
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_RAW_SURROGATE = re.compile(rb"\xed[\xa0-\xbf]")  # U+D800–U+DFFF written as UTF-8 bytes


def applies(method: str, path: str, content_type: bytes | None) -> bool:
    """Whether the body of this call is checked: a JSON body (or one without a media type)
    of a POST, PUT, PATCH or DELETE that is not an object upload."""
    return method in _METHODS and not _upload(path) and _json_media(content_type)


def refusal(body: bytes) -> Response | None:
    """The 400 answer when ``body`` is not UTF-8 (``INVALID_VALUE`` when it holds a
    surrogate encoded as bytes, ``VALIDATION_ERROR`` otherwise) or holds a lone surrogate
    escape (``INVALID_VALUE``), else ``None``."""
    if not body.isascii():
        try:
            body.decode()
        except UnicodeDecodeError:
            # Python's json decodes bytes with "surrogatepass" and would read the bytes of
            # a surrogate (ED A0 80 …) as one; other encodings (UTF-16, Latin-1) are not JSON's
            if _RAW_SURROGATE.search(body):
                return error_response(
                    400, "a value cannot be stored: the body holds a UTF-16 surrogate encoded as"
                    " bytes, which is not text", "INVALID_VALUE")
            return error_response(400, "the body is not UTF-8 text; JSON bodies must be encoded in UTF-8",
                                  "VALIDATION_ERROR")
    if b"\\u" in body and _SURROGATE_ESCAPE.search(body) and _lone_surrogate(body):
        return error_response(
            400, "a value cannot be stored: a string holds an unpaired UTF-16 surrogate escape"
            " (\\ud800–\\udfff without its pair), which is not text", "INVALID_VALUE",
        )
    return None


def media_refusal(door: str | None, method: str, content_type: bytes | None,
                  content_length: bytes | None) -> Response | None:
    """415 ``UNSUPPORTED_MEDIA_TYPE`` for a body of another media type than JSON sent to
    REST or SQL, whose every body is JSON (FastAPI would not parse it and answered its
    model's validation message). A body without a media type is read as JSON, and an empty
    one (``curl -X POST -d ''``) is let through."""
    if (door in _JSON_DOORS and method in _BODY_METHODS and content_type is not None
            and not _json_media(content_type) and content_length != b"0"):
        media = content_type.partition(b";")[0].strip().decode("latin-1")[:100]
        return error_response(415, f"this endpoint takes JSON bodies (Content-Type: application/json), not {media!r}",
                              "UNSUPPORTED_MEDIA_TYPE")
    return None


def _upload(path: str) -> bool:
    return path.startswith(_UPLOADS) and not path.startswith(_SIGN)


def _json_media(content_type: bytes | None) -> bool:
    """Whether FastAPI would read the body as JSON: a JSON media type, or none at all."""
    if content_type is None:
        return True
    media = content_type.partition(b";")[0].strip().lower()
    return media == b"application/json" or media.endswith(b"+json")


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
    return not all(encodable(text) for text in strings_in(value))
