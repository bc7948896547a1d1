"""The MCP door: protocol-free tool specs (``tools_data``, ``tools_builder``, ``catalog``)
and the SDK wiring (``server``)."""
