"""Record steps: create_record, update_record, delete_record, fetch_records.

They act inside the writing token's workspace with the writer's rights, as its direct
write would have them (a step cannot reach another workspace: table ids resolve only
within ``inp.table.workspace_id``): its table grants; for an app user the Users-table
rules (its own row only, never its e-mail, no profile row created or deleted); file
references resolved as a REST write resolves them (this workspace's bucket, an existing
object, one the writer may read). Records a step writes get their own pipelines, run by
the workflow as child workflows.
"""

from __future__ import annotations

from typing import Any

from temporalio import activity

from activities.bulkplan import dependants_map
from activities.metrics import timed_step
from activities.results import fit_result
from activities.sandbox import sandbox
from activities.snap import principal_of, table_snap
from activities.steps import column_for_step
from activities.templates import render_many
from activities.types import StepInput, StepResult
from storage import appusers, meta, objects
from storage import records as rec
from storage.access import Action, Principal
from storage.db import Database
from storage.errors import ServiceError
from storage.pipelines import FETCH_MAX, plan_steps
from storage.query import Query, list_records, parse_filters, plan_query
from storage.query.parse import Group, group_text, parse_group
from storage.refs import each_group, map_group_values
from storage.schema import TableMeta, WorkspaceSchema

_TEMPLATED = ("table_id", "record_id", "fields", "filters")  # the config keys holding templates


def _split_groups(filters: Any) -> tuple[Any, list[Group | None]]:
    """A fetch_records step's filters with each ``or``/``and`` group holding a template
    replaced by the list of its values (in :func:`storage.refs.map_group_values` order),
    and the parsed groups in :func:`storage.refs.each_group` order (None: left as text).
    The values render one by one and the group is then written again with each value
    quoted as the grammar needs (:func:`_join_groups`): rendered inside the group's text,
    a record's ``a",Other.eq."b`` ended its quoted value and added a condition, and a
    ``"`` or ``,`` broke the group. A group that does not parse stays text (rendered whole)."""
    groups: list[Group | None] = []

    def split(key: str, text: Any) -> Any:
        group = None
        if isinstance(text, str) and "{" in text:
            try:
                group = parse_group(key, text)
            except ServiceError:
                pass
        groups.append(group)
        if group is None:
            return text
        values: list[str] = []
        map_group_values(group, lambda v: values.append(v) or v)
        return values

    return each_group(filters, split), groups


def _join_groups(filters: Any, groups: list[Group | None]) -> Any:
    """:func:`_split_groups`'s rendered filters with each split group written again from
    its rendered values (rendering keeps the filters' shape, so the groups come in the
    same order)."""
    visits = iter(groups)

    def join(_key: str, value: Any) -> Any:
        group = next(visits)
        if group is None:
            return value
        rendered = iter(value)
        return group_text(map_group_values(group, lambda _v: next(rendered)))

    return each_group(filters, join)


class StepFailure(Exception):
    """A step error for one record (stored as the cell's error)."""


def _child(table: TableMeta, record_ids: list[int], mode: str, changed: list[str]) -> dict[str, Any] | None:
    levels = plan_steps(table, mode=mode, changed=changed)
    if not levels or not record_ids:
        return None
    deps = dependants_map(table)
    snap = table_snap(table)
    return {
        "table": {"id": snap.id, "workspace_id": snap.workspace_id, "name": snap.name,
                  "columns": [c.__dict__ for c in snap.columns]},
        "record_ids": record_ids, "mode": mode, "levels": [[c.id for c in lvl] for lvl in levels],
        "dependants": deps,
    }


def _children(*children: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [c for c in children if c]


class RecordSteps:
    def __init__(self, db: Database, *, base_url: str = "") -> None:
        self.db = db
        self.base_url = base_url  # the public base URL: object URLs written back resolve to references

    async def _schema(self, workspace_id: int) -> WorkspaceSchema:
        async with self.db.connection() as conn:
            return await meta.load_schema(conn, workspace_id=workspace_id)

    @activity.defn(name="record_step")
    @timed_step  # Prometheus wds_step_duration_seconds{kind, status}
    async def record_step(self, inp: StepInput) -> StepResult:
        col = column_for_step(inp)
        schema = await self._schema(inp.table.workspace_id)
        who = principal_of(inp.caller, inp.table.workspace_id)
        result = StepResult()
        rids = list(inp.records)
        extras = {rid: {"record_id": int(rid), **({"item": inp.items.get(rid)} if inp.items is not None else {})}
                  for rid in rids}
        # every record's templates in one go, off the event loop unless simple (activities/templates.py)
        part = {k: col.config[k] for k in _TEMPLATED if k in col.config}
        groups: list[Group | None] = []
        if "filters" in part:
            part["filters"], groups = _split_groups(part["filters"])
        rendered = await render_many([(part, inp.records[rid], extras[rid]) for rid in rids], sandbox(),
                                     workspace=inp.table.workspace_id)
        for rid, (ok, config) in zip(rids, rendered, strict=True):
            if not ok:
                result.errors[rid] = config
                continue
            if any(groups):
                config["filters"] = _join_groups(config["filters"], groups)
            try:
                value, children = await self._one(col.type, {**col.config, **config}, schema, inp, who, extras[rid])
            except StepFailure as exc:
                result.errors[rid] = str(exc)
                continue
            except ServiceError as exc:
                result.errors[rid] = f"{exc.code}: {exc.message}"
                continue
            result.values[rid] = value
            result.children.extend(children)
        return fit_result(result, "result")  # e.g. fetch_records of long fields, within one payload

    def _target(self, schema: WorkspaceSchema, config: dict[str, Any], who: Principal, action: Action) -> TableMeta:
        ref = config.get("table_id")
        table = schema.table(ref) if ref is not None else None
        if table is None:
            raise StepFailure(f"table {ref!r} not found in this workspace")
        if who.own_row_only(table.id) and action in (Action.CREATE, Action.DELETE):
            # as a direct write: an account makes and removes its profile row, never a write
            raise StepFailure(f"an app user never {action.value}s a row of the {table.name!r} table")
        if not who.can(table.id, action):
            raise StepFailure(f"the writing token has no {action.value} permission on table {table.name!r}")
        return table

    async def _prepare(self, conn: Any, table: TableMeta, values: Any, who: Principal, *,
                       creating: bool) -> rec.PreparedRow:
        """``values`` checked and encoded as a REST write's, file references resolved."""
        prepared = rec.prepare_fields(table, values, creating=creating)
        await objects.resolve_file_refs(conn, table=table, values=prepared.values, base_url=self.base_url,
                                        may_read=who.may_read_object)  # no query without a reference
        return prepared

    def _record_id(self, config: dict[str, Any]) -> int:
        text = config.get("record_id")
        try:
            rid = int(str(text).strip())
        except (TypeError, ValueError):
            raise StepFailure(f"record_id {text!r} is not a record id") from None
        if rid <= 0:
            raise StepFailure(f"record_id {rid} is not a record id")
        return rid

    async def _one(
        self, kind: str, config: dict[str, Any], schema: WorkspaceSchema, inp: StepInput, who: Principal,
        extra: dict[str, Any],
    ) -> tuple[Any, list[dict[str, Any]]]:
        """One record's step as ``who`` (the writer); ``config`` has its templates rendered
        already. Returns its value and the pipelines of the records it wrote
        (:func:`_child`), to run as child workflows."""
        if kind == "create_record":
            table = self._target(schema, config, who, Action.CREATE)
            values = config.get("fields") or {}
            async with self.db.transaction() as conn:
                prepared = await self._prepare(conn, table, values, who, creating=True)
                row = await rec.insert_record(conn, table=table, row=prepared)
            return row["id"], _children(_child(table, [row["id"]], "create", []))
        if kind == "update_record":
            table = self._target(schema, config, who, Action.UPDATE)
            record_id = self._record_id(config)
            values = config.get("fields") or {}
            if who.own_row_only(table.id):
                appusers.check_own_profile_row(who, record_id, values if isinstance(values, dict) else {})
            async with self.db.transaction() as conn:
                prepared = await self._prepare(conn, table, values, who, creating=False)
                row = await rec.update_record(conn, table=table, record_id=record_id, row=prepared)
            if row is None:
                raise StepFailure(f"record {record_id} not found in table {table.name!r}")
            # a record updating itself would loop; its own pipeline is this one
            same = table.id == inp.table.id and record_id == extra["record_id"]
            return row["id"], [] if same else _children(_child(table, [row["id"]], "edit", list(values)))
        if kind == "delete_record":
            table = self._target(schema, config, who, Action.DELETE)
            record_id = self._record_id(config)
            # relation cells pointing at it are cleared (ON DELETE SET NULL): those records
            # run what reads them, as an update of the relation would
            relations = rec.relations_to(
                schema, table, lambda t, c: bool(plan_steps(t, mode="edit", changed=[c.name])))
            unlinked: list[rec.Unlinked] = []
            async with self.db.transaction() as conn:
                if relations:
                    unlinked = await rec.linked_records(conn, relations=relations, record_id=record_id)
                row = await rec.delete_record(conn, table=table, record_id=record_id)
            if row is None:
                raise StepFailure(f"record {record_id} not found in table {table.name!r}")
            return row["id"], _children(*(_child(u.table, u.record_ids, "edit", list(u.columns))
                                          for u in unlinked))
        if kind == "fetch_records":
            table = self._target(schema, config, who, Action.READ)
            parsed = parse_filters(config.get("filters") or {})  # either form (checked when the column is written)
            limit = config.get("limit", 10)
            # checked when the column is written too (storage.pipelines.check_config)
            if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= FETCH_MAX:
                raise StepFailure(f"fetch_records limit must be between 1 and {FETCH_MAX}")
            query = Query(filters=parsed, limit=limit)
            plan = plan_query(
                query, table,
                can_read=who.can_read,
                get_table=schema.tables.get,
            )
            async with self.db.connection() as conn:
                records, _ = await list_records(conn, plan, count=False)
            return [{"id": r["id"], **r["fields"]} for r in records], []
        raise StepFailure(f"{kind} is not a record step")
