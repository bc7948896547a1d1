"""The 42 builder tools the workspace's builder credential (vibe_mcp) gets on top of the
12 data tools: tables and columns (8), views (4), schedules (6), agents (5), channels (5),
publishing (4), access (3), batch records (4) and credentials (3).

Like the data tools they are protocol-free ``async (state, principal, args) -> dict``
functions over the REST route helpers and storage; one module per resource under
``api/doors/mcp/builder/``.
"""

from __future__ import annotations

from api.doors.mcp.builder.access_tools import ACCESS_TOOLS
from api.doors.mcp.builder.agent_tools import AGENT_TOOLS
from api.doors.mcp.builder.batch_tools import BATCH_TOOLS
from api.doors.mcp.builder.schedule_tools import SCHEDULE_TOOLS
from api.doors.mcp.builder.schema_tools import SCHEMA_TOOLS
from api.doors.mcp.builder.view_tools import VIEW_TOOLS
from api.doors.mcp.spec import ToolSpec

BUILDER_TOOLS: list[ToolSpec] = [
    *SCHEMA_TOOLS, *VIEW_TOOLS, *SCHEDULE_TOOLS, *AGENT_TOOLS, *ACCESS_TOOLS, *BATCH_TOOLS,
]

__all__ = ["BUILDER_TOOLS"]
