"""Registry of the formula language's functions.

``FUNCTIONS`` maps each upper-case name to its :class:`FunctionSpec` (signature, arity,
category, one-line description). The parser checks names and arity against it, the
evaluator calls the implementations, and docs and the MCP ``check_column_types`` tool
list it (``describe_functions()``).
"""

from __future__ import annotations

from typing import Any

from .fn_array import array
from .fn_date import datefn
from .fn_logic import logical
from .fn_number import numeric
from .fn_text import rx, text
from .spec import FunctionSpec

FUNCTIONS: dict[str, FunctionSpec] = {
    spec.name: spec
    for registry in (text, rx, numeric, logical, datefn, array)
    for spec in registry.specs
}

CATEGORIES: tuple[str, ...] = ("text", "regex", "numeric", "logical", "date", "array")


def describe_functions() -> list[dict[str, Any]]:
    """Every function as a JSON-able dict, grouped by category then name."""
    order = {c: i for i, c in enumerate(CATEGORIES)}
    specs = sorted(FUNCTIONS.values(), key=lambda s: (order.get(s.category, 99), s.name))
    return [s.describe() for s in specs]


__all__ = ["CATEGORIES", "FUNCTIONS", "FunctionSpec", "describe_functions"]
