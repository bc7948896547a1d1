"""The builder (vibe_mcp) tools, one module per resource; ``api.doors.mcp.tools_builder`` lists them."""
