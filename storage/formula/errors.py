"""Evaluation-time error values of the formula language.

Syntax problems are caught when a column is created and raise
:class:`storage.errors.InvalidFormula`; everything that can only go wrong for a given
record (a division by zero, text where a number is needed, a script that runs too long)
raises :class:`FormulaError` carrying an Airtable-style error value as ``code``. The
pipeline stores that as the cell's step error; a formula never raises anything else.
"""

from __future__ import annotations

ERROR = "#ERROR!"
VALUE = "#VALUE!"
DIV0 = "#DIV/0!"
NUM = "#NUM!"
# Reserved for callers: a formula referencing a column that no longer exists.
REF = "#REF!"
TIMEOUT = "#TIMEOUT!"
MEMORY = "#MEMORY!"

ERROR_CODES = frozenset({ERROR, VALUE, DIV0, NUM, REF, TIMEOUT, MEMORY})


class FormulaError(Exception):
    """A formula could not be evaluated for one record.

    Attributes:
        code: One of :data:`ERROR_CODES` (``"#DIV/0!"``, ``"#VALUE!"``…).
        message: A human-readable explanation.
    """

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code} {message}".strip())
        self.code = code
        self.message = message or code

    def __reduce__(self) -> tuple[type[FormulaError], tuple[str, str]]:
        # Keeps the exception picklable across process/activity boundaries.
        return (FormulaError, (self.code, self.message))
