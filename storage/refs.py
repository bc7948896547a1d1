"""Column references stored by id, shown by name (issue #21, DESIGN §5).

Clients write formulas, templates and configs with column *names*; the metadata tables
keep column *ids*, and every read renders today's names. A rename therefore changes one
row and carries everywhere at once; a delete knows exactly who uses the column.

Stored (encoded) forms, never shown to clients:

- Excel-like formulas: ``{Price}`` → ``{@12}`` (only column-reference tokens; strings are
  left alone; the grammar's own scanner decides what is a reference).
- JavaScript formulas: ``{Price}`` → ``{@12}``, ``fields["Price"]`` → ``fields[@12]``,
  ``fields.Price`` → ``fields.@12``.
- Jinja2 templates: a variable ``Price`` → ``__ref_12``; ``fields["Due Date"]`` →
  ``fields["__ref_12"]`` (rewritten token by token with Jinja's own lexer; references are
  the template's undeclared variables as Jinja's parser finds them, so
  ``{% if Status %}`` counts and ``{{ Price * 2 }}`` reads ``Price``).
- Config values naming columns (``source_column``, ``depends_on``): ``"@12"``.
- Record steps into other tables (``create_record``/``update_record`` ``fields`` keys,
  ``fetch_records`` ``filters`` keys): ``"@<column id of the target table>"``; the target
  ``table_id`` is stored as the table's id.

Everything here is pure: :class:`Names` is the workspace's id ↔ name index.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from jinja2 import TemplateSyntaxError, nodes
from jinja2 import meta as jinja_meta
from jinja2.sandbox import ImmutableSandboxedEnvironment

from storage.errors import InvalidFormula, ServiceError, UnknownColumn, ValidationError
from storage.formula import compile_formula, js
from storage.query.parse import GROUP_PARAMS, Group, group_text, parse_group
from storage.schema import SYSTEM_COLUMNS, TableMeta

# Config keys whose string values are Jinja2 templates over the record.
TEMPLATE_KEYS = ("url", "method", "body", "headers", "prompt", "system", "params", "fields",
                 "record_id", "filters")
# Config keys naming columns of the same table.
NAME_KEYS = ("source_column", "depends_on")
RECORD_KINDS = ("create_record", "update_record", "delete_record", "fetch_records")
# Names a template may use that are not columns.
TEMPLATE_CONTEXT = frozenset({"fields", "record_id", "item", "index", "loop", "now"})

_FORMULA_TOKENS = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|\{((?:[^}\\]|\\.)*)\}", re.DOTALL)
_FIELD_UNESCAPE = re.compile(r"\\([\\}])")
_STORED_FIELD = re.compile(r"^@(\d+)$")
_JS_STORED_ACCESS = re.compile(r"\bfields\s*(?:\[@(\d+)\]|\.@(\d+))")
_JS_STORED_PLACEHOLDER = re.compile(r"\{@(\d+)\}")
_JS_IDENT = re.compile(r"^[A-Za-z_$][\w$]*$")
_TPL_REF = re.compile(r"^__ref_(\d+)$")
_JINJA_KEYWORDS = frozenset({
    "and", "or", "not", "in", "is", "if", "else", "elif", "endif", "for", "endfor", "true", "false",
    "none", "True", "False", "None", "set", "endset", "block", "endblock", "macro", "endmacro", "call",
    "endcall", "filter", "endfilter", "with", "endwith", "import", "from", "include", "extends",
    "recursive", "as", "ignore", "missing", "context", "without", "scoped", "required", "raw", "endraw",
})


@dataclass(frozen=True)
class Names:
    """The workspace's column index: ids ↔ (table id, name), and table names."""

    columns: Mapping[int, tuple[int, str]]
    tables: Mapping[int, str]
    _by_name: dict[tuple[int, str], int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for cid, (tid, name) in self.columns.items():
            self._by_name[(tid, name)] = cid

    def column_id(self, table_id: int, name: str) -> int | None:
        return self._by_name.get((table_id, name))

    def name(self, column_id: int) -> str | None:
        entry = self.columns.get(column_id)
        return entry[1] if entry else None

    def table_id(self, ref: Any) -> int | None:
        """A table named by id (int or digits) or by exact name."""
        if isinstance(ref, bool):
            return None
        if isinstance(ref, int) or (isinstance(ref, str) and ref.isascii() and ref.isdigit()):
            return int(ref) if int(ref) in self.tables else None
        if isinstance(ref, str):
            for tid, name in self.tables.items():
                if name == ref:
                    return tid
        return None


@dataclass
class Refs:
    """What a computed column reads: column ids of its own table and of other tables."""

    own: set[int] = field(default_factory=set)
    other: set[int] = field(default_factory=set)
    missing: set[int] = field(default_factory=set)  # ids that no longer exist (forced deletes)
    tables: set[int] = field(default_factory=set)  # tables its record steps write or read


# --------------------------------------------------------------------------- name extraction


def formula_names(source: str, language: str) -> set[str]:
    """Column names a formula reads (raises InvalidFormula on bad text)."""
    return set(compile_formula(source, language=language).references)


@lru_cache(maxsize=1)
def _jinja() -> ImmutableSandboxedEnvironment:
    return ImmutableSandboxedEnvironment()


class _Undeclared(jinja_meta.TrackingCodeGenerator):
    """``jinja2.meta.find_undeclared_variables``'s tracker without constant folding.

    Tracking the names walks Jinja2's code generator, which folds constant expressions
    (its optimizer, and each output's children) while it goes: ``{{ 'a' * 10**9 }}`` built
    a 1 GB string on the event loop (3 s and a gigabyte per table creation, issue #22).
    Names need no values: the tracker runs without the optimizer, and every output child
    is left to "runtime" (which never comes: the code is thrown away)."""

    def __init__(self, environment: ImmutableSandboxedEnvironment) -> None:
        super().__init__(environment)  # type: ignore[arg-type]
        self.optimizer = None  # the optimizer folds constants (the environment's flag does not stop it here)

    def _output_child_to_const(self, node: nodes.Expr, frame: Any, finalize: Any) -> str:
        raise nodes.Impossible()


def _undeclared(tree: nodes.Template) -> set[str]:
    tracker = _Undeclared(_jinja())
    tracker.visit(tree)
    return set(tracker.undeclared_identifiers)


@lru_cache(maxsize=4096)
def template_names(text: str) -> frozenset[str]:
    """Column names a Jinja2 template reads: its free variables and ``fields["…"]`` keys.

    >>> sorted(template_names('{% if Status %}{{ Price * 2 }}{% endif %} {{ fields["Due Date"] }}'))
    ['Due Date', 'Price', 'Status']

    Raises:
        InvalidFormula: the template does not parse (``INVALID_FORMULA`` is the code
            clients already get for unparsable computed-column text).
    """
    if "{" not in text:
        return frozenset()
    try:
        tree = _jinja().parse(text)
    except TemplateSyntaxError as exc:
        raise InvalidFormula(f"template error: {exc}") from None
    names = _undeclared(tree) - TEMPLATE_CONTEXT
    names -= set(_jinja().globals)
    for item in tree.find_all(nodes.Getitem):
        if (isinstance(item.node, nodes.Name) and item.node.name == "fields"
                and isinstance(item.arg, nodes.Const) and isinstance(item.arg.value, str)):
            names.add(item.arg.value)
    return frozenset(names)


def strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON value (dicts and lists, recursively)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def config_names(kind: str, config: Mapping[str, Any]) -> set[str]:
    """Names of same-table columns a computed column's config reads (templates and keys)."""
    out: set[str] = set()
    for key in TEMPLATE_KEYS:
        for text in template_strings(key, config.get(key)):
            out |= template_names(text)
    for key in NAME_KEYS:
        value = config.get(key)
        if isinstance(value, str):
            out.add(value)
        elif isinstance(value, list):
            out |= {v for v in value if isinstance(v, str)}
    step = config.get("step")
    if kind == "loop" and isinstance(step, dict) and isinstance(step.get("config"), dict):
        sub = step["config"]
        out |= config_names(str(step.get("type") or ""), sub)
        if step.get("type") == "formula" and isinstance(sub.get("formula"), str):
            out |= formula_names(sub["formula"], sub.get("language", "excel")) - TEMPLATE_CONTEXT
    return out


def names_read(kind: str, formula: str | None, config: Mapping[str, Any]) -> set[str]:
    """Every same-table column name a computed column reads."""
    out = config_names(kind, config)
    if kind == "formula":
        out |= formula_names(formula or config.get("formula") or "", config.get("language", "excel"))
    return out


def _template_reads(text: str) -> frozenset[str] | None:
    """:func:`template_names` of ``text``, or None when it may read any field: it uses
    ``fields`` otherwise than ``fields["a constant"]`` (``{{ fields | tojson }}``,
    ``fields[name]``, ``fields.get(...)``), or it does not parse."""
    if "{" not in text:
        return frozenset()
    try:
        tree = _jinja().parse(text)
        names = template_names(text)
    except (TemplateSyntaxError, InvalidFormula):
        return None
    uses = sum(1 for n in tree.find_all(nodes.Name) if n.name == "fields")
    constant = sum(1 for item in tree.find_all(nodes.Getitem)
                   if isinstance(item.node, nodes.Name) and item.node.name == "fields"
                   and isinstance(item.arg, nodes.Const) and isinstance(item.arg.value, str))
    return names if uses == constant else None


def fields_read(kind: str, formula: str | None, config: Mapping[str, Any]) -> frozenset[str] | None:
    """The fields of its record a step of a computed column reads (name-form config), or
    None when it may read any of them: what the pipeline hands the step
    (workflows/pipeline.py). Unlike :func:`names_read` (the dependency graph) this is
    conservative: every string of the config is read as a template, and a JavaScript
    formula, a template using ``fields`` as a whole or with a computed key, or text that
    does not parse reads everything.

    >>> sorted(fields_read("http_request", None, {"url": "http://x/{{ A }}", "body": {"b": "{{ fields['B c'] }}"}}))
    ['A', 'B c']
    >>> fields_read("ai_agent", None, {"prompt": "{{ fields | tojson }}"}) is None
    True
    """
    out: set[str] = set()
    if kind == "formula":
        if config.get("language", "excel") != "excel":
            return None
        try:
            out |= formula_names(formula or config.get("formula") or "", "excel")
        except InvalidFormula:
            return None
    for key, value in config.items():
        if key in ("source_column",) and isinstance(value, str):
            out.add(value)
            continue
        if key in ("depends_on", "formula", "step"):
            continue
        for text in template_strings(key, value):
            found = _template_reads(text)
            if found is None:
                return None
            out |= found
    step = config.get("step")
    if kind == "loop" and isinstance(step, dict):
        sub = step.get("config") if isinstance(step.get("config"), dict) else {}
        found = fields_read(str(step.get("type") or ""), sub.get("formula"), sub)
        if found is None:
            return None
        out |= found
    return frozenset(out)  # a name that is no column (``item``) is simply not found


def target_names(kind: str, config: Mapping[str, Any]) -> set[str]:
    """Names of the target table's columns a record step names (``fields``/``filters`` keys)."""
    out: set[str] = set()
    if kind in ("create_record", "update_record") and isinstance(config.get("fields"), dict):
        out |= {k for k in config["fields"] if isinstance(k, str)}
    if kind == "fetch_records":
        out |= {n for n in fetch_filter_columns(config.get("filters")) if n not in SYSTEM_COLUMNS}
    return out


def fetch_filter_columns(filters: Any) -> set[str]:
    """Every column a ``fetch_records`` step's filters name: the object form's keys and the
    columns inside its ``or``/``and`` groups, or the list form's columns and groups."""
    if isinstance(filters, list):
        return filter_list_columns(filters)
    if not isinstance(filters, dict):
        return set()
    out: set[str] = set()
    for key, value in filters.items():
        if key in GROUP_PARAMS:
            out |= filter_list_columns([{key: value}])
        elif isinstance(key, str):
            out.add(key)
    return out


def _fetch_filters(filters: Any, key_of: Any, term_of: Any) -> Any:
    """A ``fetch_records`` step's filters with each column mapped: ``key_of`` for the object
    form's keys and the list form's columns, ``term_of`` for the columns inside groups
    (re-rendered, as a saved view stores its groups; text that does not parse is kept)."""
    if isinstance(filters, dict):
        out_map: dict[str, Any] = {}
        for k, v in filters.items():
            if k in GROUP_PARAMS:
                out_map[k] = _mapped_group(k, v, term_of) if isinstance(v, str) else v
            else:
                out_map[key_of(k)] = v
        return out_map
    if isinstance(filters, list):
        return _mapped_list(filters, key_of, term_of)
    return filters


# --------------------------------------------------------------------------- rewriting


def _escape_field(name: str) -> str:
    return "{" + name.replace("\\", "\\\\").replace("}", "\\}") + "}"


def _rewrite_formula(source: str, swap: Any) -> str:
    """Replace each ``{…}`` reference token (outside strings) by ``swap(name)``."""
    out: list[str] = []
    last = 0
    for m in _FORMULA_TOKENS.finditer(source):
        if m.group(1) is None:
            continue
        out.append(source[last:m.start()])
        out.append(swap(_FIELD_UNESCAPE.sub(r"\1", m.group(1))))
        last = m.end()
    out.append(source[last:])
    return "".join(out)


def _js_chunks(source: str) -> Iterator[tuple[bool, str]]:
    """Split JavaScript into (is_code, text) runs; strings and comments are not code."""
    last = 0
    for m in js.SKIP.finditer(source):
        yield True, source[last:m.start()]
        yield False, m.group(0)
        last = m.end()
    yield True, source[last:]


def _encode_js(source: str, ref: Any) -> str:
    def access(m: re.Match[str]) -> str:
        cid = ref(js.js_string(m.group(1)) if m.group(1) is not None else m.group(2))
        if not isinstance(cid, int):  # lenient encoding of an unknown name: left as written
            return m.group(0)
        return f"fields[@{cid}]" if m.group(1) is not None else f"fields.@{cid}"

    source = js.FIELD_ACCESS.sub(access, source)
    out: list[str] = []
    for is_code, chunk in _js_chunks(source):
        if not is_code:
            out.append(chunk)
            continue

        def placeholder(m: re.Match[str], chunk: str = chunk) -> str:
            name = m.group(1)
            if name != name.strip() or js.KEYWORD.match(name) or js.BLOCK_BEFORE.search(chunk, 0, m.start()):
                return m.group(0)
            cid = ref(name)
            return "{@" + str(cid) + "}" if isinstance(cid, int) else m.group(0)

        out.append(js.PLACEHOLDER.sub(placeholder, chunk))
    return "".join(out)


def _decode_js(source: str, name_of: Any) -> str:
    def access(m: re.Match[str]) -> str:
        cid = int(m.group(1) or m.group(2))
        name = name_of(cid)
        if name is None:
            return m.group(0)
        if m.group(2) is not None and _JS_IDENT.match(name):
            return f"fields.{name}"
        return f"fields[{json.dumps(name, ensure_ascii=False)}]"

    source = _JS_STORED_ACCESS.sub(access, source)
    out: list[str] = []
    for is_code, chunk in _js_chunks(source):
        if not is_code:
            out.append(chunk)
            continue

        def placeholder(m: re.Match[str]) -> str:
            name = name_of(int(m.group(1)))
            if name is None:
                return m.group(0)
            if js.PLACEHOLDER.fullmatch("{" + name + "}") and not js.KEYWORD.match(name) and name == name.strip():
                return "{" + name + "}"
            return f"fields[{json.dumps(name, ensure_ascii=False)}]"

        out.append(_JS_STORED_PLACEHOLDER.sub(placeholder, chunk))
    return "".join(out)


def _template_tokens(text: str) -> list[tuple[str, str]]:
    return [(tok, value) for _, tok, value in _jinja().lexer.tokeniter(text, None)]


def _rewrite_template(text: str, name_swap: Any, key_swap: Any) -> str:
    """Rewrite variable names and ``fields["…"]`` keys token by token (Jinja's lexer)."""
    if "{" not in text:
        return text
    tokens = _template_tokens(text)
    out: list[str] = []
    significant: list[tuple[str, str]] = []  # previous non-whitespace tokens
    for tok, value in tokens:
        new = value
        if tok == "name":
            prev = significant[-1] if significant else ("", "")
            if not (prev[0] == "operator" and prev[1] in (".", "|")) and not (prev == ("name", "is")):
                new = name_swap(value)
        elif tok == "string" and len(significant) >= 2 and significant[-1] == ("operator", "[") \
                and significant[-2] == ("name", "fields"):
            swapped = key_swap(js.js_string(value))
            if swapped is not None:
                new = json.dumps(swapped, ensure_ascii=False)
        out.append(new)
        if tok != "whitespace":
            significant.append((tok, value))
    return "".join(out)


def each_group(filters: Any, on_group: Any, other: Any = None) -> Any:
    """``filters`` in either form (an object, or a list of items) with the value of each
    ``or``/``and`` group (an object's group key, or a list item ``{"or": ...}``) replaced by
    ``on_group(key, value)``, and each other value or item by ``other(it)`` when given."""
    keep = other if other is not None else (lambda v: v)
    if isinstance(filters, dict):
        return {k: on_group(k, v) if k in GROUP_PARAMS else keep(v) for k, v in filters.items()}
    if isinstance(filters, list):
        return [{k: on_group(k, v) for k, v in f.items()}
                if isinstance(f, dict) and len(f) == 1 and next(iter(f)) in GROUP_PARAMS else keep(f)
                for f in filters]
    return keep(filters)


def map_templates(key: str, value: Any, fn: Any) -> Any:
    """``fn`` applied to every template text of a config key's value: every string, except
    that an ``or``/``and`` group of filters (``{"or": "(A.eq.{{ x }},B.gt.1)"}``, in the
    object or the list form) is filter grammar around templates: ``fn`` is applied to
    each of its values and the group is written again with them quoted as the grammar
    needs (:func:`storage.query.parse.group_text`). Mapped as one text, a group's
    ``fields["a"]`` came back quoted as ``fields[\\"a\\"]``, which no template reads: the
    workspace's schema then failed to load. A group that does not parse is one text."""
    if key != "filters":
        return _map_config_strings(value, fn)

    def other(v: Any) -> Any:
        return _map_config_strings(v, fn)

    return each_group(value, lambda k, v: _map_group_templates(k, v, fn) if isinstance(v, str) else other(v), other)


def template_strings(key: str, value: Any) -> list[str]:
    """Every template text of a config key's value, as :func:`map_templates` sees them."""
    found: list[str] = []

    def note(text: str) -> str:
        found.append(text)
        return text

    map_templates(key, value, note)
    return found


def _map_group_templates(key: str, text: str, fn: Any) -> str:
    if "{" not in text:
        return fn(text)
    try:
        group = parse_group(key, text)
    except ServiceError:
        return fn(text)
    return group_text(map_group_values(group, lambda v: fn(v) if "{" in v else v))


def map_group_values(group: Group, fn: Any) -> Group:
    """``group`` with ``fn`` applied to each condition's value (each item of a list value)."""
    items: list[Any] = []
    for item in group.items:
        if isinstance(item, Group):
            items.append(map_group_values(item, fn))
        elif isinstance(item.value, tuple):
            items.append(replace(item, value=tuple(fn(v) for v in item.value)))
        else:
            items.append(replace(item, value=fn(item.value)))
    return replace(group, items=tuple(items))


def _map_config_strings(value: Any, fn: Any) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map_config_strings(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_config_strings(v, fn) for v in value]
    return value


# --------------------------------------------------------------------------- encode / decode


class _Encoder:
    def __init__(self, table_id: int, names: Names, *, strict: bool = True) -> None:
        self.table_id = table_id
        self.names = names
        self.strict = strict

    def ref(self, name: str, table_id: int | None = None) -> int | str:
        tid = self.table_id if table_id is None else table_id
        cid = self.names.column_id(tid, name)
        if cid is None:
            dangling = _STORED_FIELD.match(name)
            if dangling and not self.strict:  # a reference left by a forced delete
                return int(dangling.group(1))
            if self.strict:
                where = "" if tid == self.table_id else f" of table {self.names.tables.get(tid, tid)!r}"
                raise UnknownColumn(f"unknown column {name!r}{where}", extra={"column": name})
            return name
        return cid

    def template(self, text: str) -> str:
        used = template_names(text)
        for name in used:
            self.ref(name)  # refuse unknown names first

        def swap_name(name: str) -> str:
            if name not in used:
                return name
            cid = self.names.column_id(self.table_id, name)
            return f"__ref_{cid}" if cid is not None else name

        def swap_key(name: str) -> str | None:
            cid = self.names.column_id(self.table_id, name)
            return f"__ref_{cid}" if cid is not None else None

        return _rewrite_template(text, swap_name, swap_key)


def encode(kind: str, formula: str | None, config: Mapping[str, Any], *, table_id: int,
           names: Names, strict: bool = True) -> tuple[str | None, dict[str, Any]]:
    """Names → ids in a computed column's formula and config.

    Raises:
        UnknownColumn: a name is not a column of the table (or of a record step's target).
        InvalidFormula: the formula or a template does not parse.
    """
    enc = _Encoder(table_id, names, strict=strict)
    cfg = dict(config)
    out_formula = formula
    if kind == "formula":
        source = formula or cfg.get("formula") or ""
        cfg.pop("formula", None)
        out_formula = _encode_formula(source, cfg.get("language", "excel"), enc)
    return out_formula, _encode_config(kind, cfg, enc)


def _encode_formula(source: str, language: str, enc: _Encoder, context: frozenset[str] = frozenset()) -> str:
    """``context``: names that are not columns (a loop sub-step's ``item``)."""
    for name in formula_names(source, language) - context:
        enc.ref(name)

    def ref(name: str) -> int | str:
        return name if name in context else enc.ref(name)

    if language == "javascript":
        return _encode_js(source, ref)

    def swap(name: str) -> str:
        cid = ref(name)
        return "{@" + str(cid) + "}" if isinstance(cid, int) else _escape_field(name)

    return _rewrite_formula(source, swap)


def _encode_config(kind: str, cfg: dict[str, Any], enc: _Encoder) -> dict[str, Any]:
    target: int | None = None
    if kind in RECORD_KINDS and "table_id" in cfg:
        target = enc.names.table_id(cfg["table_id"])
        if target is None:
            if enc.strict:
                raise ValidationError(f"config.table_id {cfg['table_id']!r} is not a table of this workspace")
        else:
            cfg["table_id"] = target
    for key in TEMPLATE_KEYS:
        if key not in cfg:
            continue
        value = map_templates(key, cfg[key], enc.template)
        if target is not None and isinstance(value, dict) and key == "fields" and kind in ("create_record",
                                                                                            "update_record"):
            value = {_stored(enc.ref(k, target)): v for k, v in value.items()}
        elif target is not None and key == "filters" and kind == "fetch_records":
            tid = target

            def term(name: str) -> str:  # system and unknown names stay (the planner judges them)
                cid = enc.names.column_id(tid, name)
                return f"@{cid}" if cid is not None else name

            value = _fetch_filters(value, lambda k: _stored(enc.ref(k, tid)) if k not in SYSTEM_COLUMNS else k, term)
        cfg[key] = value
    for key in NAME_KEYS:
        value = cfg.get(key)
        if isinstance(value, str):
            cfg[key] = _stored(enc.ref(value))
        elif isinstance(value, list):
            cfg[key] = [_stored(enc.ref(v)) if isinstance(v, str) else v for v in value]
    step = cfg.get("step")
    if kind == "loop" and isinstance(step, dict) and isinstance(step.get("config"), dict):
        sub_kind = str(step.get("type") or "")
        sub = _encode_config(sub_kind, dict(step["config"]), enc)
        if sub_kind == "formula" and isinstance(sub.get("formula"), str):
            sub["formula"] = _encode_formula(sub["formula"], sub.get("language", "excel"), enc, TEMPLATE_CONTEXT)
        cfg["step"] = {**step, "config": sub}
    return cfg


def _stored(ref: int | str) -> str:
    return f"@{ref}" if isinstance(ref, int) else ref


class _Decoder:
    def __init__(self, table_id: int, names: Names) -> None:
        self.table_id = table_id
        self.names = names
        self.refs = Refs()

    def name_of(self, cid: int, *, table_id: int | None = None) -> str | None:
        entry = self.names.columns.get(cid)
        tid = self.table_id if table_id is None else table_id
        if entry is None or entry[0] != tid:
            self.refs.missing.add(cid)
            return None
        (self.refs.own if tid == self.table_id else self.refs.other).add(cid)
        return entry[1]

    def stored(self, value: str, *, table_id: int | None = None) -> str:
        m = _STORED_FIELD.match(value)
        if not m:
            return value
        name = self.name_of(int(m.group(1)), table_id=table_id)
        return name if name is not None else value

    def template(self, text: str) -> str:
        if "__ref_" not in text:
            return text

        def swap_name(token: str) -> str:
            m = _TPL_REF.match(token)
            if not m:
                return token
            name = self.name_of(int(m.group(1)))
            if name is None:
                return token
            if name.isidentifier() and name not in _JINJA_KEYWORDS and name not in TEMPLATE_CONTEXT:
                return name
            return f"fields[{json.dumps(name, ensure_ascii=False)}]"

        def swap_key(key: str) -> str | None:
            m = _TPL_REF.match(key)
            return self.name_of(int(m.group(1))) if m else None

        try:
            return _rewrite_template(text, swap_name, swap_key)
        except TemplateSyntaxError:  # stored text is never refused on the way out: kept as it is
            return text


def decode(kind: str, formula: str | None, config: Mapping[str, Any], *, table_id: int,
           names: Names) -> tuple[str | None, dict[str, Any], Refs]:
    """Ids → today's names; also returns what the column reads (by id)."""
    dec = _Decoder(table_id, names)
    cfg = dict(config)
    out_formula = formula
    if kind == "formula" and formula is not None:
        out_formula = _decode_formula(formula, cfg.get("language", "excel"), dec)
    return out_formula, _decode_config(kind, cfg, dec), dec.refs


def _decode_formula(source: str, language: str, dec: _Decoder) -> str:
    if language == "javascript":
        return _decode_js(source, dec.name_of)

    def swap(ref: str) -> str:
        m = _STORED_FIELD.match(ref)
        name = dec.name_of(int(m.group(1))) if m else None
        return _escape_field(name if name is not None else ref)

    return _rewrite_formula(source, swap)


def _decode_config(kind: str, cfg: dict[str, Any], dec: _Decoder) -> dict[str, Any]:
    target = cfg.get("table_id") if kind in RECORD_KINDS else None
    if isinstance(target, int) and not isinstance(target, bool):
        dec.refs.tables.add(target)
    for key in TEMPLATE_KEYS:
        if key not in cfg:
            continue
        value = map_templates(key, cfg[key], dec.template)
        if isinstance(target, int) and isinstance(value, dict) and key == "fields" and kind in ("create_record",
                                                                                                 "update_record"):
            value = {dec.stored(k, table_id=target): v for k, v in value.items()}
        elif isinstance(target, int) and key == "filters" and kind == "fetch_records":
            tid = target
            value = _fetch_filters(value, lambda k: dec.stored(k, table_id=tid), lambda r: dec.stored(r, table_id=tid))
        cfg[key] = value
    for key in NAME_KEYS:
        value = cfg.get(key)
        if isinstance(value, str):
            cfg[key] = dec.stored(value)
        elif isinstance(value, list):
            cfg[key] = [dec.stored(v) if isinstance(v, str) else v for v in value]
    step = cfg.get("step")
    if kind == "loop" and isinstance(step, dict) and isinstance(step.get("config"), dict):
        sub_kind = str(step.get("type") or "")
        sub = _decode_config(sub_kind, dict(step["config"]), dec)
        if sub_kind == "formula" and isinstance(sub.get("formula"), str):
            sub["formula"] = _decode_formula(sub["formula"], sub.get("language", "excel"), dec)
        cfg["step"] = {**step, "config": sub}
    return cfg


# --------------------------------------------------------------------------- filter lists, column lists


def encode_filter_list(filters: list[dict[str, Any]], column_id: Any) -> list[dict[str, Any]]:
    """``[{column, op, value}]`` with each column name replaced by ``"@<id>"``
    (``column_id(name) -> int | None``; system and unknown names stay as they are). A group
    item (``{"or": "(A.gt.1,B.eq.x)"}``) is re-rendered with ``@<id>`` for each column it
    names, as a saved view stores its groups, so a rename carries into it too.

    >>> encode_filter_list([{"or": "(A.gt.1,id.eq.2)"}, {"column": "A", "op": "eq", "value": 1}],
    ...                    {"A": 7}.get)
    [{'or': '(@7.gt.1,id.eq.2)'}, {'column': '@7', 'op': 'eq', 'value': 1}]
    """
    def swap(name: str) -> str:
        cid = column_id(name)
        return f"@{cid}" if cid is not None else name

    return _mapped_list(filters, swap, swap)


def filters_by_id(table: TableMeta, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``[{column, op, value}]`` of ``table`` as stored (schedules, realtime subscriptions):
    columns by id, so a rename carries (:func:`encode_filter_list`)."""
    return encode_filter_list(filters, lambda n: c.id if (c := table.column(n)) is not None else None)


def filters_by_name(table: TableMeta, filters: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored filters (:func:`filters_by_id`) with today's column names; a deleted column
    keeps its ``"@<id>"``, which the planner refuses (:func:`decode_filter_list`)."""
    return decode_filter_list(filters, lambda i: c.name if (c := table.column_by_id(i)) is not None else None)


def decode_filter_list(filters: list[dict[str, Any]], name_of: Any) -> list[dict[str, Any]]:
    """The inverse of :func:`encode_filter_list` (``name_of(id) -> str | None``); a term
    whose column is gone keeps its ``"@<id>"``, which the planner then refuses by name (in
    a group too).

    >>> decode_filter_list([{"or": "(@7.gt.1,@8.eq.2)"}], {7: "My.col"}.get)
    [{'or': '("My.col".gt.1,@8.eq.2)'}]
    """
    def swap(ref: str) -> str:
        m = _STORED_FIELD.match(ref)
        name = name_of(int(m.group(1))) if m else None
        return name if name is not None else ref

    return _mapped_list(filters, swap, swap)


def _mapped_list(filters: list[Any], column_of: Any, term_of: Any) -> list[Any]:
    """A filter list with ``column_of`` applied to each item's column and ``term_of`` to
    each column a group item names (the group re-rendered); other items kept."""
    out = []
    for f in filters:
        group = _group_item(f)
        if group is not None:
            out.append({group[0]: _mapped_group(group[0], group[1], term_of)})
        elif isinstance(f, dict) and isinstance(f.get("column"), str):
            out.append({**f, "column": column_of(f["column"])})
        else:
            out.append(f)
    return out


def filter_list_columns(filters: Any) -> set[str]:
    """Every column name (or ``"@<id>"``) a filter list names, inside its groups too."""
    out: set[str] = set()
    for f in filters if isinstance(filters, list) else []:
        group = _group_item(f)
        if group is not None:
            try:
                parsed = parse_group(group[0], group[1])
            except ServiceError:
                continue
            out.update(_group_names(parsed))
        elif isinstance(f, dict) and isinstance(f.get("column"), str):
            out.add(f["column"])
    return out


def _group_item(f: Any) -> tuple[str, str] | None:
    """``(key, text)`` of a group item ``{"or": "(...)"}`` of a filter list, else ``None``."""
    if isinstance(f, dict) and len(f) == 1:
        key, text = next(iter(f.items()))
        if key in GROUP_PARAMS and isinstance(text, str):
            return key, text
    return None


def _group_names(group: Group) -> list[str]:
    out: list[str] = []
    for item in group.items:
        out.extend(_group_names(item) if isinstance(item, Group) else [item.column])
    return out


def _mapped_group(key: str, text: str, swap: Any) -> str:
    """A group's text with ``swap`` applied to each column it names, in the REST grammar
    (:func:`storage.query.parse.group_text`); text that does not parse is kept as it is
    (the filters were validated when stored)."""
    try:
        group = parse_group(key, text)
    except ServiceError:
        return text
    return group_text(group, swap)


def encode_names(names: list[str], column_id: Any) -> list[str]:
    """Column names → ``"@<id>"`` (unknown names kept)."""
    return [f"@{cid}" if (cid := column_id(n)) is not None else n for n in names]


def decode_names(refs: list[str], name_of: Any) -> list[str]:
    """``"@<id>"`` → today's names; ids of deleted columns are dropped."""
    out = []
    for r in refs:
        m = _STORED_FIELD.match(r) if isinstance(r, str) else None
        if m is None:
            out.append(r)
        elif (name := name_of(int(m.group(1)))) is not None:
            out.append(name)
    return out
