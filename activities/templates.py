"""Sandboxed Jinja2 templates over a record (http_request, ai_agent, record steps).

``{{ Name }}`` reads a column whose name is a valid identifier; ``{{ fields["Due Date"] }}``
reads any column; ``{{ record_id }}`` and, inside a loop, ``{{ item }}`` are also defined.
The sandbox refuses attribute tricks (``__class__`` and friends) with SecurityError.

Budgets (issue #22, docs/security.md): a template is at most ``MAX_SOURCE``
characters and is only *compiled* when a column is created, with constant folding off
(Jinja2 folds constant expressions at compile time: ``{{ 'a' * 10**9 }}`` or
``{{ 'a'|center(10**9) }}`` would be built then, on the API's event loop). At render
time ``*``, ``**``, ``+`` and ``%`` are intercepted and refused past ``MAX_OUTPUT``
characters or huge numbers. Rendering runs in the sandbox processes (CPU budget and
memory cap per value, :mod:`activities.sandbox`) unless every template is *simple*:
plain ``{{ name }}`` / ``{{ fields["x"] }}`` substitutions, at most ``SIMPLE_MAX``
of them, whose cost is bounded by the record's size.
"""

from __future__ import annotations

import re
import time
from functools import lru_cache
from typing import Any

from jinja2 import TemplateError, Undefined, nodes
from jinja2.compiler import CodeGenerator
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from activities.formula import BUDGET_EXCEEDED, over
from storage import jsontext
from storage.refs import strings

MAX_OUTPUT = 1_000_000
MAX_SOURCE = 20_000  # characters per template string (checked when a column is created)
MAX_INT_BITS = 4_096  # an integer result of * or ** larger than this is refused
TEMPLATE_CPU_S = 0.1  # CPU per rendered value (in the sandbox)
RENDER_WALL_S = 5.0  # wall clock for a step's templates over its batch
SIMPLE_MAX = 16  # substitutions per template string, to render inline
SIMPLE_VALUE_MAX = 64  # substitutions per step's value (every string of its config), to render inline
MAX_VALUE_OUTPUT = 5_000_000  # characters rendered for one step's value, all its strings together
_SIMPLE_EXPR = re.compile(
    r"\{\{-?\s*[A-Za-z_]\w*(?:\.[A-Za-z_]\w*|\[\s*(?:\"[^\"\\{}%#]*\"|'[^'\\{}%#]*'|\d{1,6})\s*\])*"
    r"\s*(?:\|\s*(?:tojson|json|string|lower|upper|trim|urlencode)\s*)?-?\}\}"
)
_PCT_WIDTH = re.compile(r"%[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?")


class TemplateFailure(Exception):
    """A template that does not parse, breaks the sandbox, or renders too much."""


def _tojson(value: Any) -> str:
    return jsontext.dumps(value, default=str).decode()


class _NoFolding(CodeGenerator):
    """Jinja2's code generator folds constant output expressions (filters included) at
    compile time; here only literal data is, everything else is computed at render time,
    under the render budgets."""

    def _output_child_to_const(self, node: nodes.Expr, frame: Any, finalize: Any) -> str:
        if isinstance(node, (nodes.TemplateData, nodes.Const)):
            return super()._output_child_to_const(node, frame, finalize)
        raise nodes.Impossible()


def _size(value: Any) -> int | None:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else None


def _check_binop(op: str, left: Any, right: Any) -> None:
    """Refuse an operation whose result would be huge (before computing it)."""
    ints = isinstance(left, int) and isinstance(right, int)
    if op == "**" and ints and abs(left) > 1 and right > 0 and left.bit_length() * right > MAX_INT_BITS:
        raise SecurityError("the result of ** is too large")
    if op == "*":
        if ints and left.bit_length() + right.bit_length() > MAX_INT_BITS:
            raise SecurityError("the result of * is too large")
        for seq, n in ((left, right), (right, left)):
            size = _size(seq)
            if size is not None and isinstance(n, int) and size * max(n, 0) > MAX_OUTPUT:
                raise SecurityError(f"repetition longer than {MAX_OUTPUT} items")
    if op == "+":
        a, b = _size(left), _size(right)
        if a is not None and b is not None and a + b > MAX_OUTPUT:
            raise SecurityError(f"concatenation longer than {MAX_OUTPUT} items")
    if op == "%" and isinstance(left, str):
        for m in _PCT_WIDTH.finditer(left):
            for width in m.groups():
                if width == "*" or (width is not None and int(width) > 1_000):
                    raise SecurityError("format width too large")


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """The sandbox with bounded arithmetic and no constant folding."""

    code_generator_class = _NoFolding
    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _check_binop(operator, left, right)
        return super().call_binop(context, operator, left, right)


@lru_cache(maxsize=1)
def _env() -> BoundedSandbox:
    env = BoundedSandbox(undefined=Undefined, autoescape=False, optimized=False)
    env.filters["tojson"] = _tojson
    env.filters["json"] = _tojson
    return env


@lru_cache(maxsize=2048)
def _compile(source: str) -> Any:
    if len(source) > MAX_SOURCE:
        raise TemplateFailure(f"template longer than {MAX_SOURCE} characters")
    return _env().from_string(source)


def check_template(source: str) -> None:
    """Raise TemplateFailure if ``source`` is too long or does not parse (used at column
    creation; compiling never evaluates anything, see the module docstring)."""
    try:
        _compile(source)
    except TemplateError as exc:
        raise TemplateFailure(f"template error: {exc}") from None
    except (RecursionError, MemoryError):
        raise TemplateFailure("template nested too deeply") from None


def render(source: str, fields: dict[str, Any], **extra: Any) -> str:
    """Render ``source`` over a record's fields.

    Raises:
        TemplateFailure: syntax error, sandbox violation or oversized output.
        MemoryError: out of memory (in the sandbox: past the value's memory cap).
    """
    if "{" not in source:
        return source
    context = {k: v for k, v in fields.items() if isinstance(k, str) and k.isidentifier()}
    context["fields"] = fields
    context.update(extra)
    try:
        out = _compile(source).render(context)
    except SecurityError as exc:
        raise TemplateFailure(f"template refused by the sandbox: {exc}") from None
    except TemplateError as exc:
        raise TemplateFailure(f"template error: {exc}") from None
    except MemoryError:
        raise
    except Exception as exc:  # errors raised inside filters on odd values
        raise TemplateFailure(f"template failed: {type(exc).__name__}: {exc}") from None
    if len(out) > MAX_OUTPUT:
        raise TemplateFailure("template output is larger than 1 MB")
    return out


def render_value(value: Any, fields: dict[str, Any], **extra: Any) -> Any:
    """Render every string inside a JSON value (dicts and lists recursively); all of them
    together at most :data:`MAX_VALUE_OUTPUT` characters (each string's own limit is
    ``MAX_OUTPUT``: a body of 1,000 keys each ``{{ T }}`` over a 1 MB ``T`` rendered 1 GB).

    Raises:
        TemplateFailure: a template failed, or the rendered strings are too large.
    """
    total = [0]
    return _render_value(value, fields, extra, total)


def _render_value(value: Any, fields: dict[str, Any], extra: dict[str, Any], total: list[int]) -> Any:
    if isinstance(value, str):
        out = render(value, fields, **extra)
        total[0] += len(out)
        if total[0] > MAX_VALUE_OUTPUT:
            raise TemplateFailure(f"the rendered templates of one step are larger than {MAX_VALUE_OUTPUT:,} characters")
        return out
    if isinstance(value, dict):
        return {k: _render_value(v, fields, extra, total) for k, v in value.items()}
    if isinstance(value, list):
        return [_render_value(v, fields, extra, total) for v in value]
    return value



@lru_cache(maxsize=4096)
def is_simple(source: str) -> bool:
    """Only plain substitutions (at most ``SIMPLE_MAX``): safe to render inline."""
    if "{" not in source:
        return True
    if len(source) > MAX_SOURCE:
        return False
    rest, n = _SIMPLE_EXPR.subn("", source)
    return n <= SIMPLE_MAX and "{{" not in rest and "{%" not in rest and "{#" not in rest


def simple_value(value: Any) -> bool:
    """Every string of a JSON value is simple (:func:`is_simple`) and they substitute at
    most :data:`SIMPLE_VALUE_MAX` times together: the whole value may render inline (each
    substitution copies at most one value of the record)."""
    count = 0
    for text in strings(value):
        if not is_simple(text):
            return False
        if "{" in text:
            count += _substitutions(text)
            if count > SIMPLE_VALUE_MAX:
                return False
    return True


@lru_cache(maxsize=4096)
def _substitutions(source: str) -> int:
    return len(_SIMPLE_EXPR.findall(source))


def over_budget(detail: str) -> str:
    return over(detail)


async def render_many(
    items: list[tuple[Any, dict[str, Any], dict[str, Any]]], sandbox: Any, *, deadline: float | None = None,
    workspace: int | None = None,
) -> list[tuple[bool, Any]]:
    """Render each (JSON value holding templates, fields, extra): ``(True, rendered)`` or
    ``(False, error message)``, in order. Simple templates render here; anything else in
    one round trip to the sandbox under the render budgets (``BUDGET_EXCEEDED`` errors)."""
    if all(simple_value(value) for value, _, _ in items):
        out: list[tuple[bool, Any]] = []
        for value, fields, extra in items:
            try:
                out.append((True, render_value(value, fields, **extra)))
            except TemplateFailure as exc:
                out.append((False, str(exc)))
        return out
    limit = time.monotonic() + RENDER_WALL_S
    return await sandbox.render(items, TEMPLATE_CPU_S, limit if deadline is None else min(limit, deadline),
                                workspace=workspace)


__all__ = ["BUDGET_EXCEEDED", "BoundedSandbox", "TemplateFailure", "check_template", "is_simple", "render",
           "render_many", "render_value", "simple_value"]
