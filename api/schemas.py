"""Request and response models of the REST API (they make ``/openapi.json``).

Request models check shapes; the domain rules (types, options, relations, formulas)
are checked by ``storage`` so that REST, MCP and the SDK share them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Strict = ConfigDict(extra="forbid")


class ErrorOut(BaseModel):
    error: str
    code: str
    upgrade: bool | None = None


class OptionIn(BaseModel):
    model_config = Strict
    id: str | None = None
    label: str
    color: str | None = None


class OptionOut(BaseModel):
    id: str
    label: str
    color: str


class ColumnIn(BaseModel):
    """A column definition; ``column_type`` is accepted as an alias of ``type``."""

    model_config = Strict
    name: str | None = None
    type: str | None = None
    column_type: str | None = None
    required: bool | None = None
    options: list[OptionIn | str] | None = None
    formula: str | None = None
    config: dict[str, Any] | None = None
    relation_table_id: int | None = None
    relation_source_column_id: int | None = None
    position: int | None = None
    backfill: bool | None = Field(
        default=None,
        description="POST/PATCH of a column: recompute existing rows. Formula, json_parser and fetch_records"
        " columns (and their dependants) are recomputed by default; kinds with side effects (http_request,"
        " action, ai_agent, record steps, loop, delay) only with true; false recomputes nothing.",
    )


class BackfillOut(BaseModel):
    """The bulk run recomputing existing rows after a column change (``GET {rest}/runs/{run_id}``)."""

    run_id: str | None
    total: int
    status: str  # running | not_started
    workflow_id: str | None = None
    error: str | None = None
    code: str | None = None


class ColumnOut(BaseModel):
    id: int
    table_id: int
    name: str
    type: str
    required: bool
    options: list[OptionOut]
    position: int
    computed: bool
    formula: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    relation_table: int | None = None
    relation_label_column: int | None = None
    status: str | None = Field(
        default=None, description='computed columns: "ok", or "error" when a column it read was deleted with force'
    )
    status_reason: str | None = None
    result_type: str | None = Field(
        default=None,
        description='computed columns: the value type, "number", "text", "date", "boolean" or "json" (declared with'
        ' config.result_type, else inferred); a scalar type is indexed, sorted and filtered like a data column',
    )
    backfill: BackfillOut | None = None  # column create/update only


class ColumnPatch(ColumnIn):
    """A column change; ``allow_loss`` lets a change drop values it cannot convert."""

    allow_loss: bool | None = None


class ConversionOut(BaseModel):
    """What a type change (or an option removal) did to the stored values."""

    converted: int = Field(description="non-empty values carried into the new type")
    lost: int = Field(description="values dropped (non-zero only with allow_loss)")


# the error answers every REST route may give, for OpenAPI (413: body too large; 503: database unreachable)
ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorOut} for s in (400, 401, 402, 403, 404, 409, 413, 429, 503)
}


class LossyChangeOut(ErrorOut):
    """409: ``CONFLICT`` (a name taken) or ``LOSSY_CHANGE`` with how many records would
    lose a value and the first 10 of their ids."""

    count: int | None = None
    record_ids: list[int] | None = None


EMBEDDINGS_RUN = ("the embeddings backfill this change started: the records' embedded text changed without a"
                  " write (a converted or relabelled column, a rename when several columns are embedded, a"
                  " forced delete of one of several): {run_id, status, total, done, failed, workflow_id}, progress"
                  " at GET /runs/{run_id}; absent when none was started")


class ColumnPatchOut(ColumnOut):
    conversion: ConversionOut | None = None
    embeddings: dict[str, Any] | None = Field(default=None, description=EMBEDDINGS_RUN)


class SemanticIn(BaseModel):
    model_config = Strict
    columns: list[str]


class TableIn(BaseModel):
    model_config = Strict
    name: str
    icon: str | None = None
    columns: list[ColumnIn] = Field(default_factory=list)
    semantic_search: SemanticIn | None = None


class TablePatch(BaseModel):
    model_config = Strict
    name: str | None = None
    icon: str | None = None
    semantic_search: SemanticIn | None = None


class TableSummary(BaseModel):
    id: int
    name: str
    icon: str | None
    created_at: str
    updated_at: str


class TableOut(TableSummary):
    columns: list[ColumnOut]
    semantic_search: dict[str, Any] | None = None
    backfill: dict[str, Any] | None = Field(
        None,
        description="PATCH with semantic_search only: the run embedding the existing records"
        " {run_id, status, total, done, failed, workflow_id} (progress at GET {rest}/runs/{run_id});"
        " null when there is nothing to embed, absent otherwise",
    )


class Deleted(BaseModel):
    id: int | str
    deleted: Literal[True] = True
    detached: list[dict[str, Any]] | None = Field(
        default=None, description="forced deletes: the dependents that were loosened or marked broken"
    )
    backfill: dict[str, Any] | None = Field(
        default=None, description="forced column deletes: the backfill recomputing the computed columns that read"
        " the ones marked broken (their values came from the cleared ones), as a column edit's `backfill`",
    )
    backfills: list[dict[str, Any]] | None = Field(
        default=None, description="forced table deletes: the same, one per table whose columns were marked broken",
    )
    embeddings: dict[str, Any] | None = Field(default=None, description="forced column deletes: " + EMBEDDINGS_RUN)


class PipelineOut(BaseModel):
    status: str
    run_id: str | None = None
    errors: dict[str, str] = Field(default_factory=dict)


class RecordOut(BaseModel):
    id: int
    fields: dict[str, Any]
    created_at: str
    updated_at: str
    pipeline: PipelineOut | None = None


class RecordList(BaseModel):
    records: list[RecordOut]
    limit: int
    offset: int
    next: str | None = Field(None, description="cursor continuing after this page's last record"
                                                " (pass it as `after`); null on the last page")


class RecordIn(BaseModel):
    """``fields`` (or its alias ``row_data``) keyed by column name."""

    model_config = Strict
    fields: dict[str, Any] | None = None
    row_data: dict[str, Any] | None = None


class BatchIn(BaseModel):
    model_config = Strict
    rows: list[dict[str, Any]]
    run_pipeline: bool = True


class BatchResult(BaseModel):
    index: int
    record: RecordOut | None = None
    error: str | None = None
    code: str | None = None


class BatchOut(BaseModel):
    results: list[BatchResult]
    pipeline: PipelineOut | None = None


# Request models the MCP builder tools also validate their arguments with (same messages).


class RunIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["edit", "create"] = "edit"
    changed_columns: list[str] = Field(default_factory=list)


# an id in a body: a JSON integer of 1 or more (not true, not "1", which lax parsing took)
BodyId = Annotated[int, Field(strict=True, ge=1)]


class RunActionsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    record_ids: list[BodyId] | None = None
    filters: list[dict[str, Any]] | dict[str, Any] | None = None
    column_ids: list[BodyId] | None = None


class ViewIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    view_type: str = Field(description="grid, kanban, gallery, calendar, timeline, form or custom")
    config: dict[str, Any] = Field(default_factory=dict, description="per view type; see the views guide")


class ViewPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    view_type: str | None = None
    config: dict[str, Any] | None = Field(None, description="replaces the whole config")
