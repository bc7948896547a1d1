"""Date and time functions (Airtable semantics, moment.js units and format tokens).

NOW() and TODAY() read the ``now`` the caller injects (workflow time inside a Temporal
workflow), never the wall clock. Dates without a time zone are UTC; SET_TIMEZONE moves
a date into a zone so DATETIME_FORMAT, HOUR(), DAY()… read its local fields.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

from . import dates
from .errors import ERROR, NUM
from .spec import EvalContext, Registry
from .values import fail, flatten, to_datetime, to_number, to_text

datefn = Registry("date")

MAX_WORKDAYS = 100_000


def _now(ctx: EvalContext) -> datetime:
    now = ctx.now
    return now if now.tzinfo is not None else now.replace(tzinfo=UTC)


def _unit(args: list[Any], index: int, default: str) -> str:
    return dates.unit_name(args[index]) if len(args) > index and args[index] is not None else default


@datefn("NOW()", "The current date and time (workflow time).")
def _nowfn(ctx: EvalContext, args: list[Any]) -> datetime:
    return _now(ctx)


@datefn("TODAY()", "The current date at midnight UTC.")
def _today(ctx: EvalContext, args: list[Any]) -> datetime:
    return dates.start_of(_now(ctx).astimezone(UTC), "days")


@datefn(
    "DATEADD(date, count, unit)",
    "date shifted by count units ('days', 'weeks', 'months', 'years', 'hours'…).",
)
def _dateadd(ctx: EvalContext, args: list[Any]) -> datetime:
    return dates.add(to_datetime(args[0]), to_number(args[1]), dates.unit_name(args[2]))


@datefn(
    "DATETIME_DIFF(date1, date2, [unit])",
    "date1 - date2 in whole units (default seconds), truncated toward zero.",
)
def _datetime_diff(ctx: EvalContext, args: list[Any]) -> int:
    return dates.diff(to_datetime(args[0]), to_datetime(args[1]), _unit(args, 2, "seconds"))


datefn.alias("DATEDIFF", "DATETIME_DIFF", "Same as DATETIME_DIFF.")


@datefn(
    "DATETIME_FORMAT(date, [format])",
    "Formats a date with moment.js tokens such as 'YYYY-MM-DD' or 'LL'.",
)
def _datetime_format(ctx: EvalContext, args: list[Any]) -> str:
    fmt = to_text(args[1]) if len(args) > 1 and args[1] is not None else dates.DEFAULT_FORMAT
    return dates.format_datetime(to_datetime(args[0]), fmt)


@datefn(
    "DATETIME_PARSE(text, [format], [locale])",
    "Reads a date from text, optionally with a moment.js format.",
)
def _datetime_parse(ctx: EvalContext, args: list[Any]) -> datetime:
    if isinstance(args[0], datetime):
        return args[0]
    text = to_text(args[0])
    fmt = to_text(args[1]) if len(args) > 1 and args[1] is not None else ""
    parsed = dates.parse_with_format(text, fmt, UTC) if fmt else dates.parse_any(text)
    if parsed is None:
        raise fail(ERROR, f"cannot read a date from {text[:40]!r}")
    return parsed


@datefn("DATESTR(date)", "The date as YYYY-MM-DD.")
def _datestr(ctx: EvalContext, args: list[Any]) -> str:
    return dates.format_datetime(to_datetime(args[0]), "YYYY-MM-DD")


@datefn("TIMESTR(date)", "The time of day as HH:mm:ss.")
def _timestr(ctx: EvalContext, args: list[Any]) -> str:
    return dates.format_datetime(to_datetime(args[0]), "HH:mm:ss")


def _part(attr: str, description: str) -> None:
    name = attr.upper()

    @datefn(f"{name}(date)", description)
    def _get(ctx: EvalContext, args: list[Any]) -> int:
        return int(getattr(to_datetime(args[0]), attr))


_part("year", "The year of a date.")
_part("month", "The month of a date, 1-12.")
_part("day", "The day of the month, 1-31.")
_part("hour", "The hour, 0-23.")
_part("minute", "The minute, 0-59.")
_part("second", "The second, 0-59.")


def _week_start(args: list[Any]) -> int:
    """Python weekday (0=Monday) on which weeks start; Sunday unless told 'Monday'."""
    if len(args) > 1 and args[1] is not None:
        text = to_text(args[1]).strip().lower()
        if text in ("monday", "mon"):
            return 0
        if text not in ("sunday", "sun", ""):
            raise fail(ERROR, "week start must be 'Sunday' or 'Monday'")
    return 6


@datefn("WEEKDAY(date, [start_day])", "Day of the week, 0-6, counting from Sunday (or 'Monday').")
def _weekday(ctx: EvalContext, args: list[Any]) -> int:
    return (to_datetime(args[0]).weekday() - _week_start(args)) % 7


@datefn(
    "WEEKNUM(date, [start_day])",
    "Week of the year; week 1 holds January 1st; weeks start on Sunday (or 'Monday').",
)
def _weeknum(ctx: EvalContext, args: list[Any]) -> int:
    return dates.week_of_year(to_datetime(args[0]), _week_start(args))


def _holidays(args: list[Any], index: int) -> set[date]:
    if len(args) <= index or args[index] is None:
        return set()
    raw = args[index]
    items = flatten(raw) if isinstance(raw, list) else [p for p in to_text(raw).split(",") if p.strip()]
    return {to_datetime(v.strip() if isinstance(v, str) else v).date() for v in items if v not in (None, "")}


def _is_workday(d: date, holidays: set[date]) -> bool:
    return d.weekday() < 5 and d not in holidays


@datefn(
    "WORKDAY(start_date, days, [holidays])",
    "The date days working days (Mon-Fri, minus holidays) after start_date.",
)
def _workday(ctx: EvalContext, args: list[Any]) -> datetime:
    start = to_datetime(args[0])
    count = int(to_number(args[1]))
    if abs(count) > MAX_WORKDAYS:
        raise fail(NUM, f"more than {MAX_WORKDAYS} working days")
    holidays = _holidays(args, 2)
    day, step = start.date(), (1 if count >= 0 else -1)
    remaining = abs(count)
    try:
        while remaining:
            day += timedelta(days=step)
            if _is_workday(day, holidays):
                remaining -= 1
    except OverflowError:
        raise fail(NUM, "date out of range") from None
    return datetime(day.year, day.month, day.day, tzinfo=start.tzinfo)


@datefn(
    "WORKDAY_DIFF(start_date, end_date, [holidays])",
    "Working days from start_date to end_date, both included (negative when end is earlier).",
)
def _workday_diff(ctx: EvalContext, args: list[Any]) -> int:
    a, b = to_datetime(args[0]).date(), to_datetime(args[1]).astimezone(to_datetime(args[0]).tzinfo).date()
    sign = 1
    if b < a:
        a, b, sign = b, a, -1
    days = (b - a).days + 1
    weeks, extra = divmod(days, 7)
    count = weeks * 5 + sum(1 for i in range(extra) if (a + timedelta(days=weeks * 7 + i)).weekday() < 5)
    count -= sum(1 for h in _holidays(args, 2) if a <= h <= b and h.weekday() < 5)
    return sign * count


@datefn("IS_BEFORE(date1, date2)", "TRUE when date1 is earlier than date2.")
def _is_before(ctx: EvalContext, args: list[Any]) -> bool:
    return to_datetime(args[0]) < to_datetime(args[1])


@datefn("IS_AFTER(date1, date2)", "TRUE when date1 is later than date2.")
def _is_after(ctx: EvalContext, args: list[Any]) -> bool:
    return to_datetime(args[0]) > to_datetime(args[1])


@datefn(
    "IS_SAME(date1, date2, [unit])",
    "TRUE when the dates are equal, or fall in the same unit ('day', 'month'…).",
)
def _is_same(ctx: EvalContext, args: list[Any]) -> bool:
    a, b = to_datetime(args[0]), to_datetime(args[1])
    if len(args) < 3 or args[2] is None:
        return a == b
    unit = dates.unit_name(args[2])
    b = b.astimezone(a.tzinfo)
    return dates.start_of(a, unit) == dates.start_of(b, unit)


@datefn("SET_TIMEZONE(date, timezone)", "The same instant in an IANA time zone (e.g. 'Europe/Paris').")
def _set_timezone(ctx: EvalContext, args: list[Any]) -> datetime:
    return to_datetime(args[0]).astimezone(dates.zone(to_text(args[1]).strip()))


@datefn("TONOW(date)", "Whole days from date until now (positive for past dates).")
def _tonow(ctx: EvalContext, args: list[Any]) -> int:
    return dates.diff(_now(ctx), to_datetime(args[0]), "days")


@datefn("FROMNOW(date)", "Whole days from now until date (positive for future dates).")
def _fromnow(ctx: EvalContext, args: list[Any]) -> int:
    return dates.diff(to_datetime(args[0]), _now(ctx), "days")
