"""Grammar of the formula language: precedence, references, literals and syntax errors."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from storage.errors import InvalidFormula
from storage.formula import compile_formula
from storage.formula.nodes import to_source
from storage.formula.parser import MAX_DEPTH, MAX_SOURCE, parse

NOW = datetime(2024, 1, 1, tzinfo=UTC)


def run(source: str, fields: dict[str, Any] | None = None) -> Any:
    return compile_formula(source).evaluate(fields or {}, now=NOW)


PRECEDENCE = [
    ("1 + 2 * 3", 7),
    ("(1 + 2) * 3", 9),
    ("10 - 4 - 3", 3),
    ("2 * 3 ^ 2", 18),
    ("2 ^ 3 ^ 2", 64),  # left-associative, as in Excel
    ("-2 ^ 2", 4),  # negation binds tighter than ^, as in Excel
    ("-(2 ^ 2)", -4),
    ("10 / 4 * 2", 5),
    ("7 % 4 + 1", 4),
    ('1 + 2 & 3', "33"),
    ('"a" & 1 = "a1"', True),
    ("1 + 1 = 2", True),
    ("2 > 1 = TRUE", True),
    ("--3", 3),
    ("+3", 3),
    ("1 - -1", 2),
    ("1.5e2 + .5", 150.5),
    ("  1\n+\t2  ", 3),
]


@pytest.mark.parametrize(("source", "expected"), PRECEDENCE)
def test_operators_follow_excel_precedence(source: str, expected: Any) -> None:
    assert run(source) == expected


LITERALS = [
    ('"double"', "double"),
    ("'single'", "single"),
    ('"say \\"hi\\""', 'say "hi"'),
    ("'it\\'s'", "it's"),
    ('"line\\nbreak\\ttab"', "line\nbreak\ttab"),
    ('"back\\\\slash"', "back\\slash"),
    ('"\\u00e9\\x41"', "éA"),
    ('"unknown \\q escape"', "unknown q escape"),
    ("TRUE", True),
    ("false", False),
    ("true()", True),
    ('if(1, "lower-case call")', "lower-case call"),
    ("12", 12),
    ("1.25", 1.25),
]


@pytest.mark.parametrize(("source", "expected"), LITERALS)
def test_literals_parse_with_escapes(source: str, expected: Any) -> None:
    assert run(source) == expected


REFERENCES = [
    ("{Price}", "Price"),
    ("{Unit Price}", "Unit Price"),
    ("{a.b.c}", "a.b.c"),
    ("{Prix unitaire (€)}", "Prix unitaire (€)"),
    ("{名前}", "名前"),
    ("{curly \\} brace}", "curly } brace"),
    ("{back\\\\slash}", "back\\slash"),
    ("{odd \\n stays}", "odd \\n stays"),
    ("{  padded  }", "  padded  "),
    ("{line\nbreak}", "line\nbreak"),
]


@pytest.mark.parametrize(("source", "name"), REFERENCES)
def test_column_references_allow_odd_names(source: str, name: str) -> None:
    formula = compile_formula(source)
    assert formula.references == frozenset({name})
    assert formula.evaluate({name: "v"}, now=NOW) == "v"
    assert parse(to_source(parse(source))) == parse(source)


def test_references_are_collected_from_the_whole_tree() -> None:
    formula = compile_formula('IF({A} > 1, CONCATENATE({B}, -{C}), {A} & {D e})')
    assert formula.references == frozenset({"A", "B", "C", "D e"})
    assert compile_formula("1 + 2").references == frozenset()


SYNTAX_ERRORS = [
    "",
    "   ",
    "1 +",
    "(1 + 2",
    "1 + 2)",
    '"unterminated',
    "'unterminated",
    "{Unclosed",
    "{}",
    "{   }",
    "1 2",
    "1 ** 2",
    "1 == 2",
    "SUM(1,)",
    "SUM(,1)",
    "NOSUCHFUNC(1)",
    "Price * 2",
    "IF(1)",
    "IF(1, 2, 3, 4)",
    "LEFT()",
    "BLANK(1)",
    "NOW(1)",
    "@",
    "1 # 2",
    "1e999999",
    "#",
    "{a} {b}",
]


@pytest.mark.parametrize("source", SYNTAX_ERRORS)
def test_bad_formulas_are_invalid_formula(source: str) -> None:
    with pytest.raises(InvalidFormula) as info:
        compile_formula(source)
    assert info.value.code == "INVALID_FORMULA"
    assert info.value.status == 400


def test_syntax_error_message_names_the_position() -> None:
    with pytest.raises(InvalidFormula) as info:
        compile_formula("1 +\n  * 2")
    assert "line 2" in info.value.message
    with pytest.raises(InvalidFormula) as info:
        compile_formula("UPPER({x}) + LOWR({y})")
    assert "column 14" in info.value.message


def test_deep_nesting_is_refused_at_compile_time() -> None:
    for source in (
        "-" * 5000 + "1",
        "ABS(" * 3000 + "1" + ")" * 3000,
        "IF(1, " * (MAX_DEPTH + 1) + "1" + ")" * (MAX_DEPTH + 1),
    ):
        with pytest.raises(InvalidFormula) as info:
            compile_formula(source)
        assert info.value.code == "INVALID_FORMULA"


def test_nesting_within_the_limit_evaluates() -> None:
    depth = MAX_DEPTH // 2 - 1
    assert run("ABS(" * depth + "-1" + ")" * depth) == 1
    # Parentheses alone add no tree depth, and LALR parsing does not recurse.
    assert run("(" * 5000 + "1" + ")" * 5000) == 1


def test_long_flat_chains_are_not_depth_limited() -> None:
    assert run(" + ".join(["1"] * 3000)) == 3000
    assert run(" & ".join(['"a"'] * 2000)) == "a" * 2000


def test_oversized_source_is_refused() -> None:
    with pytest.raises(InvalidFormula):
        compile_formula("1" + " + 1" * MAX_SOURCE)


def test_unknown_language_is_invalid_formula() -> None:
    with pytest.raises(InvalidFormula):
        compile_formula("1", language="cobol")


CANONICAL = [
    ("1+2*3", "1 + 2 * 3"),
    ("(1+2)*3", "(1 + 2) * 3"),
    ("(1+2)+3", "1 + 2 + 3"),
    ("1-(2-3)", "1 - (2 - 3)"),
    ("-(1+2)", "-(1 + 2)"),
    ("if({a}<>1,'x',\"y\")", 'IF({a} <> 1, "x", "y")'),
    ("{a\\}b}&'q\"'", '{a\\}b} & "q\\""'),
    ("true", "TRUE"),
    ("2.50", "2.5"),
]


@pytest.mark.parametrize(("source", "canonical"), CANONICAL)
def test_printer_renders_canonical_source(source: str, canonical: str) -> None:
    assert compile_formula(source).canonical() == canonical
    assert parse(canonical) == parse(source)


def test_compiled_formulas_are_cached() -> None:
    assert compile_formula("{x} + 1") is compile_formula("{x} + 1")
