"""Inputs and outputs of the pipeline workflow and its activities.

Plain dataclasses of JSON-able values only: workflows import this module (and activity
names) and nothing else of ours. Fields added later get defaults.

No ``from __future__ import annotations`` here: Temporal's converter resolves a
dataclass's type hints on every decode, and string annotations made it evaluate them
anew each time (half the cost of decoding a pipeline's input, ~0.6 ms per decode).
"""

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ColumnSnap:
    """A column as it was when the write happened (what the steps run against)."""

    id: int
    name: str
    type: str
    config: dict[str, Any] = field(default_factory=dict)
    formula: str | None = None
    options: list[dict[str, str]] = field(default_factory=list)
    relation_table_id: int | None = None
    required: bool = False
    position: int = 0
    # why the column cannot compute (a column it read was deleted with force): every
    # record gets this as its error and a null value
    broken: str | None = None
    # computed columns: the value type results must have (storage/schema.py value_fits)
    value_type: str | None = None
    # a digest of the stored definition (storage.schema.definition_of): the write-back
    # stores the run's values only while it is still the column's (storage/guards.py)
    definition: str = ""
    # computed columns: the fields of its record a step of this column reads
    # (storage.refs.fields_read); None: any of them (and snapshots taken before this)
    reads: list[str] | None = None


@dataclass
class TableSnap:
    id: int
    workspace_id: int
    name: str
    columns: list[ColumnSnap]


@dataclass
class Caller:
    """Whose rights record steps use: the writer's, as a direct write would have them
    (``activities.snap.principal_of``). The fields after ``grants`` came later (session
    24): an input recorded before them decodes with their defaults, which grant less."""

    token_id: int
    token_type: str
    plan: str
    grants: dict[str, list[bool]] = field(default_factory=dict)  # table id → [r, c, u, d]
    buckets: dict[str, list[bool]] = field(default_factory=dict)  # bucket id → [read, write, all_paths]
    app_user_id: int | None = None  # an app user's row in the Users table (its own-row rules)
    users_table_id: int | None = None


@dataclass
class RecordOutcome:
    status: str  # "ok" | "error"
    errors: dict[str, str] = field(default_factory=dict)


@dataclass
class PipelineResult:
    """Kept small on purpose (it crosses Temporal's converter and history): the records
    that failed with their errors, the ids of those that succeeded. Computed values are
    written to the database by the run and read from there."""

    run_id: str
    status: str  # "ok" | "error"
    records: dict[str, RecordOutcome] = field(default_factory=dict)  # failed records only
    ok: list[str] = field(default_factory=list)  # ids of records whose every step succeeded


@dataclass
class PipelineInput:
    table: TableSnap
    record_ids: list[int]
    mode: str  # "create" | "edit"
    levels: list[list[int]]  # computed column ids, level by level
    caller: Caller
    time_budget_s: float
    step_budget: int
    depth: int = 0
    write: bool = True
    # column id → ids of the computed columns that read it, transitively (skipped on failure)
    dependants: dict[str, list[int]] = field(default_factory=dict)
    outbox_id: int | None = None  # the outbox row this run was committed with
    # the bulk run (run-actions, schedule, backfill) this chunk belongs to: its writes stop
    # once that run is superseded by a newer backfill (storage.records.write_computed)
    bulk_run_id: str | None = None
    # a create that computed its columns before its INSERT (api/services/pipelines.py
    # ``create_computed``): the run's result as stored; the workflow records it and ends
    recorded: PipelineResult | None = None


@dataclass
class LoadInput:
    table: TableSnap
    record_ids: list[int]
    # the run's computed columns (PipelineInput.levels): with them, the result also holds
    # the write-back guard under "_guards" (storage/guards.py stamp)
    levels: list[list[int]] | None = None
    # the fields to load (every one when None; "id" always)
    fields: list[str] | None = None
    # load at most this many bytes of fields (as Temporal's JSON encodes them): the records
    # after go under "_more" for the next load, and the fields of a record that cannot fit
    # even alone under "_unloaded" (activities.ledger.load_page); None: no limit
    max_bytes: int | None = None


@dataclass
class StepInput:
    """One computed column over many records."""

    table: TableSnap
    column_id: int
    records: dict[str, dict[str, Any]]  # record id → fields by column name (API values, select labels)
    now: str  # workflow time, ISO-8601
    caller: Caller
    step_key: str = ""  # workflow id + column: the idempotency key base for side effects
    depth: int = 0
    override: dict[str, Any] | None = None  # loop: the sub-step's {type, config}
    items: dict[str, Any] | None = None  # loop: record id → the current item
    # a formula/parser step: the most its values may take as JSON in this call (its share
    # of a workflow task's upload, workflows/pipeline.py); the records past it are listed
    # in StepResult.over, to run again with the whole STEP_RESULT_MAX_BYTES. None: all of it
    max_result_bytes: int | None = None


@dataclass
class StepResult:
    values: dict[str, Any] = field(default_factory=dict)  # record id → value
    errors: dict[str, str] = field(default_factory=dict)  # record id → message
    children: list[dict[str, Any]] = field(default_factory=list)  # pipelines to run for written records
    over: list[str] = field(default_factory=list)  # records past StepInput.max_result_bytes, not run here

    def absorb(self, other: "StepResult") -> None:
        """Take in what another run of the same step gave (a sub-batch, a re-run)."""
        self.values.update(other.values)
        self.errors.update(other.errors)
        self.children.extend(other.children)


@dataclass
class WriteInput:
    table: TableSnap
    updates: list[dict[str, Any]]  # {id, values: {column id: value}, outcome}
    bulk_run_id: str | None = None  # as PipelineInput.bulk_run_id
    guard: dict[str, Any] | None = None  # what the values were computed from (storage/guards.py)


@dataclass
class BulkInput:
    """run-actions and schedules: every matching record, chunk by chunk."""

    run_id: str
    table: TableSnap
    caller: Caller
    levels: list[list[int]]
    dependants: dict[str, list[int]]
    record_ids: list[int] | None = None  # explicit ids, or None to page through filters
    filters: list[dict[str, Any]] = field(default_factory=list)  # [{column, op, value}]
    mode: str = "edit"
    time_budget_s: float = 10.0
    step_budget: int = 25
    chunk: int = 200
    concurrency: int = 4
    retries: int = 1  # passes over the rows that failed, before they count as failed
    # chunks one workflow run starts before it continues as new (its history bounded):
    # WDS_BULK_CHUNKS_PER_RUN, read where the run is planned (activities.bulkplan)
    chunks_per_run: int = 500
    # where a continued run goes on from, and what the runs before it counted
    # (workflows/bulk.py BulkRunWorkflow._continue); None for the first run
    resume: dict[str, Any] | None = None


@dataclass
class PageInput:
    table: TableSnap
    filters: list[dict[str, Any]]
    after_id: int
    limit: int


@dataclass
class CostInput:
    """``record_costs``: what a run of ``levels`` would carry per record (bytes as JSON)."""

    table: TableSnap
    levels: list[list[int]]
    record_ids: list[int]


@dataclass
class ProgressInput:
    run_id: str
    done: int
    failed: int
    status: str | None = None
    errors: dict[str, Any] = field(default_factory=dict)


@dataclass
class FusedInput:
    """A pipeline of formula/parser columns only, run as one local activity."""

    pipeline: PipelineInput
    run_id: str
    now: str  # workflow time at the start of the run, ISO-8601


@dataclass
class ScheduledRunInput:
    """What a schedule's every firing starts with (no secrets: ids, filters, grants)."""

    workspace_id: int
    table_id: int
    schedule_id: int
    caller: Caller
    filters: list[dict[str, Any]] = field(default_factory=list)
    column_ids: list[int] | None = None


@dataclass
class PrepareInput:
    run: ScheduledRunInput
    workflow_id: str


@dataclass
class Prepared:
    # the BulkInput as plain JSON: the workflow only hands it on to the bulk child, which
    # decodes it as its own input (an optional nested dataclass does not decode in the
    # workflow sandbox)
    bulk: dict[str, Any] | None = None
    skipped: str = ""  # why nothing runs (table or schedule gone, filters now invalid)
