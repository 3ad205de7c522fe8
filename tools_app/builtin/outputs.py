"""`tool_output_get`: read back the full output of a call that exceeded the output budget."""
from __future__ import annotations

import uuid

from tools_app.base import Tool, ToolContext, ToolError, ToolResult


class ToolOutputGetTool(Tool):
    """Pages through a stored output; only outputs produced for the same agent (and user) are visible."""

    name = "tool_output_get"
    description = (
        "Read a tool output that was cut because it exceeded the output budget. Pass the output_id from the "
        "cut marker, and optionally offset (characters) and limit (default 20000)."
    )
    parameters = {
        "type": "object",
        "properties": {
            "output_id": {"type": "string", "minLength": 1, "maxLength": 64},
            "offset": {"type": "integer", "minimum": 0, "default": 0},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100000, "default": 20000},
        },
        "required": ["output_id"],
        "additionalProperties": False,
    }
    group = "runtime"
    read_only = True
    inline = True  # a single indexed read: runs in the caller's thread and transaction
    timeout_seconds = 10

    def run(self, ctx: ToolContext, args: dict) -> ToolResult:
        from tools_app.models import StoredToolOutput
        from tools_app.pipeline import labels_of

        try:
            output_id = uuid.UUID(args["output_id"])
        except ValueError:
            raise ToolError("output_id is not a valid id") from None
        # Outputs are stored under the user's label (never a raw id that may be a credential), as the pipeline wrote it.
        stored = StoredToolOutput.objects.filter(id=output_id, agent_key=ctx.agent_key, user_id=labels_of(ctx).user_id).first()
        if stored is None:
            raise ToolError(f"no stored output {output_id} for this agent")
        offset, limit = args.get("offset", 0), args.get("limit", 20000)
        total = len(stored.content)
        if offset >= total and total:
            raise ToolError(f"offset {offset} is past the end ({total} characters)")
        chunk = stored.content[offset: offset + limit]
        end = offset + len(chunk)
        more = f" — call again with offset={end} for more" if end < total else " — end of output"
        return ToolResult(for_llm=f"[characters {offset}-{end} of {total} from {stored.tool_name}{more}]\n{chunk}")


TOOLS = [ToolOutputGetTool()]
