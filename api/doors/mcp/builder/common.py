"""Helpers shared by the builder tools."""

from __future__ import annotations

from typing import Any, TypeVar

import pydantic

from api.doors.mcp.spec import Handler, ToolSpec
from storage.errors import NotFound, ValidationError
from storage.schema import TableMeta

M = TypeVar("M", bound=pydantic.BaseModel)


def model(cls: type[M], data: dict[str, Any]) -> M:
    """Build a REST request model from tool arguments; shape errors become VALIDATION_ERROR."""
    try:
        return cls.model_validate(data)
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ()))
        raise ValidationError(f"{where}: {err.get('msg', 'invalid')}" if where else "invalid arguments") from None


def pick(args: dict[str, Any], *keys: str) -> dict[str, Any]:
    """The given keys that are present in ``args`` (absent means "leave unchanged")."""
    return {k: args[k] for k in keys if k in args}


def builder(name: str, title: str, description: str, handler: Handler, input_schema: dict[str, Any],
            output_schema: dict[str, Any] | None = None, **hints: bool) -> ToolSpec:
    return ToolSpec(name=name, title=title, description=description, input_schema=input_schema,
                    output_schema=output_schema, handler=handler, door="builder", **hints)


def positive_id(value: Any, what: str) -> int:
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and value.isascii() and value.isdigit())):
        raise ValidationError(f"{what} must be an integer id")
    return int(value)


def column_ids(table: TableMeta, refs: list[Any]) -> list[int]:
    """Column ids of ``refs`` (names or ids); NotFound for one the table lacks."""
    ids = []
    for ref in refs:
        col = table.column_ref(ref)
        if col is None:
            raise NotFound(f"column {ref!r} not found in table {table.name!r}")
        ids.append(col.id)
    return ids
