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


def purge_expired_audit() -> dict:
    """Delete audit rows older than GOCLAW_AUDIT_RETENTION_DAYS (docs/audit-search.md); returns what it removed."""
    from tools_app.services.audit import audit_purge_expired

    return audit_purge_expired()


def send_approval_notifications() -> int:
    """Send the approval notifications that are due (new, or retrying after a failure); returns how many were sent."""
    from tools_app.services.notifications import notification_deliveries_send_due

    return notification_deliveries_send_due()
