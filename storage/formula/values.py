"""Value model and coercions shared by the operators and functions.

Runtime values are ``None`` (blank), ``str``, ``bool``, ``int``/``float``,
:class:`datetime.datetime` (always timezone-aware) and ``list`` (multi-selects, files,
arrays). Field values arrive as the API represents them, so a date is an ISO-8601 string
until a date function or a comparison reads it as a date.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from .errors import NUM, VALUE, FormulaError

MAX_TEXT = 1_000_000
MAX_LIST = 100_000

_NUMERIC = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
# A strict ISO-8601 shape, so "dates compare as dates" without guessing at free text.
_ISO_DATE = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?"
    r"(?:Z|z|[+-]\d{2}(?::?\d{2})?)?)?"
)


def fail(code: str, message: str) -> FormulaError:
    """Build a :class:`FormulaError` (callers ``raise fail(...)``)."""
    return FormulaError(code, message)


def check_text(s: str) -> str:
    """Return ``s`` unless it is over the result size cap."""
    if len(s) > MAX_TEXT:
        raise fail(VALUE, f"text result longer than {MAX_TEXT} characters")
    return s


def check_number(x: float) -> float | int:
    """Reject NaN and infinities, which JSON cannot carry."""
    if isinstance(x, float) and not math.isfinite(x):
        raise fail(NUM, "result is not a finite number")
    return x


def join_text(parts: list[str], sep: str = "") -> str:
    """Join text, refusing results over the size cap before building them."""
    total = sum(len(p) for p in parts) + len(sep) * max(len(parts) - 1, 0)
    if total > MAX_TEXT:
        raise fail(VALUE, f"text result longer than {MAX_TEXT} characters")
    return sep.join(parts)


def is_blank(v: Any) -> bool:
    """Airtable's notion of empty: blank, empty text or an empty list."""
    return v is None or v == "" or (isinstance(v, list) and len(v) == 0)


def flatten(values: Iterable[Any]) -> list[Any]:
    """Flatten nested lists (iteratively, so deep input cannot overflow the stack)."""
    out: list[Any] = []
    stack: list[Iterable[Any]] = [iter(values)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, (list, tuple)):
                stack.append(iter(item))
                break
            out.append(item)
            if len(out) > MAX_LIST:
                raise fail(VALUE, f"list longer than {MAX_LIST} items")
        else:
            stack.pop()
    return out


def looks_like_date(v: Any) -> bool:
    return isinstance(v, datetime) or (isinstance(v, str) and _ISO_DATE.fullmatch(v) is not None)


def parse_iso(text: str) -> datetime | None:
    """Parse ISO-8601 text to an aware datetime (naive means UTC); ``None`` if it is not one."""
    s = text.strip()
    if not _ISO_DATE.fullmatch(s):
        return None
    try:
        if len(s) == 10:
            d = date.fromisoformat(s)
            return datetime(d.year, d.month, d.day, tzinfo=UTC)
        dt = datetime.fromisoformat(s.replace("z", "Z").replace(",", "."))
    except ValueError:
        return None
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)


def to_datetime(v: Any) -> datetime:
    """Coerce a value to an aware datetime or raise ``#VALUE!``."""
    if isinstance(v, datetime):
        return v if v.tzinfo is not None else v.replace(tzinfo=UTC)
    if isinstance(v, list) and len(v) == 1:
        return to_datetime(v[0])
    if isinstance(v, str):
        dt = parse_iso(v)
        if dt is not None:
            return dt
    raise fail(VALUE, f"not a date: {short(v)}")


def to_number(v: Any) -> float | int:
    """Coerce a value to a number: blank → 0, TRUE → 1, numeric text → its value."""
    if v is None:
        return 0
    if isinstance(v, bool):
        return 1 if v else 0
    if isinstance(v, (int, float)):
        return v
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, str):
        s = v.strip()
        if s == "":
            return 0
        if _NUMERIC.fullmatch(s):
            return parse_number_literal(s)
        raise fail(VALUE, f"not a number: {short(v)}")
    if isinstance(v, list) and len(v) <= 1:
        return to_number(v[0] if v else None)
    raise fail(VALUE, f"not a number: {short(v)}")


def parse_number_literal(s: str) -> float | int:
    """Parse numeric text; integers stay ``int`` while they are exact as doubles."""
    # Short digit strings only: int() of thousands of digits is slow (and capped).
    if len(s) <= 18 and re.fullmatch(r"[+-]?\d+", s):
        n = int(s)
        if abs(n) <= 2**53:
            return n
    try:
        x = float(s)
    except (ValueError, OverflowError):
        raise fail(NUM, f"number out of range: {short(s)}") from None
    return check_number(x)


def to_int(v: Any) -> int:
    """Coerce to an integer, truncating toward zero (as Excel does for counts)."""
    x = to_number(v)
    if isinstance(x, float):
        if not math.isfinite(x):
            raise fail(NUM, "not a finite number")
        return int(x)
    return x


def truthy(v: Any) -> bool:
    """Airtable truthiness: blank, empty text, 0, FALSE and empty lists are false."""
    if v is None:
        return False
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return v != 0 and not (isinstance(v, float) and math.isnan(v))
    if isinstance(v, (str, list, dict)):
        return len(v) > 0
    return True


def format_number(x: float) -> str:
    """Render a number like JavaScript's ``String(n)`` (no trailing ``.0``)."""
    if isinstance(x, bool):
        return "1" if x else "0"
    if isinstance(x, int):
        return str(x)
    if not math.isfinite(x):
        return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")
    if x == 0:
        return "0"
    if x.is_integer() and abs(x) < 1e21:
        return str(int(x))
    r = repr(x)
    if 1e-6 <= abs(x) < 1e21:
        if "e" in r:
            r = format(Decimal(r), "f")
        return r
    # JavaScript's exponent form: 1e+21, 1.5e-7.
    mantissa, _, exp = r.partition("e")
    if not exp:
        mantissa, _, exp = format(x, ".17g").partition("e")
    sign = "-" if exp.startswith("-") else "+"
    return f"{mantissa.removesuffix('.0')}e{sign}{int(exp.lstrip('+-'))}"


def format_datetime(dt: datetime) -> str:
    """ISO-8601 text of a datetime, as the API renders dates."""
    return dt.isoformat()


def to_text(v: Any) -> str:
    """Coerce a value to text: blank → "", numbers without ``.0``, lists joined by ", "."""
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, (int, float)):
        return format_number(v)
    if isinstance(v, datetime):
        return format_datetime(v)
    if isinstance(v, list):
        return check_text(", ".join(to_text(x) for x in flatten(v)))
    if isinstance(v, Decimal):
        return format_number(float(v))
    try:
        return check_text(json.dumps(v, ensure_ascii=False, separators=(",", ":"), default=str))
    except (TypeError, ValueError):
        return str(v)


def short(v: Any) -> str:
    """A short, safe rendering of a value for error messages."""
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def to_json(v: Any) -> Any:
    """Turn a runtime value into the JSON-able result of a formula."""
    if v is None or isinstance(v, (str, bool)):
        return v
    if isinstance(v, int):
        if abs(v) > 2**53:
            return check_number(float(v))
        return v
    if isinstance(v, float):
        check_number(v)
        # Integral doubles come back as ints so 10/2 renders as 5, as in Airtable.
        if v.is_integer() and abs(v) <= 2**53:
            return int(v)
        return v
    if isinstance(v, datetime):
        return format_datetime(v)
    if isinstance(v, Decimal):
        return to_json(float(v))
    if isinstance(v, (list, tuple)):
        if len(v) > MAX_LIST:
            raise fail(VALUE, f"list longer than {MAX_LIST} items")
        return [to_json(x) for x in flatten(v)]
    if isinstance(v, dict):
        return json.loads(to_text(v))
    return to_text(v)
