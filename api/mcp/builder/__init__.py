"""The builder (vibe_mcp) tools, one module per resource; ``api.mcp.tools_builder`` lists them."""
