"""The formula kind: Excel/Airtable-like or JavaScript formulas over a record."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from activities.types import ColumnSnap
from storage.errors import InvalidFormula
from storage.formula import FormulaError, compile_formula


def evaluate_batch(
    col: ColumnSnap, records: dict[str, dict[str, Any]], now: datetime
) -> tuple[dict[str, Any], dict[str, str]]:
    """Evaluate one formula column for many records: (values, errors) by record id."""
    source = col.formula or col.config.get("formula") or ""
    try:
        compiled = compile_formula(source, language=col.config.get("language", "excel"))
    except InvalidFormula as exc:
        return {}, {rid: exc.message for rid in records}
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for rid, fields in records.items():
        try:
            values[rid] = compiled.evaluate(fields, now=now)
        except FormulaError as exc:
            errors[rid] = f"{exc.code} {exc.message}".strip()
    return values, errors
