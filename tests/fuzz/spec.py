"""The operations of ``/openapi.json``, read from the app itself at collection time (no
server needed) so that every operation is its own test item."""

from __future__ import annotations

from api.app import create_app

_METHODS = ("get", "put", "post", "patch", "delete", "head", "options")


def operations() -> list[tuple[str, str]]:
    """``(METHOD, path)`` of every operation the app documents.

    >>> ("GET", "/functions/v1/rest-api/tables") in operations()
    True
    """
    spec = create_app().openapi()
    return [(m.upper(), path) for path, ops in spec["paths"].items() for m in ops if m in _METHODS]


OPERATIONS = operations()
