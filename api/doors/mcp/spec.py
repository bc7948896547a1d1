"""What a tool is, independent of any protocol: name, schemas, hints and a handler.

The MCP server (``api/doors/mcp/server.py``) and the agent chat both serve these specs; a
handler is a plain ``async (state, principal, args) -> dict`` over the same route
helpers and storage functions as REST, so both doors behave identically.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from api.state import AppState
from storage.access import Principal
from storage.values import iso

Handler = Callable[[AppState, Principal, dict[str, Any]], Awaitable[dict[str, Any]]]
Door = Literal["data", "builder"]


@dataclass(frozen=True)
class ToolSpec:
    """One tool. ``read_only`` tools run on read-only plans; others need a writable plan."""

    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    handler: Handler
    door: Door = "data"
    output_schema: dict[str, Any] | None = None
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False

    def listing(self) -> dict[str, Any]:
        """The tool as JSON (MCP ``Tool`` shape, camelCase), for ``GET .../tools`` and docs."""
        out: dict[str, Any] = {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema,
            "annotations": {
                "title": self.title,
                "readOnlyHint": self.read_only,
                "destructiveHint": self.destructive,
                "idempotentHint": self.idempotent,
                "openWorldHint": False,
            },
        }
        if self.output_schema is not None:
            out["outputSchema"] = self.output_schema
        return out


# --------------------------------------------------------------------------- schema helpers


class JsonValues(dict[str, Any]):
    """A tool result made of JSON values only: ``str``, ``int``, ``float``, ``bool``,
    ``None`` and lists and dicts (with ``str`` keys) of them, as parsed from JSON.

    orjson writes such a value byte for byte as the SDK's pydantic dump does, so the MCP
    fast path may write it itself instead of through the SDK's per-version result model
    (:class:`api.doors.mcp.fastpath.HeldResult`). Only a handler that knows its result holds
    nothing else (a datetime, say, is written differently by the two) returns one.
    """

    __slots__ = ()


def string(description: str, **kw: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **kw}


def integer(description: str, **kw: Any) -> dict[str, Any]:
    return {"type": "integer", "description": description, **kw}


def boolean(description: str, **kw: Any) -> dict[str, Any]:
    return {"type": "boolean", "description": description, **kw}


def array(items: dict[str, Any], description: str, **kw: Any) -> dict[str, Any]:
    return {"type": "array", "items": items, "description": description, **kw}


def any_object(description: str) -> dict[str, Any]:
    return {"type": "object", "description": description, "additionalProperties": True}


def obj(properties: Mapping[str, dict[str, Any]], required: tuple[str, ...] = (), *,
        description: str | None = None, additional: bool = False) -> dict[str, Any]:
    """An object schema; inputs forbid unknown keys so a typo is an error, not a no-op."""
    out: dict[str, Any] = {"type": "object", "properties": dict(properties), "additionalProperties": additional}
    if required:
        out["required"] = list(required)
    if description:
        out["description"] = description
    return out


def out(properties: Mapping[str, dict[str, Any]], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """An output schema: documents the keys, tolerates additions (forward compatible)."""
    return obj(properties, required, additional=True)


ID_OR_NAME = ["integer", "string"]
TABLE_ID = {"type": ID_OR_NAME, "description": "the table's id, or its exact name"}
RECORD_ID = {"type": ID_OR_NAME, "description": "the record's id (an integer)"}
FIELDS = any_object(
    "values keyed by column name; select columns take the option label or id, multi_select a list,"
    " relation the related record id, date an ISO date or datetime, file a list of URLs or"
    " {bucket, path}; computed columns cannot be written"
)
RECORD_OUT = out({
    "id": {"type": "integer"},
    "fields": {"type": "object"},
    "created_at": {"type": ["string", "null"]},
    "updated_at": {"type": ["string", "null"]},
    "pipeline": {"type": "object", "description": "{status, run_id, errors} when computed columns ran"},
}, ("id", "fields"))
DELETED_OUT = out({"id": {"type": ID_OR_NAME}, "deleted": {"type": "boolean"}}, ("id", "deleted"))


def jsonable(value: Any) -> Any:
    """Metadata rows → JSON values (timestamps as ISO strings, bytes never leak)."""
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items() if not isinstance(v, (bytes, memoryview))}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value
