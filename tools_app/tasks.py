"""django-q2 entry points for tools: ids in, one service call."""
from __future__ import annotations

from typing import Any

from tools_app.calls import CallContext, ToolCall
from tools_app.ratelimit import rate_limit_cleanup
from tools_app.services.agents import agent_get_by_key
from tools_app.services.approvals import approval_sweep_expired
from tools_app.execution import tool_execute


def execute_tool(agent_key: str, tool: str, arguments: dict[str, Any] | None = None, context: dict[str, Any] | None = None) -> dict:
    """Run a queued tool call through the same pipeline as the API (background jobs, scheduled calls)."""
    call = ToolCall(agent_get_by_key(agent_key), tool, arguments or {}, context=CallContext.from_stored(context))
    return tool_execute(call).as_dict()


def cleanup_rate_limits() -> int:
    return rate_limit_cleanup()


def sweep_expired_approvals() -> int:
    """Mark overdue approval requests expired (deadlines are also enforced at decision and execution)."""
    return approval_sweep_expired()
