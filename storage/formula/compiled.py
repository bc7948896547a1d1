"""``compile_formula``: parse once, evaluate per record."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any

from ..errors import InvalidFormula
from .errors import ERROR, NUM, VALUE, FormulaError
from .evaluator import build
from .js import compile_js
from .nodes import Node, field_names, to_source
from .parser import parse
from .spec import EvalContext
from .values import to_json

LANGUAGES = ("excel", "javascript")


class CompiledFormula:
    """A formula checked and ready to evaluate; immutable and safe to share between threads.

    Attributes:
        source: The formula as written.
        language: ``"excel"`` or ``"javascript"``.
        references: Names of the columns the formula reads (``{Name}`` references).
    """

    __slots__ = ("_js", "_run", "_tree", "language", "references", "source")

    def __init__(self, source: str, language: str, references: frozenset[str], tree: Node | None,
                 js: Any = None) -> None:
        self.source = source
        self.language = language
        self.references = references
        self._tree = tree
        self._run = build(tree) if tree is not None else None
        self._js = js

    @property
    def tree(self) -> Node | None:
        """The syntax tree (``None`` for JavaScript formulas)."""
        return self._tree

    def canonical(self) -> str:
        """The formula re-printed in canonical form (JavaScript: the source unchanged)."""
        return to_source(self._tree) if self._tree is not None else self.source

    def evaluate(self, fields: Mapping[str, Any], *, now: datetime) -> Any:
        """Evaluate against one record.

        Args:
            fields: Column name → value as the API represents it (text, number, ISO date
                string, bool, option label(s), related id, file URLs, computed JSON).
                Missing names read as blank.
            now: The current time to use for NOW()/TODAY() (workflow time in a workflow).

        Returns:
            A JSON-able value: text, number, bool, ``None``, a list, or an ISO-8601 string
            for dates.

        Raises:
            FormulaError: The formula has no value for this record; ``code`` is an
                error value such as ``"#DIV/0!"``. Nothing else is raised.
        """
        try:
            if self._js is not None:
                return self._js.evaluate(fields, now=now)
            return to_json(self._run(EvalContext(fields if fields is not None else {}, now)))  # type: ignore[misc]
        except FormulaError:
            raise
        except RecursionError:
            raise FormulaError(ERROR, "formula nested too deeply") from None
        except (OverflowError, ArithmeticError):
            raise FormulaError(NUM, "number out of range") from None
        except MemoryError:
            raise FormulaError(VALUE, "result too large") from None
        except Exception as exc:  # noqa: BLE001 - the contract: only FormulaError escapes
            raise FormulaError(ERROR, f"cannot evaluate: {type(exc).__name__}") from None

    def __repr__(self) -> str:
        return f"CompiledFormula({self.source!r}, language={self.language!r})"


@lru_cache(maxsize=2048)
def _compile(source: str, language: str) -> CompiledFormula:
    if language == "javascript":
        js = compile_js(source)
        return CompiledFormula(source, language, js.references, None, js)
    tree = parse(source)
    return CompiledFormula(source, language, field_names(tree), tree)


def compile_formula(source: str, *, language: str = "excel") -> CompiledFormula:
    """Check and compile a formula (cached by source and language).

    >>> compile_formula('{Price} * 2').evaluate({"Price": 21}, now=datetime(2024, 1, 1))
    42

    Args:
        source: The formula text.
        language: ``"excel"`` (the Airtable-like language, default) or ``"javascript"``.

    Raises:
        InvalidFormula: Syntax error (with line and column), unknown function or name,
            wrong number of arguments, nesting too deep, unknown language.
    """
    if language not in LANGUAGES:
        raise InvalidFormula(f"unknown formula language {language!r}; use one of {', '.join(LANGUAGES)}")
    if not isinstance(source, str):
        raise InvalidFormula("formula must be text")
    return _compile(source, language)
