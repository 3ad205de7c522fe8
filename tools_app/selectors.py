"""Reads, scoped to who is asking."""
from __future__ import annotations

from django.db.models import QuerySet

from goclaw.db import pg_text

from tools_app.models import Agent, ToolInvocation

INVOCATION_FILTERS = ("agent_key", "tool_name", "status", "session_key", "user_id")


def invocation_list_for(*, agent: Agent | None, filters: dict[str, str]) -> QuerySet[ToolInvocation]:
    """An agent sees only its own invocations; staff (agent=None) sees all. Filters are exact matches."""
    qs = ToolInvocation.objects.all()
    if agent is not None:
        qs = qs.filter(agent_key=agent.key)
    for name in INVOCATION_FILTERS:
        value = filters.get(name)
        if value:
            qs = qs.filter(**{name: pg_text(value)})
    return qs.order_by("-created_at")


# --- approvals ------------------------------------------------------------------------------------------
APPROVAL_FILTERS = ("status", "tool_name", "session_key", "user_id", "decision")


def approval_list_for(*, agent: Agent | None, filters: dict[str, str]) -> QuerySet:
    """An agent sees its own approval requests; staff (agent=None) sees all, optionally `?agent=<key>`."""
    from tools_app.models import ApprovalRequest

    qs = ApprovalRequest.objects.select_related("agent", "decided_by")
    if agent is not None:
        qs = qs.filter(agent=agent)
    elif filters.get("agent"):
        qs = qs.filter(agent__key=filters["agent"])
    for name in APPROVAL_FILTERS:
        value = filters.get(name)
        if value:
            qs = qs.filter(**{name: value})
    return qs.order_by("-requested_at")


def approval_get_for(*, agent: Agent | None, approval_id):
    from goclaw.errors import NotFound

    request = approval_list_for(agent=agent, filters={}).filter(pk=approval_id).first()
    if request is None:
        raise NotFound("no such approval request", code="approval_not_found")
    return request


def approval_queue() -> QuerySet:
    """Pending requests still within their deadline, oldest first (the admin's live queue)."""
    from django.utils import timezone

    from tools_app.models import ApprovalRequest

    return (ApprovalRequest.objects.select_related("agent")
            .filter(status="pending", expires_at__gt=timezone.now()).order_by("requested_at"))


def pending_change_list_for(*, agent: Agent | None, filters: dict[str, str]) -> QuerySet:
    from tools_app.models import PendingChange

    qs = PendingChange.objects.select_related("agent", "decided_by")
    if agent is not None:
        qs = qs.filter(agent=agent)
    elif filters.get("agent"):
        qs = qs.filter(agent__key=filters["agent"])
    for name in ("status", "session_key", "tool_name"):
        if filters.get(name):
            qs = qs.filter(**{name: filters[name]})
    return qs.order_by("created_at")
