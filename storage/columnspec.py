"""Validation of column definitions sent by clients (create and patch).

Pure: takes the request's dict and the workspace's current schema and returns a
:class:`ColumnSpec` ready to persist, or raises a typed error. The same rules serve the
REST columns endpoints, table creation and the builder MCP tools.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field, replace
from typing import Any

from storage.errors import ValidationError
from storage.valuetype import check_result_type
from storage.schema import (
    OPTION_COLORS,
    SELECT_TYPES,
    SYSTEM_COLUMNS,
    ColumnType,
    Option,
    TableMeta,
    WorkspaceSchema,
)

MAX_NAME = 255
MAX_OPTIONS = 1000
_FIELDS = {
    "name", "type", "column_type", "required", "options", "formula", "config",
    "relation_table_id", "relation_source_column_id", "position",
}


@dataclass(frozen=True)
class ColumnSpec:
    name: str
    type: ColumnType
    required: bool = False
    options: tuple[Option, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    formula: str | None = None
    relation_table_id: int | None = None
    relation_label_column_id: int | None = None
    position: int | None = None

    def options_json(self) -> list[dict[str, str]]:
        return [o.as_dict() for o in self.options]


def new_option_id() -> str:
    return "opt_" + secrets.token_hex(4)


def _name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError("column name must be a non-empty string")
    name = value.strip()
    if len(name) > MAX_NAME:
        raise ValidationError(f"column name is longer than {MAX_NAME} characters")
    if name.lower() in SYSTEM_COLUMNS:
        raise ValidationError(f"{name!r} is a system column name")
    if any(ord(c) < 32 for c in name):
        raise ValidationError("column name cannot contain control characters")
    return name


def _type(value: Any) -> ColumnType:
    try:
        return ColumnType(value)
    except ValueError:
        allowed = ", ".join(t.value for t in ColumnType)
        raise ValidationError(f"unknown column type {value!r}; one of: {allowed}") from None


def _options(value: Any, previous: tuple[Option, ...] = ()) -> tuple[Option, ...]:
    if not isinstance(value, list):
        raise ValidationError("options must be a list of {label, color} objects")
    if len(value) > MAX_OPTIONS:
        raise ValidationError(f"at most {MAX_OPTIONS} options")
    by_id = {o.id: o for o in previous}
    by_label = {o.label: o for o in previous}
    out: list[Option] = []
    labels: set[str] = set()
    for i, item in enumerate(value):
        if isinstance(item, str):
            item = {"label": item}
        if not isinstance(item, dict):
            raise ValidationError("each option must be an object {label, color} or a string")
        label = item.get("label", item.get("name"))
        if not isinstance(label, str) or not label.strip():
            raise ValidationError(f"option {i} needs a non-empty label")
        label = label.strip()
        if label in labels:
            raise ValidationError(f"duplicate option label {label!r}")
        labels.add(label)
        color = item.get("color")
        prior = by_id.get(item.get("id")) if item.get("id") else by_label.get(label)
        if color is None:
            color = prior.color if prior else OPTION_COLORS[i % len(OPTION_COLORS)]
        if color not in OPTION_COLORS:
            raise ValidationError(f"option color {color!r} is not one of: {', '.join(OPTION_COLORS)}")
        oid = item.get("id")
        if oid is not None and (not isinstance(oid, str) or not oid or len(oid) > 64):
            raise ValidationError("option id must be a short string")
        if oid is None:
            oid = prior.id if prior else new_option_id()
        out.append(Option(id=oid, label=label, color=color))
    if len({o.id for o in out}) != len(out):
        raise ValidationError("duplicate option ids")
    return tuple(out)


def _int_id(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise ValidationError(f"{what} must be an id")
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    if not isinstance(value, int) or value <= 0:
        raise ValidationError(f"{what} must be an id")
    return value


def _relation(data: dict[str, Any], schema: WorkspaceSchema) -> tuple[int, int | None]:
    if data.get("relation_table_id") is None:
        raise ValidationError("relation columns need relation_table_id")
    target_id = _int_id(data["relation_table_id"], "relation_table_id")
    target = schema.tables.get(target_id)
    if target is None:
        raise ValidationError(f"relation_table_id {target_id} is not a table of this workspace")
    source = data.get("relation_source_column_id")
    if source is None:
        # default label column: the related table's first text-like column, if any
        label = next((c for c in target.columns if c.type is ColumnType.TEXT), None)
        return target_id, label.id if label else None
    source_id = _int_id(source, "relation_source_column_id")
    if target.column_by_id(source_id) is None:
        raise ValidationError(f"relation_source_column_id {source_id} is not a column of table {target_id}")
    return target_id, source_id


def _config(data: dict[str, Any], col_type: ColumnType) -> tuple[dict[str, Any], str | None]:
    config = data.get("config")
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise ValidationError("config must be an object")
    formula = data.get("formula", config.get("formula"))
    if col_type is ColumnType.FORMULA:
        if not isinstance(formula, str) or not formula.strip():
            raise ValidationError("formula columns need a formula")
    elif data.get("formula") is not None:
        raise ValidationError("only formula columns take a formula")
    if not col_type.computed and config:
        raise ValidationError(f"{col_type.value} columns take no config")
    check_result_type(col_type, config)
    return dict(config), formula


def parse_new_column(data: Any, schema: WorkspaceSchema, table: TableMeta | None) -> ColumnSpec:
    """Validate a column-create body (``type`` or its alias ``column_type``).

    Raises:
        ValidationError: any field is missing, of the wrong type or inconsistent.
    """
    if not isinstance(data, dict):
        raise ValidationError("a column must be an object")
    unknown = set(data) - _FIELDS
    if unknown:
        raise ValidationError(f"unknown column field(s): {', '.join(sorted(unknown))}")
    name = _name(data.get("name"))
    if table is not None and table.column(name) is not None:
        raise ValidationError(f"column {name!r} already exists", code="CONFLICT", status=409)
    col_type = _type(data.get("type", data.get("column_type")))
    required = data.get("required", False)
    if not isinstance(required, bool):
        raise ValidationError("required must be a boolean")
    if required and col_type.computed:
        raise ValidationError("computed columns cannot be required")
    options: tuple[Option, ...] = ()
    if data.get("options") is not None:
        if col_type not in SELECT_TYPES:
            raise ValidationError("only select columns take options")
        options = _options(data["options"])
    relation: tuple[int | None, int | None] = (None, None)
    if col_type is ColumnType.RELATION:
        relation = _relation(data, schema)
    elif data.get("relation_table_id") is not None:
        raise ValidationError("only relation columns take relation_table_id")
    config, formula = _config(data, col_type)
    position = data.get("position")
    if position is not None:
        position = _position(position)
    return ColumnSpec(
        name=name, type=col_type, required=required, options=options, config=config,
        formula=formula, relation_table_id=relation[0], relation_label_column_id=relation[1],
        position=position,
    )


def parse_column_patch(data: Any, current: ColumnSpec, schema: WorkspaceSchema, table: TableMeta) -> ColumnSpec:
    """Validate a column-patch body against the column's current definition."""
    if not isinstance(data, dict):
        raise ValidationError("the body must be an object")
    unknown = set(data) - _FIELDS
    if unknown:
        raise ValidationError(f"unknown column field(s): {', '.join(sorted(unknown))}")
    spec = current
    if "name" in data:
        name = _name(data["name"])
        if name != current.name and table.column(name) is not None:
            raise ValidationError(f"column {name!r} already exists", code="CONFLICT", status=409)
        spec = replace(spec, name=name)
    new_type = data.get("type", data.get("column_type"))
    if new_type is not None:
        spec = replace(spec, type=_type(new_type))
    if "required" in data:
        if not isinstance(data["required"], bool):
            raise ValidationError("required must be a boolean")
        spec = replace(spec, required=data["required"])
    if spec.required and spec.type.computed:
        raise ValidationError("computed columns cannot be required")
    if "options" in data:
        if spec.type not in SELECT_TYPES:
            raise ValidationError("only select columns take options")
        spec = replace(spec, options=_options(data["options"], current.options))
    elif spec.type not in SELECT_TYPES:
        spec = replace(spec, options=())
    if spec.type is ColumnType.RELATION and (
        current.type is not ColumnType.RELATION or "relation_table_id" in data
    ):
        merged = {"relation_table_id": spec.relation_table_id, **data}
        rel = _relation(merged, schema)
        spec = replace(spec, relation_table_id=rel[0], relation_label_column_id=rel[1])
    elif spec.type is not ColumnType.RELATION:
        if data.get("relation_table_id") is not None:
            raise ValidationError("only relation columns take relation_table_id")
        spec = replace(spec, relation_table_id=None, relation_label_column_id=None)
    if "config" in data or "formula" in data or spec.type is not current.type:
        base = {"config": data.get("config", current.config if spec.type is current.type else {})}
        if "formula" in data:
            base["formula"] = data["formula"]
        elif spec.type is ColumnType.FORMULA and current.formula:
            base["formula"] = current.formula
        config, formula = _config(base, spec.type)
        spec = replace(spec, config=config, formula=formula)
    if "position" in data:
        spec = replace(spec, position=_position(data["position"]))
    return spec


MAX_POSITION = 10_000  # a column's position past the table's last is its last (storage.meta)


def _position(value: Any) -> int:
    """A column position: an integer from 0 to :data:`MAX_POSITION`.

    Raises:
        ValidationError: anything else (a position of 2^31 overflowed the column table and
            stopped the table taking columns).
    """
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_POSITION:
        raise ValidationError(f"position must be an integer from 0 to {MAX_POSITION:,}")
    return value
