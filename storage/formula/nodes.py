"""Syntax tree of the formula language and its printer.

The parser builds these nodes; :func:`to_source` prints them back as canonical source,
so ``parse(to_source(parse(s))) == parse(s)`` for every accepted formula. Runs of
left-associative operators of one precedence level are kept flat in a :class:`Chain`
(``a + b - c`` is one node), so long sums don't deepen the tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Precedence levels, lowest first (Excel's order; Airtable has no ^).
COMPARE, CONCAT, ADDITIVE, MULTIPLICATIVE, POWER = range(5)
LEVEL_OPS: dict[int, tuple[str, ...]] = {
    COMPARE: ("=", "!=", "<>", "<", ">", "<=", ">="),
    CONCAT: ("&",),
    ADDITIVE: ("+", "-"),
    MULTIPLICATIVE: ("*", "/", "%"),
    POWER: ("^",),
}
OP_LEVEL = {op: level for level, ops in LEVEL_OPS.items() for op in ops}


@dataclass(frozen=True, slots=True)
class Num:
    value: int | float
    depth: int = field(default=1, compare=False)


@dataclass(frozen=True, slots=True)
class Str:
    value: str
    depth: int = field(default=1, compare=False)


@dataclass(frozen=True, slots=True)
class Bool:
    value: bool
    depth: int = field(default=1, compare=False)


@dataclass(frozen=True, slots=True)
class Field:
    """A ``{Column Name}`` reference."""

    name: str
    depth: int = field(default=1, compare=False)


@dataclass(frozen=True, slots=True)
class Call:
    """A function call; ``name`` is upper-cased."""

    name: str
    args: tuple[Node, ...]
    depth: int = field(default=1, compare=False)


@dataclass(frozen=True, slots=True)
class Unary:
    op: str  # "-" or "+"
    operand: Node
    depth: int = field(default=1, compare=False)


@dataclass(slots=True)
class Chain:
    """``first op1 x1 op2 x2 …`` at one precedence ``level``, evaluated left to right."""

    level: int
    first: Node
    rest: list[tuple[str, Node]]
    depth: int = field(default=1, compare=False)


Node = Num | Str | Bool | Field | Call | Unary | Chain


def quote_string(value: str) -> str:
    """Render text as a double-quoted formula string literal."""
    escaped = (
        value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        .replace("\r", "\\r").replace("\t", "\\t")
    )
    return f'"{escaped}"'


def quote_field(name: str) -> str:
    """Render a column name as a ``{...}`` reference, escaping ``\\`` and ``}``."""
    return "{" + name.replace("\\", "\\\\").replace("}", "\\}") + "}"


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    text = repr(value)
    return text.removesuffix(".0")


def to_source(node: Node) -> str:
    """Print a tree as canonical formula source (minimal parentheses)."""
    if isinstance(node, Num):
        return _number(node.value)
    if isinstance(node, Str):
        return quote_string(node.value)
    if isinstance(node, Bool):
        return "TRUE" if node.value else "FALSE"
    if isinstance(node, Field):
        return quote_field(node.name)
    if isinstance(node, Call):
        return f"{node.name}({', '.join(to_source(a) for a in node.args)})"
    if isinstance(node, Unary):
        inner = to_source(node.operand)
        if isinstance(node.operand, Chain):
            inner = f"({inner})"
        return f"{node.op}{inner}"

    def operand(child: Node) -> str:
        text = to_source(child)
        return f"({text})" if isinstance(child, Chain) and child.level <= node.level else text

    parts = [operand(node.first)]
    for op, child in node.rest:
        parts.append(f" {op} {operand(child)}")
    return "".join(parts)


def field_names(node: Node) -> frozenset[str]:
    """Every column name referenced in the tree (iterative walk)."""
    names: set[str] = set()
    stack: list[Node] = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Field):
            names.add(n.name)
        elif isinstance(n, Call):
            stack.extend(n.args)
        elif isinstance(n, Unary):
            stack.append(n.operand)
        elif isinstance(n, Chain):
            stack.append(n.first)
            stack.extend(child for _, child in n.rest)
    return frozenset(names)
