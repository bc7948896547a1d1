"""The value type of a formula's result, read from its syntax tree (issue 24 item 1).

A computed column with a scalar value type (``number``, ``text``, ``date``, ``boolean``)
is indexed and filtered like a data column of that type (storage/ddl.py
``computed_value_expr``); ``json`` is the type of anything else — lists, objects, and
every formula whose result this module cannot be sure of. The inference is conservative:
a formula is given a scalar type only when every value it can produce (other than blank
or an error value) is of that type.

    >>> from storage.formula.parser import parse
    >>> infer_type(parse('{Price} * 2'))
    'number'
    >>> infer_type(parse('IF({Qty} > 0, "yes", "no")'))
    'text'
    >>> infer_type(parse('IF({Qty} > 0, 1, "none")'))
    'json'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .nodes import COMPARE, CONCAT, Bool, Call, Chain, Field, Node, Num, Str, Unary

NUMBER, TEXT, DATE, BOOLEAN, JSON = "number", "text", "date", "boolean", "json"
VALUE_TYPES: tuple[str, ...] = (NUMBER, TEXT, DATE, BOOLEAN, JSON)
SCALAR_TYPES = frozenset({NUMBER, TEXT, DATE, BOOLEAN})
_BLANK = "blank"  # BLANK() and ERROR(): no value of their own, fit any type

_FIXED: dict[str, str] = {}
for _names, _type in (
    (
        ("ABS AVERAGE CEILING COUNT COUNTA COUNTALL EVEN EXP FLOOR INT LN LOG LOG10 MOD ODD POWER"
         " ROUND ROUNDDOWN ROUNDUP SIGN SQRT SUM VALUE FIND SEARCH LEN DATEDIFF DATETIME_DIFF DAY"
         " HOUR MINUTE MONTH SECOND WEEKDAY WEEKNUM WORKDAY_DIFF YEAR TONOW FROMNOW"),
        NUMBER,
    ),
    (
        ("CONCAT CONCATENATE ENCODE_URL_COMPONENT LEFT LOWER LPAD MID REPLACE REPT RIGHT RPAD"
         " SUBSTITUTE T TRIM UPPER REGEX_EXTRACT REGEX_REPLACE ARRAYJOIN DATESTR TIMESTR DATETIME_FORMAT"),
        TEXT,
    ),
    ("DATEADD DATETIME_PARSE NOW TODAY SET_TIMEZONE WORKDAY", DATE),
    ("AND OR NOT XOR TRUE FALSE ISBLANK ISERROR IS_AFTER IS_BEFORE IS_SAME REGEX_MATCH", BOOLEAN),
    ("BLANK ERROR", _BLANK),
):
    for _name in _names.split():
        _FIXED[_name] = _type

# the data column types whose values a formula reads as one scalar type (storage/schema.py)
FIELD_TYPES = {"number": NUMBER, "text": TEXT, "date": DATE, "checkbox": BOOLEAN, "single_select": TEXT}

FieldType = Callable[[str], str | None]


def infer_type(tree: Node, field_type: FieldType | None = None) -> str:
    """The value type of ``tree``'s results: one of :data:`VALUE_TYPES`.

    ``field_type`` gives a referenced column's value type by name (``None`` when unknown);
    without it a bare ``{Field}`` reads as ``json``.
    """
    found = _infer(tree, field_type or (lambda _name: None))
    return JSON if found == _BLANK else found


def _common(types: Iterable[str]) -> str:
    """The one type every branch has (blank fits any), else ``json``."""
    out = _BLANK
    for t in types:
        if t == _BLANK:
            continue
        if out == _BLANK:
            out = t
        elif out != t:
            return JSON
    return out


def _infer(node: Node, field_type: FieldType) -> str:
    # recursive: the parser bounds a formula's nesting depth
    if isinstance(node, Num):
        return NUMBER
    if isinstance(node, Str):
        return TEXT
    if isinstance(node, Bool):
        return BOOLEAN
    if isinstance(node, Field):
        return field_type(node.name) or JSON
    if isinstance(node, Unary):
        return NUMBER
    if isinstance(node, Chain):
        if node.level == COMPARE:
            return BOOLEAN
        if node.level == CONCAT:
            return TEXT
        return NUMBER  # + - * / % ^ always give a number (or an error value)
    if isinstance(node, Call):
        fixed = _FIXED.get(node.name)
        if fixed is not None:
            return fixed
        args = node.args
        if node.name == "IF":
            return _common(_infer(a, field_type) for a in args[1:]) if len(args) > 2 else _common(
                [_infer(args[1], field_type)] if len(args) > 1 else [])
        if node.name == "IFERROR":
            return _common(_infer(a, field_type) for a in args)
        if node.name == "SWITCH":
            rest = args[1:]
            results = [rest[i] for i in range(1, len(rest), 2)]
            if len(rest) % 2:
                results.append(rest[-1])  # the default
            return _common(_infer(a, field_type) for a in results)
        if node.name in ("MIN", "MAX"):
            # numbers give a number, dates a date (fn_number._extreme); a mix is unsure
            found = _common(_infer(a, field_type) for a in args)
            return found if found in (NUMBER, DATE) else JSON
        return JSON  # arrays, SPLIT and anything new: unsure
    return JSON
