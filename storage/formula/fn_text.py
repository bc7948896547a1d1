"""Text and regular-expression functions.

Regular expressions run on the ``regex`` package with a per-call timeout (catastrophic
backtracking ends as ``#TIMEOUT!`` instead of hanging a worker) and patterns are capped
at ``MAX_PATTERN`` characters. Replacements write groups as ``$1``/``${name}`` (as
Airtable and JavaScript do); ``$$`` is a literal dollar.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any
from urllib.parse import quote

import regex

from .errors import ERROR, TIMEOUT, VALUE
from .spec import EvalContext, Registry
from .values import MAX_LIST, MAX_TEXT, check_text, fail, join_text, to_int, to_text

text = Registry("text")
rx = Registry("regex")

MAX_PATTERN = 1_000
REGEX_TIMEOUT = 0.05


def _count(value: Any, name: str) -> int:
    n = to_int(value)
    if n < 0:
        raise fail(VALUE, f"{name} must not be negative")
    return n


@text("CONCATENATE(text, ...)", "Joins all arguments into one text.")
def _concatenate(ctx: EvalContext, args: list[Any]) -> str:
    return join_text([to_text(a) for a in args])


text.alias("CONCAT", "CONCATENATE", "Same as CONCATENATE.")


@text("LEFT(text, [count])", "The first count characters (default 1).")
def _left(ctx: EvalContext, args: list[Any]) -> str:
    n = _count(args[1] if len(args) > 1 else 1, "count")
    return to_text(args[0])[:n]


@text("RIGHT(text, [count])", "The last count characters (default 1).")
def _right(ctx: EvalContext, args: list[Any]) -> str:
    n = _count(args[1] if len(args) > 1 else 1, "count")
    s = to_text(args[0])
    return s[len(s) - n:] if n else ""


@text("MID(text, start, count)", "count characters starting at position start (1-based).")
def _mid(ctx: EvalContext, args: list[Any]) -> str:
    start, n = to_int(args[1]), _count(args[2], "count")
    if start < 1:
        raise fail(VALUE, "start must be at least 1")
    return to_text(args[0])[start - 1:start - 1 + n]


@text("LEN(text)", "Number of characters.")
def _len(ctx: EvalContext, args: list[Any]) -> int:
    return len(to_text(args[0]))


@text("LOWER(text)", "Lower-case text.")
def _lower(ctx: EvalContext, args: list[Any]) -> str:
    return check_text(to_text(args[0]).lower())


@text("UPPER(text)", "Upper-case text.")
def _upper(ctx: EvalContext, args: list[Any]) -> str:
    return check_text(to_text(args[0]).upper())


@text("TRIM(text)", "Removes whitespace at the beginning and end.")
def _trim(ctx: EvalContext, args: list[Any]) -> str:
    return to_text(args[0]).strip()


@text("SUBSTITUTE(text, old, new, [index])", "Replaces old by new (every occurrence, or only the index-th).")
def _substitute(ctx: EvalContext, args: list[Any]) -> str:
    s, old, new = to_text(args[0]), to_text(args[1]), to_text(args[2])
    if old == "":
        return s
    if len(args) > 3 and args[3] is not None:
        index = to_int(args[3])
        if index < 1:
            raise fail(VALUE, "index must be at least 1")
        pos = -1
        for _ in range(index):
            pos = s.find(old, pos + 1)
            if pos < 0:
                return s
        return join_text([s[:pos], new, s[pos + len(old):]])
    grown = len(s) + s.count(old) * (len(new) - len(old))
    if grown > MAX_TEXT:
        raise fail(VALUE, f"text result longer than {MAX_TEXT} characters")
    return s.replace(old, new)


@text("REPLACE(text, start, count, replacement)", "Replaces count characters from position start.")
def _replace(ctx: EvalContext, args: list[Any]) -> str:
    s, start, n = to_text(args[0]), to_int(args[1]), _count(args[2], "count")
    if start < 1:
        raise fail(VALUE, "start must be at least 1")
    return join_text([s[:start - 1], to_text(args[3]), s[start - 1 + n:]])


def _start(args: list[Any]) -> int:
    start = to_int(args[2]) if len(args) > 2 and args[2] is not None else 1
    return max(start, 1)


@text("FIND(search, text, [start])", "Position (1-based) of search in text, case-sensitive; 0 if absent.")
def _find(ctx: EvalContext, args: list[Any]) -> int:
    return to_text(args[1]).find(to_text(args[0]), _start(args) - 1) + 1


@text(
    "SEARCH(search, text, [start])",
    "Position (1-based) of search in text, ignoring case; blank if absent.",
)
def _search(ctx: EvalContext, args: list[Any]) -> int | None:
    # str.find on lower-cased text: linear in the text (a regex of the escaped needle cost
    # len(needle) × len(text): 20,000 × 250,000 characters held the event loop for 10 s)
    found = _folded(to_text(args[1])).find(_folded(to_text(args[0])), _start(args) - 1)
    return found + 1 if found >= 0 else None


def _folded(text: str) -> str:
    """``text`` lower-cased character by character, its length kept (positions in it are
    positions in ``text``; ``str.lower`` turns "İ" into two characters)."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    return "".join(low if len(low := ch.lower()) == 1 else ch for ch in text)


@text("REPT(text, count)", "text repeated count times.")
def _rept(ctx: EvalContext, args: list[Any]) -> str:
    s, n = to_text(args[0]), _count(args[1], "count")
    if len(s) * n > MAX_TEXT:
        raise fail(VALUE, f"text result longer than {MAX_TEXT} characters")
    return s * n


@text("T(value)", "value when it is text, blank otherwise.")
def _t(ctx: EvalContext, args: list[Any]) -> str | None:
    return args[0] if isinstance(args[0], str) else None


@text("ENCODE_URL_COMPONENT(text)", "Percent-encodes text for use in a URL (like encodeURIComponent).")
def _encode_url(ctx: EvalContext, args: list[Any]) -> str:
    return check_text(quote(to_text(args[0]), safe="-_.!~*'()", errors="replace"))


@text("SPLIT(text, separator)", "Splits text into a list at each separator (each character when empty).")
def _split(ctx: EvalContext, args: list[Any]) -> list[str]:
    s, sep = to_text(args[0]), to_text(args[1])
    if sep == "":
        parts = list(s)
    else:
        if s.count(sep) >= MAX_LIST:
            raise fail(VALUE, f"list longer than {MAX_LIST} items")
        parts = s.split(sep)
    if len(parts) > MAX_LIST:
        raise fail(VALUE, f"list longer than {MAX_LIST} items")
    return parts


def _pad(args: list[Any], left: bool) -> str:
    s, width = to_text(args[0]), _count(args[1], "length")
    fill = to_text(args[2]) if len(args) > 2 and args[2] is not None else " "
    if width > MAX_TEXT:
        raise fail(VALUE, f"text result longer than {MAX_TEXT} characters")
    if len(s) >= width or fill == "":
        return s
    pad = (fill * ((width - len(s)) // len(fill) + 1))[: width - len(s)]
    return pad + s if left else s + pad


@text("LPAD(text, length, [pad])", "Pads text on the left to length characters (default pad a space).")
def _lpad(ctx: EvalContext, args: list[Any]) -> str:
    return _pad(args, left=True)


@text("RPAD(text, length, [pad])", "Pads text on the right to length characters (default pad a space).")
def _rpad(ctx: EvalContext, args: list[Any]) -> str:
    return _pad(args, left=False)


@lru_cache(maxsize=256)
def _compile(pattern: str) -> regex.Pattern[str]:
    if len(pattern) > MAX_PATTERN:
        raise fail(ERROR, f"regular expression longer than {MAX_PATTERN} characters")
    try:
        return regex.compile(pattern)
    except (regex.error, ValueError, OverflowError, RecursionError) as exc:
        raise fail(ERROR, f"invalid regular expression: {exc}") from None


def _run(op: str, pattern: Any, *args: Any, **kwargs: Any) -> Any:
    compiled = _compile(to_text(pattern))
    try:
        return getattr(compiled, op)(*args, timeout=REGEX_TIMEOUT, **kwargs)
    except TimeoutError:
        raise fail(TIMEOUT, "regular expression took too long") from None


@rx("REGEX_MATCH(text, regex)", "TRUE when the regular expression matches anywhere in text.")
def _regex_match(ctx: EvalContext, args: list[Any]) -> bool:
    return _run("search", args[1], to_text(args[0])) is not None


@rx("REGEX_EXTRACT(text, regex)", "The first substring matching the regular expression (#ERROR! if none).")
def _regex_extract(ctx: EvalContext, args: list[Any]) -> str:
    m = _run("search", args[1], to_text(args[0]))
    if m is None:
        raise fail(ERROR, "no match")
    return m.group(0)


_TEMPLATE = re.compile(r"\$(\$|\d+|\{[^}]*\}|&)")


def _expander(template: str) -> tuple[Any, list[int | str]]:
    """Compile a ``$1``-style replacement into a function of a match (bounded output)."""
    pieces: list[tuple[bool, int | str]] = []  # (is_group, literal text or group key)
    last = 0
    for m in _TEMPLATE.finditer(template):
        pieces.append((False, template[last:m.start()]))
        ref = m.group(1)
        if ref == "$":
            pieces.append((False, "$"))
        else:
            key = "0" if ref == "&" else ref.strip("{}")
            pieces.append((True, int(key) if key.isdigit() else key))
        last = m.end()
    pieces.append((False, template[last:]))
    produced = [0]

    def expand(m: Any) -> str:
        out = "".join((m.group(p) or "") if is_group else p for is_group, p in pieces)  # type: ignore[misc]
        produced[0] += len(out)
        if produced[0] > MAX_TEXT:
            raise fail(VALUE, f"text result longer than {MAX_TEXT} characters")
        return out

    return expand, [p for is_group, p in pieces if is_group]


@rx("REGEX_REPLACE(text, regex, replacement)", "Replaces every match; $1 or ${name} insert groups.")
def _regex_replace(ctx: EvalContext, args: list[Any]) -> str:
    pattern = _compile(to_text(args[1]))
    expand, groups = _expander(to_text(args[2]))
    for ref in groups:
        if (isinstance(ref, int) and ref > pattern.groups) or (
            isinstance(ref, str) and ref not in pattern.groupindex
        ):
            raise fail(ERROR, f"replacement refers to a missing group ${ref}")
    return check_text(_run("sub", args[1], expand, to_text(args[0])))
