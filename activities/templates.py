"""Sandboxed Jinja2 templates over a record (http_request, ai_agent, record steps).

``{{ Name }}`` reads a column whose name is a valid identifier; ``{{ fields["Due Date"] }}``
reads any column; ``{{ record_id }}`` and, inside a loop, ``{{ item }}`` are also defined.
The sandbox refuses attribute tricks (``__class__`` and friends) with SecurityError.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from jinja2 import TemplateError, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from storage import jsontext

MAX_OUTPUT = 1_000_000


class TemplateFailure(Exception):
    """A template that does not parse, breaks the sandbox, or renders too much."""


def _tojson(value: Any) -> str:
    return jsontext.dumps(value, default=str).decode()


@lru_cache(maxsize=1)
def _env() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(undefined=Undefined, autoescape=False)
    env.filters["tojson"] = _tojson
    env.filters["json"] = _tojson
    return env


@lru_cache(maxsize=2048)
def _compile(source: str) -> Any:
    return _env().from_string(source)


def check_template(source: str) -> None:
    """Raise TemplateFailure if ``source`` does not parse (used at column creation)."""
    try:
        _compile(source)
    except TemplateError as exc:
        raise TemplateFailure(f"template error: {exc}") from None


def render(source: str, fields: dict[str, Any], **extra: Any) -> str:
    """Render ``source`` over a record's fields.

    Raises:
        TemplateFailure: syntax error, sandbox violation or oversized output.
    """
    if "{" not in source:
        return source
    context = {k: v for k, v in fields.items() if isinstance(k, str) and k.isidentifier()}
    context["fields"] = fields
    context.update(extra)
    try:
        out = _compile(source).render(context)
    except SecurityError as exc:
        raise TemplateFailure(f"template refused by the sandbox: {exc}") from None
    except TemplateError as exc:
        raise TemplateFailure(f"template error: {exc}") from None
    except Exception as exc:  # errors raised inside filters on odd values
        raise TemplateFailure(f"template failed: {type(exc).__name__}: {exc}") from None
    if len(out) > MAX_OUTPUT:
        raise TemplateFailure("template output is larger than 1 MB")
    return out


def render_value(value: Any, fields: dict[str, Any], **extra: Any) -> Any:
    """Render every string inside a JSON value (dicts and lists recursively)."""
    if isinstance(value, str):
        return render(value, fields, **extra)
    if isinstance(value, dict):
        return {k: render_value(v, fields, **extra) for k, v in value.items()}
    if isinstance(value, list):
        return [render_value(v, fields, **extra) for v in value]
    return value
