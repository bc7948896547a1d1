"""The tool catalogue: which tools a token gets, argument validation and error capture.

Protocol-free on purpose: the MCP server and the agent chat both call :func:`run_tool`.
Every token gets the 12 data tools; the builder credential (vibe_mcp) also gets the 44
builder tools. A failure is returned as ``{error, code}`` (never raised), so a model
sees what went wrong and can correct itself.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
import psycopg
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from jsonschema.exceptions import best_match  # type: ignore[import-untyped]

from api.deps import require_writable
from api.doors.mcp.spec import ToolSpec
from api.doors.mcp.tools_builder import BUILDER_TOOLS
from api.doors.mcp.tools_data import DATA_TOOLS
from api.errors import database_error_on
from api.state import AppState
from storage.access import Principal, TokenType
from storage.errors import NotFound, ServiceError, ValidationError

log = logging.getLogger("wds.mcp")

ALL_TOOLS: list[ToolSpec] = [*DATA_TOOLS, *BUILDER_TOOLS]
BY_NAME: dict[str, ToolSpec] = {t.name: t for t in ALL_TOOLS}
_VALIDATORS = {t.name: Draft202012Validator(t.input_schema) for t in ALL_TOOLS}
# arguments already found valid, as tool name + their JSON: validation is a pure function
# of the two, and an agent (or a client paging) sends the same arguments again and again
VALID_MEMO = 2048
_VALID: set[bytes] = set()
assert len(DATA_TOOLS) == 12 and len(BUILDER_TOOLS) == 44 and len(BY_NAME) == 56, "tool catalogue drifted"


class UnknownTool(NotFound):
    code = "UNKNOWN_TOOL"


def has_builder_tools(principal: Principal) -> bool:
    return principal.type is TokenType.VIBE_MCP


def tools_for(principal: Principal) -> list[ToolSpec]:
    """The tools this token may call: 12 data tools, or all 56 for the builder."""
    return ALL_TOOLS if has_builder_tools(principal) else DATA_TOOLS


def tool_for(principal: Principal, name: str) -> ToolSpec:
    """The named tool if this token has it.

    Raises:
        UnknownTool: no such tool for this token (builder tools are invisible to others).
    """
    spec = BY_NAME.get(name)
    if spec is None or (spec.door == "builder" and not has_builder_tools(principal)):
        raise UnknownTool(f"unknown tool {name!r}")
    return spec


def input_schema(name: str) -> dict[str, Any] | None:
    spec = BY_NAME.get(name)
    return spec.input_schema if spec else None


def _refuse_unknown_arguments(spec: ToolSpec, args: dict[str, Any]) -> None:
    """An argument the tool does not take is ``UNKNOWN_PARAMETER``, as an unknown query
    parameter is on REST (docs/query.md), before any other schema check.

    ``tools/list`` keeps ``additionalProperties: false`` for clients; only the code of
    this one fault differs from the schema's ``VALIDATION_ERROR``. Unknown keys nested in
    an argument's value stay ``VALIDATION_ERROR`` (they are a malformed value).
    """
    schema = spec.input_schema
    if schema.get("additionalProperties", True) is not False:
        return
    known = schema.get("properties", {})
    unknown = [k for k in args if k not in known]
    if unknown:
        takes = ", ".join(known) or "no arguments"
        raise ServiceError(f"unknown argument {unknown[0]!r} for tool {spec.name}; it takes {takes}",
                           code="UNKNOWN_PARAMETER")


def validate_arguments(spec: ToolSpec, args: Any) -> dict[str, Any]:
    """Check arguments against the tool's input schema; the first problem is named.

    Raises:
        ServiceError: ``UNKNOWN_PARAMETER`` for an argument the tool does not take.
        ValidationError: any other schema violation (the first one).
    """
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ValidationError("tool arguments must be an object")
    try:
        key: bytes | None = spec.name.encode() + b"\0" + orjson.dumps(args)
    except TypeError:  # an integer beyond 64 bits: validate without the memo
        key = None
    if key is not None and key in _VALID:
        return args
    _refuse_unknown_arguments(spec, args)
    error = best_match(_VALIDATORS[spec.name].iter_errors(args))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path)
        raise ValidationError(f"{where}: {error.message}" if where else error.message)
    if key is not None:
        if len(_VALID) >= VALID_MEMO:
            _VALID.clear()
        _VALID.add(key)
    return args


async def call_tool(state: AppState, principal: Principal, spec: ToolSpec, args: Any) -> dict[str, Any]:
    """Run one tool for ``principal``; raises :class:`ServiceError` on failure."""
    args = validate_arguments(spec, args)
    if not spec.read_only:
        require_writable(principal)
    return await spec.handler(state, principal, args)


async def run_tool(state: AppState, principal: Principal, spec: ToolSpec, args: Any) -> tuple[bool, dict[str, Any]]:
    """Run one tool; returns ``(True, result)`` or ``(False, {error, code, ...})``."""
    try:
        return True, await call_tool(state, principal, spec, args)
    except ServiceError as exc:
        return False, exc.body()
    except Exception as exc:  # a tool must answer, never crash the connection
        # a database error REST maps (a value that cannot be stored, a schema race) maps alike
        mapped = (await database_error_on(state, exc, args.get("table_id") if isinstance(args, dict) else None)
                  if isinstance(exc, psycopg.Error) else None)
        if mapped is not None:
            return False, mapped.body()
        log.exception("tool %s failed", spec.name)
        return False, {"error": "internal error; the tool call was not completed", "code": "INTERNAL"}
