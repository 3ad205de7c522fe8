"""Sessions API: a channel gateway (the agent's token, its own sessions) or a person with permission starts sessions,
sends messages (optionally waiting for the reply), reads them and cancels. Thin: parse, call a service, render."""
from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from goclaw.api import (ClosedBody, StrictBooleanField, StrictCharField, StrictIntegerField, agent_of,
                        error_responses, validated, validated_query)
from goclaw.errors import PermissionDenied, ValidationError
from runtime_app import selectors as sel
from runtime_app.choices import MessageRole, SessionStatus
from runtime_app.services import sessions as svc
from tools_app.services.agents import agent_get_by_key

VIEW = ("runtime_app.view_session", "runtime_app.view_sessionmessage")
RUN = (*VIEW, "runtime_app.run_session")
WAIT_DEFAULT_SECONDS, WAIT_MAX_SECONDS = 120, 300


def _caller(request) -> str:
    agent = agent_of(request)
    return f"agent:{agent.key}" if agent is not None else f"staff:{request.user.get_username()}"


def _session(request, session_id):
    return sel.session_get_for(agent_of(request), session_id)


class SessionCreateSerializer(ClosedBody, serializers.Serializer):
    agent = StrictCharField(required=False, max_length=64, help_text="staff: the agent (an agent token: itself)")
    user_id = StrictCharField(required=False, allow_blank=True, max_length=255, default="")
    channel = StrictCharField(required=False, allow_blank=True, max_length=64, default="")
    chat_id = StrictCharField(required=False, allow_blank=True, max_length=255, default="")
    message = StrictCharField(required=False, max_length=svc.MESSAGE_MAX_CHARS, help_text="a first message starts a run")


class MessagePostSerializer(ClosedBody, serializers.Serializer):
    content = StrictCharField(max_length=svc.MESSAGE_MAX_CHARS)
    wait = StrictBooleanField(required=False, default=False, help_text="answer with the reply (200) instead of 202")
    timeout = StrictIntegerField(required=False, min_value=1, max_value=WAIT_MAX_SECONDS, default=WAIT_DEFAULT_SECONDS,
                                 help_text="with wait: seconds to wait at most (then 202)")


class SessionFilterSerializer(serializers.Serializer):
    agent = StrictCharField(required=False, max_length=64)
    user_id = StrictCharField(required=False, max_length=255)
    status = serializers.ChoiceField(choices=SessionStatus.choices, required=False)
    channel = StrictCharField(required=False, max_length=64)
    parent = serializers.UUIDField(required=False)
    limit = StrictIntegerField(required=False, min_value=1, max_value=500, default=100)


class MessagesQuerySerializer(serializers.Serializer):
    after = StrictIntegerField(required=False, min_value=0, default=0, help_text="only messages after this seq")
    limit = StrictIntegerField(required=False, min_value=1, max_value=1000, default=200)


class SessionSerializer(serializers.Serializer):
    """A session as the API answers it (runtime_app.services.sessions.session_as_dict)."""

    id = serializers.UUIDField()
    key = serializers.CharField()
    agent = serializers.CharField()
    status = serializers.ChoiceField(choices=SessionStatus.choices)
    end_reason = serializers.CharField()
    user_id = serializers.CharField()
    channel = serializers.CharField()
    chat_id = serializers.CharField()
    parent = serializers.UUIDField(allow_null=True)
    depth = serializers.IntegerField()
    origin = serializers.CharField()
    ref = serializers.CharField()
    label = serializers.CharField()
    iterations = serializers.IntegerField()
    max_iterations = serializers.IntegerField()
    tokens_in = serializers.IntegerField()
    tokens_out = serializers.IntegerField()
    waiting_approval = serializers.UUIDField(allow_null=True)
    error = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True)


class ChildSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    label = serializers.CharField()
    status = serializers.ChoiceField(choices=SessionStatus.choices)


class SessionDetailSerializer(SessionSerializer):
    messages = serializers.IntegerField(help_text="how many messages it has")
    children = ChildSerializer(many=True)


class SessionListSerializer(serializers.Serializer):
    results = SessionSerializer(many=True)


class SessionCreatedSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    key = serializers.CharField()
    status = serializers.ChoiceField(choices=SessionStatus.choices)


class ToolCallSerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    arguments = serializers.CharField(help_text="the JSON text the model sent (credentials scrubbed)")


class MessageSerializer(serializers.Serializer):
    session = serializers.UUIDField()
    seq = serializers.IntegerField()
    role = serializers.ChoiceField(choices=MessageRole.choices)
    content = serializers.CharField()
    tool_calls = ToolCallSerializer(many=True)
    tool_call_id = serializers.CharField()
    tool_name = serializers.CharField()
    verdict = serializers.CharField(help_text="a tool result: the pipeline's status (ok, denied, invalid_arguments, …)")
    is_error = serializers.BooleanField()
    invocation_id = serializers.UUIDField(allow_null=True, help_text="the audit row of a tool result")
    approval_id = serializers.UUIDField(allow_null=True)
    child = serializers.UUIDField(allow_null=True, help_text="an announcement: the child session it reports")
    tokens_in = serializers.IntegerField()
    tokens_out = serializers.IntegerField()
    created_at = serializers.DateTimeField()


class MessageListSerializer(serializers.Serializer):
    results = MessageSerializer(many=True)


class MessagePostedSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    message_seq = serializers.IntegerField()
    status = serializers.ChoiceField(choices=SessionStatus.choices)
    end_reason = serializers.CharField(required=False)
    error = serializers.CharField(required=False)
    reply = serializers.CharField(required=False, allow_null=True, help_text="with wait: the model's final reply")
    waiting_approval = serializers.UUIDField(required=False, allow_null=True)


def _detail(session) -> dict:
    data = svc.session_as_dict(session)
    data["messages"] = session.messages.count()
    data["children"] = [{"id": str(c.pk), "label": c.label, "status": c.status}
                        for c in session.children.order_by("created_at")]
    return data


class SessionListView(APIView):
    staff_permissions = {"GET": VIEW, "POST": RUN}

    @extend_schema(parameters=[SessionFilterSerializer], summary="Sessions (an agent: its own; staff: all)",
                   responses={200: SessionListSerializer}, operation_id="sessions_list")
    def get(self, request):
        filters = validated_query(SessionFilterSerializer, request)
        rows = sel.session_list_for(agent_of(request), filters=filters)[: filters.get("limit", 100)]
        return Response({"results": [svc.session_as_dict(s) for s in rows]})

    @extend_schema(request=SessionCreateSerializer, summary="Start a session (a first message starts a run)",
                   responses={201: SessionCreatedSerializer, **error_responses({
                       400: "invalid fields, or a staff request without `agent` (agent_required)",
                       404: "no such agent", 409: "agent disabled"})})
    def post(self, request):
        data = validated(SessionCreateSerializer, request.data)
        agent = agent_of(request)
        if agent is None:
            if not data.get("agent"):
                raise ValidationError("staff requests must name an agent", code="agent_required")
            agent = agent_get_by_key(data["agent"])
        elif data.get("agent") and data["agent"] != agent.key:
            raise PermissionDenied("an agent token can only start its own sessions")
        session = svc.session_create(agent=agent, created_by=_caller(request), user_id=data["user_id"],
                                     channel=data["channel"], chat_id=data["chat_id"], message=data.get("message"))
        return Response({"id": str(session.pk), "key": session.key, "status": session.status}, status=201)


class SessionDetailView(APIView):
    staff_permissions = {"GET": VIEW}

    @extend_schema(summary="A session: status, counts, parent, children", responses={200: SessionDetailSerializer},
                   operation_id="sessions_retrieve")
    def get(self, request, id):  # noqa: A002 - the house names path ids {id}
        return Response(_detail(_session(request, id)))


class SessionMessagesView(APIView):
    staff_permissions = {"GET": VIEW, "POST": RUN}

    @extend_schema(parameters=[MessagesQuerySerializer], summary="A session's messages, in order",
                   responses={200: MessageListSerializer})
    def get(self, request, id):  # noqa: A002 - the house names path ids {id}
        query = validated_query(MessagesQuerySerializer, request)
        session = _session(request, id)
        rows = sel.session_messages(session, after=query["after"], limit=query["limit"])
        return Response({"results": [svc.message_as_dict(m) for m in rows]})

    @extend_schema(request=MessagePostSerializer, summary="Send a message; with wait, answer with the reply",
                   responses={200: MessagePostedSerializer, 202: MessagePostedSerializer,
                              **error_responses({409: "the session is archived"})})
    def post(self, request, id):  # noqa: A002
        data = validated(MessagePostSerializer, request.data)
        session = _session(request, id)
        message = svc.session_message_post(session=session, content=data["content"])
        body = {"id": str(session.pk), "message_seq": message.seq}
        if not data["wait"]:
            return Response({**body, "status": SessionStatus.RUNNING}, status=202)
        settled = sel.session_wait_settled(session, seconds=data["timeout"])
        if settled.status == SessionStatus.RUNNING:
            return Response({**body, "status": settled.status}, status=202)
        reply = sel.session_reply_after(settled, message.seq)
        return Response({**body, "status": settled.status, "end_reason": settled.end_reason, "error": settled.error,
                         "reply": reply.content if reply is not None and not reply.tool_calls else None,
                         "waiting_approval": str(settled.waiting_approval_id) if settled.waiting_approval_id else None})


class SessionCancelView(APIView):
    staff_permissions = {"POST": RUN}

    @extend_schema(request=None, summary="Cancel a session (its model request, tool call and subagents stop)",
                   responses={200: SessionSerializer})
    def post(self, request, id):  # noqa: A002
        session = svc.session_cancel(session=_session(request, id), actor=_caller(request))
        return Response(svc.session_as_dict(session))


urlpatterns = [
    path("sessions", SessionListView.as_view(), name="session-list"),
    path("sessions/<uuid:id>", SessionDetailView.as_view(), name="session-detail"),
    path("sessions/<uuid:id>/messages", SessionMessagesView.as_view(), name="session-messages"),
    path("sessions/<uuid:id>/cancel", SessionCancelView.as_view(), name="session-cancel"),
]
