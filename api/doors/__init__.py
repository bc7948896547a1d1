"""The doors: REST (``rest``, with its fast path), MCP (``mcp``) and agent chat (``chat``).
Each is a thin adapter over the operations layer (:mod:`api.ops`)."""
