"""Reads, scoped to who is asking."""
from __future__ import annotations

from django.db.models import QuerySet

from goclaw.db import pg_text

from tools_app.calls import CallContext
from tools_app.models import Agent, ToolInvocation
from tools_app.policy import PolicyInput, catalog_for, explain
from tools_app.toolsets import toolset_for

INVOCATION_FILTERS = ("agent_key", "tool_name", "status", "session_key", "user_id")


def _exact_filters(qs: QuerySet, filters: dict[str, str], names) -> QuerySet:
    """Apply the non-empty query-string filters among `names` as exact matches (values made storable, so a NUL
    byte simply matches nothing instead of failing in PostgreSQL)."""
    for name in names:
        value = filters.get(name)
        if value:
            qs = qs.filter(**{name: pg_text(value)})
    return qs


def invocation_list_for(*, agent: Agent | None, filters: dict[str, str]) -> QuerySet[ToolInvocation]:
    """An agent sees only its own invocations; staff (agent=None) sees all. Filters are exact matches."""
    qs = ToolInvocation.objects.all()
    if agent is not None:
        qs = qs.filter(agent_key=agent.key)
    return _exact_filters(qs, filters, INVOCATION_FILTERS).order_by("-created_at")


# --- approvals ------------------------------------------------------------------------------------------
APPROVAL_FILTERS = ("status", "tool_name", "session_key", "user_id", "decision")


def _scoped(qs: QuerySet, agent: Agent | None, filters: dict[str, str]) -> QuerySet:
    """An agent's own rows; staff (agent=None) see all, optionally narrowed with `?agent=<key>`."""
    if agent is not None:
        return qs.filter(agent=agent)
    return _exact_filters(qs, {"agent__key": filters.get("agent", "")}, ("agent__key",))


def approval_list_for(*, agent: Agent | None, filters: dict[str, str]) -> QuerySet:
    """An agent sees its own approval requests; staff (agent=None) sees all, optionally `?agent=<key>`."""
    from tools_app.models import ApprovalRequest

    qs = _scoped(ApprovalRequest.objects.select_related("agent", "decided_by"), agent, filters)
    return _exact_filters(qs, filters, APPROVAL_FILTERS).order_by("-requested_at")


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

    qs = _scoped(PendingChange.objects.select_related("agent", "decided_by"), agent, filters)
    return _exact_filters(qs, filters, ("status", "session_key", "tool_name")).order_by("created_at")


def tool_catalog_for_agent(agent: Agent, call: CallContext) -> list[dict]:
    """The definitions of the tools this call context may see (its tool set, filtered by the policy engine)."""
    tools = toolset_for(agent, call.user_id)
    return tools.definitions(catalog_for(agent, call, tools))


def tool_catalog_explain(agent: Agent, call: CallContext) -> dict:
    """Why each tool of the agent's tool set is or is not in this call context's catalog."""
    return explain(PolicyInput(agent, call), toolset_for(agent, call.user_id))
