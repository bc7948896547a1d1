"""The grammar of the formula language (lark, LALR) and the tree it builds.

Precedence, lowest first: comparisons ``= != <> < > <= >=``, concatenation ``&``,
``+ -``, ``* / %``, ``^``, unary ``- +`` (so ``-2^2`` is 4, as in Excel). All binary
operators associate to the left. Column references are ``{Name}``; inside the braces
``\\}`` stands for ``}`` and ``\\\\`` for a backslash. Strings take double or single quotes
with JavaScript escapes. Function names are case-insensitive; ``TRUE`` and ``FALSE``
may be written without parentheses.

The tree is built by callbacks while LALR parses (no recursive tree walk), and every node
records its depth, so deeply nested input is refused with ``INVALID_FORMULA`` rather than
exhausting the Python stack later.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from lark import Lark, Token, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from ..errors import InvalidFormula
from .errors import FormulaError
from .functions import FUNCTIONS
from .nodes import (
    ADDITIVE,
    COMPARE,
    CONCAT,
    MULTIPLICATIVE,
    POWER,
    Bool,
    Call,
    Chain,
    Field,
    Node,
    Num,
    Str,
    Unary,
)
from .values import parse_number_literal

MAX_SOURCE = 20_000
MAX_DEPTH = 100

_GRAMMAR = r"""
?start: expr
?expr: cmp
?cmp: cmp CMP concat -> compare
    | concat
?concat: concat "&" additive -> concat
    | additive
?additive: additive ADDOP term -> additive
    | term
?term: term MULOP power -> multiplicative
    | power
?power: power "^" unary -> power
    | unary
?unary: "-" unary -> neg
    | "+" unary -> pos
    | atom
?atom: NUMBER -> number
    | STRING -> string
    | FIELD -> field
    | NAME "(" [arglist] ")" -> call
    | NAME -> bare_name
    | "(" expr ")"
arglist: expr ("," expr)*

CMP: "<=" | ">=" | "<>" | "!=" | "=" | "<" | ">"
ADDOP: "+" | "-"
MULOP: "*" | "/" | "%"
NUMBER: /(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?/
STRING: /"(?:[^"\\]|\\.)*"/s | /'(?:[^'\\]|\\.)*'/s
FIELD: /\{(?:[^}\\]|\\.)*\}/s
NAME: /[A-Za-z_][A-Za-z0-9_]*/
%ignore /\s+/
"""

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "0": "\0"}
_STRING_ESCAPE = re.compile(r"\\(u\{[0-9A-Fa-f]{1,6}\}|u[0-9A-Fa-f]{4}|x[0-9A-Fa-f]{2}|.)", re.DOTALL)
_FIELD_ESCAPE = re.compile(r"\\([\\}])")


def _invalid(message: str, token: Token | None = None) -> InvalidFormula:
    if token is not None and token.line is not None:
        message = f"line {token.line}, column {token.column}: {message}"
    return InvalidFormula(message)


def _unescape_string(body: str) -> str:
    def repl(m: re.Match[str]) -> str:
        esc = m.group(1)
        if esc[0] in "ux" and len(esc) > 1:
            code = int(esc[1:].strip("{}"), 16)
            return chr(code) if code <= 0x10FFFF else "\ufffd"
        # As in JavaScript, an unknown escape is the character itself.
        return _ESCAPES.get(esc, esc)

    return _STRING_ESCAPE.sub(repl, body)


def _depth(*children: Node) -> int:
    depth = 1 + max((c.depth for c in children), default=0)
    if depth > MAX_DEPTH:
        raise InvalidFormula(f"formula is nested more than {MAX_DEPTH} levels deep")
    return depth


def _chain(level: int, left: Node, op: str, right: Node) -> Chain:
    if isinstance(left, Chain) and left.level == level:
        # Extend in place: the parser holds the only reference to a chain under construction.
        left.rest.append((op, right))
        left.depth = max(left.depth, _depth(right))
        return left
    return Chain(level, left, [(op, right)], depth=_depth(left, right))


class _Builder:
    """LALR callbacks turning matched rules into :mod:`nodes`."""

    def compare(self, children: list[Any]) -> Node:
        return _chain(COMPARE, children[0], str(children[1]), children[2])

    def concat(self, children: list[Any]) -> Node:
        return _chain(CONCAT, children[0], "&", children[1])

    def additive(self, children: list[Any]) -> Node:
        return _chain(ADDITIVE, children[0], str(children[1]), children[2])

    def multiplicative(self, children: list[Any]) -> Node:
        return _chain(MULTIPLICATIVE, children[0], str(children[1]), children[2])

    def power(self, children: list[Any]) -> Node:
        return _chain(POWER, children[0], "^", children[1])

    def neg(self, children: list[Any]) -> Node:
        return Unary("-", children[0], depth=_depth(children[0]))

    def pos(self, children: list[Any]) -> Node:
        return Unary("+", children[0], depth=_depth(children[0]))

    def number(self, children: list[Any]) -> Node:
        token = children[0]
        try:
            return Num(parse_number_literal(str(token)))
        except FormulaError:
            raise _invalid(f"number {str(token)[:40]!r} is out of range", token) from None

    def string(self, children: list[Any]) -> Node:
        return Str(_unescape_string(str(children[0])[1:-1]))

    def field(self, children: list[Any]) -> Node:
        token = children[0]
        name = _FIELD_ESCAPE.sub(r"\1", str(token)[1:-1])
        if not name.strip():
            raise _invalid("empty column reference {}", token)
        return Field(name)

    def arglist(self, children: list[Any]) -> list[Node]:
        return list(children)

    def call(self, children: list[Any]) -> Node:
        token, args = children[0], children[1] or []
        name = str(token).upper()
        spec = FUNCTIONS.get(name)
        if spec is None:
            raise _invalid(f"unknown function {token!s}()", token)
        if len(args) < spec.min_args or (spec.max_args is not None and len(args) > spec.max_args):
            raise _invalid(f"{name}() takes {spec.arity_text()}, got {len(args)}", token)
        return Call(name, tuple(args), depth=_depth(*args))

    def bare_name(self, children: list[Any]) -> Node:
        token = children[0]
        upper = str(token).upper()
        if upper in ("TRUE", "FALSE"):
            return Bool(upper == "TRUE")
        raise _invalid(
            f"unknown name {str(token)!r}: reference a column as {{{token}}}, call a function as {upper}()",
            token,
        )


@cache
def _parser() -> Lark:
    # Built on first use (tens of milliseconds), not at import.
    return Lark(
        _GRAMMAR, parser="lalr", transformer=_Builder(), maybe_placeholders=True  # type: ignore[arg-type]
    )


def _describe(exc: UnexpectedInput, source: str) -> str:
    where = f"line {exc.line}, column {exc.column}" if exc.line not in (None, -1) else "end of formula"
    if isinstance(exc, UnexpectedEOF) or (isinstance(exc, UnexpectedToken) and exc.token.type == "$END"):
        return "unexpected end of formula (unclosed parenthesis, brace or quote?)"
    if isinstance(exc, UnexpectedCharacters):
        pos = exc.pos_in_stream if exc.pos_in_stream is not None else -1
        ch = source[pos] if 0 <= pos < len(source) else ""
        if ch in "\"'{":
            return f"{where}: unterminated {'string' if ch != '{' else 'column reference'}"
        return f"{where}: unexpected character {ch!r}"
    if isinstance(exc, UnexpectedToken):
        return f"{where}: unexpected {str(exc.token)[:30]!r}"
    return f"{where}: syntax error"


def parse(source: str) -> Node:
    """Parse formula source into a tree.

    >>> from storage.formula.nodes import to_source
    >>> to_source(parse('IF({Price} > 10, "big", "small")'))
    'IF({Price} > 10, "big", "small")'

    Raises:
        InvalidFormula: on syntax errors, unknown functions or names, wrong arity,
            nesting deeper than ``MAX_DEPTH`` or source longer than ``MAX_SOURCE``.
    """
    if not isinstance(source, str):
        raise InvalidFormula("formula must be text")
    if len(source) > MAX_SOURCE:
        raise InvalidFormula(f"formula longer than {MAX_SOURCE} characters")
    if not source.strip():
        raise InvalidFormula("formula is empty")
    try:
        return _parser().parse(source)  # type: ignore[return-value]
    except InvalidFormula:
        raise
    except UnexpectedInput as exc:
        raise InvalidFormula(_describe(exc, source)) from None
    except RecursionError:
        raise InvalidFormula(f"formula is nested more than {MAX_DEPTH} levels deep") from None
