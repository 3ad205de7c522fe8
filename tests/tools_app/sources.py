"""A tool source for tests that span processes: its tools are listed in a JSON file (path in the environment
variable GOCLAW_TEST_TOOL_FILE), standing in for a database table or an MCP server's listing."""
from __future__ import annotations

import json
import os

from tools_app.base import Tool, ToolResult
from tools_app.toolsets import ToolSource


class ReplyTool(Tool):
    """Answers with a fixed text; its metadata comes from the listing (per instance)."""

    def __init__(self, reply: str, **metadata):
        super().__init__(**metadata)
        self.reply = reply

    def run(self, ctx, args):
        return ToolResult(for_llm=f"{self.reply} ({args.get('who', 'nobody')})")


class FileToolSource(ToolSource):
    name = "test-file-source"

    def tools_for(self, agent, user_id):
        path = os.environ.get("GOCLAW_TEST_TOOL_FILE")
        if not path or not os.path.exists(path):
            return []
        with open(path) as fh:
            listing = json.load(fh)
        return [ReplyTool(entry["reply"], name=entry["name"], description=entry["description"], group="listed",
                          parameters={"type": "object", "properties": {"who": {"type": "string"}},
                                      "additionalProperties": False})
                for entry in listing]
