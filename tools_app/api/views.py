"""Agent-facing API: catalog, execute, safety check, scrub, invocations. Thin: parse, call a service, render."""
from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.generics import ListAPIView, RetrieveAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from goclaw.api import IsAgentOrStaff, IsStaff, agent_of, validated
from goclaw.errors import PermissionDenied, ValidationError
from tools_app import pipeline, policy
from tools_app.api import serializers as s
from tools_app.registry import registry
from tools_app.selectors import INVOCATION_FILTERS, invocation_list_for
from tools_app.services.agents import agent_get_by_key
from tools_app.services.approvals import tool_execute_waiting


def _acting_agent(request, key: str | None):
    """Agents act as themselves; staff must name the agent they act as."""
    agent = agent_of(request)
    if agent is not None:
        if key and key != agent.key:
            raise PermissionDenied("an agent token can only act as its own agent")
        return agent
    if not key:
        raise ValidationError("staff requests must name an agent", code="agent_required")
    return agent_get_by_key(key)


def _allow_param(request) -> list[str] | None:
    raw = request.query_params.get("allow")
    return None if raw is None else [part.strip() for part in raw.split(",") if part.strip()]


class AgentMeView(APIView):
    @extend_schema(responses=s.AgentSerializer, summary="The agent this token belongs to")
    def get(self, request):
        agent = agent_of(request)
        if agent is None:
            raise PermissionDenied("this endpoint needs an agent token")
        return Response(s.agent_public(agent))


_POLICY_QUERY_PARAMS = [
    OpenApiParameter("allow", str, description="comma-separated per-request allow list (names or group:x)"),
    OpenApiParameter("user_id", str), OpenApiParameter("provider", str, description="default: the agent's provider"),
    OpenApiParameter("channel", str), OpenApiParameter("chat_id", str), OpenApiParameter("depth", int, description="subagent depth"),
]


def _policy_call(request, agent) -> pipeline.ToolCall:
    """The call context a catalog query describes (the same inputs an execute call carries)."""
    params = request.query_params
    try:
        depth = int(params.get("depth") or 0)
    except ValueError:
        raise ValidationError("depth must be an integer", code="invalid_request") from None
    if not 0 <= depth <= 16:
        raise ValidationError("depth must be between 0 and 16", code="invalid_request")
    return pipeline.ToolCall(agent=agent, tool="", arguments={}, user_id=params.get("user_id", ""),
                             provider=params.get("provider", ""), channel=params.get("channel", ""),
                             chat_id=params.get("chat_id", ""), subagent_depth=depth, request_allow=_allow_param(request))


class ToolCatalogView(APIView):
    @extend_schema(responses=s.ToolCatalogSerializer, summary="The tools this agent may call, sorted by name",
                   parameters=[OpenApiParameter("agent", str, description="staff only: whose catalog"), *_POLICY_QUERY_PARAMS])
    def get(self, request):
        call = _policy_call(request, _acting_agent(request, request.query_params.get("agent")))
        return Response({"tools": registry.definitions(pipeline.catalog_for(call))})


class ToolExplainView(APIView):
    permission_classes = [IsStaff]

    @extend_schema(responses=s.ExplainSerializer, summary="Why each tool is or is not in an agent's catalog (staff)",
                   parameters=[OpenApiParameter("agent", str, required=True), *_POLICY_QUERY_PARAMS])
    def get(self, request):
        agent = _acting_agent(request, request.query_params.get("agent"))
        return Response(policy.explain(pipeline.policy_input(_policy_call(request, agent))))


class ToolExecuteView(APIView):
    @extend_schema(request=s.ExecuteRequestSerializer, responses=s.ExecuteResponseSerializer,
                   summary="Run a tool through the pipeline",
                   description="HTTP 200 for every outcome the model should see (ok, error, denied, rate_limited, "
                               "invalid_arguments, timeout); 4xx only for transport problems.")
    def post(self, request):
        data = s.parse_execute_request(request.data)
        agent = _acting_agent(request, data.get("agent"))
        ctx = data["context"]
        call = pipeline.ToolCall(
            agent=agent, tool=data["tool"], arguments=data["arguments"], user_id=ctx["user_id"],
            session_key=ctx["session_key"], channel=ctx["channel"], chat_id=ctx["chat_id"], peer_kind=ctx["peer_kind"],
            provider=ctx["provider"], subagent_depth=ctx["subagent_depth"], request_allow=ctx["allow"],
            request_id=request.headers.get("X-Request-Id", "")[:64],
        )
        outcome = tool_execute_waiting(call, data["wait_seconds"])
        return Response(outcome.as_dict(), status=202 if outcome.status == "pending_approval" else 200)


class CheckCommandView(APIView):
    permission_classes = [IsAgentOrStaff]

    @extend_schema(request=s.CheckCommandRequestSerializer, responses=s.CheckCommandResponseSerializer,
                   summary="The shell safety check exec applies, without running anything")
    def post(self, request):
        from tools_app.security.shell_check import check_command

        data = validated(s.CheckCommandRequestSerializer, request.data)
        agent = agent_of(request)
        disabled = frozenset(pipeline.agent_settings(agent).get("shell_disabled_rule_groups", ())) if agent else frozenset()
        verdict = check_command(data["command"], disabled_groups=disabled)
        return Response({"verdict": verdict.verdict, "observe": verdict.observe, "reasons": list(verdict.reasons)})


class ScrubView(APIView):
    permission_classes = [IsStaff]

    @extend_schema(request=s.ScrubRequestSerializer, responses=s.ScrubResponseSerializer,
                   summary="Redact credentials from text (staff only)")
    def post(self, request):
        from tools_app.security.scrub import default_scrubber

        data = validated(s.ScrubRequestSerializer, request.data)
        text, count = default_scrubber.scrub(data["text"])
        return Response({"text": text, "redactions": count})


class InvocationListView(ListAPIView):
    serializer_class = s.InvocationSerializer

    @extend_schema(parameters=[OpenApiParameter(name, str) for name in INVOCATION_FILTERS],
                   summary="Audit rows: an agent sees its own, staff sees all")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        return invocation_list_for(agent=agent_of(self.request), filters=self.request.query_params)


class InvocationDetailView(RetrieveAPIView):
    serializer_class = s.InvocationSerializer
    lookup_field = "pk"

    def get_queryset(self):
        return invocation_list_for(agent=agent_of(self.request), filters={})
