"""The json_parser kind: a JMESPath expression over another column's JSON value."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jmespath
import orjson
from jmespath.exceptions import JMESPathError

from activities.formula import over
from activities.types import ColumnSnap
from storage.errors import ValidationError
from storage.pipelines import register_config_check


def check_config(config: dict[str, Any]) -> str | None:
    """A problem with the configuration, or None (used at column creation)."""
    if not isinstance(config.get("source_column"), str):
        return "json_parser needs config.source_column (a column name)"
    path = config.get("path")
    if not isinstance(path, str) or not path.strip():
        return "json_parser needs config.path (a JMESPath expression)"
    try:
        jmespath.compile(path)
    except JMESPathError as exc:
        return f"invalid JMESPath expression: {exc}"
    return None


def _check_column(name: str, config: dict[str, Any]) -> None:
    problem = check_config(config)
    if problem:
        raise ValidationError(f"{name}: {problem}")


register_config_check("json_parser", _check_column)  # refused at column creation, not at the first run


# JMESPath nodes whose cost is bounded by the size of the document they read: field and
# index access. Functions, projections, pipes, multi-selects, filters and slices can build
# far more than they read ("[@,@] | [@,@] | …" doubles at every stage: 25 stages made a
# 134-million-character value and held the event loop for 6.5 s), so a path using one is
# evaluated in the sandbox, under a CPU budget per value and a memory cap.
_SIMPLE_NODES = frozenset({"field", "subexpression", "index_expression", "index", "identity", "current", "literal"})


def is_simple(path: Any) -> bool:
    """Whether a JMESPath expression only walks the document (it may run inline); a path
    that does not compile is simple too (its error needs no evaluation)."""
    if not isinstance(path, str):
        return True
    try:
        stack = [jmespath.compile(path).parsed]
    except JMESPathError:
        return True
    while stack:
        node = stack.pop()
        if node.get("type") not in _SIMPLE_NODES:
            return False
        stack.extend(c for c in node.get("children", ()) if isinstance(c, dict))
    return True


def evaluate_batch(col: ColumnSnap, records: dict[str, dict[str, Any]], *,
                   run: Callable[[Callable[[], Any]], Any] | None = None,
                   over_budget: tuple[type[BaseException], ...] = ()) -> tuple[dict[str, Any], dict[str, str]]:
    """The column's path over each record's source value: (values, errors). ``run`` (the
    sandbox's meter) evaluates each value under its CPU budget and memory cap; a value
    past them raises one of ``over_budget`` and that record gets a budget error."""
    problem = check_config(col.config)
    if problem:
        return {}, {rid: problem for rid in records}
    expr = jmespath.compile(col.config["path"])
    source = col.config["source_column"]
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for rid, fields in records.items():
        data = fields.get(source)
        if isinstance(data, str):
            try:
                data = orjson.loads(data)
            except orjson.JSONDecodeError:
                errors[rid] = f"column {source!r} does not hold JSON"
                continue
        try:
            values[rid] = expr.search(data) if run is None else run(lambda d=data: expr.search(d))
        except JMESPathError as exc:
            errors[rid] = f"JMESPath failed: {exc}"
        except over_budget:
            errors[rid] = over("(the JMESPath expression used more than its CPU time per value)")
        except MemoryError:
            errors[rid] = over("(the JMESPath expression used more than its memory)")
    return values, errors
