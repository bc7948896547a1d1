"""Lexing helpers of the query parser: comma lists, double-quoted names and values.

Quoting follows PostgREST: ``"`` opens and closes a quoted item, a backslash inside
quotes escapes the next character, and a quoted item may hold commas, dots and
parentheses.
"""

from __future__ import annotations

from collections.abc import Iterator

from storage.errors import InvalidValue, ValidationError


def parse_list(text: str, open_: str, close: str, *, required: bool) -> tuple[str, ...]:
    """Parse ``(a,"b,c",d)`` into texts; ``"`` quotes, backslash escapes inside quotes.

    Unquoted items are stripped of surrounding blanks. With ``required`` the brackets
    must be present.

    >>> parse_list('(a, "b,\\\\"c", d)', "(", ")", required=True)
    ('a', 'b,"c', 'd')
    >>> parse_list("", "(", ")", required=False)
    ()
    """
    body = text.strip()
    if body.startswith(open_) and body.endswith(close) and len(body) >= 2:
        body = body[1:-1]
    elif required:
        raise InvalidValue(f"expected a list in {open_}{close}, got {text!r}")
    if not body.strip():
        return ()
    items: list[str] = []
    i, n = 0, len(body)
    while True:
        while i < n and body[i] == " ":
            i += 1
        if i < n and body[i] == '"':
            buf: list[str] = []
            i += 1
            while i < n and body[i] != '"':
                if body[i] == "\\" and i + 1 < n:
                    i += 1
                buf.append(body[i])
                i += 1
            if i >= n:
                raise InvalidValue(f"unterminated quote in list {text!r}")
            i += 1
            while i < n and body[i] == " ":
                i += 1
            if i < n and body[i] != ",":
                raise InvalidValue(f"unexpected text after a quoted item in {text!r}")
            items.append("".join(buf))
        else:
            j = body.find(",", i)
            j = n if j < 0 else j
            items.append(body[i:j].strip())
            i = j
        if i >= n:
            return tuple(items)
        i += 1  # the comma


def split_top(text: str, *, braces: bool = False) -> list[str]:
    """Split on commas outside double quotes and parentheses (and ``{}`` with ``braces``:
    the conditions of a group, whose ``cs.{a,b}`` lists hold commas)."""
    return list(iter_top(text, braces=braces))


def iter_top(text: str, *, braces: bool = False) -> Iterator[str]:
    """:func:`split_top` one part at a time, so that a caller counting the parts stops
    reading at the first one too many (the unbalanced-text check comes at the end).

    >>> list(iter_top('a,"b,c",f(x,y)'))
    ['a', '"b,c"', 'f(x,y)']
    """
    opens, closes = ("({", ")}") if braces else ("(", ")")
    buf: list[str] = []
    depth, quoted, i = 0, False, 0
    while i < len(text):
        ch = text[i]
        if quoted and ch == "\\" and i + 1 < len(text):
            buf.append(text[i : i + 2])
            i += 2
            continue
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in opens:
            depth += 1
        elif not quoted and ch in closes:
            depth -= 1
        elif not quoted and depth == 0 and ch == ",":
            yield "".join(buf)
            buf = []
            i += 1
            continue
        buf.append(ch)
        i += 1
    if quoted or depth != 0:
        raise ValidationError(f"unbalanced quotes or parentheses in {text!r}")
    yield "".join(buf)


def partition_unquoted(text: str, sep: str) -> tuple[str, str, str]:
    r"""Like ``str.partition`` but ignores ``sep`` inside double quotes.

    >>> partition_unquoted('"a(\\"b"(c)', "(")
    ('"a(\\"b"', '(', 'c)')
    """
    quoted, i = False, 0
    while i < len(text):
        ch = text[i]
        if quoted and ch == "\\":
            i += 2
            continue
        if ch == '"':
            quoted = not quoted
        elif ch == sep and not quoted:
            return text[:i], sep, text[i + 1 :]
        i += 1
    return text, "", ""


def read_quoted(text: str) -> tuple[str, str]:
    """``"a\\"b".rest`` → (``a"b``, ``.rest``); ``text`` starts with a quote."""
    buf: list[str] = []
    i = 1
    while i < len(text) and text[i] != '"':
        if text[i] == "\\" and i + 1 < len(text):
            i += 1
        buf.append(text[i])
        i += 1
    if i >= len(text):
        raise ValidationError(f"unterminated quote in {text!r}")
    return "".join(buf), text[i + 1 :]


def unquote_name(text: str) -> str:
    r"""A name with surrounding blanks removed, or the content of a quoted name.

    >>> unquote_name(' "a, \\"b\\"" '), unquote_name(" plain ")
    ('a, "b"', 'plain')
    """
    t = text.strip()
    if t.startswith('"'):
        name, rest = read_quoted(t)
        if rest.strip():
            raise ValidationError(f"unexpected text after quoted name {text!r}")
        return name
    return t


def name_and_rest(part: str) -> tuple[str | None, list[str]]:
    """Split an order term into a quoted name (or None) and its dot-separated pieces."""
    t = part.strip()
    if t.startswith('"'):
        name, rest = read_quoted(t)
        if rest and not rest.startswith("."):
            raise ValidationError(f"bad order term {part!r}")
        return name, rest[1:].split(".") if rest else []
    return None, t.split(".")
