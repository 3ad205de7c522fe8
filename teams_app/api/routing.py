"""Handoff routes, agent links and delegations over HTTP (docs/delegation.md): `routes/resolve` for channel gateways
(staff or any agent token), `agent-links/` for staff (agent keys in and out), `delegations/` (an agent sees its own,
both ways; staff every one). Thin: parse, call one service or selector, render."""
from __future__ import annotations

from typing import Any

from django.urls import re_path
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from goclaw.api import (IsAgentOrStaff, IsStaff, StrictBooleanField, StrictCharField, StrictIntegerField, agent_of,
                        error_responses, validated, validated_query)
from goclaw.errors import NotFound, ValidationError
from teams_app.actors import Actor
from teams_app.choices import DelegationStatus, LinkDirection
from teams_app.models import AgentLink
from teams_app.selectors_delegation import (agent_link_as_dict, agent_link_list, delegation_as_dict, delegation_list,
                                            delegations_for_agent, handoff_route_as_dict)
from teams_app.services import delegation as delegation_svc
from teams_app.services import handoff as handoff_svc
from tools_app.models import Agent

MAX_ID = 2**63 - 1


# --- serializers ---------------------------------------------------------------------------------------------------
class RouteResolveQuerySerializer(serializers.Serializer):
    channel = StrictCharField(max_length=handoff_svc.CHANNEL_MAX, help_text="the conversation's channel")
    chat_id = StrictCharField(max_length=handoff_svc.CHAT_ID_MAX, help_text="the conversation's chat id")


class HandoffRouteSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    channel = serializers.CharField()
    chat_id = serializers.CharField()
    agent = serializers.CharField(help_text="the agent that receives the conversation's next message")
    from_agent = serializers.CharField(allow_null=True)
    reason = serializers.CharField()
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)


class RouteResolveSerializer(serializers.Serializer):
    channel = serializers.CharField()
    chat_id = serializers.CharField()
    agent = serializers.CharField(allow_null=True, help_text="the handoff's agent key; null: the channel's usual agent")
    route = HandoffRouteSerializer(allow_null=True)


def _user_ids(**kwargs) -> serializers.ListField:
    return serializers.ListField(child=StrictCharField(max_length=255), max_length=delegation_svc.USER_LIST_MAX,
                                 **kwargs)


class AgentLinkPatchSerializer(serializers.Serializer):
    direction = serializers.ChoiceField(choices=LinkDirection.choices, required=False)
    max_concurrent = StrictIntegerField(min_value=1, max_value=1000, required=False,
                                        help_text="running delegations over this link at once")
    allow_user_ids = _user_ids(required=False, help_text="only these users (empty: everyone)")
    deny_user_ids = _user_ids(required=False, help_text="never these users (deny wins)")
    description = StrictCharField(max_length=delegation_svc.DESCRIPTION_MAX, allow_blank=True, required=False)
    enabled = StrictBooleanField(required=False)


class AgentLinkWriteSerializer(AgentLinkPatchSerializer):
    source = StrictCharField(max_length=64, help_text="the delegating agent's key")
    target = StrictCharField(max_length=64, help_text="the agent delegated to (key)")


class AgentLinkSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    source = serializers.CharField()
    target = serializers.CharField()
    direction = serializers.ChoiceField(choices=LinkDirection.choices)
    max_concurrent = serializers.IntegerField()
    allow_user_ids = serializers.ListField(child=serializers.CharField())
    deny_user_ids = serializers.ListField(child=serializers.CharField())
    description = serializers.CharField()
    enabled = serializers.BooleanField()
    created_at = serializers.DateTimeField()

    def to_representation(self, instance: AgentLink) -> dict[str, Any]:
        return agent_link_as_dict(instance)


class DelegationSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="D-12")
    source = serializers.CharField()
    target = serializers.CharField()
    link = serializers.IntegerField(allow_null=True)
    status = serializers.ChoiceField(choices=DelegationStatus.choices)
    request = serializers.CharField()
    result = serializers.CharField()
    user_id = serializers.CharField()
    team = serializers.IntegerField(allow_null=True)
    task = serializers.CharField(allow_null=True, help_text="T-001 when the work is a task on a team's board")
    task_status = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)

    def to_representation(self, instance) -> dict[str, Any]:
        return delegation_as_dict(instance)


class DelegationFilterSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=DelegationStatus.choices, required=False)


# --- views ---------------------------------------------------------------------------------------------------------
class RouteResolveView(APIView):
    permission_classes = [IsAgentOrStaff]
    staff_permissions = {"GET": ("teams_app.view_handoffroute",)}

    @extend_schema(parameters=[RouteResolveQuerySerializer], responses={200: RouteResolveSerializer},
                   summary="Which agent receives a conversation's next message (channel gateways)",
                   description="`agent` is the handoff's target, or null when the conversation has no unexpired "
                               "handoff (the channel's usual agent answers). Expired routes are purged.")
    def get(self, request):
        query = validated_query(RouteResolveQuerySerializer, request)
        route = handoff_svc.handoff_route_resolve(channel=query["channel"], chat_id=query["chat_id"])
        return Response({"channel": query["channel"], "chat_id": query["chat_id"],
                         "agent": route.target.key if route else None,
                         "route": handoff_route_as_dict(route) if route else None})


def _named_agent(key: str, field: str) -> Agent:
    agent = Agent.objects.filter(key=key).first()
    if agent is None:
        raise ValidationError(f"{field}: no agent has the key {key[:64]!r}", code="agent_link_invalid",
                              details={field: ["Unknown agent key."]})
    return agent


def _link(pk: str) -> AgentLink:
    row = (agent_link_list().filter(pk=int(pk)).first()
           if pk.isascii() and pk.isdigit() and int(pk) <= MAX_ID else None)
    if row is None:
        raise NotFound(f"no agent link {pk[:40]}", code="agent_link_not_found")
    return row


LINK_ERRORS = error_responses({400: "invalid fields or an unknown agent key (agent_link_invalid)",
                               409: "a link between these agents in this direction exists (agent_link_exists)"})
NO_LINK = error_responses({404: "no such agent link (agent_link_not_found)"})
ID = OpenApiParameter("id", int, OpenApiParameter.PATH, description="the link's id")


class AgentLinkListView(ListAPIView):
    permission_classes = [IsStaff]
    staff_permissions = {"GET": ("teams_app.view_agentlink",), "POST": ("teams_app.add_agentlink",)}
    serializer_class = AgentLinkSerializer

    def get_queryset(self):
        return agent_link_list()

    @extend_schema(summary="Agent links: who may delegate and hand off to whom (staff)")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(request=AgentLinkWriteSerializer, responses={201: AgentLinkSerializer, **LINK_ERRORS},
                   summary="Link two agents (staff)")
    def post(self, request):
        data = dict(validated(AgentLinkWriteSerializer, request.data))
        source = _named_agent(data.pop("source"), "source")
        target = _named_agent(data.pop("target"), "target")
        link = delegation_svc.agent_link_create(actor=Actor.for_user(request.user), source=source, target=target,
                                                **data)
        return Response(agent_link_as_dict(link), status=201)


class AgentLinkDetailView(APIView):
    permission_classes = [IsStaff]
    staff_permissions = {"GET": ("teams_app.view_agentlink",), "PATCH": ("teams_app.change_agentlink",),
                         "DELETE": ("teams_app.delete_agentlink",)}

    @extend_schema(parameters=[ID], responses={200: AgentLinkSerializer, **NO_LINK}, summary="One agent link (staff)")
    def get(self, request, id):
        return Response(agent_link_as_dict(_link(id)))

    @extend_schema(parameters=[ID], request=AgentLinkPatchSerializer,
                   responses={200: AgentLinkSerializer, **LINK_ERRORS, **NO_LINK},
                   summary="Change some fields of an agent link (staff)")
    def patch(self, request, id):
        link = _link(id)
        data = validated(AgentLinkPatchSerializer, request.data)
        link = delegation_svc.agent_link_update(actor=Actor.for_user(request.user), link=link, **data)
        return Response(agent_link_as_dict(link))

    @extend_schema(parameters=[ID], responses={204: None, **NO_LINK},
                   summary="Remove an agent link; its delegations stay and still finish (staff)")
    def delete(self, request, id):
        delegation_svc.agent_link_delete(actor=Actor.for_user(request.user), link=_link(id))
        return Response(status=204)


class DelegationListView(ListAPIView):
    permission_classes = [IsAgentOrStaff]
    staff_permissions = {"GET": ("teams_app.view_delegation",)}
    serializer_class = DelegationSerializer

    def get_queryset(self):
        agent = agent_of(self.request)
        status = self.filters.get("status")
        if agent is not None:
            return delegations_for_agent(agent, status=status)
        return delegation_list(status=status)

    @extend_schema(parameters=[DelegationFilterSerializer],
                   summary="Delegations: an agent's own (sent and received), or every one (staff)")
    def get(self, request, *args, **kwargs):
        self.filters = validated_query(DelegationFilterSerializer, request)
        return super().get(request, *args, **kwargs)


urlpatterns = [
    re_path(r"^routes/resolve/?$", RouteResolveView.as_view(), name="handoff-route-resolve"),
    re_path(r"^agent-links/?$", AgentLinkListView.as_view(), name="agent-link-list"),
    re_path(r"^agent-links/(?P<id>[^/]+)/?$", AgentLinkDetailView.as_view(), name="agent-link-detail"),
    re_path(r"^delegations/?$", DelegationListView.as_view(), name="delegation-list"),
]
