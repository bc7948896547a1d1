"""What one row of an SQL endpoint query may copy: a budget decided at translation time.

A text value holds up to 1,000,000 characters (up to 4 MB in UTF-8) and is stored
TOASTed: reading it as a pointer costs nothing, but every function that looks at its
characters *detoasts* it (a full copy) and every function that builds a text builds
another, and PostgreSQL keeps those copies until the row is done (the per-tuple memory
context); it does not evaluate a repeated expression once. ``700 × lower(T) AS aN`` over
one 1,000,000-character row took the backend to 3.4 GB; ``J IN (200 numbers)`` over a
computed column of the simple form, 1.15 GB per row.

So each translated expression carries the number of such copies it may make per row
(:data:`COPIES`, measured with the backend's VmHWM, docs/decisions.md), the statement
adds them up, and a query past :data:`MAX_COPIES` is refused (``INVALID_SQL``) before
anything runs. A copy is of one value of at most 1,000,000 characters, so the budget
bounds what one row builds at ``MAX_COPIES × 4 MB``. Numbers, dates, ids, booleans and
select labels are short: expressions over them cost nothing, and so do comparisons of
texts (PostgreSQL frees their copies at once), ``coalesce``, ``nullif``, ``CASE``,
``COUNT`` and the bare columns of the select list (the answer's cap bounds those).
"""

from __future__ import annotations

from storage.errors import InvalidSQL

# Long-value copies one row of a query may make (each ≤ 1,000,000 characters, ≤ 4 MB):
# 64 × 4 MB = 256 MB at worst per backend (64 MB for ASCII text), eight queries at once
# (the per-workspace gate) 2 GB. See docs/decisions.md for the measurements.
MAX_COPIES = 64

# What each construct copies per row, measured (docs/decisions.md "Values built inside one row"):
DETOAST = 1  # reading a stored (TOASTed) text's characters: length, LIKE, lower…'s argument
BUILD = 1  # a function's new text: lower, upper, trim, ||, ILIKE's lowered operand
COMPUTED_TEXT = 2  # a computed column read as text (c #>> '{}'): the jsonb detoasted + the text
COMPUTED_NUMBER = 4  # read as a number (jsonb_typeof, the text, the numeric test and cast)
COMPUTED_BOOLEAN = 1  # a boolean formula (jsonb_typeof + cast)
AGGREGATE_KEEP = 1  # MIN/MAX keep their current value (a copy) beyond the row
OUTPUT_BUILT = 2  # a built long value in the select list: the result row and the page's window

# Where the budget is documented (the refusal says so)
_WHAT = ("lower, upper, trim, length, LIKE/ILIKE, ||, MIN/MAX over a text, and each use of a"
         " computed column in an expression, count; see the SQL documentation")


def check_copies(copies: int) -> None:
    """Refuse a query whose rows may copy long values more than :data:`MAX_COPIES` times.

    Raises:
        InvalidSQL: ``copies`` is over the budget (the message names both figures).
    """
    if copies > MAX_COPIES:
        raise InvalidSQL(
            f"this query would copy long text values {copies} times per row, more than the {MAX_COPIES}"
            f" allowed ({_WHAT}): use fewer text functions or conditions on texts, or refer to a"
            " result column by its name or position in ORDER BY and GROUP BY")
