"""Local activities that load a batch's records and write its computed values back."""

from __future__ import annotations

import dataclasses
import time
from datetime import datetime
from typing import Any

import psycopg
from temporalio import activity
from temporalio.converter import PayloadConverter
from temporalio.exceptions import ApplicationError

from activities import formula, json_parser, written
from activities.ledger import MORE_KEY, UNLOADED_KEY, Ledger
from activities.metrics import STALE_VALUES, observe_step
from activities.sandbox import SandboxLost, lost_message, sandbox
from activities.snap import step_decoder, table_meta, table_snap
from activities.types import FusedInput, LoadInput, PipelineInput, PipelineResult, TableSnap, WriteInput
from storage import guards, meta
from storage import records as rec
from storage.db import Database
from storage.errors import is_schema_race
from storage.schema import ColumnType, TableMeta


def _stale_read(exc: psycopg.Error) -> bool:
    """Whether a read of rows by a run's table snapshot failed because the table changed
    since the snapshot was taken: a column it names deleted, or converted to a type the
    read's casts and functions no longer apply to (a function or cast of the old type, or
    a stored value that is no longer text of the old type: class 22)."""
    return is_schema_race(exc) or isinstance(exc, psycopg.DataError)


class _StaleCheck(Exception):
    """The write-back's check could not read a row by the run's snapshot: a column was
    converted since, and a value it now stores is no text of the old type (class 22, which
    would otherwise read as values the database refuses)."""


GUARDS_KEY = "_guards"  # load_records' result: the write-back guard beside the records
_PAYLOADS = PayloadConverter.default  # the bytes the worker's converter writes (service/converter.py: the same)
RETRIES = 2  # records a write-back left values of out, evaluated again (see pure_pipeline)
# the stored bytes a fused run reads out at once (activities.formula.RUN_VALUE_BYTES bounds
# what it computes): a chunk of larger records is loaded, evaluated and written in parts
PURE_LOAD_BYTES = 32 * 1024 * 1024


async def table_now(db: Database, snap: TableSnap) -> TableMeta:
    """The table of ``snap`` as the schema has it now.

    Raises:
        ApplicationError: the table itself is gone (non-retryable).
    """
    async with db.connection() as conn:
        now = (await meta.load_schema(conn, workspace_id=snap.workspace_id)).tables.get(snap.id)
    if now is None:
        raise ApplicationError("the table was deleted while the run went on", type="TABLE_GONE",
                               non_retryable=True)
    return now


class RecordIO:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def _load(self, inp: LoadInput, run_id: str = "") -> tuple[dict[str, dict[str, Any]], dict[int, dict[str, Any]]]:
        """(record id → fields by column name, record id → the row as stored).

        The rows come from the write that started run ``run_id`` when it waits in this
        process and handed them over (:func:`activities.written.given_rows`: the rows it
        committed, every one of them), else from the database.
        """
        table = table_meta(inp.table)
        given = written.given_rows(run_id) if run_id else None
        by_id = {row["id"]: row for row in given} if given is not None else {}
        if given is not None and all(rid in by_id for rid in inp.record_ids):
            rows = [by_id[rid] for rid in inp.record_ids]
        else:
            table, rows = await self._read(inp.table, inp.record_ids)
        return decode_rows(table, rows), {row["id"]: row for row in rows}

    async def _read(self, snap: TableSnap, record_ids: list[int]) -> tuple[TableMeta, list[dict[str, Any]]]:
        """The rows of ``record_ids`` read as stored now (:meth:`_reading`), and the table
        they were read by."""
        async def read(table: TableMeta) -> list[dict[str, Any]]:
            async with self.db.connection() as conn:
                return await rec.get_record_rows(conn, table=table, record_ids=record_ids)
        return await self._reading(snap, read)

    async def _reading(self, snap: TableSnap, read: Any) -> tuple[TableMeta, Any]:
        """``read(table)`` by ``snap``'s table as its rows are stored now: by
        :meth:`_as_stored` when a column it names was deleted or converted since the
        snapshot was taken. A read composed from a stale type would fail (a function or
        cast of the old type), or worse, succeed: a converted boolean read as the text
        ``'true'``, a number converted to text read back as a number. The column types are
        checked first (one small statement); a conversion committing between the check and
        the read fails the read, which is then made again as stored."""
        async with self.db.connection() as conn:
            changed = await meta.changed_columns(conn, table_id=snap.id, types={c.id: c.type for c in snap.columns})
        if changed:
            snap = await self._as_stored(snap)
        table = table_meta(snap)
        try:
            return table, await read(table)
        except psycopg.Error as exc:
            if not _stale_read(exc):
                raise
            table = table_meta(await self._as_stored(snap))
            return table, await read(table)

    async def _now(self, snap: TableSnap) -> TableMeta:
        return await table_now(self.db, snap)

    async def _current(self, snap: TableSnap) -> TableSnap:
        """The table's snapshot as it is now (its definitions after a schema change)."""
        return table_snap(await self._now(snap))

    async def _redefined(self, p: PipelineInput) -> PipelineInput:
        """``p`` with the table's definitions now, its levels without the columns no longer
        computed (deleted, or converted to a data type: nothing of the run is theirs now)."""
        now = await self._current(p.table)
        computed = {c.id for c in now.columns if ColumnType(c.type).computed}
        levels = [kept for level in p.levels if (kept := [cid for cid in level if cid in computed])]
        return dataclasses.replace(p, table=now, levels=levels)

    async def _as_stored(self, snap: TableSnap) -> TableSnap:
        """``snap`` as its rows are stored now, to read them: without the columns deleted
        since it was taken, and each column converted meanwhile (``PATCH`` of its type) with
        its type and options now. Names, definitions and everything the run computes with
        stay the snapshot's (a run's table snapshot is taken when the run starts; a schema
        change may commit while it runs; the write-back's guard then decides what lands)."""
        now = {c.id: c for c in (await self._now(snap)).columns}
        return dataclasses.replace(snap, columns=[
            dataclasses.replace(c, type=now[c.id].type.value, options=[o.as_dict() for o in now[c.id].options])
            if now[c.id].type.value != c.type else c
            for c in snap.columns if c.id in now])

    async def _still_there(self, snap: TableSnap) -> TableSnap:
        """``snap`` without the columns deleted since it was taken (a run's table snapshot
        is taken when the run starts; a schema change may commit while it runs)."""
        ids = {c.id for c in (await self._now(snap)).columns}
        return dataclasses.replace(snap, columns=[c for c in snap.columns if c.id in ids])

    @activity.defn(name="load_records")
    async def load_records(self, inp: LoadInput) -> dict[str, dict[str, Any]]:
        """record id → fields by column name (selects as labels), for the steps to read;
        with ``inp.levels``, also ``"_guards"``: what the run's values derive from, as read
        (storage/guards.py; the workflow hands it to ``write_results``)."""
        fields, loaded = await self._load(inp)
        if inp.fields is not None:  # only what the run's steps read
            wanted = {*inp.fields, "id"}
            fields = {rid: {k: v for k, v in f.items() if k in wanted} for rid, f in fields.items()}
        out: dict[str, Any] = fields
        if inp.max_bytes is not None:
            out = load_page(fields, inp.max_bytes)
            loaded = {rid: row for rid, row in loaded.items() if str(rid) in out}
        if inp.levels is not None:
            guard = guards.plan(table_meta(inp.table), [cid for level in inp.levels for cid in level])
            return {**out, GUARDS_KEY: guards.stamp(guard, loaded.values())}
        return out

    @activity.defn(name="pure_pipeline")
    async def pure_pipeline(self, inp: FusedInput) -> PipelineResult:
        """Load the records, evaluate every level of formula/parser columns in order, and
        write the results: a whole pipeline of pure steps in one local activity.

        Records some of whose values did not land (storage/guards.py) are loaded and
        evaluated again, at most :data:`RETRIES` times: those refused because a column's
        definition changed, with the table's current definitions (a backfill may already
        have computed the column from inputs this run then wrote); and, in a backfill,
        those refused because a write changed their inputs (that write's run may have
        used a previous definition, and a backfill must leave every row computed by the
        current one)."""
        p = inp.pipeline
        pending = list(p.record_ids)
        result: PipelineResult | None = None
        while True:
            # the records a part holds at most PURE_LOAD_BYTES between them (the first
            # whatever its size): 200 rows of 5 MB would otherwise be read out at once
            part, pending = await self._load_part(p.table, pending, inp.run_id)
            p, done = await self._pure_part(inp, p, part)
            result = done if result is None else _merged(result, done)
            if not pending:
                return result

    async def _load_part(self, snap: TableSnap, record_ids: list[int], run_id: str,
                         ) -> tuple[tuple[dict[str, dict[str, Any]], dict[int, dict[str, Any]]], list[int]]:
        """:meth:`_load` of the first records of ``record_ids`` that fit in
        :data:`PURE_LOAD_BYTES`, and the ids after them. A run a write of this process
        waits for loads all at once, as before: its rows are in memory already when the
        write handed them over, and the waiter takes the rows of one write-back."""
        if run_id and (written.given_rows(run_id) is not None or written.waiting(run_id)):
            return await self._load(LoadInput(table=snap, record_ids=record_ids), run_id), []
        async def read(table: TableMeta) -> tuple[list[dict[str, Any]], list[int]]:
            async with self.db.connection() as conn:
                return await rec.get_record_rows_within(conn, table=table, record_ids=record_ids,
                                                        max_bytes=PURE_LOAD_BYTES)
        table, (rows, rest) = await self._reading(snap, read)
        return (decode_rows(table, rows), {row["id"]: row for row in rows}), rest

    async def _pure_part(self, inp: FusedInput, p: PipelineInput,
                         part: tuple[dict[str, dict[str, Any]], dict[int, dict[str, Any]]],
                         ) -> tuple[PipelineInput, PipelineResult]:
        """:meth:`pure_pipeline` over one loaded part: the run's input as it ends (the
        table's definitions after a schema change) and the part's result."""
        result: PipelineResult | None = None
        fields, loaded = part
        record_ids: list[int] = []
        for attempt in range(1 + RETRIES):
            guard = guards.plan(table_meta(p.table), [cid for level in p.levels for cid in level])
            if attempt:
                fields, loaded = await self._load(LoadInput(table=p.table, record_ids=record_ids))
            ledger = await evaluate_pure(dataclasses.replace(inp, pipeline=p), fields)
            again, updates = ledger.result(inp.run_id, json_keys=False)
            result = again if result is None else _merged(result, again)
            if not (p.write and updates):
                break
            checked = await self._write(p.table, [(u["id"], u["values"], u["outcome"]) for u in updates], loaded,
                                        bulk_run_id=p.bulk_run_id, guard=guards.stamp(guard, loaded.values()))
            redo = set(checked.redefined)
            if p.bulk_run_id:
                redo |= checked.moved
            if not redo:
                break
            if checked.redefined:  # evaluate again with the definitions the table has now
                p = await self._redefined(p)
            record_ids = sorted(redo)
        assert result is not None
        return p, result

    @activity.defn(name="write_results")
    async def write_results(self, inp: WriteInput) -> int:
        """Write every record's computed values and outcome in one statement (only those
        still derived from what the table holds: ``inp.guard``, storage/guards.py)."""
        updates = [(u["id"], {int(k): v for k, v in u["values"].items()}, u["outcome"]) for u in inp.updates]
        checked = await self._write(inp.table, updates, bulk_run_id=inp.bulk_run_id, guard=inp.guard)
        return len(updates) - len(checked.moved | checked.redefined)

    async def _write(self, snap: TableSnap, updates: list[tuple[int, dict[int, Any], dict[str, Any]]],
                     loaded: dict[int, dict[str, Any]] | None = None, *, bulk_run_id: str | None = None,
                     guard: dict[str, Any] | None = None) -> guards.Checked:
        """Store ``updates``; what the check (``guard``) left out, and why."""
        table = table_meta(snap)
        # an API process of ours waiting for this run gets the written rows straight away
        # (activities/written.py), instead of reading them again after the run completes;
        # with the rows as loaded, they are built here rather than decoded from the database
        run_id = str((updates[0][2] or {}).get("run_id") or "") if updates else ""
        waited = written.waiting(run_id)
        try:
            rows, checked = await self._store(table, updates, waited, loaded, bulk_run_id, guard)
        except psycopg.errors.UndefinedColumn:
            # a column was deleted since the run began: write what still has a column
            snap = await self._still_there(snap)
            ids = {c.id for c in snap.columns}
            updates = [(rid, {k: v for k, v in values.items() if k in ids}, out) for rid, values, out in updates]
            rows, checked = await self._store(table_meta(snap), updates, waited, None, bulk_run_id, guard)
        except (psycopg.Error, _StaleCheck) as exc:
            if guard is None or not (isinstance(exc, _StaleCheck) or is_schema_race(exc)):
                raise
            # a column converted since the run's snapshot: the check locks the rows by the
            # types they are stored with now (storage.guards.as_stored), and still refuses
            # values computed from a converted input
            rows, checked = await self._store(table, updates, waited, loaded, bulk_run_id, guard, stored=True)
        if waited:  # committed
            written.notify(run_id, rows)
        return checked

    async def _store(self, table: TableMeta, updates: list[tuple[int, dict[int, Any], dict[str, Any]]],
                     waited: bool, loaded: dict[int, dict[str, Any]] | None,
                     bulk_run_id: str | None, guard: dict[str, Any] | None,
                     stored: bool = False) -> tuple[list[dict[str, Any]], guards.Checked]:
        """Write ``updates`` in one statement; with ``guard``, in a transaction that first
        locks the rows and keeps only the values still derived from what they hold
        (:func:`storage.guards.check`). Returns the written rows (when ``waited``) and what
        the check kept and left out.

        Raises:
            ApplicationError: values the database refuses (the ledger keeps out what it knows
                of: storage.schema.storable). A retry fails alike; the reason is one line,
                not the server's DETAIL and CONTEXT lines, which quote the parameters.
        """
        try:
            if guard is None:
                async with self.db.connection() as conn:
                    _, rows = await rec.write_computed(conn, table=table, updates=updates, returning=waited,
                                                       loaded=loaded, unless_superseded=bulk_run_id)
                return rows, guards.Checked(updates, {})
            async with self.db.transaction() as conn:
                try:
                    checked = await guards.check(conn, table, updates, guard, stored=stored)
                except psycopg.DataError as exc:  # a stored value the snapshot's type cannot read
                    if stored:
                        raise
                    raise _StaleCheck() from exc
                STALE_VALUES.inc(sum(len(v) for _, v, _ in updates) - sum(len(v) for _, v, _ in checked.kept)
                                 - sum(len(v) for rid, v, _ in updates if rid not in checked.current))
                # the rows as they are now (locked): what the answer is built from
                _, rows = await rec.write_computed(conn, table=table, updates=checked.kept, returning=waited,
                                                   loaded=checked.current, unless_superseded=bulk_run_id)
                return rows, checked
        except psycopg.DataError as exc:
            raise ApplicationError(f"the computed values could not be stored: {exc.diag.message_primary or 'refused'}",
                                   type="UNSTORABLE", non_retryable=True) from None


def _json_size(value: Any) -> int:
    """Bytes of ``value`` as a Temporal payload's data (JSON, non-ASCII escaped)."""
    return len(_PAYLOADS.to_payloads([value])[0].data)


def load_page(fields: dict[str, dict[str, Any]], max_bytes: int) -> dict[str, Any]:
    """``fields`` (record id → fields) within ``max_bytes`` as Temporal's JSON encodes them.

    Records are kept in order while they fit; those after go under ``"_more"`` (their
    ids, for the next load). A record that does not fit even alone starts a page of its
    own and keeps its fields in column order while they fit; the others are listed under
    ``"_unloaded"`` (record id → name → bytes as JSON): a step reading one of them fails
    for that record, naming the limit (workflows/pipeline.py), the others run.
    """
    if _json_size(fields) <= max_bytes:
        return dict(fields)
    out: dict[str, Any] = {}
    more: list[int] = []
    unloaded: dict[str, dict[str, int]] = {}
    used = 2  # {}
    for rid, record in fields.items():
        if more:
            more.append(int(rid))
            continue
        key = _json_size(rid) + 2  # "rid": and a comma
        size = key + _json_size(record)
        if used + size <= max_bytes:
            out[rid] = record
            used += size
            continue
        if out:  # the next load starts with it
            more.append(int(rid))
            continue
        kept: dict[str, Any] = {}
        used += key + 2
        for name, value in sorted(record.items(), key=lambda kv: kv[0] != "id"):  # its id first
            item = _json_size(name) + 2 + _json_size(value)
            if used + item <= max_bytes:
                kept[name] = value
                used += item
            else:
                unloaded.setdefault(rid, {})[name] = item
        out[rid] = kept
    if more:
        out[MORE_KEY] = more
    if unloaded:
        out[UNLOADED_KEY] = unloaded
    return out


def _merged(first: PipelineResult, again: PipelineResult) -> PipelineResult:
    """``first`` with the outcomes of the records evaluated ``again`` replaced."""
    redone = set(again.ok) | set(again.records)
    records = {k: v for k, v in first.records.items() if k not in redone}
    records.update(again.records)
    ok = [r for r in first.ok if r not in redone] + list(again.ok)
    return PipelineResult(run_id=first.run_id, status="error" if records else "ok", records=records, ok=ok)


def decode_rows(table: TableMeta, rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """record id → fields by column name (selects as labels), as the steps read them."""
    decoders = [(c.name, c.physical, step_decoder(c)) for c in table.columns]
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        fields = {name: decode(row.get(physical)) for name, physical, decode in decoders}
        fields["id"] = row["id"]
        out[str(row["id"])] = fields
    return out


async def evaluate_pure(inp: FusedInput, fields: dict[str, dict[str, Any]]) -> Ledger:
    """Every level of formula/parser columns over ``fields``, in order, under the batch's
    budgets (activities/formula.py); formulas run off the event loop unless cheap. Used
    by the fused local activity and by a create that computes its columns before its
    INSERT (api/services/pipelines.py ``create_computed``).

    When a column would go to the sandbox whole (:func:`formula.sandbox_bound`), the
    whole run goes there in ONE round trip (:meth:`Sandbox.pipeline`) instead of one per
    formula column; if that child is lost, those columns fail with the loss (never run
    again) and the others run here as usual."""
    p = inp.pipeline
    cols = {c.id: c for c in p.table.columns}
    now = datetime.fromisoformat(inp.now)
    budget = formula.Budget.for_run(p.time_budget_s)
    lost: str | None = None
    if fields and any(formula.sandbox_bound(cols[cid]) for level in p.levels for cid in level if cid in cols):
        try:
            ledger, timings = await sandbox().pipeline(p, fields, now, budget, workspace=p.table.workspace_id)
        except SandboxLost as exc:
            lost = lost_message(exc)
        else:
            for kind, status, seconds, n in timings:
                observe_step(kind, status, seconds, n)
            return ledger
    ledger = Ledger(p, list(fields))
    for col, rids in ledger.due(fields):
        cid = col.id
        batch = {r: fields[r] for r in rids}
        started = time.perf_counter()
        if lost is not None and formula.sandbox_bound(col):
            values, errors = {}, {r: lost for r in rids}
        elif col.type == "formula":
            values, errors = await formula.evaluate_column(col, batch, now, budget, sandbox(),
                                                           workspace=p.table.workspace_id)
        else:
            values, errors = json_parser.evaluate_batch(col, batch)
        observe_step(col.type, "error" if errors else "ok", time.perf_counter() - started, len(batch))
        ledger.apply(cid, rids, values, errors, fields)
    return ledger
