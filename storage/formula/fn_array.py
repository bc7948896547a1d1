"""Array functions, for multi-selects, files, relations and SPLIT results. A non-list
argument counts as a one-item list (blank as an empty one)."""

from __future__ import annotations

import json
from typing import Any

from .spec import EvalContext, Registry
from .values import flatten, join_text, to_int, to_text

array = Registry("array")


def _items(v: Any) -> list[Any]:
    if v is None:
        return []
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _key(v: Any) -> Any:
    # Items may be unhashable (nested lists, JSON objects); compare by canonical JSON then.
    if isinstance(v, (str, int, float, bool)) or v is None:
        return (type(v).__name__ if isinstance(v, bool) else "v", v)
    return ("json", json.dumps(v, sort_keys=True, default=str))


@array("ARRAYJOIN(array, [separator])", "Joins the items into text (separator default \", \").")
def _arrayjoin(ctx: EvalContext, args: list[Any]) -> str:
    sep = to_text(args[1]) if len(args) > 1 and args[1] is not None else ", "
    return join_text([to_text(v) for v in flatten(_items(args[0]))], sep)


@array("ARRAYUNIQUE(array)", "The distinct items, in first-seen order.")
def _arrayunique(ctx: EvalContext, args: list[Any]) -> list[Any]:
    seen: set[Any] = set()
    out = []
    for v in _items(args[0]):
        k = _key(v)
        if k not in seen:
            seen.add(k)
            out.append(v)
    return out


@array("ARRAYCOMPACT(array)", "The items without blanks and empty text.")
def _arraycompact(ctx: EvalContext, args: list[Any]) -> list[Any]:
    return [v for v in _items(args[0]) if v is not None and v != ""]


@array("ARRAYFLATTEN(array)", "Nested lists flattened into one list.")
def _arrayflatten(ctx: EvalContext, args: list[Any]) -> list[Any]:
    return flatten(_items(args[0]))


@array(
    "ARRAYSLICE(array, start, [end])",
    "Items start..end (1-based, inclusive; negative counts from the end).",
)
def _arrayslice(ctx: EvalContext, args: list[Any]) -> list[Any]:
    items = _items(args[0])
    n = len(items)
    start = to_int(args[1])
    lo = start - 1 if start > 0 else max(n + start, 0)
    if len(args) > 2 and args[2] is not None:
        end = to_int(args[2])
        hi = end if end >= 0 else n + end + 1
    else:
        hi = n
    return items[lo:hi]
