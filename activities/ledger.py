"""Per-record bookkeeping of a pipeline run, shared by the workflow and the fused
pure-pipeline activity: computed values, step errors, steps used against the plan's step
budget, and columns blocked because something they depend on failed.

Pure and deterministic (no I/O, no clock): safe inside workflow code.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from activities.types import ColumnSnap, PipelineInput, PipelineResult, RecordOutcome
from storage.schema import UNSTORABLE_TEXT, storable, value_fits

BUDGET_EXCEEDED = "budget_exceeded"
SKIPPED = "skipped: a column it depends on failed"
VALUE_TYPE_MISMATCH = "VALUE_TYPE_MISMATCH"

# What the workflow hands a step (and what ``load_records`` hands the workflow) travels as
# one Temporal payload, which Temporal refuses over its 2 MiB blob-size limit
# ("[TMPRL1103]", the workflow task failing again and again: the run hung until its
# budget). The records' fields of one step input, or of one load, are kept within this
# as Temporal's JSON encodes them (non-ASCII escaped: up to 6 bytes a character), the
# rest of the payload (the table's snapshot, the caller) in what is left. The same
# figure as a step's results (activities/proxy.py STEP_RESULT_MAX_BYTES).
STEP_INPUT_MAX_BYTES = 1536 * 1024
# What a run carries through its Temporal history: every load, every remote step's input
# and every step's result is recorded there, and Temporal bounds both what one workflow
# task may upload (one gRPC request: 4 MiB, past which the server terminates the workflow,
# reason "GrpcMessageTooLarge") and a history's total (50 MiB by default, 10 MiB warns).
# A pipeline run keeps what one of its workflow tasks uploads within TASK_MAX_BYTES (it
# waits for a new task when the next load or step would pass it), and what it records in
# all within RUN_HISTORY_MAX_BYTES: a step that would pass it does not run, and its
# records fail naming the limit (workflows/pipeline.py). Runs are planned so that this
# does not happen: a batch's or a bulk run's records go in runs whose estimated reads
# (:func:`row_cost`) stay within RUN_PLAN_BYTES (api/services/pipelines.py,
# workflows/bulk.py); results are not known in advance, hence the room between the two.
TASK_MAX_BYTES = 3 * 1024 * 1024
RUN_HISTORY_MAX_BYTES = 32 * 1024 * 1024
RUN_PLAN_BYTES = 8 * 1024 * 1024
# steps whose input is recorded in the history (scheduled as activities; the others are
# local activities, whose result alone is recorded)
REMOTE_STEP_KINDS = frozenset({"http_request", "action", "ai_agent"})
# load_records' result beside the records: the ids left for the next load, and the
# fields of a record that could not be loaded even alone (name → bytes as JSON)
MORE_KEY = "_more"
UNLOADED_KEY = "_unloaded"


def size_text(n: int) -> str:
    """A byte count as people read it.

    >>> size_text(1536 * 1024), size_text(2 * 1024 * 1024), size_text(704 * 1024 + 2), size_text(10)
    ('1.5 MiB', '2 MiB', '704 KiB', '1 KiB')
    """
    if n >= 1024 * 1024:
        return f"{n / (1024 * 1024):.1f}".removesuffix(".0") + " MiB"
    return f"{max(1, round(n / 1024))} KiB"


def input_too_large(size: int) -> str:
    """A record's error for a step its fields cannot be handed to."""
    return (f"input too large: the fields this step reads of this record take {size_text(size)} as JSON;"
            f" a step is handed at most {size_text(STEP_INPUT_MAX_BYTES)} of a record, so it did not run")


def run_history_full(carried: int) -> str:
    """A record's error for a step not run because its run's history is full."""
    return (f"not run: this run already carries {size_text(carried)} of loads and step inputs and results"
            f" through its Temporal history, and a run carries at most {size_text(RUN_HISTORY_MAX_BYTES)};"
            " run this record alone or in a smaller batch")


def row_cost(sizes: dict[str, int], columns: list[ColumnSnap], levels: list[list[int]]) -> int:
    """What a run's history carries for one record whose fields take ``sizes`` (name →
    bytes as JSON), before any step returns: its load (the fields the run's steps read)
    and each remote step's input (the fields that step reads). A loop counts once."""
    run = run_columns(columns, levels)

    def read(col: ColumnSnap) -> int:
        if col.reads is None:
            return sum(sizes.values())
        return sum(sizes.get(name, 0) for name in col.reads)

    names = run_reads(run)
    load = sum(sizes.values()) if names is None else sum(sizes.get(n, 0) for n in names)
    remote = sum(read(c) for c in run if remote_step(c.type, c.config))
    return load + remote


def run_columns(columns: list[ColumnSnap], levels: list[list[int]]) -> list[ColumnSnap]:
    """The columns a run of ``levels`` computes (a broken one computes nothing)."""
    cols = {c.id: c for c in columns}
    return [cols[cid] for level in levels for cid in level if cid in cols and not cols[cid].broken]


def run_reads(run: list[ColumnSnap]) -> set[str] | None:
    """The fields any step of ``run`` reads (``None``: every field, a step may read any)."""
    if any(c.reads is None for c in run):
        return None
    return {n for c in run for n in c.reads or ()}


def remote_step(kind: str, config: dict[str, Any]) -> bool:
    """Whether a column's step input is recorded in its run's history: an HTTP, action or
    AI step, or a loop of one."""
    return kind in REMOTE_STEP_KINDS or (kind == "loop" and (config.get("step") or {}).get("type") in REMOTE_STEP_KINDS)


def runs_by_bytes(costs: list[tuple[int, int]], max_rows: int, max_bytes: int = RUN_PLAN_BYTES) -> list[list[int]]:
    """``costs`` ((record id, :func:`row_cost`) in order) in runs of at most ``max_rows``
    records whose costs total at most ``max_bytes``; a record over it alone runs alone.

    >>> runs_by_bytes([(1, 5), (2, 5), (3, 1), (4, 20), (5, 1)], max_rows=10, max_bytes=10)
    [[1, 2], [3], [4], [5]]
    """
    out: list[list[int]] = []
    current: list[int] = []
    used = 0
    for rid, cost in costs:
        if current and (used + cost > max_bytes or len(current) >= max_rows):
            out.append(current)
            current, used = [], 0
        current.append(rid)
        used += cost
    if current:
        out.append(current)
    return out


def outcome(run_id: str, errors: dict[str, str]) -> dict[str, Any]:
    """A record's pipeline outcome as stored in ``_pipeline`` and shown as its ``pipeline``."""
    return {"status": "error" if errors else "ok", "run_id": run_id, "errors": errors}


class Ledger:
    def __init__(self, inp: PipelineInput, record_ids: list[str]) -> None:
        self.inp = inp
        self.names = {c.id: c.name for c in inp.table.columns}
        self.types = {c.id: c.value_type for c in inp.table.columns}
        self.values: dict[str, dict[int, Any]] = {r: {} for r in record_ids}
        self.errors: dict[str, dict[str, str]] = {r: {} for r in record_ids}
        self.steps: dict[str, int] = {r: 0 for r in record_ids}
        self.blocked: dict[str, set[int]] = {r: set() for r in record_ids}

    def rekey(self, keys: dict[str, str]) -> None:
        """Rename records (``keys``: old id → new id, every record named once), keeping
        their order: a create computed under provisional ids before its ids existed."""
        self.values = {keys[r]: v for r, v in self.values.items()}
        self.errors = {keys[r]: v for r, v in self.errors.items()}
        self.steps = {keys[r]: v for r, v in self.steps.items()}
        self.blocked = {keys[r]: v for r, v in self.blocked.items()}

    def due(self, fields: dict[str, dict[str, Any]]) -> Iterator[tuple[ColumnSnap, list[str]]]:
        """The pipeline's columns level by level, each with the records it is due for (a
        record that failed an input is skipped). A *broken* column (one it read was deleted
        with ``force``) is answered here: null and the reason, and not yielded."""
        cols = {c.id: c for c in self.inp.table.columns}
        for level in self.inp.levels:
            for cid in level:
                col = cols.get(cid)
                if col is None:
                    continue
                rids = self.eligible(cid)
                if not rids:
                    continue
                if col.broken:
                    for r in rids:
                        self.record(r, cid, None, fields)
                        self.fail(r, cid, col.broken)
                    continue
                yield col, rids

    def _dependants(self, cid: int) -> list[int]:
        return list(self.inp.dependants.get(str(cid), []))

    def fail(self, rid: str, cid: int, message: str) -> None:
        """Record a step error for ``rid`` and block every column that reads ``cid``. The
        cell is written null: an edit's run must not leave the value computed from the
        record's earlier inputs in place, as if it were this run's (a create's is null too)."""
        self.errors[rid][self.names[cid]] = message
        self.values[rid][cid] = None
        self.blocked[rid].update(self._dependants(cid))

    def exceed(self, rid: str, cid: int) -> None:
        self.fail(rid, cid, BUDGET_EXCEEDED)

    def eligible(self, cid: int, *, over_time: bool = False, cost: int = 1) -> list[str]:
        """Records that may run column ``cid`` now (charging ``cost`` steps); the others
        get their error (skipped, or over budget) here."""
        name = self.names[cid]
        out = []
        for rid in self.values:
            if cid in self.blocked[rid]:
                self.errors[rid].setdefault(name, SKIPPED)
                self.values[rid][cid] = None  # skipped: no value from inputs that failed
                continue
            if over_time or self.steps[rid] + cost > self.inp.step_budget:
                self.exceed(rid, cid)
                continue
            self.steps[rid] += cost
            out.append(rid)
        return out

    def record(self, rid: str, cid: int, value: Any, fields: dict[str, dict[str, Any]]) -> None:
        """A computed value: kept for the write and visible to the steps that follow. A
        value not of the column's value type is kept too (the cell is jsonb) and is the
        record's error for this column: sorts and filters read it as blank (issue 24)."""
        self.apply(cid, [rid], {rid: value}, {}, fields)

    def apply(self, cid: int, rids: list[str], values: dict[str, Any], errors: dict[str, str],
              fields: dict[str, dict[str, Any]]) -> None:
        """A column's outcome over ``rids``: each record's error (:meth:`fail`), or its
        value (:meth:`record`); a record in neither is left as it is."""
        name, value_type, kept = self.names[cid], self.types.get(cid), self.values
        for rid in rids:
            if rid in errors:
                self.fail(rid, cid, errors[rid])
            elif rid in values:
                value = values[rid]
                if not storable(value):  # a NUL or a lone surrogate: this record's error, not the write's
                    self.fail(rid, cid, UNSTORABLE_TEXT)
                    continue
                kept[rid][cid] = value
                fields[rid][name] = value
                if not value_fits(value_type, value):
                    self.errors[rid][name] = (
                        f"{VALUE_TYPE_MISMATCH}: the value is not a {value_type} (the column's result_type);"
                        " it is kept, but sorts and filters read it as blank")

    def result(self, run_id: str, *, json_keys: bool = True) -> tuple[PipelineResult, list[dict[str, Any]]]:
        """The run's result and the row updates to write (values and outcome per record).

        ``json_keys``: values keyed by column id as text (they cross Temporal's converter);
        otherwise the ledger's own dicts keyed by column id (written in the same process).
        """
        result = PipelineResult(run_id=run_id, status="ok")
        updates = []
        for rid, values in self.values.items():
            errors = self.errors[rid]
            status = "error" if errors else "ok"
            if errors:
                result.records[rid] = RecordOutcome(status=status, errors=errors)
                result.status = "error"
            else:
                result.ok.append(rid)
            updates.append({
                "id": int(rid),
                "values": {str(k): v for k, v in values.items()} if json_keys else values,
                "outcome": outcome(run_id, errors),
            })
        return result, updates
