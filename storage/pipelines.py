"""The computed-column dependency graph of a table (DESIGN §5).

Each computed column's configuration names the columns it reads: ``{Col}`` in formulas,
``{{ Col }}`` or ``{{ fields["Col"] }}`` in Jinja2 templates, and ``source_column`` of
json_parser and loop. Those edges form a DAG per table; a cycle is refused at column
creation or edit. ``plan_steps`` orders the columns to run for a write: mode ``create``
runs every computed column, mode ``edit`` only those depending (transitively) on the
changed columns; ``run_on`` filters by mode. Columns of the same depth are independent
and may run concurrently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from storage import refs
from storage.errors import CircularReference, ServiceError, UnknownColumn, ValidationError
from storage.schema import ColumnMeta, ColumnType, TableMeta, WorkspaceSchema

MODES = ("create", "edit")
# kind → check(column name, config) raising ValidationError; each kind's implementation
# registers its own (activities/http_request.py, action.py, ai_agent.py) so that bad
# configurations are refused at column creation, not at the first run
ConfigCheck = Callable[[str, dict[str, Any]], None]
_CONFIG_CHECKS: dict[str, ConfigCheck] = {}


def register_config_check(kind: str, check: ConfigCheck) -> None:
    """Register the configuration check of a computed kind (called by its module)."""
    _CONFIG_CHECKS[kind] = check


DELAY_MAX_S = 366 * 86400  # a delay step's longest wait (workflows/pipeline.py enforces it at run time too)
FETCH_MAX = 100  # fetch_records' largest limit (activities/records.py MAX_FETCH)

# the config keys each computed kind reads (its implementation in activities/ and
# workflows/pipeline.py; docs/api.md "Computed columns"), and the keys every computed
# column takes. A new or changed config with any other key is refused: a typo
# ("methd") would otherwise be stored and do nothing
CONFIG_KEYS: dict[str, frozenset[str]] = {
    "formula": frozenset({"formula", "language"}),
    "json_parser": frozenset({"source_column", "path"}),
    "http_request": frozenset({"method", "url", "headers", "body", "credential", "timeout_s"}),
    "action": frozenset({"group_id", "request_id", "params", "credential", "timeout_s"}),
    "ai_agent": frozenset({"prompt", "system", "model", "output", "timeout_s"}),
    "create_record": frozenset({"table_id", "fields"}),
    "update_record": frozenset({"table_id", "record_id", "fields"}),
    "delete_record": frozenset({"table_id", "record_id"}),
    "fetch_records": frozenset({"table_id", "filters", "limit"}),
    "loop": frozenset({"source_column", "step"}),
    "delay": frozenset({"seconds"}),
}
COMMON_CONFIG_KEYS = frozenset({"run_on", "depends_on", "result_type"})  # not in a loop's sub-step
LOOP_STEP_KEYS = frozenset({"type", "config"})


def _check_keys(name: str, kind: str, config: dict[str, Any], *, sub_step: bool) -> None:
    """Refuse a config key ``kind`` does not read, naming it and the allowed ones."""
    allowed = CONFIG_KEYS.get(kind)
    if allowed is None:
        return  # an unknown kind is refused by its type check
    if not sub_step:
        allowed = allowed | COMMON_CONFIG_KEYS
    _refuse_unknown(name, "config.step.config" if sub_step else "config", config, allowed, f" for {kind}")


def _refuse_unknown(name: str, where: str, given: dict[str, Any], allowed: frozenset[str], kind: str = "") -> None:
    unknown = sorted(k for k in given if k not in allowed)
    if unknown:
        raise ValidationError(f"{name}: unknown {where} key{'s' if len(unknown) > 1 else ''} "
                              + ", ".join(repr(k) for k in unknown) + f"{kind}; allowed: {', '.join(sorted(allowed))}")


def check_config(
    name: str, kind: str, config: dict[str, Any], *, keys: bool = True, sub_step: bool = False
) -> None:
    """Run the check of ``kind`` (and of a loop's sub-step) over ``config``: the built-in
    ones below, then the one its implementation registered. What a run would refuse for
    every record is refused here, when the column is written.

    ``keys`` (a new or changed config) also refuses keys the kind does not read and a
    delay without ``seconds``; a column stored before those rules is still accepted when
    it is changed without sending its config (a rename), and runs as it always did.

    Raises:
        ValidationError: the configuration is refused.
    """
    if keys:
        _check_keys(name, kind, config, sub_step=sub_step)
    if kind == "loop":
        step = config.get("step")
        if keys and step is not None:
            if not isinstance(step, dict) or not isinstance(step.get("type"), str):
                raise ValidationError(f"{name}: config.step must be {{type, config}}")
            _refuse_unknown(name, "config.step", step, LOOP_STEP_KEYS)
        if isinstance(step, dict) and isinstance(step.get("type"), str):
            if step["type"] in ("loop", "delay"):
                raise ValidationError(f"{name}: a loop's step may be any kind but loop or delay")
            sub = step.get("config") or {}
            if not isinstance(sub, dict):
                raise ValidationError(f"{name}: config.step.config must be an object")
            check_config(name, step["type"], sub, keys=keys, sub_step=True)
        return
    if kind == "delay":
        if keys and "seconds" not in config:
            raise ValidationError(f"{name}: delay needs config.seconds, a number between 0 and {DELAY_MAX_S:,}")
        seconds = config.get("seconds", 0)
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds <= DELAY_MAX_S:
            raise ValidationError(f"{name}: delay needs config.seconds, a number between 0 and {DELAY_MAX_S:,}")
    if kind == "fetch_records":
        limit = config.get("limit", 10)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= FETCH_MAX:
            raise ValidationError(f"{name}: fetch_records config.limit must be a whole number between 1 and {FETCH_MAX}")
        filters = config.get("filters") or {}
        if not (isinstance(filters, dict) or (isinstance(filters, list) and all(isinstance(f, dict) for f in filters))):
            raise ValidationError(f"{name}: fetch_records config.filters must be an object {{column: 'op.value'}}"
                                  " or a list of {column, op, value}")
    check = _CONFIG_CHECKS.get(kind)
    if check is not None:
        check(name, config)


class ColumnLike(Protocol):
    name: str
    type: ColumnType
    config: dict[str, Any]
    formula: str | None


def references(col: ColumnLike) -> set[str]:
    """Names of the same-table columns a computed column reads (name-form config)."""
    if not col.type.computed:
        return set()
    return refs.names_read(col.type.value, col.formula, col.config or {})


@dataclass(frozen=True)
class Graph:
    """A table's computed-column dependency graph, by column id.

    ``reads[c]``: the columns computed column ``c`` reads directly; ``readers[x]``: the
    computed columns reading ``x`` directly. Built once per version of the table
    (memoised on the :class:`TableMeta`, which a schema change replaces).
    """

    reads: dict[int, frozenset[int]]
    readers: dict[int, frozenset[int]]

    def dependants(self, ids: Iterable[int]) -> set[int]:
        """Computed columns reading any of ``ids``, transitively (linear in the edges)."""
        out: set[int] = set()
        stack = list(ids)
        while stack:
            for reader in self.readers.get(stack.pop(), ()):
                if reader not in out:
                    out.add(reader)
                    stack.append(reader)
        return out


def _reads(table: TableMeta, col: ColumnMeta) -> frozenset[int]:
    if col.refs:
        return col.refs
    by_name = {c.name: c.id for c in table.columns}
    try:
        names = references(col)
    except ServiceError:  # a broken column reads nothing it can name
        return frozenset()
    return frozenset(by_name[n] for n in names if n in by_name)


def graph(table: TableMeta) -> Graph:
    """The memoised dependency graph of ``table``."""
    found = table.memo.get("graph")
    if found is None:
        reads = {c.id: _reads(table, c) for c in table.columns if c.computed}
        readers: dict[int, set[int]] = {}
        for cid, deps in reads.items():
            for dep in deps:
                readers.setdefault(dep, set()).add(cid)
        found = Graph(reads, {k: frozenset(v) for k, v in readers.items()})
        table.memo["graph"] = found
    return found


def _find_cycle(graph: dict[Any, set[Any]]) -> list[Any] | None:
    """A cycle in ``graph`` (node → nodes it reads) as a path, or None."""
    state: dict[Any, int] = {}
    stack: list[Any] = []

    def visit(node: Any) -> list[Any] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if dep not in graph:
                continue
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if state.get(dep) is None:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if state.get(node) is None:
            found = visit(node)
            if found:
                return found
    return None


def check_computed_columns(
    specs: Sequence[ColumnLike],
    table: TableMeta | None = None,
    *,
    replacing: int | None = None,
    schema: WorkspaceSchema | None = None,
    config_keys: bool = True,
) -> None:
    """Validate new or changed columns: configs, references and the dependency graph.

    ``config_keys``: the configs are new or changed (refuse keys their kind does not read,
    see :func:`check_config`); false for a change that keeps a stored config as it is.

    Raises:
        InvalidFormula: a formula or template does not parse.
        UnknownColumn: a formula or config names a column that does not exist (the
            record steps' ``fields``/``filters`` keys are checked against their target).
        CircularReference: the change would create a cycle; the message names the path.
        ValidationError: a run_on value is not create/edit, or a kind's config is refused.
    """
    ids: dict[str, int] = {}
    reads: dict[int, set[int]] = {}
    names: dict[int, str] = {}
    if table is not None:
        for c in table.columns:
            if c.id == replacing:
                continue
            ids[c.name] = c.id
            names[c.id] = c.name
            if c.computed:
                reads[c.id] = set(graph(table).reads.get(c.id, ()))
    new_ids = {}
    for i, spec in enumerate(specs):
        sid = replacing if replacing is not None and len(specs) == 1 else -(i + 1)
        new_ids[spec.name] = sid
        ids[spec.name] = sid
        names[sid] = spec.name
    for spec in specs:
        if not spec.type.computed:
            continue
        cfg = spec.config or {}
        check_config(spec.name, spec.type.value, cfg, keys=config_keys)
        run_on = cfg.get("run_on")
        if run_on is not None and (
            not isinstance(run_on, list) or not run_on or any(m not in MODES for m in run_on)
        ):
            raise ValidationError(f"run_on of {spec.name!r} must be a non-empty list of 'create' and 'edit'")
        read = references(spec)
        unknown = sorted(n for n in read if n not in ids)
        if unknown:
            raise UnknownColumn(
                f"{spec.name}: unknown column {unknown[0]!r}" + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""),
                extra={"column": unknown[0]},
            )
        _check_target(spec, schema)
        reads[new_ids[spec.name]] = {ids[n] for n in read}
    cycle = _find_cycle(reads)
    if cycle:
        raise CircularReference(
            "computed columns would form a cycle: " + " → ".join(names.get(c, str(c)) for c in cycle),
            extra={"path": [names.get(c, str(c)) for c in cycle]},
        )


def _check_target(spec: ColumnLike, schema: WorkspaceSchema | None) -> None:
    """Record steps: the target table exists and its named columns too."""
    kind = spec.type.value
    cfg = spec.config or {}
    if schema is None or kind not in refs.RECORD_KINDS or "table_id" not in cfg:
        return
    target = schema.table(cfg["table_id"]) if isinstance(cfg["table_id"], (int, str)) else None
    if target is None:
        raise ValidationError(f"{spec.name}: config.table_id {cfg['table_id']!r} is not a table of this workspace")
    for name in sorted(refs.target_names(kind, cfg)):
        if target.column(name) is None:
            raise UnknownColumn(
                f"{spec.name}: unknown column {name!r} of table {target.name!r}", extra={"column": name}
            )


def _runs_in(col: ColumnMeta, mode: str) -> bool:
    run_on = col.config.get("run_on")
    return run_on is None or mode in run_on


def plan_steps(
    table: TableMeta,
    *,
    mode: str,
    changed: Iterable[str] = (),
    only: Iterable[int] | None = None,
) -> list[list[ColumnMeta]]:
    """Computed columns to run, grouped in levels (each level depends only on earlier ones).

    ``only`` (column ids) restricts the run to exactly those columns (``compute`` and
    ``run-actions`` with ``column_ids``).
    """
    computed = {c.id: c for c in table.columns if c.computed}
    if not computed:
        return []
    g = graph(table)
    if only is not None:
        only_set = set(only)
        wanted = {cid for cid in computed if cid in only_set}
    elif mode == "create":
        wanted = set(computed)
    else:
        by_name = {c.name: c.id for c in table.columns}
        wanted = g.dependants(by_name[n] for n in changed if n in by_name)
    wanted = {c for c in wanted if only is not None or _runs_in(computed[c], mode)}
    levels: list[list[ColumnMeta]] = []
    remaining = set(wanted)
    while remaining:
        level = sorted(
            (c for c in remaining if not (g.reads[c] & remaining)),
            key=lambda c: (computed[c].position, c),
        )
        if not level:  # a cycle slipped in (refused at write time): run the rest in order
            level = sorted(remaining, key=lambda c: (computed[c].position, c))
        levels.append([computed[c] for c in level])
        remaining -= set(level)
    return levels


def dependants(table: TableMeta, names: Iterable[str]) -> set[str]:
    """Computed columns that read any of ``names``, transitively (for skipping after a failure)."""
    by_name = {c.name: c.id for c in table.columns}
    by_id = {c.id: c.name for c in table.columns}
    return {by_id[c] for c in graph(table).dependants(by_name[n] for n in names if n in by_name)}


def dependant_ids(table: TableMeta, column_ids: Iterable[int]) -> set[int]:
    """Computed column ids reading any of ``column_ids``, transitively."""
    return graph(table).dependants(column_ids)
