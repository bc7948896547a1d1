"""Record reads and writes on the physical tables.

Validation (unknown columns, computed columns, required columns, value types) happens in
``prepare_fields`` before any SQL runs, so bad input changes nothing. Lists with filters
live in ``storage/query``; this module covers single records and batches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.types.json import Jsonb

from storage import ddl
from storage.errors import InvalidValue, ServiceError, UnknownColumn
from storage.query import build_where
from storage.schema import ColumnMeta, TableMeta
from storage.values import decode_value, encode_value, iso

Conn = AsyncConnection[Any]
MAX_PARAMS = 60_000  # PostgreSQL allows 65,535 bind parameters per statement


def row_to_record(table: TableMeta, row: Mapping[str, Any], columns: Sequence[ColumnMeta] | None = None) -> dict[str, Any]:
    """Physical row (``id, created_at, updated_at, c_<id>...``) → API record."""
    cols = table.columns if columns is None else columns
    return {
        "id": row["id"],
        "fields": {c.name: decode_value(c, row.get(c.physical)) for c in cols},
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
    }


def pipeline_of(row: Mapping[str, Any]) -> dict[str, Any] | None:
    return row.get("_pipeline")


@dataclass(frozen=True, slots=True)
class PreparedRow:
    values: dict[int, Any]  # column id → encoded value


def prepare_fields(
    table: TableMeta, fields: Any, *, creating: bool, allow_computed: bool = False
) -> PreparedRow:
    """Validate a client's ``fields`` object and encode its values.

    Raises:
        ServiceError: VALIDATION_ERROR (not an object), UNKNOWN_COLUMN, READ_ONLY_COLUMN,
            REQUIRED_FIELD, INVALID_VALUE, INVALID_OPTION.
    """
    if not isinstance(fields, dict):
        raise ServiceError("fields must be an object keyed by column name")
    values: dict[int, Any] = {}
    for name, value in fields.items():
        col = table.column(name)
        if col is None:
            raise UnknownColumn(f"unknown column {name!r} in table {table.name!r}")
        if col.computed and not allow_computed:
            raise ServiceError(
                f"column {name!r} is computed; the server writes it", code="READ_ONLY_COLUMN"
            )
        values[col.id] = encode_value(col, value)
    for col in table.columns:
        if not col.required:
            continue
        if creating and _blank(values.get(col.id)):
            raise ServiceError(f"column {col.name!r} is required", code="REQUIRED_FIELD")
        if not creating and col.id in values and _blank(values[col.id]):
            raise ServiceError(f"column {col.name!r} is required and cannot be cleared", code="REQUIRED_FIELD")
    return PreparedRow(values)


def _blank(value: Any) -> bool:
    return value is None or value == "" or value == []


def _target(table: TableMeta) -> sql.Composed:
    return ddl.qualified(table.workspace_id, table.id)


def _fk_error(table: TableMeta, exc: psycopg.errors.ForeignKeyViolation) -> InvalidValue:
    detail = exc.diag.message_detail or ""
    for col in table.columns:
        if f"({col.physical})" in detail:
            return InvalidValue(f"column {col.name!r} points at a record that does not exist")
    return InvalidValue("a relation points at a record that does not exist")


_GET_SQL: dict[tuple[int, int], sql.Composed] = {}


async def get_record_row(conn: Conn, *, table: TableMeta, record_id: int) -> dict[str, Any] | None:
    key = (table.workspace_id, table.id)
    query = _GET_SQL.get(key)
    if query is None:
        # composed once per table: identifiers never change (names are c_<id>)
        query = _GET_SQL[key] = sql.SQL("SELECT * FROM {} WHERE id = %s").format(_target(table))
    cur = await conn.execute(query, (record_id,))
    return await cur.fetchone()


async def insert_record(conn: Conn, *, table: TableMeta, row: PreparedRow) -> dict[str, Any]:
    """Insert one record; returns the physical row."""
    rows = await insert_records(conn, table=table, rows=[row])
    return rows[0]


async def insert_records(conn: Conn, *, table: TableMeta, rows: Sequence[PreparedRow]) -> list[dict[str, Any]]:
    """Insert many records in as few statements as the parameter limit allows, in order.

    Raises:
        InvalidValue: a relation points at a missing record (the whole call is rolled back
            by the caller's transaction; batch callers retry row by row to isolate it).
    """
    if not rows:
        return []
    col_ids = sorted({cid for r in rows for cid in r.values})
    out: list[dict[str, Any]] = []
    per_stmt = max(1, MAX_PARAMS // max(1, len(col_ids)))
    for start in range(0, len(rows), per_stmt):
        chunk = rows[start : start + per_stmt]
        if col_ids:
            cols = sql.SQL(", ").join(sql.Identifier(f"c_{cid}") for cid in col_ids)
            one = sql.SQL("({})").format(sql.SQL(", ").join(sql.Placeholder() * len(col_ids)))
            query = sql.SQL("INSERT INTO {} ({}) VALUES {} RETURNING *").format(
                _target(table), cols, sql.SQL(", ").join([one] * len(chunk))
            )
            params = [r.values.get(cid) for r in chunk for cid in col_ids]
        else:
            query = sql.SQL("INSERT INTO {} SELECT FROM generate_series(1, %s) RETURNING *").format(_target(table))
            params = [len(chunk)]
        try:
            cur = await conn.execute(query, params)
        except psycopg.errors.ForeignKeyViolation as exc:
            raise _fk_error(table, exc) from None
        got = await cur.fetchall()
        # identity values are assigned in VALUES order within one statement
        got.sort(key=lambda r: r["id"])
        out.extend(got)
    return out


async def update_record(
    conn: Conn, *, table: TableMeta, record_id: int, row: PreparedRow
) -> dict[str, Any] | None:
    """Apply a partial update; ``updated_at`` always advances. ``None`` if no such record."""
    sets = [
        sql.SQL("{} = %s").format(sql.Identifier(f"c_{cid}")) for cid in row.values
    ] + [sql.SQL("updated_at = clock_timestamp()")]
    query = sql.SQL("UPDATE {} SET {} WHERE id = %s RETURNING *").format(
        _target(table), sql.SQL(", ").join(sets)
    )
    try:
        cur = await conn.execute(query, [*row.values.values(), record_id])
    except psycopg.errors.ForeignKeyViolation as exc:
        raise _fk_error(table, exc) from None
    return await cur.fetchone()


async def write_computed(
    conn: Conn,
    *,
    table: TableMeta,
    updates: Sequence[tuple[int, dict[int, Any], dict[str, Any] | None]],
) -> list[dict[str, Any]]:
    """Write pipeline results for many records in one statement.

    ``updates`` holds ``(record_id, {column_id: json value}, pipeline_outcome)``. Values are
    written as jsonb; ``_pipeline`` records the outcome shown with the record.
    """
    if not updates:
        return []
    col_ids = sorted({cid for _, vals, _ in updates for cid in vals})
    payload = [
        Jsonb({"id": rid, "v": {str(c): v for c, v in vals.items()}, "p": outcome})
        for rid, vals, outcome in updates
    ]
    sets = [
        sql.SQL("{c} = CASE WHEN u.d->'v' ? %s THEN u.d->'v'->%s ELSE t.{c} END").format(
            c=sql.Identifier(f"c_{cid}")
        )
        for cid in col_ids
    ]
    params: list[Any] = []
    for cid in col_ids:
        params += [str(cid), str(cid)]
    sets.append(sql.SQL("_pipeline = coalesce(u.d->'p', t._pipeline)"))
    sets.append(sql.SQL("updated_at = clock_timestamp()"))
    query = sql.SQL(
        "UPDATE {} AS t SET {} FROM (SELECT unnest(%s::jsonb[]) AS d) AS u"
        " WHERE t.id = (u.d->>'id')::bigint RETURNING t.*"
    ).format(_target(table), sql.SQL(", ").join(sets))
    cur = await conn.execute(query, [*params, payload])
    return await cur.fetchall()


async def delete_record(conn: Conn, *, table: TableMeta, record_id: int) -> dict[str, Any] | None:
    cur = await conn.execute(
        sql.SQL("DELETE FROM {} WHERE id = %s RETURNING *").format(_target(table)), (record_id,)
    )
    return await cur.fetchone()


async def existing_ids(conn: Conn, *, table: TableMeta, ids: Sequence[int]) -> set[int]:
    cur = await conn.execute(
        sql.SQL("SELECT id FROM {} WHERE id = ANY(%s)").format(_target(table)), (list(ids),)
    )
    return {r["id"] for r in await cur.fetchall()}


async def get_record_rows(conn: Conn, *, table: TableMeta, record_ids: Sequence[int]) -> list[dict[str, Any]]:
    """Rows by id, in the order of ``record_ids`` (missing ids are left out)."""
    cur = await conn.execute(
        sql.SQL("SELECT * FROM {} WHERE id = ANY(%s)").format(_target(table)), (list(record_ids),)
    )
    by_id = {r["id"]: r for r in await cur.fetchall()}
    return [by_id[i] for i in record_ids if i in by_id]


async def page_ids(
    conn: Conn, *, table: TableMeta, filters: Sequence[Any], after_id: int, limit: int
) -> list[int]:
    """Ids of matching records after ``after_id``, ascending (bulk runs page with this)."""
    where, params = build_where(filters, alias="t")
    query = sql.SQL("SELECT t.id FROM {} AS t WHERE t.id > %s AND {} ORDER BY t.id LIMIT %s").format(
        _target(table), where
    )
    cur = await conn.execute(query, [after_id, *params, limit])
    return [r["id"] for r in await cur.fetchall()]


async def count_matching(conn: Conn, *, table: TableMeta, filters: Sequence[Any]) -> int:
    where, params = build_where(filters, alias="t")
    cur = await conn.execute(sql.SQL("SELECT count(*) AS n FROM {} AS t WHERE {}").format(_target(table), where), params)
    row = await cur.fetchone()
    return int(row["n"]) if row else 0
