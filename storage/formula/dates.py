"""Date arithmetic, moment.js-style formatting and parsing for the date functions.

Airtable's date functions follow moment.js: ``DATETIME_FORMAT`` takes tokens such as
``YYYY-MM-DD`` or ``LL``, units are ``'days'``, ``'M'`` (months), ``'m'`` (minutes)…
This module implements the English locale of that token set; text in ``[brackets]`` is
copied through literally.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import ERROR, VALUE
from .values import fail, parse_iso

_UNIT_US = {
    "milliseconds": 1_000,
    "seconds": 1_000_000,
    "minutes": 60_000_000,
    "hours": 3_600_000_000,
    "days": 86_400_000_000,
    "weeks": 7 * 86_400_000_000,
}
_UNIT_MONTHS = {"months": 1, "quarters": 3, "years": 12}
# moment's short keys are case-sensitive ('M' months, 'm' minutes); long names are not.
_SHORT_UNITS = {
    "ms": "milliseconds", "s": "seconds", "m": "minutes", "h": "hours", "d": "days",
    "w": "weeks", "M": "months", "Q": "quarters", "y": "years",
}
_LONG_UNITS = {name: name for name in [*_UNIT_US, *_UNIT_MONTHS]} | {
    name[:-1]: name for name in [*_UNIT_US, *_UNIT_MONTHS]
}

MONTHS = list(calendar.month_name)[1:]
MONTHS_SHORT = list(calendar.month_abbr)[1:]
# Sunday first, as moment's 'd' token counts.
WEEKDAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]

_LOCALIZED = {
    "LT": "h:mm A", "LTS": "h:mm:ss A", "L": "MM/DD/YYYY", "LL": "MMMM D, YYYY",
    "LLL": "MMMM D, YYYY h:mm A", "LLLL": "dddd, MMMM D, YYYY h:mm A", "l": "M/D/YYYY",
    "ll": "MMM D, YYYY", "lll": "MMM D, YYYY h:mm A", "llll": "ddd, MMM D, YYYY h:mm A",
}
_TOKEN = re.compile(
    r"\[[^\]]*\]|LTS|LT|LLLL|LLL|LL|L|llll|lll|ll|l|YYYY|YY|Qo|Q|MMMM|MMM|MM|Mo|M|DDDD|DDDo"
    r"|DDD|Do|DD|D|dddd|ddd|dd|do|d|E|e|wo|ww|w|Wo|WW|W|HH|H|hh|h|kk|k|mm|m|ss|s|SSS|SS|S"
    r"|A|a|ZZ|Z|X|x|.",
    re.DOTALL,
)
DEFAULT_FORMAT = "YYYY-MM-DDTHH:mm:ss.SSSZ"


def unit_name(unit: Any) -> str:
    """Normalise a unit argument (``'days'``, ``'d'``, ``'M'``…) or raise ``#ERROR!``."""
    text = str(unit).strip() if unit is not None else ""
    if text in _SHORT_UNITS:
        return _SHORT_UNITS[text]
    name = _LONG_UNITS.get(text.lower())
    if name is None:
        raise fail(ERROR, f"unknown time unit {text!r}")
    return name


def add_months(dt: datetime, months: int) -> datetime:
    """Add calendar months, clamping the day to the month's end (as moment does)."""
    total = dt.year * 12 + (dt.month - 1) + months
    year, month = divmod(total, 12)
    if not 1 <= year <= 9999:
        raise fail(VALUE, "date out of range")
    day = min(dt.day, calendar.monthrange(year, month + 1)[1])
    return dt.replace(year=year, month=month + 1, day=day)


def add(dt: datetime, count: float, unit: str) -> datetime:
    """``DATEADD``: shift ``dt`` by ``count`` units."""
    try:
        if unit in _UNIT_MONTHS:
            return add_months(dt, int(count) * _UNIT_MONTHS[unit])
        return dt + timedelta(microseconds=round(count * _UNIT_US[unit]))
    except (OverflowError, ValueError):
        raise fail(VALUE, "date out of range") from None


def _month_diff(a: datetime, b: datetime) -> int:
    whole = (a.year - b.year) * 12 + (a.month - b.month)
    anchor = add_months(b, whole)
    if whole > 0 and anchor > a:
        whole -= 1
    elif whole < 0 and anchor < a:
        whole += 1
    return whole


def diff(a: datetime, b: datetime, unit: str) -> int:
    """``DATETIME_DIFF``: ``a - b`` in whole units, truncated toward zero."""
    b = b.astimezone(a.tzinfo)
    if unit in _UNIT_MONTHS:
        months = _month_diff(a, b)
        step = _UNIT_MONTHS[unit]
        return abs(months) // step * (1 if months >= 0 else -1)
    delta = a - b
    us = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    q = abs(us) // _UNIT_US[unit]
    return q if us >= 0 else -q


def start_of(dt: datetime, unit: str) -> datetime:
    """Truncate ``dt`` to the start of ``unit`` (weeks start on Sunday)."""
    if unit == "milliseconds":
        return dt.replace(microsecond=dt.microsecond // 1000 * 1000)
    if unit == "seconds":
        return dt.replace(microsecond=0)
    if unit == "minutes":
        return dt.replace(second=0, microsecond=0)
    if unit == "hours":
        return dt.replace(minute=0, second=0, microsecond=0)
    day = dt.replace(hour=0, minute=0, second=0, microsecond=0)
    if unit == "days":
        return day
    if unit == "weeks":
        return day - timedelta(days=(day.weekday() + 1) % 7)
    if unit == "months":
        return day.replace(day=1)
    if unit == "quarters":
        return day.replace(day=1, month=(day.month - 1) // 3 * 3 + 1)
    return day.replace(day=1, month=1)


@lru_cache(maxsize=512)
def zone(name: str) -> ZoneInfo | timezone:
    """Resolve an IANA zone name (``#ERROR!`` if unknown)."""
    if name.upper() in ("UTC", "Z", "GMT"):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise fail(ERROR, f"unknown time zone {name!r}") from None


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def week_of_year(dt: datetime, first_weekday: int) -> int:
    """Week number where week 1 contains January 1st; ``first_weekday`` 0=Monday…6=Sunday."""
    jan1 = dt.replace(month=1, day=1)
    offset = (jan1.weekday() - first_weekday) % 7
    return (dt.timetuple().tm_yday - 1 + offset) // 7 + 1


def _offset(dt: datetime, sep: str) -> str:
    off = dt.utcoffset() or timedelta(0)
    minutes = int(off.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    h, m = divmod(abs(minutes), 60)
    return f"{sign}{h:02d}{sep}{m:02d}"


def _h12(dt: datetime) -> int:
    return dt.hour % 12 or 12


def _dow(dt: datetime) -> int:
    return (dt.weekday() + 1) % 7  # Sunday = 0, as moment's 'd'


def _yday(dt: datetime) -> int:
    return dt.timetuple().tm_yday


_FORMATTERS: dict[str, Callable[[datetime], str]] = {
    "YYYY": lambda dt: f"{dt.year:04d}", "YY": lambda dt: f"{dt.year % 100:02d}",
    "Q": lambda dt: str((dt.month - 1) // 3 + 1), "Qo": lambda dt: ordinal((dt.month - 1) // 3 + 1),
    "M": lambda dt: str(dt.month), "MM": lambda dt: f"{dt.month:02d}", "Mo": lambda dt: ordinal(dt.month),
    "MMM": lambda dt: MONTHS_SHORT[dt.month - 1], "MMMM": lambda dt: MONTHS[dt.month - 1],
    "D": lambda dt: str(dt.day), "DD": lambda dt: f"{dt.day:02d}", "Do": lambda dt: ordinal(dt.day),
    "DDD": lambda dt: str(_yday(dt)), "DDDD": lambda dt: f"{_yday(dt):03d}",
    "DDDo": lambda dt: ordinal(_yday(dt)),
    "d": lambda dt: str(_dow(dt)), "do": lambda dt: ordinal(_dow(dt)), "e": lambda dt: str(_dow(dt)),
    "E": lambda dt: str(dt.isoweekday()), "dd": lambda dt: WEEKDAYS[_dow(dt)][:2],
    "ddd": lambda dt: WEEKDAYS[_dow(dt)][:3], "dddd": lambda dt: WEEKDAYS[_dow(dt)],
    "w": lambda dt: str(week_of_year(dt, 6)), "ww": lambda dt: f"{week_of_year(dt, 6):02d}",
    "wo": lambda dt: ordinal(week_of_year(dt, 6)),
    "W": lambda dt: str(dt.isocalendar()[1]), "WW": lambda dt: f"{dt.isocalendar()[1]:02d}",
    "Wo": lambda dt: ordinal(dt.isocalendar()[1]),
    "H": lambda dt: str(dt.hour), "HH": lambda dt: f"{dt.hour:02d}",
    "h": lambda dt: str(_h12(dt)), "hh": lambda dt: f"{_h12(dt):02d}",
    "k": lambda dt: str(dt.hour or 24), "kk": lambda dt: f"{dt.hour or 24:02d}",
    "m": lambda dt: str(dt.minute), "mm": lambda dt: f"{dt.minute:02d}",
    "s": lambda dt: str(dt.second), "ss": lambda dt: f"{dt.second:02d}",
    "S": lambda dt: str(dt.microsecond // 100_000), "SS": lambda dt: f"{dt.microsecond // 10_000:02d}",
    "SSS": lambda dt: f"{dt.microsecond // 1000:03d}",
    "A": lambda dt: "AM" if dt.hour < 12 else "PM", "a": lambda dt: "am" if dt.hour < 12 else "pm",
    "Z": lambda dt: _offset(dt, ":"), "ZZ": lambda dt: _offset(dt, ""),
    "X": lambda dt: str(int(dt.timestamp())), "x": lambda dt: str(int(dt.timestamp() * 1000)),
}


@lru_cache(maxsize=256)
def _tokens(fmt: str) -> tuple[str, ...]:
    return tuple(_TOKEN.findall(fmt))


def format_datetime(dt: datetime, fmt: str) -> str:
    """Format ``dt`` in its own time zone with moment.js tokens."""
    out: list[str] = []
    for tok in _tokens(fmt):
        if tok.startswith("[") and tok.endswith("]"):
            out.append(tok[1:-1])
        elif tok in _LOCALIZED:
            out.append(format_datetime(dt, _LOCALIZED[tok]))
        else:
            fn = _FORMATTERS.get(tok)
            out.append(fn(dt) if fn is not None else tok)
    return "".join(out)


_NAMES = "|".join(MONTHS + MONTHS_SHORT)
_DAYNAMES = "|".join(WEEKDAYS + [d[:3] for d in WEEKDAYS] + [d[:2] for d in WEEKDAYS])
_PARSE_TOKENS = {
    "YYYY": ("year", r"[+-]?\d{4,6}"), "YY": ("year2", r"\d{2}"),
    "M": ("month", r"\d{1,2}"), "MM": ("month", r"\d{1,2}"),
    "MMM": ("monthname", _NAMES), "MMMM": ("monthname", _NAMES),
    "D": ("day", r"\d{1,2}"), "DD": ("day", r"\d{1,2}"), "Do": ("day", r"\d{1,2}(?:st|nd|rd|th)"),
    "H": ("hour", r"\d{1,2}"), "HH": ("hour", r"\d{1,2}"), "h": ("hour12", r"\d{1,2}"),
    "hh": ("hour12", r"\d{1,2}"), "k": ("hour", r"\d{1,2}"), "kk": ("hour", r"\d{1,2}"),
    "m": ("minute", r"\d{1,2}"), "mm": ("minute", r"\d{1,2}"),
    "s": ("second", r"\d{1,2}"), "ss": ("second", r"\d{1,2}"),
    "S": ("fraction", r"\d+"), "SS": ("fraction", r"\d+"), "SSS": ("fraction", r"\d+"),
    "A": ("ampm", r"[AaPp]\.?[Mm]\.?"), "a": ("ampm", r"[AaPp]\.?[Mm]\.?"),
    "Z": ("tz", r"Z|[+-]\d{2}:?\d{2}"), "ZZ": ("tz", r"Z|[+-]\d{2}:?\d{2}"),
    "X": ("unix", r"-?\d+(?:\.\d+)?"), "x": ("unixms", r"-?\d+"),
    "d": (None, r"\d"), "dd": (None, _DAYNAMES), "ddd": (None, _DAYNAMES), "dddd": (None, _DAYNAMES),
}
_FALLBACK_FORMATS = [
    "MM/DD/YYYY", "YYYY/MM/DD", "MMMM D, YYYY", "MMM D, YYYY", "D MMMM YYYY", "D MMM YYYY",
    "dddd, MMMM D, YYYY", "MM/DD/YYYY HH:mm", "MM/DD/YYYY h:mm A", "MMMM D, YYYY h:mm A",
    "YYYY-MM-DD HH:mm:ss", "YYYY-MM-DD h:mm A",
]


@lru_cache(maxsize=256)
def _parser(fmt: str) -> tuple[re.Pattern[str], tuple[str | None, ...]]:
    parts: list[str] = []
    groups: list[str | None] = []
    for tok in _TOKEN.findall(fmt):
        if tok.startswith("[") and tok.endswith("]"):
            parts.append(re.escape(tok[1:-1]))
        elif tok in _LOCALIZED:
            sub, sub_groups = _parser(_LOCALIZED[tok])
            parts.append(sub.pattern.removeprefix(r"\s*").removesuffix(r"\s*"))
            groups.extend(sub_groups)
        elif tok in _PARSE_TOKENS:
            field, pattern = _PARSE_TOKENS[tok]
            parts.append(f"({pattern})")
            groups.append(field)
        elif tok.isspace():
            parts.append(r"\s+")
        else:
            parts.append(re.escape(tok))
    return re.compile(r"\s*" + "".join(parts) + r"\s*", re.IGNORECASE), tuple(groups)


def parse_with_format(text: str, fmt: str, tz: timezone | ZoneInfo) -> datetime | None:
    """Parse ``text`` against a moment.js format; ``None`` when it does not match."""
    pattern, fields = _parser(fmt)
    m = pattern.fullmatch(text)
    if m is None:
        return None
    got: dict[str, str] = {f: v for f, v in zip(fields, m.groups(), strict=True) if f and v}
    try:
        if "unixms" in got:
            return datetime.fromtimestamp(int(got["unixms"]) / 1000, UTC)
        if "unix" in got:
            return datetime.fromtimestamp(float(got["unix"]), UTC)
        year = int(got.get("year", 0)) or None
        if "year2" in got:
            y2 = int(got["year2"])
            year = 2000 + y2 if y2 <= 68 else 1900 + y2
        month = int(got.get("month", 1))
        if "monthname" in got:
            name = got["monthname"].lower()[:3]
            month = [m_.lower() for m_ in MONTHS_SHORT].index(name) + 1
        day = int(re.sub(r"\D", "", got.get("day", "1")))
        hour = int(got.get("hour", got.get("hour12", 0)))
        if "ampm" in got and "hour12" in got:
            hour = hour % 12 + (12 if got["ampm"].lower().startswith("p") else 0)
        micro = int((got.get("fraction", "0") + "000000")[:6])
        dt = datetime(year or 1970, month, day, hour, int(got.get("minute", 0)),
                      int(got.get("second", 0)), micro)
    except (ValueError, OverflowError, OSError):
        return None
    if "tz" in got:
        return dt.replace(tzinfo=UTC) - _tz_delta(got["tz"])
    return dt.replace(tzinfo=tz).astimezone(UTC) if tz is not UTC else dt.replace(
        tzinfo=UTC
    )


def _tz_delta(text: str) -> timedelta:
    if text.upper() == "Z":
        return timedelta(0)
    digits = text[1:].replace(":", "")
    delta = timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    return -delta if text[0] == "-" else delta


def parse_any(text: str, tz: timezone | ZoneInfo = UTC) -> datetime | None:
    """Parse ISO-8601 or one of a few common English layouts (``DATETIME_PARSE`` without format)."""
    dt = parse_iso(text)
    if dt is not None:
        return dt
    for fmt in _FALLBACK_FORMATS:
        dt = parse_with_format(text, fmt, tz)
        if dt is not None:
            return dt
    return None
