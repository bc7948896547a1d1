"""Metadata → API JSON (shared by REST routes, the schema endpoint and MCP tools)."""

from __future__ import annotations

from typing import Any

from storage.schema import ColumnMeta, TableMeta
from storage.values import iso


def column_out(col: ColumnMeta) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": col.id,
        "table_id": col.table_id,
        "name": col.name,
        "type": col.type.value,
        "required": col.required,
        "options": [o.as_dict() for o in col.options],
        "position": col.position,
        "computed": col.computed,
        "formula": col.formula,
        "config": col.config,
        "relation_table": col.relation_table_id,
        "relation_label_column": col.relation_label_column_id,
    }
    if col.computed:
        out["status"] = "error" if col.broken else "ok"
        out["result_type"] = col.value_type or "json"
        if col.broken:
            out["status_reason"] = col.broken
    return out


def table_summary(table: TableMeta) -> dict[str, Any]:
    return {
        "id": table.id,
        "name": table.name,
        "icon": table.icon,
        "created_at": iso(table.created_at),
        "updated_at": iso(table.updated_at),
    }


def table_out(table: TableMeta) -> dict[str, Any]:
    return {
        **table_summary(table),
        "columns": [column_out(c) for c in table.columns],
        "semantic_search": table.semantic,
    }
