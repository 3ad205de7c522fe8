"""django-q2 entry points for tools: ids in, one service call."""
from __future__ import annotations

from typing import Any

from tools_app import pipeline
from tools_app.ratelimit import rate_limit_cleanup
from tools_app.services.agents import agent_get_by_key


def execute_tool(agent_key: str, tool: str, arguments: dict[str, Any] | None = None, context: dict[str, Any] | None = None) -> dict:
    """Run a queued tool call through the same pipeline as the API (background jobs, scheduled calls)."""
    call = pipeline.ToolCall(agent=agent_get_by_key(agent_key), tool=tool, arguments=arguments or {}, **(context or {}))
    return pipeline.execute(call).as_dict()


def cleanup_rate_limits() -> int:
    return rate_limit_cleanup()


def sweep_expired_approvals() -> int:
    """Mark overdue approval requests expired (deadlines are also enforced at decision and execution)."""
    from tools_app.services.approvals import approval_sweep_expired

    return approval_sweep_expired()
