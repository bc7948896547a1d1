"""The json_parser kind: a JMESPath expression over another column's JSON value."""

from __future__ import annotations

from typing import Any

import jmespath
import orjson
from jmespath.exceptions import JMESPathError

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


def evaluate_batch(col: ColumnSnap, records: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], dict[str, str]]:
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
            values[rid] = expr.search(data)
        except JMESPathError as exc:
            errors[rid] = f"JMESPath failed: {exc}"
    return values, errors
