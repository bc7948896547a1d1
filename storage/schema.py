"""In-memory description of a workspace's tables and columns.

These frozen dataclasses are what every layer plans against: the query compiler, the SQL
translator, value coercion, the pipeline graph. They are built from the metadata tables
(``storage/meta.py``) and cached per workspace by the API.

Physical naming (DESIGN §3): workspace ``W`` lives in schema ``ws_W``; table ``T`` is
``ws_W.t_T``; column ``C`` is ``c_C``. Renames therefore never touch data.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

import orjson


class ColumnType(StrEnum):
    TEXT = "text"
    NUMBER = "number"
    DATE = "date"
    CHECKBOX = "checkbox"
    SINGLE_SELECT = "single_select"
    MULTI_SELECT = "multi_select"
    RELATION = "relation"
    FILE = "file"
    # computed kinds
    FORMULA = "formula"
    HTTP_REQUEST = "http_request"
    ACTION = "action"
    JSON_PARSER = "json_parser"
    AI_AGENT = "ai_agent"
    CREATE_RECORD = "create_record"
    UPDATE_RECORD = "update_record"
    DELETE_RECORD = "delete_record"
    FETCH_RECORDS = "fetch_records"
    LOOP = "loop"
    DELAY = "delay"

    @property
    def computed(self) -> bool:
        return self not in DATA_TYPES


DATA_TYPES = frozenset(
    {
        ColumnType.TEXT,
        ColumnType.NUMBER,
        ColumnType.DATE,
        ColumnType.CHECKBOX,
        ColumnType.SINGLE_SELECT,
        ColumnType.MULTI_SELECT,
        ColumnType.RELATION,
        ColumnType.FILE,
    }
)
COMPUTED_TYPES = frozenset(t for t in ColumnType if t not in DATA_TYPES)
SELECT_TYPES = frozenset({ColumnType.SINGLE_SELECT, ColumnType.MULTI_SELECT})
OPTION_COLORS = (
    "red", "orange", "amber", "green", "teal", "blue", "indigo", "purple", "pink", "gray",
)

# PostgreSQL storage type per data column type (DESIGN §3). Computed columns store jsonb.
PG_TYPES: dict[ColumnType, str] = {
    ColumnType.TEXT: "text",
    ColumnType.NUMBER: "double precision",
    ColumnType.DATE: "timestamptz",
    ColumnType.CHECKBOX: "boolean",
    ColumnType.SINGLE_SELECT: "text",
    ColumnType.MULTI_SELECT: "text[]",
    ColumnType.RELATION: "bigint",
    ColumnType.FILE: "jsonb",
}
COMPUTED_PG_TYPE = "jsonb"
# The value types of computed columns (issue 24 item 1, storage/formula/types.py). A
# computed column with a scalar value type is indexed and filtered like a data column of
# that type (storage/ddl.py ``computed_value_expr``); ``json`` is neither.
VALUE_TYPES = ("number", "text", "date", "boolean", "json")
SCALAR_VALUE_TYPES = frozenset({"number", "text", "date", "boolean"})
# a date value: ISO-8601 with an explicit offset (as storage/ddl.py INSTANT_FUNCTION_SQL reads it)
_INSTANT_RE = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?([Zz]|[+-]\d{2}(:?\d{2}(:?\d{2})?)?)")


def value_fits(value_type: str | None, value: Any) -> bool:
    """Whether a computed value is of ``value_type`` (blank fits every type, and
    anything fits ``json``). Pure: pipelines check results with it (activities/ledger.py)."""
    if value is None or value_type not in SCALAR_VALUE_TYPES:
        return True
    if value_type == "number":
        # a double, as a data number column holds: jsonb also holds 1e400 (an HTTP body's
        # 400-digit integer), which the column's float8 key reads as blank (storage/ddl.py)
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and abs(value) <= sys.float_info.max)
    if value_type == "boolean":
        return isinstance(value, bool)
    if value_type == "text":
        return isinstance(value, str)
    if not isinstance(value, str) or not _INSTANT_RE.fullmatch(value):
        return False
    try:
        datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        return False
    return True

UNSTORABLE_TEXT = ("#VALUE! the result holds text that cannot be stored: a NUL character (\\u0000)"
                   " or an unpaired UTF-16 surrogate")


def storable(value: Any) -> bool:
    """Whether PostgreSQL can store ``value`` (a computed result) as jsonb: no string in it,
    key or value at any depth, holds a NUL character or an unpaired surrogate (which no
    UTF-8 text can hold). A step or formula can make either (``CHAR(0)``, a JavaScript
    ``"\\ud800"``, an HTTP body); refused here, it is that record's step error instead of
    a write that fails as a whole. Pure (activities/ledger.py checks every result with it)."""
    if isinstance(value, str):  # most results are a number, a boolean or one string
        return "\x00" not in value and encodable(value)
    if not isinstance(value, dict | list | tuple):
        return True
    return all("\x00" not in text and encodable(text) for text in strings_in(value))


def strings_in(value: Any) -> Iterator[str]:
    """Every string in a JSON-like value, object keys included, at any depth."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def encodable(text: str) -> bool:
    """Whether ``text`` is text UTF-8 can hold (no unpaired surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


# System columns visible as record attributes (not inside ``fields``).
SYSTEM_COLUMNS = ("id", "created_at", "updated_at")


def schema_name(workspace_id: int) -> str:
    return f"ws_{int(workspace_id)}"


def table_name(table_id: int) -> str:
    return f"t_{int(table_id)}"


def column_name(column_id: int) -> str:
    return f"c_{int(column_id)}"


@dataclass(frozen=True, slots=True)
class Option:
    id: str
    label: str
    color: str

    def as_dict(self) -> dict[str, str]:
        return {"id": self.id, "label": self.label, "color": self.color}


@dataclass(frozen=True, slots=True)
class ColumnMeta:
    id: int
    table_id: int
    name: str
    type: ColumnType
    required: bool = False
    position: int = 0
    options: tuple[Option, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    formula: str | None = None
    relation_table_id: int | None = None
    relation_label_column_id: int | None = None
    # ids of the same table's columns this computed column reads (storage/refs.py)
    refs: frozenset[int] = frozenset()
    # ids of other tables' columns it names (record steps' fields/filters keys)
    other_refs: frozenset[int] = frozenset()
    # why the column cannot compute (e.g. a column it read was deleted with force)
    broken: str | None = None
    # a computed column's value type (VALUE_TYPES; None for data columns and for
    # computed columns described without it, which then read as json)
    value_type: str | None = None
    # a digest of the stored definition (storage.guards.definition_of; "" when not loaded
    # from its metadata row): a run's write-back checks it is still the column's
    definition: str = field(default="", compare=False)

    @property
    def computed(self) -> bool:
        return self.type.computed

    @property
    def physical(self) -> str:
        """Physical column name, ``c_<id>``."""
        return column_name(self.id)

    @property
    def scalar_value_type(self) -> str | None:
        """The scalar value type of a computed column (indexed like a data column), else None."""
        if self.computed and self.value_type in SCALAR_VALUE_TYPES:
            return self.value_type
        return None

    def option_by_id_or_label(self, value: str) -> Option | None:
        """Resolve a select value given as option id or label (ids win on a tie)."""
        for opt in self.options:
            if opt.id == value:
                return opt
        for opt in self.options:
            if opt.label == value:
                return opt
        return None


@dataclass(frozen=True, slots=True)
class TableMeta:
    id: int
    workspace_id: int
    name: str
    icon: str | None
    columns: tuple[ColumnMeta, ...]
    created_at: Any = None
    updated_at: Any = None
    semantic: dict[str, Any] | None = None
    # memo of what is derived from this version of the table (the dependency graph)
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def schema(self) -> str:
        return schema_name(self.workspace_id)

    @property
    def physical(self) -> str:
        return table_name(self.id)

    def column(self, name: str) -> ColumnMeta | None:
        """Column by its human name (exact match)."""
        for col in self.columns:
            if col.name == name:
                return col
        return None

    def column_by_id(self, column_id: int) -> ColumnMeta | None:
        for col in self.columns:
            if col.id == column_id:
                return col
        return None

    def column_ref(self, ref: str | int) -> ColumnMeta | None:
        """Column by name, or by id when ``ref`` is an int or all digits and no name matches."""
        if isinstance(ref, str):
            col = self.column(ref)
            if col is not None:
                return col
            if not (ref.isascii() and ref.isdigit()):
                return None
        return self.column_by_id(int(ref))


@dataclass(frozen=True, slots=True)
class WorkspaceSchema:
    """All tables of one workspace, as cached by the API.

    ``derived`` memoises what requests compute from this version of the schema (e.g.
    translated SQL plans); a schema change builds a new object, so it never goes stale.
    """

    workspace_id: int
    tables: dict[int, TableMeta]
    derived: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def table(self, ref: str | int) -> TableMeta | None:
        """Table by id (int or digit string) or by exact name."""
        if isinstance(ref, int) or (isinstance(ref, str) and ref.isascii() and ref.isdigit()):
            t = self.tables.get(int(ref))
            if t is not None:
                return t
        if isinstance(ref, str):
            for t in self.tables.values():
                if t.name == ref:
                    return t
        return None


def definition_of(row: Any) -> str:
    """A digest of a column's stored definition (its ``wds.columns`` row): what its values
    are computed by. References are stored by id, so a rename leaves it unchanged
    (storage/guards.py compares it when a run writes its values back)."""
    text = orjson.dumps([row["type"], row.get("formula"), row.get("config") or {}, row.get("broken"),
                         row.get("value_type")], option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(text, digest_size=8).hexdigest()
