"""Reads, scoped to who is asking."""
from __future__ import annotations

from django.db.models import QuerySet

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
            qs = qs.filter(**{name: value})
    return qs.order_by("-created_at")
