"""Saved views of a table: validation of their configuration, persistence, and applying
a view's filters and sort to a record listing.

A view is ``{name, view_type, config}``. ``config`` is checked per type against the
table's columns; every type but ``form`` and ``custom`` shares the list keys:

* ``filters``: ``{column: "op.value"}`` in the shared filter grammar (the MCP/SDK object
  form, :func:`storage.query.parse_filter_object`), or the list form ``[{column, op,
  value}]`` of run-actions (:func:`storage.query.parse_filter_list`), which can hold
  several conditions on one column (``Score gte 10`` and ``Score lt 20``); planned like
  a REST listing. ``or``/``and``/``not.or``/``not.and`` groups are terms too (the key
  ``"or"`` of the object form, or a list item ``{"or": "(Score.gte.10,Status.eq.done)"}``);
  they AND with the other terms and with the listing's own filters;
* ``sort``: an order string ``Col.asc,Col2.desc`` as in REST ``order=``;
* ``hidden_columns``: column names not shown; ``column_order``: column names in display
  order (each at most once).

Per type, in addition:

========  =====================================================================
grid      nothing more
kanban    ``group_by`` (required): a single_select column, one stack per option
gallery   ``cover_column`` (optional): a file column shown as the card image
calendar  ``date_column`` (required): a date column (or ``created_at``/``updated_at``)
timeline  ``start_column`` (required) and ``end_column`` (optional): date columns
form      ``fields`` (required): the non-computed columns the form asks for, in
          order; it must include every required column. Optional ``title``,
          ``description`` and ``submit_label`` texts.
custom    any JSON object (a UI's own settings); nothing is interpreted
========  =====================================================================

Unknown keys are refused so a typo does not silently do nothing. A configuration is at
most 64 KB of JSON (413 ``PAYLOAD_TOO_LARGE``). Unknown column names are
``UNKNOWN_COLUMN``; filter and sort errors carry the planner's codes; every other
problem is ``VALIDATION_ERROR``.

Views store column *ids* (``"@12"``; system columns by name) and show today's names
(:func:`encode_config` / :func:`decode_config`), so a rename carries into every view.
A group's text is stored re-rendered with ``@<id>`` column references
(:func:`storage.query.parse.group_text`) and shown with today's names, in normal form.
Deleting a column a view uses (a group's conditions included) is refused (409
``COLUMN_IN_USE``) unless forced; a forced delete removes the view's terms that named it,
a group as a whole (decoding drops any dangling id too).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import orjson
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from storage import jsontext
from storage.errors import Conflict, PayloadTooLarge, ServiceError, UnknownColumn, ValidationError
from storage.query import Query, parse_filters, plan_query
from storage.query.parse import GROUP_PARAMS, Group, OrderTerm, group_text, parse_group, parse_order
from storage.schema import SYSTEM_COLUMNS, ColumnMeta, ColumnType, TableMeta
from storage.values import iso

Conn = AsyncConnection[Any]

VIEW_TYPES = ("grid", "kanban", "gallery", "calendar", "timeline", "form", "custom")
MAX_CONFIG_BYTES = 64 * 1024
MAX_VIEW_NAME = 255
_TEXT_LIMITS = {"title": 500, "description": 10_000, "submit_label": 100}

_LIST_KEYS = frozenset({"filters", "sort", "hidden_columns", "column_order"})
_KEYS: dict[str, frozenset[str]] = {
    "grid": _LIST_KEYS,
    "kanban": _LIST_KEYS | {"group_by"},
    "gallery": _LIST_KEYS | {"cover_column"},
    "calendar": _LIST_KEYS | {"date_column"},
    "timeline": _LIST_KEYS | {"start_column", "end_column"},
    "form": frozenset({"fields", "title", "description", "submit_label"}),
}
_REQUIRED: dict[str, tuple[str, ...]] = {
    "kanban": ("group_by",),
    "calendar": ("date_column",),
    "timeline": ("start_column",),
    "form": ("fields",),
}
_DATE_SYSTEM_COLUMNS = ("created_at", "updated_at")


# --------------------------------------------------------------------------- validation


def view_name(value: Any) -> str:
    """A view name: a non-empty string of at most 255 characters without control characters.

    Raises:
        ValidationError: otherwise.
    """
    if not isinstance(value, str) or not value.strip():
        raise ValidationError("view name must be a non-empty string")
    name = value.strip()
    if len(name) > MAX_VIEW_NAME or any(ord(c) < 32 for c in name):
        raise ValidationError("view name is too long or has control characters")
    return name


def validate_view(*, table: TableMeta, view_type: Any, config: Any) -> dict[str, Any]:
    """Check a view's type and configuration against ``table``; returns the config to store
    (column names replaced by ids, :func:`encode_config`).

    Raises:
        ValidationError: an unknown type or key, a value of the wrong shape, a column of
            the wrong type for its role.
        UnknownColumn: a column name the table does not have.
        UnknownOperator, InvalidValue, ServiceError: a filter or sort the planner refuses
            (its codes: ``UNKNOWN_OPERATOR``, ``INVALID_VALUE``, ``INVALID_OPTION``, ...).
        PayloadTooLarge: the configuration is over 64 KB of JSON.
    """
    checked = _validate(table=table, view_type=view_type, config=config)
    return encode_config(view_type, checked, table)


def _validate(*, table: TableMeta, view_type: Any, config: Any) -> dict[str, Any]:
    if view_type not in VIEW_TYPES:
        raise ValidationError(f"view_type must be one of {', '.join(VIEW_TYPES)}")
    if config is None:
        config = {}
    if not isinstance(config, Mapping):
        raise ValidationError("config must be a JSON object")
    try:
        size = len(jsontext.dumps(config))
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise ValidationError("config must be plain JSON") from exc
    if size > MAX_CONFIG_BYTES:
        raise PayloadTooLarge(f"a view's config may be at most {MAX_CONFIG_BYTES // 1024} KB of JSON")
    config = dict(config)
    if view_type == "custom":
        return config
    unknown = sorted(set(config) - _KEYS[view_type])
    if unknown:
        raise ValidationError(
            f"unknown config key(s) for a {view_type} view: {', '.join(unknown)}"
            f" (allowed: {', '.join(sorted(_KEYS[view_type]))})"
        )
    missing = [k for k in _REQUIRED.get(view_type, ()) if config.get(k) is None]
    if missing:
        raise ValidationError(f"a {view_type} view needs config.{missing[0]}")
    if view_type == "form":
        _check_form(table, config)
        return config
    _check_list_keys(table, config)
    if view_type == "kanban":
        col = _user_column(table, config["group_by"], "group_by")
        if col.type is not ColumnType.SINGLE_SELECT:
            raise ValidationError(f"group_by must be a single_select column; {col.name!r} is {col.type.value}")
    elif view_type == "gallery" and config.get("cover_column") is not None:
        col = _user_column(table, config["cover_column"], "cover_column")
        if col.type is not ColumnType.FILE:
            raise ValidationError(f"cover_column must be a file column; {col.name!r} is {col.type.value}")
    elif view_type == "calendar":
        _date_column(table, config["date_column"], "date_column")
    elif view_type == "timeline":
        _date_column(table, config["start_column"], "start_column")
        if config.get("end_column") is not None:
            _date_column(table, config["end_column"], "end_column")
    return config


def _check_list_keys(table: TableMeta, config: dict[str, Any]) -> None:
    filters = parse_filters(config.get("filters"))
    sort = config.get("sort")
    if sort is not None and not isinstance(sort, str):
        raise ValidationError('sort must be an order string like "Col.asc,Other.desc"')
    order = parse_order(sort) if sort else ()
    # the REST planner checks names, operators and values exactly as a listing would
    plan_query(
        Query(filters=filters, order=order), table,
        can_read=lambda _table_id: True, get_table=lambda _table_id: None,
    )
    if "hidden_columns" in config:
        names = _names(config["hidden_columns"], "hidden_columns")
        for name in names:
            _user_column(table, name, "hidden_columns")
        config["hidden_columns"] = list(dict.fromkeys(names))
    if "column_order" in config:
        names = _names(config["column_order"], "column_order")
        if len(set(names)) != len(names):
            raise ValidationError("column_order names a column more than once")
        for name in names:
            _user_column(table, name, "column_order")


def _check_form(table: TableMeta, config: dict[str, Any]) -> None:
    names = _names(config["fields"], "fields")
    if not names:
        raise ValidationError("a form needs at least one field")
    if len(set(names)) != len(names):
        raise ValidationError("form fields name a column more than once")
    for name in names:
        col = _user_column(table, name, "fields")
        if col.computed:
            raise ValidationError(f"form field {name!r} is a computed column; forms ask for data columns only")
    absent = [c.name for c in table.columns if c.required and c.name not in names]
    if absent:
        # a submission without a required column would always be refused
        raise ValidationError(f"the form must include required column(s): {', '.join(absent)}")
    for key, limit in _TEXT_LIMITS.items():
        value = config.get(key)
        if value is not None and (not isinstance(value, str) or len(value) > limit):
            raise ValidationError(f"{key} must be a string of at most {limit} characters")


def _names(value: Any, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValidationError(f"{key} must be a list of column names")
    return list(value)


def _user_column(table: TableMeta, name: Any, key: str) -> ColumnMeta:
    if not isinstance(name, str):
        raise ValidationError(f"{key} must be a column name")
    col = table.column(name)
    if col is None:
        raise UnknownColumn(f"{key}: unknown column {name!r}")
    return col


def _date_column(table: TableMeta, name: Any, key: str) -> None:
    if name in _DATE_SYSTEM_COLUMNS:
        return
    col = _user_column(table, name, key)
    if col.type is not ColumnType.DATE:
        raise ValidationError(f"{key} must be a date column; {col.name!r} is {col.type.value}")


# --------------------------------------------------------------------------- references by id

_ONE_COLUMN_KEYS = ("group_by", "cover_column", "date_column", "start_column", "end_column")
_MANY_COLUMN_KEYS = ("hidden_columns", "column_order", "fields")


def _order_text(terms: tuple[OrderTerm, ...]) -> str:
    parts = []
    for t in terms:
        name = t.column
        if any(ch in name for ch in '.,"()') or name != name.strip():
            name = '"' + name.replace('"', '\\"') + '"'
        text = f"{name}.{'desc' if t.desc else 'asc'}"
        if t.nulls:
            text += f".nulls{t.nulls}"
        parts.append(text)
    return ",".join(parts)


def _map_columns(view_type: str, config: Mapping[str, Any], swap: Any) -> dict[str, Any]:
    """Apply ``swap(name) -> name | None`` to every column a view's config names
    (``None`` drops the term)."""
    if view_type == "custom":
        return dict(config)
    out = dict(config)
    if isinstance(out.get("filters"), Mapping):
        kept: dict[str, Any] = {}
        for k, v in out["filters"].items():
            if k in GROUP_PARAMS:
                if (text := _map_group(k, v, swap)) is not None:
                    kept[k] = text
            elif (new := swap(k)) is not None:
                kept[new] = v
        out["filters"] = kept
    elif isinstance(out.get("filters"), list):
        items: list[Any] = []
        for f in out["filters"]:
            if _is_group_item(f):
                key, text = next(iter(f.items()))
                if (new_text := _map_group(key, text, swap)) is not None:
                    items.append({key: new_text})
            elif isinstance(f, Mapping) and isinstance(f.get("column"), str) and (new := swap(f["column"])) is not None:
                items.append({**f, "column": new})
        out["filters"] = items
    if isinstance(out.get("sort"), str):
        try:
            terms = parse_order(out["sort"])
        except ValidationError:
            terms = ()
        kept = tuple(dataclasses.replace(t, column=new) for t in terms if (new := swap(t.column)) is not None)
        out["sort"] = _order_text(kept)
    for key in _ONE_COLUMN_KEYS:
        if isinstance(out.get(key), str):
            new = swap(out[key])
            if new is None:
                out.pop(key)
            else:
                out[key] = new
    for key in _MANY_COLUMN_KEYS:
        if isinstance(out.get(key), list):
            out[key] = [new for v in out[key] if isinstance(v, str) and (new := swap(v)) is not None]
    return out


def _is_group_item(item: Any) -> bool:
    return isinstance(item, Mapping) and len(item) == 1 and next(iter(item)) in GROUP_PARAMS


def group_columns(group: Group) -> list[str]:
    """Every column a group's conditions name, nested groups included, in order."""
    out: list[str] = []
    for item in group.items:
        out.extend(group_columns(item) if isinstance(item, Group) else [item.column])
    return out


def _map_group(key: str, text: Any, swap: Any) -> Any:
    """A group's text with ``swap`` applied to every column it names, re-rendered in the
    REST grammar; ``None`` (drop the whole group) when ``swap`` drops any of them.

    A group is one term of the view's filters: a forced delete of a column it names drops
    the whole group, as it drops a plain condition on that column, never a condition
    inside it (which would make the group match something nobody wrote: fewer rows
    in an ``or``, more in an ``and``). Text that does not parse is left as it is (it was
    validated when stored).
    """
    if not isinstance(text, str):
        return text
    try:
        group = parse_group(key, text)
    except ServiceError:
        return text
    mapped: dict[str, str | None] = {}
    for name in group_columns(group):
        if name not in mapped:
            mapped[name] = swap(name)
    if any(new is None for new in mapped.values()):
        return None
    return group_text(group, lambda name: mapped[name] or name)


def encode_config(view_type: str, config: Mapping[str, Any], table: TableMeta) -> dict[str, Any]:
    """A validated view config with column names replaced by ``"@<id>"``."""
    def swap(name: str) -> str:
        if name in SYSTEM_COLUMNS:
            return name
        col = table.column(name)
        return f"@{col.id}" if col is not None else name

    return _map_columns(view_type, config, swap)


def decode_config(view_type: str, config: Mapping[str, Any], table: TableMeta) -> dict[str, Any]:
    """A stored view config with today's column names; terms naming deleted columns dropped."""
    def swap(ref: str) -> str | None:
        if ref.startswith("@") and ref[1:].isascii() and ref[1:].isdigit():
            col = table.column_by_id(int(ref[1:]))
            return col.name if col is not None else None
        return ref

    return _map_columns(view_type, config, swap)


def uses_column(view_type: str, config: Mapping[str, Any], column_id: int) -> bool:
    """Whether a stored view config names the column."""
    found = False
    mark = f"@{column_id}"

    def swap(ref: str) -> str:
        nonlocal found
        found = found or ref == mark
        return ref

    _map_columns(view_type, config, swap)
    return found


def decoded(row: Mapping[str, Any], table: TableMeta) -> dict[str, Any]:
    """A view row with its config decoded."""
    return {**row, "config": decode_config(row["view_type"], row["config"] or {}, table)}


# --------------------------------------------------------------------------- applying


def apply_view(query: Query, *, view: Mapping[str, Any], table: TableMeta) -> Query:
    """Combine a listing's parsed query with a view's filters and sort.

    The view's filters AND with the query's; the query's ``order`` (if any) replaces the
    view's sort. Terms naming columns that no longer exist are skipped (module
    docstring). ``form`` and ``custom`` views carry no filters and leave ``query`` as is.
    """
    if view["view_type"] not in _KEYS or view["view_type"] == "form":
        return query
    config = decode_config(view["view_type"], view.get("config") or {}, table)
    filters = tuple(
        f for f in parse_filters(config.get("filters"))
        if all(_exists(table, name) for name in (group_columns(f) if isinstance(f, Group) else [f.column]))
    )
    order: tuple[OrderTerm, ...] = query.order
    if not order and isinstance(config.get("sort"), str):
        order = tuple(t for t in parse_order(config["sort"]) if _exists(table, t.column))
    return dataclasses.replace(query, filters=filters + query.filters, order=order)


def _exists(table: TableMeta, name: str) -> bool:
    return name in SYSTEM_COLUMNS or table.column(name) is not None


# --------------------------------------------------------------------------- persistence

_COLUMNS = "id, workspace_id, table_id, name, view_type, config, created_at, updated_at"


def view_out(row: Mapping[str, Any], table: TableMeta) -> dict[str, Any]:
    """The API shape of a view row (REST and MCP), with today's column names."""
    return {
        "id": row["id"],
        "table_id": row["table_id"],
        "name": row["name"],
        "view_type": row["view_type"],
        "config": decode_config(row["view_type"], row["config"] or {}, table),
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
    }


async def list_views(conn: Conn, *, workspace_id: int, table_id: int) -> list[dict[str, Any]]:
    cur = await conn.execute(
        f"SELECT {_COLUMNS} FROM wds.views WHERE workspace_id = %s AND table_id = %s ORDER BY id",
        (workspace_id, table_id),
    )
    return await cur.fetchall()


async def get_view(conn: Conn, *, workspace_id: int, table_id: int, view_id: int) -> dict[str, Any] | None:
    cur = await conn.execute(
        f"SELECT {_COLUMNS} FROM wds.views WHERE id = %s AND workspace_id = %s AND table_id = %s",
        (view_id, workspace_id, table_id),
    )
    return await cur.fetchone()


async def create_view(
    conn: Conn, *, workspace_id: int, table_id: int, name: str, view_type: str, config: dict[str, Any]
) -> dict[str, Any] | None:
    """Insert a view (already validated); ``None`` when the table no longer exists.

    Raises:
        Conflict: the table already has a view with that name.
    """
    async with conn.transaction():
        if not await _lock_table(conn, workspace_id=workspace_id, table_id=table_id):
            return None
        await _check_name(conn, table_id=table_id, name=name, exclude_id=None)
        cur = await conn.execute(
            "INSERT INTO wds.views (workspace_id, table_id, name, view_type, config)"
            f" VALUES (%s, %s, %s, %s, %s) RETURNING {_COLUMNS}",
            (workspace_id, table_id, name, view_type, Jsonb(config)),
        )
        return await cur.fetchone()


async def update_view(
    conn: Conn, *, workspace_id: int, table_id: int, view_id: int, changes: Mapping[str, Any]
) -> dict[str, Any] | None:
    """Change ``name``, ``view_type`` and/or ``config`` (already validated); ``None`` if absent.

    Raises:
        Conflict: another view of the table has the new name.
    """
    allowed = {k: v for k, v in changes.items() if k in ("name", "view_type", "config")}
    async with conn.transaction():
        if not await _lock_table(conn, workspace_id=workspace_id, table_id=table_id):
            return None
        if "name" in allowed:
            await _check_name(conn, table_id=table_id, name=allowed["name"], exclude_id=view_id)
        sets = ", ".join(f"{k} = %s" for k in allowed)
        params = [Jsonb(v) if k == "config" else v for k, v in allowed.items()]
        cur = await conn.execute(
            f"UPDATE wds.views SET {sets}{', ' if sets else ''}updated_at = now()"
            f" WHERE id = %s AND workspace_id = %s AND table_id = %s RETURNING {_COLUMNS}",
            (*params, view_id, workspace_id, table_id),
        )
        return await cur.fetchone()


async def delete_view(conn: Conn, *, workspace_id: int, table_id: int, view_id: int) -> dict[str, Any] | None:
    cur = await conn.execute(
        "DELETE FROM wds.views WHERE id = %s AND workspace_id = %s AND table_id = %s RETURNING id",
        (view_id, workspace_id, table_id),
    )
    return await cur.fetchone()


async def _lock_table(conn: Conn, *, workspace_id: int, table_id: int) -> bool:
    # Locking the table's metadata row serialises view-name checks per table and
    # makes a concurrent table delete wait (or us see it gone).
    cur = await conn.execute(
        "SELECT id FROM wds.tables WHERE id = %s AND workspace_id = %s FOR NO KEY UPDATE",
        (table_id, workspace_id),
    )
    return await cur.fetchone() is not None


async def _check_name(conn: Conn, *, table_id: int, name: str, exclude_id: int | None) -> None:
    cur = await conn.execute(
        "SELECT 1 FROM wds.views WHERE table_id = %s AND name = %s AND id IS DISTINCT FROM %s",
        (table_id, name, exclude_id),
    )
    if await cur.fetchone() is not None:
        raise Conflict(f"this table already has a view named {name!r}")

