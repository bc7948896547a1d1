"""Installed integrations, as the column-type catalogue reports them (REST and MCP)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

# Modules with integrations (the special-fields catalogue) append callables
# ``async (state, principal) -> list[dict]``; check_column_types lists what they report.
INTEGRATION_SOURCES: list[Callable[..., Awaitable[list[Any]]]] = []
