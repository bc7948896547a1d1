"""The value type of a computed column (issue 24 item 1; docs/decisions.md, "Typed
computed values").

Every computed column has one of :data:`storage.schema.VALUE_TYPES`: the builder's
``config.result_type`` when given, else the kind's own — a formula's inferred from its
syntax tree (storage/formula/types.py; JavaScript formulas: ``json``), ``ai_agent``
``text`` (``json`` with ``output: json``), record steps ``number`` (the record's id),
everything else ``json``. A scalar type makes the column indexed, sorted and filtered like
a data column of that type (storage/ddl.py ``computed_value_expr``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from storage.errors import ValidationError
from storage.formula import compile_formula
from storage.formula.types import FIELD_TYPES, infer_type
from storage.schema import VALUE_TYPES, ColumnType

RESULT_TYPE_KEY = "result_type"

_KIND_TYPES = {
    ColumnType.CREATE_RECORD: "number",
    ColumnType.UPDATE_RECORD: "number",
    ColumnType.DELETE_RECORD: "number",
}

FieldType = Callable[[str], str | None]


def check_result_type(kind: ColumnType, config: Mapping[str, Any]) -> None:
    """Refuse a declared ``config.result_type`` that is not a value type.

    Raises:
        ValidationError: ``INVALID_RESULT_TYPE`` (400).
    """
    if RESULT_TYPE_KEY not in config:
        return
    value = config[RESULT_TYPE_KEY]
    if not kind.computed:
        raise ValidationError(f"{kind.value} columns take no result_type", code="INVALID_RESULT_TYPE")
    if not isinstance(value, str) or value not in VALUE_TYPES:
        raise ValidationError(
            f"config.result_type must be one of {', '.join(VALUE_TYPES)}, got {value!r}", code="INVALID_RESULT_TYPE"
        )


def value_type_of(kind: ColumnType, formula: str | None, config: Mapping[str, Any],
                  field_type: FieldType | None = None) -> str | None:
    """The value type of a computed column (``None`` for a data column).

    ``field_type`` gives the value type of a column the formula names (by name, or by
    stored reference ``@<id>``); unknown names read as ``json``.
    """
    if not kind.computed:
        return None
    declared = config.get(RESULT_TYPE_KEY)
    if isinstance(declared, str) and declared in VALUE_TYPES:
        return declared
    if kind is ColumnType.FORMULA:
        language = config.get("language", "excel")
        if language != "excel" or not isinstance(formula, str):
            return "json"
        try:
            tree = compile_formula(formula, language="excel").tree
        except Exception:  # noqa: BLE001 - a formula that no longer parses is unsure
            return "json"
        return infer_type(tree, field_type) if tree is not None else "json"
    if kind is ColumnType.AI_AGENT:
        return "json" if config.get("output") == "json" else "text"
    return _KIND_TYPES.get(kind, "json")


def field_types(columns: Mapping[Any, tuple[str, str | None]]) -> FieldType:
    """A ``field_type`` lookup from ``{name or "@id": (column type, value type)}``."""

    def lookup(name: str) -> str | None:
        found = columns.get(name)
        if found is None:
            return None
        kind, value_type = found
        if ColumnType(kind).computed:
            return value_type if value_type in FIELD_TYPES.values() else None
        return FIELD_TYPES.get(kind)

    return lookup
