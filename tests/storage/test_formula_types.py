"""The value type of a formula, read from its syntax tree (storage/formula/types.py), of
a computed column (storage/valuetype.py), and whether a result fits it (value_fits)."""

from __future__ import annotations

import pytest

from storage.errors import ValidationError
from storage.formula import compile_formula
from storage.formula.types import infer_type
from storage.schema import ColumnType, value_fits
from storage.valuetype import check_result_type, field_types, value_type_of


def _infer(source: str, **fields: str) -> str:
    lookup = field_types({name: (kind, None) for name, kind in fields.items()})
    tree = compile_formula(source).tree
    assert tree is not None
    return infer_type(tree, lookup)


@pytest.mark.parametrize("source, expected", [
    ("1 + 2", "number"), ("{A} * 2", "number"), ("-{A}", "number"), ("ROUND({A} / 3, 2)", "number"),
    ("LEN({T})", "number"), ("YEAR({D})", "number"), ("DATETIME_DIFF({D}, NOW(), 'days')", "number"),
    ("SUM({A}, 1)", "number"), ("MAX(1, {A})", "number"),
    ('"a" & {A}', "text"), ("UPPER({T})", "text"), ('CONCAT("x", 1)', "text"), ("DATESTR(NOW())", "text"),
    ('REGEX_REPLACE({T}, "a", "b")', "text"), ("ARRAYJOIN({T})", "text"),
    ("TODAY()", "date"), ('DATEADD({D}, 1, "days")', "date"), ('DATETIME_PARSE("2024-01-01")', "date"),
    ("{A} > 1", "boolean"), ("AND({A}, {B})", "boolean"), ("NOT({A})", "boolean"), ("ISBLANK({A})", "boolean"),
    ('REGEX_MATCH({T}, "a")', "boolean"), ("TRUE()", "boolean"), ('IS_BEFORE({D}, NOW())', "boolean"),
    ('IF({A} > 0, "pos", "neg")', "text"), ("IF({A}, 1)", "number"), ("IF({A}, BLANK(), 2)", "number"),
    ('IF({A}, 1, "x")', "json"), ('IFERROR(1 / {A}, 0)', "number"), ('IFERROR(1 / {A}, "none")', "json"),
    ('SWITCH({A}, 1, "one", 2, "two", "many")', "text"), ('SWITCH({A}, 1, "one", 2)', "json"),
    ("MAX(TODAY(), {D})", "date"), ('MAX(1, "x")', "json"),
    ('SPLIT({T}, ",")', "json"), ("ARRAYUNIQUE({T})", "json"), ("BLANK()", "json"), ('ERROR("x")', "json"),
    # a bare reference reads the column's type; unknown columns are unsure
    ("{A}", "number"), ("{T}", "text"), ("{D}", "date"), ("{C}", "boolean"), ("{S}", "text"), ("{F}", "json"),
    ("{Nope}", "json"), ('IF({C}, {A}, 0)', "number"),
])
def test_formula_types(source, expected):
    fields = {"A": "number", "B": "number", "T": "text", "D": "date", "C": "checkbox", "S": "single_select",
              "F": "file"}
    assert _infer(source, **fields) == expected


def test_computed_reference_reads_its_value_type():
    lookup = field_types({"@5": ("formula", "number"), "@6": ("http_request", "json")})
    assert value_type_of(ColumnType.FORMULA, "{@5} + 0", {}, lookup) == "number"
    assert value_type_of(ColumnType.FORMULA, "{@5}", {}, lookup) == "number"
    assert value_type_of(ColumnType.FORMULA, "{@6}", {}, lookup) == "json"


def test_column_value_types_by_kind_and_declaration():
    assert value_type_of(ColumnType.TEXT, None, {}) is None
    assert value_type_of(ColumnType.FORMULA, "1 + 1", {}) == "number"
    assert value_type_of(ColumnType.FORMULA, "1 + 1", {"result_type": "text"}) == "text"
    assert value_type_of(ColumnType.FORMULA, "return 1", {"language": "javascript"}) == "json"
    assert value_type_of(ColumnType.FORMULA, "return 1", {"language": "javascript", "result_type": "number"}) == "number"
    assert value_type_of(ColumnType.FORMULA, "(((", {}) == "json"  # no longer parses: unsure
    assert value_type_of(ColumnType.AI_AGENT, None, {"prompt": "x"}) == "text"
    assert value_type_of(ColumnType.AI_AGENT, None, {"prompt": "x", "output": "json"}) == "json"
    assert value_type_of(ColumnType.HTTP_REQUEST, None, {"url": "http://x"}) == "json"
    assert value_type_of(ColumnType.JSON_PARSER, None, {}) == "json"
    assert value_type_of(ColumnType.CREATE_RECORD, None, {}) == "number"


@pytest.mark.parametrize("kind, config", [
    (ColumnType.FORMULA, {"result_type": "integer"}), (ColumnType.FORMULA, {"result_type": None}),
    (ColumnType.FORMULA, {"result_type": ["number"]}), (ColumnType.TEXT, {"result_type": "text"}),
])
def test_bad_declarations_are_refused(kind, config):
    with pytest.raises(ValidationError) as err:
        check_result_type(kind, config)
    assert err.value.code == "INVALID_RESULT_TYPE"


@pytest.mark.parametrize("value_type, value, fits", [
    ("number", 1, True), ("number", 1.5, True), ("number", True, False), ("number", "1", False),
    ("text", "a", True), ("text", 1, False), ("boolean", False, True), ("boolean", 0, False),
    ("date", "2024-01-01T00:00:00+00:00", True), ("date", "2024-01-01T10:00:00.123456-05:00", True),
    ("date", "2024-01-01T00:00:00Z", True), ("date", "2024-01-01", False), ("date", "2024-02-31T00:00:00Z", False),
    ("date", "2024-01-01T00:00:00", False), ("json", {"a": 1}, True), ("number", None, True), ("text", [1], False),
])
def test_value_fits(value_type, value, fits):
    assert value_fits(value_type, value) is fits
