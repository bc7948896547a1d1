"""Table operations: list, create (with columns), get, change, delete — for every door."""

from __future__ import annotations

from typing import Any

from api.deps import require_writable, table_or_404
from api.ops.access import require_manage, table_for
from api.ops.agents import list_agents, may_manage_agents
from api.ops.columns import recompute_readers
from api.ops.schema_tx import check_column_hosts, schema_change
from api.schemas import TableIn, TablePatch
from api.serialize import table_out, table_summary
from api.services import embeddings as semantic_search
from api.services.limits import check_table_quota
from api.services.schedules import delete_table_schedules
from api.state import AppState
from storage import access, appusers, dependents, meta
from storage.access import Action, Principal, TokenType
from storage.columnspec import parse_new_column
from storage.errors import ColumnInUse, Conflict, ValidationError
from storage.pipelines import check_computed_columns
from storage.schema import TableMeta, WorkspaceSchema

MAX_TABLE_NAME = 255


def _table_name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError("table name must be a non-empty string")
    name = value.strip()
    if len(name) > MAX_TABLE_NAME or any(ord(c) < 32 for c in name):
        raise ValidationError("table name is too long or has control characters")
    return name


def _semantic(value: Any, table: TableMeta | None, column_names: set[str]) -> dict[str, Any] | None:
    if value is None:
        return None
    cols = list(dict.fromkeys(value.columns))
    if not cols:  # it embedded empty text for every record and every search scored 0
        raise ValidationError("semantic_search needs at least one column; send semantic_search: null to turn it off")
    missing = [c for c in cols if c not in column_names]
    if missing:
        raise ValidationError(f"semantic_search names unknown column(s): {', '.join(missing)}")
    return {"columns": cols}


async def _fresh(state: AppState, principal: Principal, table_id: int) -> TableMeta:
    schema = await state.schema(principal.workspace_id)
    return table_or_404(schema, table_id)


async def list_tables(state: AppState, principal: Principal) -> list[dict[str, Any]]:
    """Summaries of the tables the principal can read."""
    schema = await state.schema(principal.workspace_id)
    return [table_summary(t) for t in schema.tables.values() if principal.can_read(t.id)]


async def workspace_overview(state: AppState, principal: Principal) -> dict[str, Any]:
    """Tables with columns and the principal's access, plus agents and their public channels
    (for a principal that may manage agents: the builder; others get ``agents: []``).

    Three queries whatever the size of the workspace: the cached schema (two) and one
    for agents with their channels.
    """
    schema = await state.schema(principal.workspace_id)
    tables = []
    for table in schema.tables.values():
        perms = principal.perms(table.id)
        if not perms.read:
            continue
        tables.append({**table_out(table), "access": perms.as_dict()})
    agents = await list_agents(state, principal) if may_manage_agents(principal) else []
    return {"workspace_id": principal.workspace_id, "tables": tables, "agents": agents}


async def get_table(state: AppState, principal: Principal, table_ref: int | str) -> dict[str, Any]:
    """One readable table with its columns and settings."""
    return table_out(await table_for(state, principal, table_ref, Action.READ))


async def create_table(state: AppState, principal: Principal, body: TableIn) -> dict[str, Any]:
    """Create a table with its columns; a rest_api creator gets full access to it."""
    require_writable(principal)
    name = _table_name(body.name)
    schema: WorkspaceSchema = await state.schema(principal.workspace_id)
    specs = []
    seen: set[str] = set()
    for raw in body.columns:
        spec = parse_new_column(raw.model_dump(exclude_unset=True, exclude={"backfill"}), schema, None)
        if spec.name in seen:
            raise ValidationError(f"duplicate column name {spec.name!r}")
        seen.add(spec.name)
        specs.append(spec)
    check_computed_columns(specs, schema=schema)
    await check_column_hosts(state, principal.workspace_id, specs)
    semantic = _semantic(body.semantic_search, None, seen)
    if semantic is not None:  # 503 NOT_CONFIGURED before anything is created
        semantic = await semantic_search.prepare_semantic(state, semantic)
    async with schema_change(state, principal.workspace_id) as conn:
        if await meta.table_name_taken(conn, workspace_id=principal.workspace_id, name=name):
            raise Conflict(f"a table named {name!r} already exists")
        await check_table_quota(state, principal, conn)  # 402 PLAN_LIMIT_TABLES
        row = await meta.create_table(
            conn, workspace_id=principal.workspace_id, name=name, icon=body.icon, token_id=principal.token_id
        )
        for spec in specs:
            await meta.create_column(
                conn, workspace_id=principal.workspace_id, table_id=row["id"], spec=spec, encode=False
            )
        # the columns may name each other in any order: store their references once all exist
        await meta.encode_table_columns(conn, workspace_id=principal.workspace_id, table_id=row["id"])
        if semantic is not None:
            await meta.update_table(conn, table_id=row["id"], changes={"semantic": semantic})
            await semantic_search.apply_semantic(conn, principal.workspace_id, row["id"], semantic)
        if principal.type is TokenType.REST_API:
            await access.grant_created_table(conn, token_id=principal.token_id, table_id=row["id"])
        await state.caches.notify(conn, tokens=True)
    state.caches.drop_tokens()
    return table_out(await _fresh(state, principal, row["id"]))


async def update_table(state: AppState, principal: Principal, table_ref: int | str, body: TablePatch) -> dict[str, Any]:
    """Rename a table, change its icon, or set its semantic-search columns; enabling search
    answers ``backfill`` (the run embedding existing records, or null when there are none)."""
    require_writable(principal)
    table = table_or_404(await state.schema(principal.workspace_id), table_ref)
    require_manage(principal, table)
    changes: dict[str, Any] = {}
    fields = body.model_dump(exclude_unset=True)
    if "name" in fields:
        changes["name"] = _table_name(body.name)
        if changes["name"] != table.name and table.name == appusers.USERS_TABLE:
            async with state.db.connection() as conn:
                if await appusers.has_accounts(conn, table_id=table.id):
                    raise Conflict(f"{table.name} holds the profiles of the workspace's app users (sign-up finds"
                                   " it by name): it keeps its name")
    if "icon" in fields:
        changes["icon"] = body.icon
    if "semantic_search" in fields:
        changes["semantic"] = _semantic(body.semantic_search, table, {c.name for c in table.columns})
        if changes["semantic"] is not None:  # 503 NOT_CONFIGURED when no provider can embed
            changes["semantic"] = await semantic_search.prepare_semantic(state, changes["semantic"])
    async with schema_change(state, principal.workspace_id) as conn:
        if "name" in changes and await meta.table_name_taken(
            conn, workspace_id=principal.workspace_id, name=changes["name"], exclude_id=table.id
        ):
            raise Conflict(f"a table named {changes['name']!r} already exists")
        await meta.update_table(conn, table_id=table.id, changes=changes)
        if "semantic" in changes:
            await semantic_search.apply_semantic(conn, principal.workspace_id, table.id, changes["semantic"])
    updated = await _fresh(state, principal, table.id)
    out = table_out(updated)
    if changes.get("semantic") is not None:
        # existing records are embedded by a run: {run_id, status, total, ...} (null: none to embed)
        out["backfill"] = await semantic_search.start_backfill(state, updated)
    return out


async def delete_table(state: AppState, principal: Principal, table_ref: int | str, *, force: bool = False) -> dict[str, Any]:
    """Drop the table and all its records (irreversible).

    Refused with ``COLUMN_IN_USE`` (listing ``dependents``) while columns of other tables
    point at it (relations, record steps) or use it, including what uses those relation
    columns (computed columns, views, semantic search, schedules); ``force`` drops it
    anyway: the relation columns go with it, detached as a forced column delete detaches
    them (their computed readers marked broken, values cleared), computed columns that
    used the table are marked broken, and the answer lists them all as ``detached``.
    """
    require_writable(principal)
    schema = await state.schema(principal.workspace_id)
    table = table_or_404(schema, table_ref)
    require_manage(principal, table)
    async with state.db.connection() as conn:
        users = await dependents.table_delete_dependents(conn, schema=schema, table=table)
    if users and not force:
        raise ColumnInUse(
            f"table {table.name!r} is used by {len(users)} item(s) of other tables; change them first,"
            " or delete with ?force=true",
            extra={"dependents": users},
        )
    # Temporal Schedules live outside the database: remove them first (their rows cascade)
    await delete_table_schedules(state, workspace_id=principal.workspace_id, table_id=table.id)
    async with schema_change(state, principal.workspace_id) as conn:
        # the data tables first, in the writers' order: no deadlock with writes in flight
        await meta.lock_table_for_delete(conn, workspace_id=principal.workspace_id, table_id=table.id)
        if users:
            await dependents.detach_for_table(conn, schema=schema, table=table)
        await meta.delete_table(conn, workspace_id=principal.workspace_id, table_id=table.id)
        await state.caches.notify(conn, tokens=True)
    state.caches.drop_tokens()
    out: dict[str, Any] = {"id": table.id, "deleted": True}
    if users:
        out["detached"] = users
        # the columns reading those marked broken held values computed from the cleared ones
        broken: dict[int, list[int]] = {}
        for dep in users:
            if dep["kind"] == "column":
                broken.setdefault(dep["table_id"], []).append(dep["id"])
        runs = [run for tid, ids in broken.items() if (run := await recompute_readers(state, principal, tid, ids))]
        if runs:
            out["backfills"] = runs
    return out
