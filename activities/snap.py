"""Conversions between storage metadata and the snapshots carried in workflow inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from activities.types import Caller, ColumnSnap, TableSnap
from storage.access import BucketPerms, Perms, Principal, TokenType
from storage.refs import fields_read
from storage.schema import ColumnMeta, ColumnType, Option, TableMeta
from storage.values import decode_value, value_decoder


def _fields_read(table: TableMeta) -> dict[int, list[str] | None]:
    """Computed column id → the fields its steps read (None: any), memoised on the table."""
    found = table.memo.get("fields_read")
    if found is None:
        found = {}
        for c in table.columns:
            if c.computed:
                names = fields_read(c.type.value, c.formula, c.config or {})
                found[c.id] = sorted(names) if names is not None else None
        table.memo["fields_read"] = found
    return found


def table_snap(table: TableMeta) -> TableSnap:
    reads = _fields_read(table)
    return TableSnap(
        id=table.id,
        workspace_id=table.workspace_id,
        name=table.name,
        columns=[
            ColumnSnap(
                id=c.id, name=c.name, type=c.type.value, config=dict(c.config), formula=c.formula,
                options=[o.as_dict() for o in c.options], relation_table_id=c.relation_table_id,
                required=c.required, position=c.position, broken=c.broken, value_type=c.value_type,
                definition=c.definition, reads=reads.get(c.id),
            )
            for c in table.columns
        ],
    )


def table_meta(snap: TableSnap) -> TableMeta:
    return TableMeta(
        id=snap.id,
        workspace_id=snap.workspace_id,
        name=snap.name,
        icon=None,
        columns=tuple(
            ColumnMeta(
                id=c.id, table_id=snap.id, name=c.name, type=ColumnType(c.type), required=c.required,
                position=c.position, options=tuple(Option(o["id"], o["label"], o["color"]) for o in c.options),
                config=c.config, formula=c.formula, relation_table_id=c.relation_table_id,
                broken=c.broken, value_type=c.value_type, definition=c.definition,
            )
            for c in snap.columns
        ),
    )


def caller_of(principal: Principal) -> Caller:
    return Caller(
        token_id=principal.token_id,
        token_type=principal.type.value,
        plan=principal.plan,
        grants={str(t): [p.read, p.create, p.update, p.delete] for t, p in principal.grants.items()},
        buckets={str(b): [g.read, g.write, g.all_paths] for b, g in principal.bucket_grants.items()},
        app_user_id=principal.app_user_id,
        users_table_id=principal.users_table_id,
    )


def principal_of(caller: Caller, workspace_id: int) -> Principal:
    """The writer a record step acts as: its grants, bucket grants and, for an app user,
    the Users-table rules (``Principal.perms`` / ``own_row_only``), as its direct writes
    have them."""
    return Principal(
        token_id=caller.token_id, workspace_id=workspace_id, type=TokenType(caller.token_type),
        profile_id=None, plan=caller.plan, read_only=False, expires_at=None,
        grants={int(t): Perms(*g) for t, g in caller.grants.items()},
        app_user_id=caller.app_user_id, users_table_id=caller.users_table_id,
        bucket_grants={int(b): BucketPerms(*g) for b, g in caller.buckets.items()},
    )


def step_value(col: ColumnMeta, raw: Any) -> Any:
    """A stored value as pipeline steps see it: like the API, but selects as labels."""
    if col.type is ColumnType.SINGLE_SELECT and raw is not None:
        opt = col.option_by_id_or_label(raw)
        return opt.label if opt else raw
    if col.type is ColumnType.MULTI_SELECT and raw is not None:
        return [(col.option_by_id_or_label(v).label if col.option_by_id_or_label(v) else v) for v in raw]
    return decode_value(col, raw)


def step_decoder(col: ColumnMeta) -> Callable[[Any], Any]:
    """:func:`step_value` for one column, resolved once (loading a batch of records)."""
    if col.type in (ColumnType.SINGLE_SELECT, ColumnType.MULTI_SELECT):
        return lambda raw: step_value(col, raw)
    return value_decoder(col)
