"""Reads: which MCP servers and tools an (agent, user) may use (docs/mcp.md, "Effective access").

The agent must hold an enabled, unexpired grant to an enabled server. For a user, every user grant that applies
(one for this agent, one for all agents) narrows it: its allow list intersects, its deny list adds; a disabled or
expired user grant means no access for that user (an expired narrowing never widens access: fail closed). Deny
always wins. Tools are ordered by server name, then tool name, in every process.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from mcp_app.choices import AccessStatus, ToolStatus
from mcp_app.models import MCPAccessRequest, MCPAgentGrant, MCPServer, MCPTool, MCPUserGrant


@dataclass(frozen=True)
class ServerAccess:
    """One server an (agent, user) may use, with the grants that decide which of its tools."""

    server: MCPServer
    agent_grant: MCPAgentGrant
    user_grants: tuple[MCPUserGrant, ...] = ()

    def allows(self, tool_name: str) -> bool:
        grants = (self.agent_grant, *self.user_grants)
        if any(tool_name in (g.tool_deny or ()) for g in grants):
            return False
        return all(g.tool_allow is None or tool_name in g.tool_allow for g in grants)

    @property
    def credential_grant(self) -> MCPUserGrant | None:
        """The user grant whose credentials calls use: the one for this agent first, then the all-agents one."""
        with_credentials = [g for g in self.user_grants if g.credentials_sealed]
        with_credentials.sort(key=lambda g: g.agent_id is None)
        return with_credentials[0] if with_credentials else None


def _live(grant: Any, now) -> bool:
    return grant.enabled and (grant.expires_at is None or grant.expires_at > now)


def mcp_access_for(agent_id: int, user_id: str = "", *, server_id: int | None = None) -> list[ServerAccess]:
    """The servers agent `agent_id` may use for `user_id` (two queries), ordered by server name."""
    now = timezone.now()
    grants = MCPAgentGrant.objects.filter(agent_id=agent_id, enabled=True, server__enabled=True).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=now)).select_related("server")
    if server_id is not None:
        grants = grants.filter(server_id=server_id)
    by_server = {g.server_id: g for g in grants}
    if not by_server:
        return []
    narrowing: dict[int, list[MCPUserGrant]] = {}
    if user_id:
        for grant in MCPUserGrant.objects.filter(user_id=user_id, server_id__in=list(by_server)).filter(
                Q(agent_id=agent_id) | Q(agent__isnull=True)):
            narrowing.setdefault(grant.server_id, []).append(grant)
    access = []
    for server_id_, grant in by_server.items():
        user_grants = narrowing.get(server_id_, [])
        if not all(_live(g, now) for g in user_grants):
            continue
        access.append(ServerAccess(server=grant.server, agent_grant=grant, user_grants=tuple(user_grants)))
    return sorted(access, key=lambda a: a.server.name)


def mcp_tools_for(agent_id: int, user_id: str = "") -> list[tuple[ServerAccess, MCPTool]]:
    """Every usable tool agent `agent_id` may call for `user_id` (three queries), in a stable order."""
    access = mcp_access_for(agent_id, user_id)
    if not access:
        return []
    by_server = {a.server.pk: a for a in access}
    rows = MCPTool.objects.filter(server_id__in=list(by_server), status="approved", present=True).order_by(
        "server__name", "name")
    return [(by_server[row.server_id], row) for row in rows
            if row.usable and by_server[row.server_id].allows(row.name)]


def mcp_tool_get(server_id: int, name: str) -> MCPTool | None:
    return MCPTool.objects.filter(server_id=server_id, name=name).first()


def access_requests_for_agent(agent: Any):
    """The requests an agent made or that name it (what its token may see)."""
    return MCPAccessRequest.objects.filter(Q(agent=agent) | Q(requested_by=f"agent:{agent.key}")).select_related(
        "server", "agent")


def access_requests_pending():
    return MCPAccessRequest.objects.filter(status=AccessStatus.PENDING).select_related("server", "agent")


def servers_with_tool_counts() -> QuerySet[MCPServer]:
    """Servers with their tools counted by status in the same query (the API list and the admin list)."""
    return MCPServer.objects.select_related("sandbox_profile").annotate(
        **{f"tools_{status}": Count("tools", filter=Q(tools__status=status)) for status in ToolStatus.values})
