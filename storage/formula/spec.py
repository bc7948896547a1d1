"""Function descriptors and the evaluation context handed to function implementations."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(slots=True)
class EvalContext:
    """What one evaluation sees: the record's field values and the injected current time."""

    fields: Mapping[str, Any]
    now: datetime


Thunk = Callable[[EvalContext], Any]


@dataclass(frozen=True)
class FunctionSpec:
    """One function of the formula language.

    Attributes:
        name: Upper-case name, as written in formulas (case-insensitively).
        signature: e.g. ``"LEFT(text, [count])"``; ``[x]`` is optional, ``...`` repeats.
        category: ``text``, ``numeric``, ``logical``, ``date``, ``array`` or ``regex``.
        description: One line for docs and the MCP ``check_column_types`` tool.
        min_args: Fewest arguments accepted (derived from ``signature``).
        max_args: Most arguments accepted, ``None`` when variadic.
        lazy: The implementation receives unevaluated arguments (IF, SWITCH, IFERROR…).
    """

    name: str
    signature: str
    category: str
    description: str
    impl: Callable[[EvalContext, list[Any]], Any] = field(repr=False, compare=False)
    min_args: int = 0
    max_args: int | None = 0
    lazy: bool = False

    def arity_text(self) -> str:
        """Human-readable arity, e.g. ``"1 to 2 arguments"``."""
        if self.max_args is None:
            return f"at least {self.min_args} argument{'s' if self.min_args != 1 else ''}"
        if self.min_args == self.max_args:
            return f"{self.min_args} argument{'s' if self.min_args != 1 else ''}"
        return f"{self.min_args} to {self.max_args} arguments"

    def describe(self) -> dict[str, Any]:
        """JSON-able description for listings."""
        return {
            "name": self.name,
            "signature": self.signature,
            "category": self.category,
            "description": self.description,
            "min_args": self.min_args,
            "max_args": self.max_args,
        }


_PARAMS = re.compile(r"\((.*)\)$")


def arity(signature: str) -> tuple[int, int | None]:
    """Derive ``(min, max)`` from a signature such as ``"MID(text, start, [count])"``."""
    inner = _PARAMS.search(signature)
    params = [p.strip() for p in inner.group(1).split(",")] if inner and inner.group(1).strip() else []
    required = sum(1 for p in params if not p.startswith("[") and p != "...")
    return required, (None if "..." in params else len(params))


class Registry:
    """Collects the functions one module defines."""

    def __init__(self, category: str) -> None:
        self.category = category
        self.specs: list[FunctionSpec] = []

    def __call__(
        self, signature: str, description: str, *, lazy: bool = False, category: str | None = None
    ) -> Callable[[Callable[[EvalContext, list[Any]], Any]], Callable[[EvalContext, list[Any]], Any]]:
        """Decorator registering ``impl`` under the name in ``signature``."""

        def register(
            impl: Callable[[EvalContext, list[Any]], Any],
        ) -> Callable[[EvalContext, list[Any]], Any]:
            lo, hi = arity(signature)
            name = signature.split("(", 1)[0].strip().upper()
            self.specs.append(
                FunctionSpec(name, signature, category or self.category, description, impl, lo, hi, lazy)
            )
            return impl

        return register

    def alias(self, name: str, target: str, description: str) -> None:
        """Register ``name`` as another spelling of an already-defined function."""
        base = next(s for s in self.specs if s.name == target)
        signature = name + base.signature[len(base.name):]
        self.specs.append(
            FunctionSpec(name, signature, base.category, description, base.impl, base.min_args,
                         base.max_args, base.lazy)
        )
