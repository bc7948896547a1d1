"""The formula language of ``formula`` columns.

Two languages: an Airtable-like expression language (``{Column}`` references,
arithmetic, ``&``, comparisons and the functions in :data:`FUNCTIONS`) parsed with a
real grammar, and JavaScript run in V8 with time and memory limits.

    >>> from datetime import datetime, timezone
    >>> f = compile_formula('IF({Qty} > 0, {Price} * {Qty}, "none")')
    >>> sorted(f.references)
    ['Price', 'Qty']
    >>> f.evaluate({"Price": 2.5, "Qty": 4}, now=datetime.now(timezone.utc))
    10

``compile_formula`` raises :class:`storage.errors.InvalidFormula` (``INVALID_FORMULA``)
for anything wrong with the text; ``evaluate`` raises only :class:`FormulaError`, whose
``code`` is an error value such as ``"#DIV/0!"``.
"""

from .compiled import LANGUAGES, CompiledFormula, compile_formula
from .errors import ERROR_CODES, FormulaError
from .functions import CATEGORIES, FUNCTIONS, describe_functions
from .spec import FunctionSpec

__all__ = [
    "CATEGORIES",
    "ERROR_CODES",
    "FUNCTIONS",
    "LANGUAGES",
    "CompiledFormula",
    "FormulaError",
    "FunctionSpec",
    "compile_formula",
    "describe_functions",
]
