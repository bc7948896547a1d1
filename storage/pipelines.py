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

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from storage.errors import ValidationError
from storage.formula import compile_formula
from storage.schema import ColumnMeta, ColumnType, TableMeta

_TEMPLATE_REF = re.compile(r"\{\{\s*(?:fields\s*\[\s*(['\"])(.+?)\1\s*\]|([^{}|\s][^{}|]*?))\s*(?:\|[^{}]*)?\}\}")
_TEMPLATE_KEYS = ("url", "body", "headers", "prompt", "system", "params", "fields", "record_id", "filters")
MODES = ("create", "edit")
# kind → check(column name, config) raising ValidationError; each kind's implementation
# registers its own (activities/http_request.py, action.py, ai_agent.py) so that bad
# configurations are refused at column creation, not at the first run
ConfigCheck = Callable[[str, dict[str, Any]], None]
_CONFIG_CHECKS: dict[str, ConfigCheck] = {}


def register_config_check(kind: str, check: ConfigCheck) -> None:
    """Register the configuration check of a computed kind (called by its module)."""
    _CONFIG_CHECKS[kind] = check


def check_config(name: str, kind: str, config: dict[str, Any]) -> None:
    """Run the registered check of ``kind`` (and of a loop's sub-step) over ``config``.

    Raises:
        ValidationError: the configuration is refused.
    """
    if kind == "loop":
        step = config.get("step")
        if isinstance(step, dict) and isinstance(step.get("type"), str):
            sub = step.get("config") or {}
            if not isinstance(sub, dict):
                raise ValidationError(f"{name}: config.step.config must be an object")
            check_config(name, step["type"], sub)
        return
    check = _CONFIG_CHECKS.get(kind)
    if check is not None:
        check(name, config)


class ColumnLike(Protocol):
    name: str
    type: ColumnType
    config: dict[str, Any]
    formula: str | None


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def template_references(text: str) -> set[str]:
    """Column names a Jinja2 template reads.

    >>> sorted(template_references('{{ Name }} and {{ fields["Due Date"] }} {{ Price | round }}'))
    ['Due Date', 'Name', 'Price']
    """
    refs: set[str] = set()
    for m in _TEMPLATE_REF.finditer(text):
        name = m.group(2) if m.group(2) is not None else m.group(3)
        if name:
            refs.add(name.strip())
    return refs


def references(col: ColumnLike) -> set[str]:
    """Names of the columns a computed column reads (unknown names are kept; callers check)."""
    refs: set[str] = set()
    cfg = col.config or {}
    if col.type is ColumnType.FORMULA:
        source = col.formula or cfg.get("formula") or ""
        language = cfg.get("language", "excel")
        refs |= set(compile_formula(source, language=language).references)
    for key in _TEMPLATE_KEYS:
        for text in _strings(cfg.get(key)):
            refs |= template_references(text)
    for key in ("source_column", "depends_on"):
        value = cfg.get(key)
        if isinstance(value, str):
            refs.add(value)
        elif isinstance(value, list):
            refs |= {v for v in value if isinstance(v, str)}
    step = cfg.get("step")
    if isinstance(step, dict) and isinstance(step.get("config"), dict):
        for text in _strings(step["config"]):
            refs |= template_references(text)
    return refs


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle in ``graph`` (node → nodes it reads) as a path, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
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
    specs: Sequence[ColumnLike], table: TableMeta | None = None, *, replacing: int | None = None
) -> None:
    """Validate formulas and refuse dependency cycles for new or changed columns.

    Raises:
        InvalidFormula: a formula does not parse.
        ValidationError: the change would create a cycle (named in the message), or a
            run_on value is not create/edit.
    """
    columns: dict[str, ColumnLike] = {}
    if table is not None:
        for c in table.columns:
            if c.id != replacing:
                columns[c.name] = c
    for spec in specs:
        columns[spec.name] = spec
        if spec.type.computed:
            check_config(spec.name, spec.type.value, spec.config or {})
    graph: dict[str, set[str]] = {}
    for name, col in columns.items():
        if not col.type.computed:
            continue
        run_on = (col.config or {}).get("run_on")
        if run_on is not None and (
            not isinstance(run_on, list) or not run_on or any(m not in MODES for m in run_on)
        ):
            raise ValidationError(f"run_on of {name!r} must be a non-empty list of 'create' and 'edit'")
        graph[name] = references(col)
    cycle = _find_cycle(graph)
    if cycle:
        raise ValidationError("computed columns would form a cycle: " + " → ".join(cycle))


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
    computed = {c.name: c for c in table.columns if c.computed}
    if not computed:
        return []
    deps = {name: references(col) for name, col in computed.items()}
    if only is not None:
        wanted = {c.name for c in computed.values() if c.id in set(only)}
    elif mode == "create":
        wanted = set(computed)
    else:
        wanted = set()
        frontier = set(changed)
        while frontier:
            nxt = {n for n, d in deps.items() if d & frontier and n not in wanted}
            wanted |= nxt
            frontier = nxt
    wanted = {n for n in wanted if only is not None or _runs_in(computed[n], mode)}
    levels: list[list[ColumnMeta]] = []
    placed: set[str] = set()
    remaining = set(wanted)
    while remaining:
        level = sorted(
            (n for n in remaining if not (deps[n] & remaining)),
            key=lambda n: (computed[n].position, computed[n].id),
        )
        if not level:  # a cycle slipped in (should be impossible): run the rest in order
            level = sorted(remaining, key=lambda n: (computed[n].position, computed[n].id))
        levels.append([computed[n] for n in level])
        placed |= set(level)
        remaining -= set(level)
    return levels


def dependants(table: TableMeta, names: Iterable[str]) -> set[str]:
    """Computed columns that read any of ``names``, transitively (for skipping after a failure)."""
    computed = {c.name: references(c) for c in table.columns if c.computed}
    out: set[str] = set()
    frontier = set(names)
    while frontier:
        nxt = {n for n, d in computed.items() if d & frontier and n not in out}
        out |= nxt
        frontier = nxt
    return out
