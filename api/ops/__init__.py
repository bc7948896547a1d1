"""The operations layer: what every door does, once (issue #23 item 9).

Each operation is an async function taking the application state, the caller's
:class:`storage.access.Principal` and typed inputs, and returning domain objects (plain
dicts/lists shaped as the contract's JSON, or dataclasses) — never a FastAPI ``Request``
or ``Response``. Failures are :mod:`storage.errors` exceptions; each door renders them
its own way (REST ``{error, code}`` with a status, MCP a tool error, chat a tool result).

The doors are thin adapters over this package: REST routes (``api/doors/rest``), the MCP
server (``api/doors/mcp``), the agent chat (``api/doors/chat``) and the REST/MCP fast paths
(``api/doors/fastpath.py``, ``api/doors/mcp/fastpath.py``). ``tests/test_layering.py`` keeps this
package free of door imports and the doors free of ``api.doors.rest`` imports.
"""
