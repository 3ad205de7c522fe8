"""Agent-facing API: catalog, execute, safety check, scrub, invocations. Thin: parse, call a service, render."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.generics import ListAPIView, RetrieveAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from goclaw.api import (
    IsAgent,
    IsStaff,
    agent_of,
    error_responses,
    validated,
    validated_query,
)
from goclaw.errors import PermissionDenied, ValidationError
from tools_app import pipeline
from tools_app.api import serializers as s
from tools_app.calls import CallContext, ToolCall
from tools_app.execution import tool_execute
from tools_app.security.scrub import default_scrubber
from tools_app.security.shell_check import check_command
from tools_app.selectors import (
    invocation_list_for,
    tool_catalog_explain,
    tool_catalog_for_agent,
)
from tools_app.selectors_audit import invocation_payloads_masked, payloads_visible
from tools_app.services.agents import agent_get_by_key
from tools_app.services.audit import audit_payload_viewed


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


class AgentMeView(APIView):
    permission_classes = [IsAgent]

    @extend_schema(responses=s.AgentSerializer, summary="The agent this token belongs to")
    def get(self, request):
        return Response(s.agent_public(agent_of(request)))


def _policy_context(query: dict) -> CallContext:
    """The call context a validated PolicyQuerySerializer describes."""
    allow = query.get("allow")
    return CallContext(user_id=query.get("user_id", ""), provider=query.get("provider", ""),
                       channel=query.get("channel", ""), chat_id=query.get("chat_id", ""), subagent_depth=query["depth"],
                       request_allow=None if allow is None else tuple(p.strip() for p in allow.split(",") if p.strip()))


_AGENT_ERRORS = {403: "an agent token named another agent", 404: "no agent with that key (agent_not_found)"}


class ToolCatalogView(APIView):
    staff_permissions = {"GET": ("tools_app.view_agent", "tools_app.view_toolpolicy")}

    @extend_schema(parameters=[s.CatalogQuerySerializer], summary="The tools this agent may call, sorted by name",
                   responses={200: s.ToolCatalogSerializer, **error_responses(
                       {400: "an invalid query parameter, or a staff request without ?agent= (agent_required)", **_AGENT_ERRORS})})
    def get(self, request):
        query = validated_query(s.CatalogQuerySerializer, request)
        agent = _acting_agent(request, query.get("agent"))
        return Response({"tools": tool_catalog_for_agent(agent, _policy_context(query))})


class ToolExplainView(APIView):
    permission_classes = [IsStaff]
    staff_permissions = {"GET": ("tools_app.view_agent", "tools_app.view_toolpolicy")}

    @extend_schema(parameters=[s.ExplainQuerySerializer], summary="Why each tool is or is not in an agent's catalog (staff)",
                   responses={200: s.ExplainSerializer, **error_responses({404: _AGENT_ERRORS[404]})})
    def get(self, request):
        query = validated_query(s.ExplainQuerySerializer, request)
        agent = _acting_agent(request, query["agent"])
        return Response(tool_catalog_explain(agent, _policy_context(query)))


class ToolExecuteView(APIView):
    staff_permissions = {"POST": ("tools_app.execute_as_agent",)}  # staff run a tool as the agent they name

    @extend_schema(request=s.ExecuteRequestSerializer,
                   responses={**s.EXECUTE_RESPONSES,
                              **error_responses({400: "malformed JSON or invalid fields, or a staff request without `agent` "
                                                      "(agent_required)", **_AGENT_ERRORS})},
                   summary="Run a tool through the pipeline",
                   description="HTTP 200 for every outcome the model should see (ok, error, denied, rate_limited, "
                               "invalid_arguments, timeout); 202 while a person must approve; 4xx only for transport problems.")
    def post(self, request):
        data = s.parse_execute_request(request.data)
        agent = _acting_agent(request, data.get("agent"))
        call = ToolCall(agent=agent, tool=data["tool"], arguments=data["arguments"],
                        context=data["context"].replace(request_id=request.META.get("HTTP_X_REQUEST_ID", "")[:64]))
        outcome = tool_execute(call, data["wait_seconds"])
        return Response(outcome.as_dict(), status=s.execute_http_status(outcome))


class CheckCommandView(APIView):
    staff_permissions = {"POST": ("tools_app.view_toolpolicy",)}

    @extend_schema(request=s.CheckCommandRequestSerializer, responses=s.CheckCommandResponseSerializer,
                   summary="The shell safety check exec applies, without running anything")
    def post(self, request):
        data = validated(s.CheckCommandRequestSerializer, request.data)
        agent = agent_of(request)
        disabled = frozenset(pipeline.agent_settings(agent).get("shell_disabled_rule_groups", ())) if agent else frozenset()
        verdict = check_command(data["command"], disabled_groups=disabled)
        return Response({"verdict": verdict.verdict, "observe": verdict.observe, "reasons": list(verdict.reasons)})


class ScrubView(APIView):
    permission_classes = [IsStaff]
    staff_permissions = {"POST": ("tools_app.view_toolpolicy",)}

    @extend_schema(request=s.ScrubRequestSerializer, responses=s.ScrubResponseSerializer,
                   summary="Redact credentials from text (staff only)")
    def post(self, request):
        data = validated(s.ScrubRequestSerializer, request.data)
        text, count = default_scrubber.scrub(data["text"])
        return Response({"text": text, "redactions": count})


def _payloads_for_person(request, rows: list[dict], target: str) -> list[dict]:
    """Audit rows as this caller may see them: an agent its own as stored; a person with view_payload as stored,
    the read recorded; any other person with the payloads masked (tools_app.selectors_audit)."""
    if agent_of(request) is not None:
        return rows
    if payloads_visible(request.user):
        audit_payload_viewed(person=request.user, invocation_ids=[row["id"] for row in rows], where="api", target=target)
        return rows
    return [invocation_payloads_masked(row) for row in rows]


_PAYLOADS = ("Staff without tools_app.view_payload see `arguments`, `error` and `observe_reasons` masked (each "
             "string cut to a short preview); with it they see them as stored, and the read is recorded.")


class InvocationListView(ListAPIView):
    serializer_class = s.InvocationSerializer
    staff_permissions = {"GET": ("tools_app.view_toolinvocation",)}

    @extend_schema(parameters=[s.InvocationFilterSerializer], summary="Audit rows: an agent sees its own, staff sees all",
                   description=_PAYLOADS)
    def get(self, request, *args, **kwargs):
        self.filters = validated_query(s.InvocationFilterSerializer, request)
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        return invocation_list_for(agent=agent_of(self.request), filters=self.filters)

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.get_queryset())
        rows = _payloads_for_person(request, self.get_serializer(page, many=True).data, "list")
        return self.get_paginated_response(rows)


class InvocationDetailView(RetrieveAPIView):
    serializer_class = s.InvocationSerializer
    lookup_field = "pk"
    staff_permissions = {"GET": ("tools_app.view_toolinvocation",)}

    @extend_schema(summary="One audit row (an agent sees only its own)", description=_PAYLOADS)
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        return invocation_list_for(agent=agent_of(self.request), filters={})

    def retrieve(self, request, *args, **kwargs):
        row = self.get_serializer(self.get_object()).data
        return Response(_payloads_for_person(request, [row], str(row["id"]))[0])
