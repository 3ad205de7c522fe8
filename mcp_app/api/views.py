"""The MCP API (docs/mcp.md): servers, their pinned tools, grants, user grants and launchers for staff; access requests
for agents (their own) and staff (all). Thin: parse, call one service or selector, render. Secrets are write-only."""
from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from goclaw.api import IsAgentOrStaff, IsStaff, agent_of, error_responses, validated, validated_query
from goclaw.errors import NotFound, ValidationError
from mcp_app.api import serializers as s
from mcp_app.models import MCPAccessRequest, MCPAgentGrant, MCPLauncher, MCPServer, MCPTool, MCPUserGrant
from mcp_app.selectors import access_requests_for_agent, servers_with_tool_counts
from mcp_app.services import connections, grants, servers
from tools_app.models import Agent

MAX_ID = 2**63 - 1
ID = OpenApiParameter("id", OpenApiTypes.INT, OpenApiParameter.PATH, description="the row's id")


# --- lookups: a name in the path is a 404 when unknown, a name in the body a 400 naming the field ------------------
def _server(name: str) -> MCPServer:
    if "\x00" in name:
        raise NotFound("no such MCP server", code="mcp_server_not_found")
    return servers.server_get(name)


def _row(queryset, pk: str, what: str):
    row = queryset.filter(pk=int(pk)).first() if pk.isascii() and pk.isdigit() and int(pk) <= MAX_ID else None
    if row is None:
        raise NotFound(f"no {what} {pk[:40]}", code=f"{what.replace(' ', '_')}_not_found")
    return row


def _named_server(name: str, code: str) -> MCPServer:
    server = MCPServer.objects.filter(name=name).first()
    if server is None:
        raise ValidationError(f"server: no MCP server named {name[:48]!r}", code=code,
                              details={"server": "unknown MCP server"})
    return server


def _named_agent(key: str | None, code: str) -> Agent | None:
    if key is None:
        return None
    agent = Agent.objects.filter(key=key).first()
    if agent is None:
        raise ValidationError(f"agent: no agent has the key {key[:64]!r}", code=code, details={"agent": "unknown agent key"})
    return agent


def _profile(name: str | None) -> Any:
    from sandbox_app.models import SandboxProfile

    if name is None:
        return None
    profile = SandboxProfile.objects.filter(name=name).first()
    if profile is None:
        raise ValidationError(f"sandbox_profile: no sandbox profile named {name[:64]!r}", code="mcp_server_invalid",
                              details={"sandbox_profile": "unknown sandbox profile"})
    return profile


def _server_fields(data: dict) -> tuple[dict, dict | None, dict | None]:
    data = dict(data)
    headers, env = data.pop("headers", None), data.pop("env", None)
    if "sandbox_profile" in data:
        data["sandbox_profile"] = _profile(data["sandbox_profile"])
    return data, (dict(headers) if headers is not None else None), (dict(env) if env is not None else None)


SERVER_ERRORS = error_responses({400: "an invalid server definition; `details` names each field (mcp_server_invalid)",
                                 409: "the name or the tool prefix is taken (mcp_server_exists)"})
NO_SERVER = error_responses({404: "no MCP server with this name (mcp_server_not_found)"})
NO_TOOL = error_responses({404: "no such server, or the server has no such tool"})


# --- servers -------------------------------------------------------------------------------------------------------
class ServerListView(ListAPIView):
    permission_classes = [IsStaff]
    staff_permissions = {"GET": ("mcp_app.view_mcpserver",), "POST": ("mcp_app.add_mcpserver",)}
    serializer_class = s.MCPServerSerializer

    def get_queryset(self):
        return servers_with_tool_counts()

    @extend_schema(summary="MCP servers with their health and tool counts (staff)")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(request=s.MCPServerWriteSerializer, responses={201: s.MCPServerSerializer, **SERVER_ERRORS},
                   summary="Add an MCP server (staff; headers and env are write-only)")
    def post(self, request):
        data, headers, env = _server_fields(validated(s.MCPServerWriteSerializer, request.data))
        server = servers.server_create(actor=request.user, headers=headers, env=env, **data)
        return Response(s.MCPServerSerializer(server).data, status=201)


class ServerDetailView(APIView):
    permission_classes = [IsStaff]
    staff_permissions = {"GET": ("mcp_app.view_mcpserver",), "PATCH": ("mcp_app.change_mcpserver",),
                         "DELETE": ("mcp_app.delete_mcpserver",)}

    @extend_schema(responses={200: s.MCPServerSerializer, **NO_SERVER}, summary="One MCP server (staff)")
    def get(self, request, name):
        return Response(s.MCPServerSerializer(_server(name)).data)

    @extend_schema(request=s.MCPServerPatchSerializer, responses={200: s.MCPServerSerializer, **SERVER_ERRORS, **NO_SERVER},
                   summary="Change some fields of an MCP server (staff; headers / env: null removes a name)")
    def patch(self, request, name):
        server = _server(name)
        data, headers, env = _server_fields(validated(s.MCPServerPatchSerializer, request.data))
        server = servers.server_update(actor=request.user, server=server, headers=headers, env=env, **data)
        return Response(s.MCPServerSerializer(server).data)

    @extend_schema(responses={204: None, **NO_SERVER}, summary="Remove an MCP server with its tools and grants (staff)")
    def delete(self, request, name):
        servers.server_delete(actor=request.user, server=_server(name))
        return Response(status=204)


class ServerTestView(APIView):
    permission_classes = [IsStaff]
    staff_permissions = {"POST": ("mcp_app.change_mcpserver",)}  # pins or quarantines the tools it lists

    @extend_schema(request=None, responses={200: s.ConnectionReportSerializer, **NO_SERVER},
                   summary="Test connection: list the server's tools now and pin / quarantine them (staff)",
                   description="200 even when the server cannot be reached: `ok` is false and `error` says why.")
    def post(self, request, name):
        return Response(connections.server_tools_refresh(_server(name)))


class ServerReconnectView(APIView):
    permission_classes = [IsStaff]
    staff_permissions = {"POST": ("mcp_app.change_mcpserver",)}

    @extend_schema(request=None, responses={200: s.ConnectionReportSerializer, **NO_SERVER},
                   summary="Drop this process's connections to the server and connect again now (staff)",
                   description="Ends a reconnect cooldown. 200 even when the server cannot be reached (`ok` false).")
    def post(self, request, name):
        return Response(connections.server_reconnect(_server(name)))


# --- tools ---------------------------------------------------------------------------------------------------------
def _tool(name: str, tool: str) -> MCPTool:
    server = _server(name)
    if tool.startswith(server.prefix):
        tool = tool[len(server.prefix):]
    row = MCPTool.objects.select_related("server").filter(server=server, name=tool).first() if "\x00" not in tool else None
    if row is None:
        raise NotFound(f"MCP server {server.name} has no tool {tool[:128]!r}", code="mcp_tool_not_found")
    return row


class ToolListView(ListAPIView):
    permission_classes = [IsStaff]
    staff_permissions = {"GET": ("mcp_app.view_mcptool",)}
    serializer_class = s.MCPToolSerializer

    def get_queryset(self):
        return MCPTool.objects.select_related("server").filter(server=self.server).order_by("name")

    @extend_schema(summary="Every tool the server listed, with its review status and flags (staff)",
                   responses={200: s.MCPToolSerializer(many=True), **NO_SERVER})
    def get(self, request, *args, name, **kwargs):
        self.server = _server(name)
        return super().get(request, *args, **kwargs)


class ToolDetailView(APIView):
    permission_classes = [IsStaff]
    staff_permissions = {"GET": ("mcp_app.view_mcptool",)}

    @extend_schema(responses={200: s.MCPToolDetailSerializer, **NO_TOOL},
                   summary="One tool with the diff of its pinned and its listed definition (staff)")
    def get(self, request, name, tool):
        return Response(s.MCPToolDetailSerializer(_tool(name, tool)).data)


class ToolApproveView(APIView):
    permission_classes = [IsStaff]
    staff_permissions = {"POST": ("mcp_app.change_mcptool",)}

    @extend_schema(request=s.ToolApproveSerializer, responses={200: s.MCPToolSerializer, **NO_TOOL,
                                                               **error_responses({
                       409: "already approved with this definition, or it changed since expected_hash (mcp_tool_not_reviewable)"})},
                   summary="Approve (pin) a pending or quarantined tool's listed definition (staff)")
    def post(self, request, name, tool):
        from mcp_app.services.tools import mcp_tool_approve

        expected = validated(s.ToolApproveSerializer, request.data or {}).get("expected_hash")
        approved = mcp_tool_approve(actor=request.user, tool=_tool(name, tool), expected_hash=expected)
        return Response(s.MCPToolSerializer(approved).data)


class ToolRejectView(APIView):
    permission_classes = [IsStaff]
    staff_permissions = {"POST": ("mcp_app.change_mcptool",)}

    @extend_schema(request=s.ToolRejectSerializer, responses={200: s.MCPToolSerializer, **NO_TOOL, **error_responses({
                       409: "already rejected (mcp_tool_not_reviewable)"})},
                   summary="Reject a tool's listed definition: agents never see it (staff)")
    def post(self, request, name, tool):
        from mcp_app.services.tools import mcp_tool_reject

        note = validated(s.ToolRejectSerializer, request.data or {})["note"]
        return Response(s.MCPToolSerializer(mcp_tool_reject(actor=request.user, tool=_tool(name, tool), note=note)).data)


# --- agent grants --------------------------------------------------------------------------------------------------
GRANT_ERRORS = error_responses({400: "invalid fields, or an unknown server or agent (mcp_grant_invalid)"})
NO_GRANT = error_responses({404: "no such grant"})


def _filtered(queryset, filters: dict, **fields: str):
    for param, lookup in fields.items():
        if filters.get(param):
            queryset = queryset.filter(**{lookup: filters[param]})
    return queryset


class GrantListView(ListAPIView):
    permission_classes = [IsStaff]
    staff_permissions = {"GET": ("mcp_app.view_mcpagentgrant",),
                         "POST": ("mcp_app.add_mcpagentgrant", "mcp_app.change_mcpagentgrant")}  # sets or replaces
    serializer_class = s.MCPAgentGrantSerializer

    def get_queryset(self):
        return _filtered(MCPAgentGrant.objects.select_related("server", "agent"), self.filters,
                         server="server__name", agent="agent__key")

    @extend_schema(parameters=[s.GrantFilterSerializer], summary="Agent grants to MCP servers (staff)")
    def get(self, request, *args, **kwargs):
        self.filters = validated_query(s.GrantFilterSerializer, request)
        return super().get(request, *args, **kwargs)

    @extend_schema(request=s.MCPAgentGrantWriteSerializer, responses={201: s.MCPAgentGrantSerializer, **GRANT_ERRORS},
                   summary="Grant an agent a server, or replace its grant (staff)")
    def post(self, request):
        data = validated(s.MCPAgentGrantWriteSerializer, request.data)
        grant = grants.agent_grant_set(
            actor=request.user, server=_named_server(data["server"], "mcp_grant_invalid"),
            agent=_named_agent(data["agent"], "mcp_grant_invalid"), tool_allow=data.get("tool_allow"),
            tool_deny=data.get("tool_deny", []), expires_at=data.get("expires_at"), enabled=data.get("enabled", True),
            config_overrides=data.get("config_overrides"))
        return Response(s.MCPAgentGrantSerializer(grant).data, status=201)


class GrantDetailView(APIView):
    permission_classes = [IsStaff]
    staff_permissions = {"GET": ("mcp_app.view_mcpagentgrant",), "PATCH": ("mcp_app.change_mcpagentgrant",),
                         "DELETE": ("mcp_app.delete_mcpagentgrant",)}

    def _grant(self, id: str) -> MCPAgentGrant:
        return _row(MCPAgentGrant.objects.select_related("server", "agent"), id, "mcp grant")

    @extend_schema(parameters=[ID], responses={200: s.MCPAgentGrantSerializer, **NO_GRANT}, summary="One agent grant (staff)")
    def get(self, request, id):
        return Response(s.MCPAgentGrantSerializer(self._grant(id)).data)

    @extend_schema(parameters=[ID], request=s.MCPAgentGrantPatchSerializer,
                   responses={200: s.MCPAgentGrantSerializer, **GRANT_ERRORS, **NO_GRANT},
                   summary="Change some fields of an agent grant (staff)")
    def patch(self, request, id):
        grant = self._grant(id)
        data = validated(s.MCPAgentGrantPatchSerializer, request.data)
        current = {"tool_allow": grant.tool_allow, "tool_deny": grant.tool_deny, "expires_at": grant.expires_at,
                   "enabled": grant.enabled, "config_overrides": None}
        grant = grants.agent_grant_set(actor=request.user, server=grant.server, agent=grant.agent, **{**current, **data})
        return Response(s.MCPAgentGrantSerializer(grant).data)

    @extend_schema(parameters=[ID], responses={204: None, **NO_GRANT}, summary="Revoke an agent grant (staff)")
    def delete(self, request, id):
        grants.agent_grant_revoke(actor=request.user, grant=self._grant(id))
        return Response(status=204)


# --- user grants ---------------------------------------------------------------------------------------------------
NO_USER_GRANT = error_responses({404: "no such user grant"})


def _credentials(data: dict) -> dict | None:
    credentials = data.get("credentials")
    return None if credentials is None else {key: dict(value) for key, value in credentials.items()}


class UserGrantListView(ListAPIView):
    permission_classes = [IsStaff]
    staff_permissions = {"GET": ("mcp_app.view_mcpusergrant",),
                         "POST": ("mcp_app.add_mcpusergrant", "mcp_app.change_mcpusergrant")}  # sets or replaces
    serializer_class = s.MCPUserGrantSerializer

    def get_queryset(self):
        return _filtered(MCPUserGrant.objects.select_related("server", "agent"), self.filters,
                         server="server__name", agent="agent__key", user_id="user_id")

    @extend_schema(parameters=[s.UserGrantFilterSerializer], summary="User grants: per-user narrowing and credentials (staff)")
    def get(self, request, *args, **kwargs):
        self.filters = validated_query(s.UserGrantFilterSerializer, request)
        return super().get(request, *args, **kwargs)

    @extend_schema(request=s.MCPUserGrantWriteSerializer, responses={201: s.MCPUserGrantSerializer, **GRANT_ERRORS},
                   summary="Set the grant of a user (for one agent or every agent) to a server (staff)")
    def post(self, request):
        data = validated(s.MCPUserGrantWriteSerializer, request.data)
        grant = grants.user_grant_set(
            actor=request.user, server=_named_server(data["server"], "mcp_grant_invalid"),
            agent=_named_agent(data.get("agent"), "mcp_grant_invalid"), user_id=data["user_id"],
            tool_allow=data.get("tool_allow"), tool_deny=data.get("tool_deny", []), expires_at=data.get("expires_at"),
            enabled=data.get("enabled", True), credentials=_credentials(data))
        return Response(s.MCPUserGrantSerializer(grant).data, status=201)


class UserGrantDetailView(APIView):
    permission_classes = [IsStaff]
    staff_permissions = {"GET": ("mcp_app.view_mcpusergrant",), "PATCH": ("mcp_app.change_mcpusergrant",),
                         "DELETE": ("mcp_app.delete_mcpusergrant",)}

    def _grant(self, id: str) -> MCPUserGrant:
        return _row(MCPUserGrant.objects.select_related("server", "agent"), id, "mcp user grant")

    @extend_schema(parameters=[ID], responses={200: s.MCPUserGrantSerializer, **NO_USER_GRANT},
                   summary="One user grant (staff)")
    def get(self, request, id):
        return Response(s.MCPUserGrantSerializer(self._grant(id)).data)

    @extend_schema(parameters=[ID], request=s.MCPUserGrantPatchSerializer,
                   responses={200: s.MCPUserGrantSerializer, **GRANT_ERRORS, **NO_USER_GRANT},
                   summary="Change some fields of a user grant (staff; credentials: null removes a name)")
    def patch(self, request, id):
        grant = self._grant(id)
        data = validated(s.MCPUserGrantPatchSerializer, request.data)
        current = {"tool_allow": grant.tool_allow, "tool_deny": grant.tool_deny, "expires_at": grant.expires_at,
                   "enabled": grant.enabled}
        current.update({key: value for key, value in data.items() if key != "credentials"})
        grant = grants.user_grant_set(actor=request.user, server=grant.server, agent=grant.agent, user_id=grant.user_id,
                                      credentials=_credentials(data), **current)
        return Response(s.MCPUserGrantSerializer(grant).data)

    @extend_schema(parameters=[ID], responses={204: None, **NO_USER_GRANT},
                   summary="Remove a user grant with the user's stored credentials (staff)")
    def delete(self, request, id):
        grants.user_grant_revoke(actor=request.user, grant=self._grant(id))
        return Response(status=204)


# --- access requests -----------------------------------------------------------------------------------------------
NO_REQUEST = error_responses({404: "no such access request, or not one these credentials can see"})


def _requester(request) -> str:
    """Who is asking: `agent:<key>` for an agent token, else the staff member's username."""
    agent = agent_of(request)
    return f"agent:{agent.key}" if agent is not None else request.user.get_username()


def _access_request(request, id: str) -> MCPAccessRequest:
    """An agent sees only its own requests (others' are a 404, never a 403: existence is not revealed)."""
    agent = agent_of(request)
    queryset = (access_requests_for_agent(agent) if agent is not None
                else MCPAccessRequest.objects.select_related("server", "agent"))
    return _row(queryset, id, "mcp access request")


class AccessRequestListView(ListAPIView):
    permission_classes = [IsAgentOrStaff]
    staff_permissions = {"GET": ("mcp_app.view_mcpaccessrequest",), "POST": ("mcp_app.add_mcpaccessrequest",)}
    serializer_class = s.MCPAccessRequestSerializer

    def get_queryset(self):
        agent = agent_of(self.request)
        queryset = (access_requests_for_agent(agent) if agent is not None
                    else MCPAccessRequest.objects.select_related("server", "agent"))
        return _filtered(queryset, self.filters, status="status", server="server__name").order_by("-created_at", "-pk")

    @extend_schema(parameters=[s.AccessRequestFilterSerializer],
                   summary="MCP access requests: an agent sees its own, staff sees all")
    def get(self, request, *args, **kwargs):
        self.filters = validated_query(s.AccessRequestFilterSerializer, request)
        return super().get(request, *args, **kwargs)

    @extend_schema(request=s.MCPAccessRequestWriteSerializer, responses={201: s.MCPAccessRequestSerializer, **error_responses({
        400: "invalid fields, or an unknown server or agent (mcp_access_request_invalid)",
        409: "the same request is already pending (mcp_access_request_pending; details.id names it)"})},
        summary="Ask for access to an MCP server (an agent for itself or one of its users; staff for anyone)")
    def post(self, request):
        data = validated(s.MCPAccessRequestWriteSerializer, request.data)
        code = "mcp_access_request_invalid"
        agent = agent_of(request) or _named_agent(data.get("agent"), code)
        created = grants.access_request_create(
            requested_by=_requester(request), scope=data["scope"], server=_named_server(data["server"], code),
            agent=agent, user_id=data.get("user_id", ""), tool_allow=data.get("tool_allow"),
            reason=data.get("reason", ""))
        return Response(s.MCPAccessRequestSerializer(created).data, status=201)


class AccessRequestDetailView(APIView):
    permission_classes = [IsAgentOrStaff]
    staff_permissions = {"GET": ("mcp_app.view_mcpaccessrequest",)}

    @extend_schema(parameters=[ID], responses={200: s.MCPAccessRequestSerializer, **NO_REQUEST},
                   summary="One access request (an agent: only its own)")
    def get(self, request, id):
        return Response(s.MCPAccessRequestSerializer(_access_request(request, id)).data)


class AccessRequestReviewView(APIView):
    permission_classes = [IsStaff]
    staff_permissions = {"POST": ("mcp_app.review_mcpaccessrequest",)}

    @extend_schema(parameters=[ID], request=s.AccessReviewSerializer,
                   responses={200: s.MCPAccessRequestSerializer, **NO_REQUEST, **error_responses({
                       409: "the request is no longer pending (mcp_access_request_decided)"})},
                   summary="Approve (the grant is written in the same transaction) or reject a request (staff)")
    def post(self, request, id):
        data = validated(s.AccessReviewSerializer, request.data)
        reviewed = grants.access_request_review(actor=request.user, request=_access_request(request, id),
                                                decision=data["decision"], note=data["note"])
        return Response(s.MCPAccessRequestSerializer(reviewed).data)


class AccessRequestWithdrawView(APIView):
    permission_classes = [IsAgentOrStaff]
    staff_permissions = {"POST": ("mcp_app.add_mcpaccessrequest",)}  # whoever may ask may take their request back

    @extend_schema(parameters=[ID], request=None, responses={200: s.MCPAccessRequestSerializer, **NO_REQUEST, **error_responses({
        403: "only the requester may withdraw a request (mcp_access_request_not_yours)",
        409: "the request is no longer pending (mcp_access_request_decided)"})},
        summary="Take back a pending request (its requester only)")
    def post(self, request, id):
        withdrawn = grants.access_request_withdraw(requested_by=_requester(request),
                                                   request=_access_request(request, id))
        return Response(s.MCPAccessRequestSerializer(withdrawn).data)


# --- launchers -----------------------------------------------------------------------------------------------------
class LauncherListView(ListAPIView):
    permission_classes = [IsStaff]
    staff_permissions = {"GET": ("mcp_app.view_mcplauncher",),
                         "POST": ("mcp_app.manage_mcplauncher", "mcp_app.add_mcplauncher", "mcp_app.change_mcplauncher")}
    serializer_class = s.MCPLauncherSerializer
    queryset = MCPLauncher.objects.all()

    @extend_schema(summary="Programs stdio MCP servers may be started with (staff)")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(request=s.MCPLauncherWriteSerializer, responses={200: s.MCPLauncherSerializer, **error_responses({
        400: "not a bare program name or an absolute path (mcp_launcher_invalid)"})},
        summary="Add or change an allowed launcher (staff)")
    def post(self, request):
        data = validated(s.MCPLauncherWriteSerializer, request.data)
        return Response(s.MCPLauncherSerializer(servers.launcher_set(actor=request.user, **data)).data)
