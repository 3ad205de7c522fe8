"""The `datetime` tool: current time in any IANA timezone."""
from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from tools_app.base import Tool, ToolContext, ToolError, ToolResult


class DateTimeTool(Tool):
    """Tells the model the current date and time, so it never has to guess."""

    name = "datetime"
    description = (
        "Get the current date and time. Optionally pass an IANA timezone such as 'Europe/Paris' or "
        "'America/New_York' (default UTC). Returns ISO 8601 time, weekday and UTC offset."
    )
    parameters = {
        "type": "object",
        "properties": {"timezone": {"type": "string", "maxLength": 64, "description": "IANA timezone name, default UTC"}},
        "additionalProperties": False,
    }
    group = "automation"
    read_only = True
    timeout_seconds = 5
    inline = True  # pure computation, cannot block: no worker-thread hop

    def run(self, ctx: ToolContext, args: dict) -> ToolResult:
        tz_name = (args.get("timezone") or "UTC").strip()
        try:
            tz = ZoneInfo(tz_name)
        except (ZoneInfoNotFoundError, ValueError):
            close = sorted(z for z in available_timezones() if tz_name.lower() in z.lower())[:5]
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            raise ToolError(f"unknown timezone {tz_name!r}.{hint}") from None
        now = datetime.now(tz)
        return ToolResult(for_llm=f"{now.isoformat(timespec='seconds')} ({now:%A}, {tz_name}, UTC{now:%z})")


TOOLS = [DateTimeTool()]
