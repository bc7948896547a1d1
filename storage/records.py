"""Record reads and writes on the physical tables.

Validation (unknown columns, computed columns, required columns, value types) happens in
``prepare_fields`` before any SQL runs, so bad input changes nothing. Lists with filters
live in ``storage/query``; this module covers single records and batches.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import orjson
import psycopg
from psycopg import AsyncConnection, sql
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from storage import ddl, jsontext, outbox
from storage.errors import InvalidValue, NotFound, ServiceError, UnknownColumn
from storage.formula.insql import OutOfRange, SqlArithmetic
from storage.query import build_where
from storage.query.render import field_keys, record_json_renderable, record_text, record_text_spaced
from storage.schema import COMPUTED_PG_TYPE, ColumnMeta, ColumnType, TableMeta, WorkspaceSchema
from storage.values import decode_value, encode_value, iso

Conn = AsyncConnection[Any]


def row_to_record(table: TableMeta, row: Mapping[str, Any], columns: Sequence[ColumnMeta] | None = None) -> dict[str, Any]:
    """Physical row (``id, created_at, updated_at, c_<id>...``) → API record."""
    plan = _layout(table).decoders if columns is None else _chosen_decoders(columns)
    get = row.get
    return {
        "id": row["id"],
        "fields": {name: (v if col is None else decode_value(col, v)) for name, phys, col in plan
                   for v in (get(phys),)},
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
    }


_CHOSEN: dict[int, tuple[Sequence[ColumnMeta], tuple[tuple[str, str, ColumnMeta | None], ...]]] = {}


def _chosen_decoders(columns: Sequence[ColumnMeta]) -> tuple[tuple[str, str, ColumnMeta | None], ...]:
    """:func:`_decoders` of a chosen column list (a memoised plan's ``select``), built once
    per list object."""
    found = _CHOSEN.get(id(columns))
    if found is None or found[0] is not columns:
        if len(_CHOSEN) >= 4096:
            _CHOSEN.clear()
        found = _CHOSEN[id(columns)] = (columns, _decoders(columns))
    return found[1]


def column_decoders(columns: Sequence[ColumnMeta]) -> tuple[tuple[str, str, ColumnMeta | None], ...]:
    """``(name, physical, column or None)`` per column, as :func:`row_to_record` decodes
    them: ``None`` where the stored value is the API value as is (:func:`storage.values.decode_value`
    otherwise)."""
    return _decoders(columns)


# Column types whose stored value is already the API value (NULL stays null).
_AS_STORED = frozenset({ColumnType.TEXT, ColumnType.SINGLE_SELECT, ColumnType.RELATION})


def _decoders(columns: Sequence[ColumnMeta]) -> tuple[tuple[str, str, ColumnMeta | None], ...]:
    """``(name, physical, column or None)`` per column; ``None``: the stored value as is
    (a computed number is decoded: jsonb reads 1e307 back as a 308-digit integer)."""
    return tuple((c.name, c.physical, None if (c.computed and c.value_type != "number") or c.type in _AS_STORED
                  else c) for c in columns)


@dataclass(frozen=True, slots=True)
class _Layout:
    columns: tuple[ColumnMeta, ...]  # identity check: the schema cache replaces it on change
    decoders: tuple[tuple[str, str, ColumnMeta | None], ...]
    by_name: dict[str, ColumnMeta]
    row_list: str  # the stored row's columns, listed (see row_list)
    row_list_t: str  # the same, qualified by the alias ``t``


_LAYOUTS: dict[int, _Layout] = {}


def _layout(table: TableMeta) -> _Layout:
    """Per-table lookups built once per schema version (rows of a batch share them)."""
    layout = _LAYOUTS.get(id(table.columns))
    if layout is None or layout.columns is not table.columns:
        by_name: dict[str, ColumnMeta] = {}
        for col in table.columns:
            by_name.setdefault(col.name, col)  # first wins, as TableMeta.column does
        if len(_LAYOUTS) >= 4096:
            _LAYOUTS.clear()
        layout = _LAYOUTS[id(table.columns)] = _Layout(
            table.columns, _decoders(table.columns), by_name,
            _row_list(table.columns, None), _row_list(table.columns, "t"))
    return layout


_SYSTEM = ("id", "created_at", "updated_at", "_pipeline")


def _row_list(columns: Sequence[ColumnMeta], alias: str | None) -> str:
    def ref(name: str) -> sql.Composable:
        return sql.Identifier(alias, name) if alias else sql.Identifier(name)

    items = [ref(name) for name in _SYSTEM]
    items += [sql.SQL("{}::{} AS {}").format(ref(c.physical), sql.SQL(ddl.pg_type(c.type)), sql.Identifier(c.physical))
              for c in columns]
    return sql.SQL(", ").join(items).as_string(None)


def row_list(table: TableMeta, alias: str | None = None) -> sql.SQL:
    """The columns of a stored row (system columns, then every column of ``table``),
    each cast to the type ``table`` gives it, for ``SELECT``/``RETURNING`` in place of ``*``.

    psycopg prepares a statement on a connection after a few executions, and PostgreSQL
    refuses to run a prepared statement whose result shape changed ("cached plan must not
    change result type"): a ``SELECT *`` prepared before a column was added, dropped or
    retyped failed from then on, on every pooled connection that had prepared it
    (issue #21). Listed and cast, the statement's text changes with the schema (a new
    statement, prepared anew) and its result shape never changes under it.
    """
    layout = _layout(table)
    return sql.SQL(layout.row_list if alias is None else layout.row_list_t if alias == "t" else
                   _row_list(table.columns, alias))


OUTCOME_KEYS = ("status", "run_id", "errors")  # a pipeline outcome's keys, in every answer's order


def outcome_in_order(outcome: Mapping[str, Any]) -> dict[str, Any]:
    """A pipeline outcome with its keys in :data:`OUTCOME_KEYS` order (jsonb keeps them
    sorted by length), any other key after them."""
    return {"status": outcome.get("status"), "run_id": outcome.get("run_id"), "errors": outcome.get("errors", {}),
            **{k: v for k, v in outcome.items() if k not in OUTCOME_KEYS}}


def pipeline_of(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record's last pipeline outcome as every answer shows it (:func:`outcome_in_order`)."""
    stored = row.get("_pipeline")
    return outcome_in_order(stored) if isinstance(stored, dict) else stored


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
    by_name = _layout(table).by_name
    for name, value in fields.items():
        col = by_name.get(name)
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


_GET_SQL: dict[tuple[Any, ...], str] = {}


async def get_record_row(conn: Conn, *, table: TableMeta, record_id: int) -> dict[str, Any] | None:
    key = ("one", table.workspace_id, table.id, _layout(table).row_list)
    query = _GET_SQL.get(key)
    if query is None:
        # composed and rendered once per table layout (the listed columns: see row_list)
        query = _remember(_GET_SQL, key, sql.SQL("SELECT {} FROM {} WHERE id = %s").format(row_list(table), _target(table)))
    cur = await conn.execute(query, (record_id,))
    return await cur.fetchone()


async def insert_record(conn: Conn, *, table: TableMeta, row: PreparedRow) -> dict[str, Any]:
    """Insert one record; returns the physical row."""
    rows = await insert_records(conn, table=table, rows=[row])
    return rows[0]


async def insert_records(conn: Conn, *, table: TableMeta, rows: Sequence[PreparedRow]) -> list[dict[str, Any]]:
    """Insert many records with one statement, in order (ids ascend with the input).

    Raises:
        InvalidValue: a relation points at a missing record (the whole call is rolled back
            by the caller's transaction; batch callers retry row by row to isolate it).
    """
    if not rows:
        return []
    query, params = _insert_statement(table, rows)
    try:
        cur = await conn.execute(query, params)
    except psycopg.errors.ForeignKeyViolation as exc:
        raise _fk_error(table, exc) from None
    got = await cur.fetchall()
    # identity values are assigned in the array's order (WITH ORDINALITY ... ORDER BY)
    got.sort(key=lambda r: r["id"])
    return got


def insert_renderable(table: TableMeta) -> bool:
    """Whether :func:`insert_records_json` can answer for this table (no file columns,
    whose URLs are signed in Python; at most 50 columns)."""
    return record_json_renderable(table.columns)


async def insert_records_json(conn: Conn, *, table: TableMeta,
                              rows: Sequence[PreparedRow]) -> tuple[list[str], list[bool]]:
    """:func:`insert_records`, answered as each new record's API JSON rendered by
    PostgreSQL (:func:`storage.query.render.record_text`, the list pages' renderer), in
    input order: no row is decoded in Python. For plain writes (no pipeline to feed).
    With each text, whether it is spaced (:func:`storage.query.render.record_text_spaced`:
    to be compacted); else it is compact, as orjson writes it.

    Raises:
        InvalidValue: as :func:`insert_records`.
    """
    if not rows:
        return [], []
    insert, params = _insert_statement(table, rows)
    key = (insert, tuple((c.physical, c.type) for c in table.columns))
    query = _INSERT_JSON_SQL.get(key)
    if query is None:
        query = _remember(_INSERT_JSON_SQL, key, sql.SQL("WITH ins AS ({}) SELECT {}, {} FROM ins ORDER BY id").format(
            sql.SQL(insert), record_text(table.columns, "ins"), record_text_spaced(table.columns, "ins")))
    try:
        cur = await conn.cursor(row_factory=tuple_row).execute(query, [*params, *field_keys(table.columns)])
    except psycopg.errors.ForeignKeyViolation as exc:
        raise _fk_error(table, exc) from None
    answers = await cur.fetchall()
    return [row[0] for row in answers], [row[1] for row in answers]


_INSERT_JSON_SQL: dict[tuple[Any, ...], str] = {}


_SEQUENCES: dict[tuple[Any, ...], str] = {}


async def allocate_ids(conn: Conn, *, table: TableMeta, n: int) -> list[int]:
    """``n`` new record ids from the table's identity sequence, ascending (an INSERT
    given them stores its rows under them)."""
    key = (table.workspace_id, table.id)
    query = _SEQUENCES.get(key)
    if query is None:
        # the sequence resolved once: pg_get_serial_sequence per row cost ~5 µs a row
        cur = await conn.cursor(row_factory=tuple_row).execute(
            "SELECT pg_get_serial_sequence(%s, 'id')", [_target(table).as_string(None)])
        found = await cur.fetchone()
        if found is None or found[0] is None:
            raise ServiceError(f"table {table.name!r} has no id sequence", code="CONFLICT", status=409)
        query = _remember(_SEQUENCES, key, sql.SQL("SELECT nextval({}::regclass) FROM generate_series(1, %s)").format(
            sql.Literal(found[0])))
    cur = await conn.cursor(row_factory=tuple_row).execute(query, [n])
    return sorted(row[0] for row in await cur.fetchall())


async def stage_records(conn: Conn, *, table: TableMeta, rows: Sequence[PreparedRow],
                        ids: Sequence[int] = ()) -> list[dict[str, Any]]:
    """The rows :func:`insert_records` would store, without storing them: row ``i`` as
    record ``ids[i]`` (:func:`allocate_ids`) with every column the insert would write,
    typed by PostgreSQL exactly as the insert types it (the same ``jsonb_to_recordset``
    expression) and read back as a stored row reads. Columns no row sets are absent
    (NULL when inserted). For computing a create's columns before its one INSERT
    (:func:`insert_computed_json`). Without ``ids`` (allocated at the same time) the rows
    come without ``id``: the caller sets it."""
    if not rows:
        return []
    col_ids = sorted({cid for r in rows for cid in r.values})
    if not col_ids:
        return [{"id": rid} for rid in ids] if ids else [{} for _ in rows]
    _, params = _insert_statement(table, rows)
    columns = _data_columns(table, col_ids)
    key = ("stage", table.workspace_id, table.id, columns)
    query = _INSERT_SQL.get(key)
    if query is None:
        names, source = _typed_rows(columns)
        query = _remember(_INSERT_SQL, key, sql.SQL("SELECT {names} FROM {source} ORDER BY x.ordinality").format(
            names=names, source=source))
    cur = await conn.execute(query, params)
    staged = await cur.fetchall()
    for row, rid in zip(staged, ids):
        row["id"] = rid
    return staged


def _fits_bigint(value: int) -> bool:
    return -(2**63) <= value < 2**63


def _staged_number(value: Any) -> Any:
    if type(value) not in (int, float) or (type(value) is int and not _fits_bigint(value)):
        return _UNPREDICTABLE
    number = float(value)
    if not math.isfinite(number):
        return _UNPREDICTABLE
    return number if number else 0.0  # jsonb's numeric has no -0


# per stored type, what jsonb_to_recordset reads back for a written value, or
# _UNPREDICTABLE (then PostgreSQL stages the rows); null reads back as None in each
_STAGED: dict[str, Callable[[Any], Any]] = {
    "double precision": _staged_number,
    "bigint": lambda v: v if type(v) is int and _fits_bigint(v) else _UNPREDICTABLE,
    "text": lambda v: v if type(v) is str and "\x00" not in v else _UNPREDICTABLE,
    "boolean": lambda v: v if type(v) is bool else _UNPREDICTABLE,
}


def stage_locally(table: TableMeta, rows: Sequence[PreparedRow]) -> list[dict[str, Any]] | None:
    """:func:`stage_records`'s answer computed here, without a round trip, when it is
    certain: every written column stores ``double precision``, ``text``, ``boolean`` or
    ``bigint`` and every value is of the matching Python type (numbers finite and, as
    integers, in the 64-bit range; text without NUL). PostgreSQL reads such a JSON value
    back as the same Python value (a number as the float nearest its digits, which is
    Python's ``float()`` too; -0 as 0, jsonb's numeric having no negative zero). ``None``
    when one is not: stage with PostgreSQL."""
    kinds = []
    for cid in sorted({cid for r in rows for cid in r.values}):
        col = table.column_by_id(cid)
        stage = _STAGED.get(ddl.pg_type(col.type)) if col is not None and not col.computed else None
        if stage is None:
            return None
        kinds.append((cid, f"c_{cid}", stage))
    staged = []
    for row in rows:
        item: dict[str, Any] = {}
        for cid, physical, stage in kinds:
            value = row.values.get(cid)
            if value is not None:
                value = stage(value)
                if value is _UNPREDICTABLE:
                    return None
            item[physical] = value
        staged.append(item)
    return staged


async def insert_computed_json(
    conn: Conn, *, table: TableMeta, rows: Sequence[PreparedRow], ids: Sequence[int],
    computed: Sequence[Mapping[int, Any]], outcomes: Sequence[Mapping[str, Any] | None],
    ok_outcome: Mapping[str, Any] | None = None, outbox_payload: dict[str, Any] | None = None,
    arithmetic: SqlArithmetic | None = None,
) -> tuple[list[str], list[bool], int | None]:
    """Insert records with their computed values and pipeline outcome in one statement:
    row ``i`` as record ``ids[i]`` (ascending with the input, as :func:`allocate_ids`
    gives them) with ``computed[i]``
    (column id → JSON value) and ``outcomes[i]`` as ``_pipeline`` (``None``: the run's
    shared ``ok_outcome``, sent once instead of once a row); the columns of ``arithmetic``
    (:mod:`storage.formula.insql`) are computed by the statement from the row's values. Answers each record's
    API JSON with its ``pipeline`` (as write responses show it), rendered by PostgreSQL,
    in input order; per record whether that text is spaced (to be compacted,
    :func:`storage.query.render.record_text_spaced`; a record with its own outcome is
    too), else it is the bytes orjson writes; and the id of the run's ``wds.outbox`` row
    written by the same statement when ``outbox_payload`` is given (else ``None``).
    The realtime feed sees one INSERT per record with every value.

    Raises:
        InvalidValue: as :func:`insert_records` (the statement inserts nothing, and
            writes no outbox row).
        NotFound: the outbox row's table or workspace was deleted meanwhile.
    """
    if not rows:
        return [], [], None
    if any(a >= b for a, b in pairwise(ids)):
        raise ValueError("record ids must ascend with the input rows")
    if ok_outcome is None and any(o is None for o in outcomes):
        raise ValueError("an outcome of None needs ok_outcome")
    data_ids = sorted({cid for r in rows for cid in r.values})
    comp_ids = sorted({cid for c in computed for cid in c})
    physical = [f"c_{cid}" for cid in data_ids]
    doc = []
    for row, rid, comp, outcome in zip(rows, ids, computed, outcomes):
        item: dict[str, Any] = {"id": rid}
        if outcome is not None:
            item["_pipeline"] = outcome
        for p, cid in zip(physical, data_ids):
            if cid in row.values:
                item[p] = row.values[cid]
        for cid, value in comp.items():
            item[f"c_{cid}"] = value
        doc.append(item)
    payload = jsontext.dumps(doc, default=_json_default).decode()
    columns = (("id", "bigint"), *_data_columns(table, data_ids),
               *((f"c_{cid}", COMPUTED_PG_TYPE) for cid in comp_ids), ("_pipeline", "jsonb"))
    key = ("computed", table.workspace_id, table.id, columns, tuple((c.physical, c.type) for c in table.columns),
           outbox_payload is not None, arithmetic.key() if arithmetic is not None else None)
    query = _INSERT_JSON_SQL.get(key)
    if query is None:
        names, source = _typed_rows(columns)
        values = sql.SQL(", ").join([*(sql.Identifier(name) for name, _ in columns[:-1]),
                                     sql.SQL("COALESCE(x._pipeline, %s::jsonb)")])
        if arithmetic is not None:  # computed by PostgreSQL from the typed input values
            exprs = arithmetic.expressions({cid: sql.Identifier("x", f"c_{cid}") for cid in data_ids})
            names = sql.SQL(", ").join([names, *(sql.Identifier(f"c_{cid}") for cid in exprs)])
            values = sql.SQL(", ").join([values, *exprs.values()])
        # the record as the list pages write it (compact, no parse here), its outcome the
        # run's shared one as compact text (the common case, tested once a row in ``s``)
        # or its own, as jsonb renders it (then the record is spaced)
        p = sql.Identifier("ins", "_pipeline")
        own = sql.SQL("json_build_object({})::text").format(sql.SQL(", ").join(
            sql.SQL("{}, {}->{}").format(sql.Literal(k), p, sql.Literal(k)) for k in OUTCOME_KEYS))
        pipeline = sql.SQL("CASE WHEN s.shared THEN %s::text ELSE {} END").format(own)
        query = _remember(_INSERT_JSON_SQL, key, sql.SQL(
            "WITH ins AS (INSERT INTO {t} ({names}) SELECT {values} FROM {source} ORDER BY x.ordinality RETURNING *)"
            "{outbox} SELECT {obj}, {spaced} OR NOT s.shared, {outbox_id}"
            " FROM ins, LATERAL (SELECT {p} IS NOT DISTINCT FROM %s::jsonb AS shared) AS s ORDER BY ins.id"
        ).format(t=_target(table), names=names, values=values, source=source,
                 outbox=sql.SQL(f", ob AS ({outbox.INSERT_SQL})" if outbox_payload is not None else ""),
                 outbox_id=sql.SQL("(SELECT id FROM ob)" if outbox_payload is not None else "NULL::bigint"),
                 obj=record_text(table.columns, "ins", pipeline=pipeline), p=p,
                 spaced=record_text_spaced(table.columns, "ins")))
    shared = jsontext.dumps(ok_outcome).decode() if ok_outcome is not None else None
    shared_text = jsontext.dumps(outcome_in_order(ok_outcome)).decode() if ok_outcome is not None else None
    params: list[Any] = [shared, payload]
    if outbox_payload is not None:
        params += [table.workspace_id, table.id, outbox.payload_param(outbox_payload)]
    params += [*field_keys(table.columns), shared_text, shared]
    try:
        cur = await conn.cursor(row_factory=tuple_row).execute(query, params)
    except psycopg.errors.ForeignKeyViolation as exc:
        if exc.diag.table_name == "outbox":  # the table (or workspace) was deleted meanwhile
            raise NotFound(f"table {table.name!r} no longer exists") from None
        raise _fk_error(table, exc) from None
    except psycopg.errors.NumericValueOutOfRange:
        if arithmetic is None:
            raise
        raise OutOfRange("a computed step overflowed or underflowed in PostgreSQL") from None
    answers = await cur.fetchall()  # ORDER BY id: the input order
    return [row[0] for row in answers], [row[1] for row in answers], (answers[0][2] if answers else None)


def _insert_statement(table: TableMeta, rows: Sequence[PreparedRow]) -> tuple[str, list[Any]]:
    col_ids = sorted({cid for r in rows for cid in r.values})
    if not col_ids:
        query = sql.SQL("INSERT INTO {} SELECT FROM generate_series(1, %s) RETURNING {}").format(
            _target(table), row_list(table)).as_string(None)
        return query, [len(rows)]
    # ONE parameter whatever the row count: the rows travel as a JSON array that
    # jsonb_to_recordset types column by column. The statement text depends only on the
    # columns, so it is composed once and prepared by the server; a VALUES list of
    # rows × columns placeholders cost more client time than the INSERT itself.
    physical = [f"c_{cid}" for cid in col_ids]
    payload = orjson.dumps([{p: r.values[cid] for p, cid in zip(physical, col_ids) if cid in r.values}
                            for r in rows], default=_json_default).decode()
    return _insert_sql(table, col_ids), [payload]


_INSERT_SQL: dict[tuple[Any, ...], str] = {}


def _typed_rows(columns: Sequence[tuple[str, str]]) -> tuple[sql.Composable, sql.Composable]:
    """``(names, source)`` for rows sent as ONE JSON array parameter: the column list and
    ``ROWS FROM (jsonb_to_recordset(%s::jsonb) AS (name type, ...)) WITH ORDINALITY AS x``,
    typed column by column by PostgreSQL (order the rows by ``x.ordinality``).
    ``columns``: ``(physical name, PostgreSQL type)`` pairs."""
    names = sql.SQL(", ").join(sql.Identifier(name) for name, _ in columns)
    defs = sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(t)) for name, t in columns)
    return names, sql.SQL("ROWS FROM (jsonb_to_recordset(%s::jsonb) AS ({})) WITH ORDINALITY AS x").format(defs)


def _data_columns(table: TableMeta, col_ids: Sequence[int]) -> tuple[tuple[str, str], ...]:
    return tuple((f"c_{cid}", ddl.pg_type(_column(table, cid).type)) for cid in col_ids)


def _remember(cache: dict[tuple[Any, ...], str], key: tuple[Any, ...], query: sql.Composable) -> str:
    if len(cache) >= 4096:
        cache.clear()
    text = cache[key] = query.as_string(None)
    return text


def _insert_sql(table: TableMeta, col_ids: list[int]) -> str:
    columns = _data_columns(table, col_ids)
    key = (table.workspace_id, table.id, columns, _layout(table).row_list)
    query = _INSERT_SQL.get(key)
    if query is None:
        names, source = _typed_rows(columns)
        query = _remember(_INSERT_SQL, key, sql.SQL(
            "INSERT INTO {t} ({names}) SELECT {names} FROM {source} ORDER BY x.ordinality RETURNING {row}"
        ).format(t=_target(table), names=names, source=source, row=row_list(table)))
    return query


def _column(table: TableMeta, column_id: int) -> ColumnMeta:
    col = table.column_by_id(column_id)
    if col is None:
        raise UnknownColumn(f"unknown column {column_id} in table {table.name!r}")
    return col


def _json_default(value: Any) -> Any:
    if isinstance(value, Jsonb):
        return value.obj
    raise TypeError(f"cannot store {type(value).__name__} as JSON")


def _sets(row: PreparedRow) -> sql.Composed:
    """An update's ``SET`` list: each given column, and ``updated_at``, which always advances."""
    return sql.SQL(", ").join([*(sql.SQL("{} = %s").format(sql.Identifier(f"c_{cid}")) for cid in row.values),
                               sql.SQL("updated_at = clock_timestamp()")])


def _row_bytes(table: TableMeta) -> sql.Composed:
    """The bytes a row of ``table`` (alias ``t``) holds as stored: the sum of :func:`_value_bytes`."""
    return sql.SQL(" + ").join([sql.SQL("0"), *(_value_bytes(c) for c in table.columns)])


async def update_record(
    conn: Conn, *, table: TableMeta, record_id: int, row: PreparedRow
) -> dict[str, Any] | None:
    """Apply a partial update; ``updated_at`` always advances. ``None`` if no such record."""
    query = sql.SQL("UPDATE {} SET {} WHERE id = %s RETURNING {}").format(
        _target(table), _sets(row), row_list(table)
    )
    try:
        cur = await conn.execute(query, [*row.values.values(), record_id])
    except psycopg.errors.ForeignKeyViolation as exc:
        raise _fk_error(table, exc) from None
    return await cur.fetchone()


async def matching_sizes(
    conn: Conn, *, table: TableMeta, filters: Sequence[Any], limit: int
) -> list[tuple[int, int]]:
    """``(id, bytes its values hold as stored)`` of the records matching ``filters``,
    ascending by id, at most ``limit`` (a text's size from its header: nothing is fetched
    or expanded to measure it)."""
    where, params = build_where(filters, alias="t")
    cur = await conn.execute(sql.SQL(
        "SELECT t.id, ({})::bigint AS n FROM {} AS t WHERE {} ORDER BY t.id LIMIT %s"
    ).format(_row_bytes(table), _target(table), where), [*params, limit])
    return [(r["id"], r["n"]) for r in await cur.fetchall()]


async def update_records(
    conn: Conn, *, table: TableMeta, record_ids: Sequence[int], filters: Sequence[Any], row: PreparedRow,
    full: bool = True,
) -> list[dict[str, Any]]:
    """Apply the same partial update to the records of ``record_ids`` that still match
    ``filters``, in one statement; ``updated_at`` always advances. Their rows ascending by
    id: whole (``full``), or their ids alone (``{"id": ...}``)."""
    where, params = build_where(filters, alias="t")
    query = sql.SQL("UPDATE {} AS t SET {} WHERE t.id = ANY(%s) AND {} RETURNING {}").format(
        _target(table), _sets(row), where, row_list(table, "t") if full else sql.SQL("t.id"))
    try:
        cur = await conn.execute(query, [*row.values.values(), list(record_ids), *params])
    except psycopg.errors.ForeignKeyViolation as exc:
        raise _fk_error(table, exc) from None
    return sorted(await cur.fetchall(), key=lambda r: r["id"])


_UNPREDICTABLE = object()


def _jsonb_key(key: str) -> tuple[int, bytes]:
    raw = key.encode()
    return len(raw), raw


def jsonb_echo(value: Any) -> Any:
    """``value`` as reading it back from a ``jsonb`` column gives it, or
    ``_UNPREDICTABLE`` when that is not certain.

    Predictable: ``None``, booleans, text without NUL, 64-bit integers, floats Python
    prints in fixed notation (1e-4 ≤ |x| < 1e16, or +0.0: PostgreSQL's numeric keeps
    their digits, so they read back as the same float; ``1e+16`` would read back as an
    integer), and lists and string-keyed objects of those, objects in jsonb's key order
    (shorter keys first, then bytewise). orjson also writes exactly these as ``json.dumps``
    does (up to the escaping of non-ASCII text, which jsonb does not keep).
    """
    t = type(value)
    if t is str:
        return value if "\x00" not in value else _UNPREDICTABLE
    if value is None or t is bool:
        return value
    if t is int:
        return value if -(2**63) <= value < 2**63 else _UNPREDICTABLE
    if t is float:
        fixed = 1e-4 <= abs(value) < 1e16 or (value == 0 and math.copysign(1.0, value) > 0)
        return value if fixed else _UNPREDICTABLE
    if t is list or t is tuple:
        items = [jsonb_echo(v) for v in value]
        return _UNPREDICTABLE if any(v is _UNPREDICTABLE for v in items) else items
    if t is dict:
        out: dict[str, Any] = {}
        for key in sorted(value, key=lambda k: _jsonb_key(k) if type(k) is str else (-1, b"")):
            if type(key) is not str or "\x00" in key:
                return _UNPREDICTABLE
            item = jsonb_echo(value[key])
            if item is _UNPREDICTABLE:
                return _UNPREDICTABLE
            out[key] = item
        return out
    return _UNPREDICTABLE


def _json_bytes(doc: Any) -> bytes | str:
    try:  # column ids (int keys) as text, as json.dumps writes them
        return orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # e.g. a lone surrogate: json.dumps reports it as it always did
        return json.dumps(doc)


async def write_computed(
    conn: Conn,
    *,
    table: TableMeta,
    updates: Sequence[tuple[int, dict[int, Any], dict[str, Any] | None]],
    returning: bool = False,
    loaded: Mapping[int, Mapping[str, Any]] | None = None,
    unless_superseded: str | None = None,
) -> tuple[int, list[dict[str, Any]]]:
    """Write pipeline results for many records in one statement: (rows written, the
    written rows when ``returning``, else ``[]``).

    ``updates`` holds ``(record_id, {column_id: json value}, pipeline_outcome)``. Values are
    written as jsonb; ``_pipeline`` records the outcome shown with the record.

    The whole batch travels as ONE jsonb parameter expanded by ``jsonb_to_recordset``: a
    ``jsonb[]`` of one document per record cost ~10 ms of client-side array quoting per
    500 records, more than the UPDATE itself. When every value is predictable
    (:func:`jsonb_echo`) the document is encoded by orjson, and with ``loaded`` (the rows
    as read before the run, by id) the written rows are those rows with the new values,
    ``_pipeline`` and ``updated_at`` (the only columns this statement changes), so the
    statement returns just ids and timestamps instead of every column to decode.

    ``unless_superseded``: a bulk run's id; nothing is written once that run is
    ``superseded`` (``wds.runs``): a chunk of a backfill still in flight when a newer
    backfill of the table took over must not write its older values after the new ones.
    """
    if not updates:
        return 0, []
    col_ids = sorted({cid for _, vals, _ in updates for cid in vals})
    echoes: list[dict[int, Any]] | None = []
    for _, vals, _ in updates:
        echo: dict[int, Any] = {}
        for cid, value in vals.items():
            echo[cid] = item = jsonb_echo(value)
            if item is _UNPREDICTABLE:
                break
        else:
            echoes.append(echo)  # type: ignore[union-attr]
            continue
        echoes = None
        break
    # column ids as keys: both encoders write them as text ("12")
    doc = [{"id": rid, "v": vals, "p": outcome} for rid, vals, outcome in updates]
    payload = Jsonb(doc, dumps=json.dumps if echoes is None else _json_bytes)
    sets = [
        sql.SQL("{c} = CASE WHEN u.v ? {k} THEN u.v->{k} ELSE t.{c} END").format(
            c=sql.Identifier(f"c_{cid}"), k=sql.Literal(str(cid))
        )
        for cid in col_ids
    ]
    sets.append(sql.SQL("_pipeline = coalesce(u.p, t._pipeline)"))
    sets.append(sql.SQL("updated_at = clock_timestamp()"))
    merge = returning and echoes is not None and loaded is not None and all(rid in loaded for rid, _, _ in updates)
    tail = " RETURNING t.id, t.updated_at" if merge else f" RETURNING {_layout(table).row_list_t}" if returning else ""
    guard = (sql.SQL(" AND NOT EXISTS (SELECT 1 FROM wds.runs r WHERE r.id = %s AND r.status = 'superseded')")
             if unless_superseded is not None else sql.SQL(""))
    query = sql.SQL(
        "UPDATE {} AS t SET {} FROM jsonb_to_recordset(%s::jsonb) AS u(id bigint, v jsonb, p jsonb)"
        " WHERE t.id = u.id{}{}"
    ).format(_target(table), sql.SQL(", ").join(sets), guard, sql.SQL(tail))
    cur = await conn.execute(query, [payload] if unless_superseded is None else [payload, unless_superseded])
    rows = await cur.fetchall() if returning else []
    if merge and loaded is not None and echoes is not None:
        stamps = {r["id"]: r["updated_at"] for r in rows}
        rows = []
        for (rid, _, outcome), echo in zip(updates, echoes):
            if rid not in stamps:
                continue  # deleted since it was loaded: nothing written
            row = dict(loaded[rid])
            for cid, value in echo.items():
                row[f"c_{cid}"] = value
            if outcome is not None:
                row["_pipeline"] = outcome
            row["updated_at"] = stamps[rid]
            rows.append(row)
    return max(cur.rowcount, 0), rows


async def delete_record(conn: Conn, *, table: TableMeta, record_id: int) -> dict[str, Any] | None:
    cur = await conn.execute(
        sql.SQL("DELETE FROM {} WHERE id = %s RETURNING {}").format(_target(table), row_list(table)), (record_id,)
    )
    return await cur.fetchone()


@dataclass(frozen=True, slots=True)
class Unlinked:
    """Records of ``table`` whose relation columns ``columns`` (names) pointed at a deleted
    record: the delete cleared them (``ON DELETE SET NULL``), as an update of those columns
    to blank would."""

    table: TableMeta
    columns: tuple[str, ...]
    record_ids: list[int]


def relations_to(schema: WorkspaceSchema, table: TableMeta,
                 matters: Callable[[TableMeta, ColumnMeta], bool]) -> list[tuple[TableMeta, ColumnMeta]]:
    """Relation columns (of any table, ``table`` too) pointing at ``table`` for which
    ``matters`` holds (e.g. an update of them would run computed columns)."""
    return [(t, c) for t in schema.tables.values() for c in t.columns
            if c.type is ColumnType.RELATION and c.relation_table_id == table.id and matters(t, c)]


async def linked_records(conn: Conn, *, relations: Sequence[tuple[TableMeta, ColumnMeta]],
                         record_id: int) -> list[Unlinked]:
    """The records whose ``relations`` point at ``record_id``, grouped by table and by the
    columns that do: what deleting that record will clear. Read in the delete's
    transaction, before it (afterwards the links are gone)."""
    by_table: dict[int, list[ColumnMeta]] = {}
    tables: dict[int, TableMeta] = {}
    for t, c in relations:
        by_table.setdefault(t.id, []).append(c)
        tables[t.id] = t
    out: list[Unlinked] = []
    for tid, cols in by_table.items():
        links = [sql.SQL("{} = %s").format(sql.Identifier(c.physical)) for c in cols]
        cur = await conn.cursor(row_factory=tuple_row).execute(
            sql.SQL("SELECT id, {} FROM {} WHERE {} ORDER BY id").format(
                sql.SQL(", ").join(links), _target(tables[tid]), sql.SQL(" OR ").join(links)),
            [record_id] * (2 * len(cols)))
        groups: dict[tuple[str, ...], list[int]] = {}
        for row in await cur.fetchall():
            names = tuple(c.name for c, linked in zip(cols, row[1:], strict=True) if linked)
            groups.setdefault(names, []).append(row[0])
        out += [Unlinked(tables[tid], names, ids) for names, ids in groups.items()]
    return out


async def existing_ids(conn: Conn, *, table: TableMeta, ids: Sequence[int]) -> set[int]:
    cur = await conn.execute(
        sql.SQL("SELECT id FROM {} WHERE id = ANY(%s)").format(_target(table)), (list(ids),)
    )
    return {r["id"] for r in await cur.fetchall()}


async def get_record_rows(conn: Conn, *, table: TableMeta, record_ids: Sequence[int]) -> list[dict[str, Any]]:
    """Rows by id, in the order of ``record_ids`` (missing ids are left out)."""
    cur = await conn.execute(
        sql.SQL("SELECT {} FROM {} WHERE id = ANY(%s)").format(row_list(table), _target(table)), (list(record_ids),)
    )
    by_id = {r["id"]: r for r in await cur.fetchall()}
    return [by_id[i] for i in record_ids if i in by_id]


def _value_bytes(col: ColumnMeta) -> sql.Composable:
    """A stored value's size in bytes as it is read out: a text's from its header (a
    TOASTed or compressed value is not fetched or expanded), any other value's text."""
    name = sql.Identifier("t", col.physical)
    if ddl.pg_type(col.type) == "text":
        return sql.SQL("coalesce(octet_length({}), 0)").format(name)
    return sql.SQL("coalesce(octet_length({}::text), 0)").format(name)


async def get_record_rows_within(
    conn: Conn, *, table: TableMeta, record_ids: Sequence[int], max_bytes: int,
) -> tuple[list[dict[str, Any]], list[int]]:
    """Rows by id, ascending, while their values hold at most ``max_bytes`` together (the
    first row whatever its size), and the ids of ``record_ids`` after them, ascending (a
    missing id is left out of both). One statement: the running sum is PostgreSQL's, and
    the rows past the budget come back as their ids alone."""
    ids = sorted(set(record_ids))
    if not ids:
        return [], []
    size = _row_bytes(table)
    t = sql.Identifier("t")
    cols = [sql.SQL("{}.{}").format(t, sql.Identifier(name)) for name in _SYSTEM]
    cols += [sql.SQL("CASE WHEN t._read THEN {}::{} END AS {}").format(
        sql.Identifier("t", c.physical), sql.SQL(ddl.pg_type(c.type)), sql.Identifier(c.physical))
        for c in table.columns]
    cur = await conn.execute(sql.SQL(
        "SELECT {cols}, t._read FROM ("
        "SELECT t.*, sum(t._size) OVER w <= %s OR sum(t._size) OVER w = t._size AS _read FROM ("
        "SELECT t.*, ({size})::bigint AS _size FROM {target} AS t WHERE t.id = ANY(%s)) AS t"
        " WINDOW w AS (ORDER BY t.id)) AS t ORDER BY t.id"
    ).format(cols=sql.SQL(", ").join(cols), size=size, target=_target(table)), (max_bytes, ids))
    rows: list[dict[str, Any]] = []
    rest: list[int] = []
    for row in await cur.fetchall():
        if row.pop("_read") and not rest:
            rows.append(row)
        else:
            rest.append(row["id"])
    return rows, rest


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


async def json_sizes(
    conn: Conn, *, table: TableMeta, record_ids: Sequence[int], names: Sequence[str] | None
) -> dict[int, dict[str, int]]:
    """Record id → column name → about how many bytes its value takes as JSON with
    non-ASCII escaped (as Temporal's converter encodes it: a character of 2 to 4 bytes in
    UTF-8 is 6 or 12), for the columns named (every one when None); measured in
    PostgreSQL, nothing is read out. Steps read some values decoded (a select's label):
    an estimate, for planning runs by the bytes they carry (workflows/bulk.py)."""
    cols = [c for c in table.columns if names is None or c.name in names]
    if not cols:
        return {rid: {} for rid in record_ids}
    parts = [sql.SQL("coalesce((SELECT 6 * octet_length(j) - 5 * length(j) FROM (SELECT to_jsonb(t.{})::text AS j) s), 4)")
             .format(sql.Identifier(c.physical)) for c in cols]
    query = sql.SQL("SELECT t.id, ARRAY[{}] AS sizes FROM {} AS t WHERE t.id = ANY(%s)").format(
        sql.SQL(", ").join(parts), _target(table))
    cur = await conn.execute(query, (list(record_ids),))
    return {r["id"]: {c.name: int(n) for c, n in zip(cols, r["sizes"], strict=True)} for r in await cur.fetchall()}


async def count_matching(conn: Conn, *, table: TableMeta, filters: Sequence[Any]) -> int:
    where, params = build_where(filters, alias="t")
    cur = await conn.execute(sql.SQL("SELECT count(*) AS n FROM {} AS t WHERE {}").format(_target(table), where), params)
    row = await cur.fetchone()
    return int(row["n"]) if row else 0
