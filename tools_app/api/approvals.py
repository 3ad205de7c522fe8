"""Approval API: agents long-poll and resume their approved calls; staff decide. Thin: parse, call a service, render."""
from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from goclaw.api import IsStaff, agent_of, validated
from goclaw.errors import ValidationError
from tools_app.api.serializers import ExecuteResponseSerializer
from tools_app.choices import ApprovalDecision, RuleMatch
from tools_app.models import ApprovalRequest, PendingChange
from tools_app.selectors import APPROVAL_FILTERS, approval_get_for, approval_list_for, pending_change_list_for
from tools_app.services import approvals as svc


class ApprovalSerializer(serializers.ModelSerializer):
    agent = serializers.SlugRelatedField(slug_field="key", read_only=True)
    decided_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = ApprovalRequest
        fields = ["id", "agent", "user_id", "session_key", "channel", "tool_name", "arguments", "args_hash", "summary",
                  "details", "reason", "status", "decision", "decided_by", "decided_at", "note", "requested_at",
                  "expires_at", "consumed_at", "invocation_id"]


class RuleRequestSerializer(serializers.Serializer):
    match = serializers.ChoiceField(choices=RuleMatch.choices, default=RuleMatch.EXACT)
    pattern = serializers.JSONField(required=False, default=None,
                                    help_text="exec: a command prefix or glob; other tools: an object of argument globs")
    user_only = serializers.BooleanField(default=False, help_text="only for the user of this request")
    expires_in_seconds = serializers.IntegerField(required=False, min_value=60, allow_null=True, default=None)


class DecisionRequestSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=ApprovalDecision.choices)
    note = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")
    rule = RuleRequestSerializer(required=False, help_text="allow_always only: how wide the rule is (exact by default)")


class ExecuteApprovedSerializer(serializers.Serializer):
    arguments = serializers.JSONField(required=False, default=None,
                                      help_text="the exact arguments; needed when the stored copy had values redacted")


class PendingChangeSerializer(serializers.ModelSerializer):
    agent = serializers.SlugRelatedField(slug_field="key", read_only=True)
    decided_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = PendingChange
        fields = ["id", "agent", "user_id", "session_key", "tool_name", "path", "summary", "status", "decided_by",
                  "decided_at", "result", "invocation_id", "created_at"]


class ChangeDecisionSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=["accept", "reject"])


def _scope(request):
    """Agents see their own approvals; staff see all (agent=None)."""
    return agent_of(request)


class ApprovalListView(ListAPIView):
    serializer_class = ApprovalSerializer

    @extend_schema(parameters=[OpenApiParameter(n, str) for n in (*APPROVAL_FILTERS, "agent")],
                   summary="Approval requests: an agent sees its own, staff sees all")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        return approval_list_for(agent=_scope(self.request), filters=self.request.query_params)


class ApprovalDetailView(APIView):
    @extend_schema(responses=ApprovalSerializer, summary="One approval request; ?wait=N long-polls up to 60 s for the decision",
                   parameters=[OpenApiParameter("wait", int, description="seconds to wait while it is pending (max 60)")])
    def get(self, request, pk):
        agent = _scope(request)
        approval_get_for(agent=agent, approval_id=pk)  # 404 before waiting on someone else's request
        try:
            wait = float(request.query_params.get("wait") or 0)
        except ValueError:
            raise ValidationError("wait must be a number of seconds", code="invalid_request") from None
        if wait > 0:
            svc.approval_wait(approval_id=pk, seconds=wait)
        return Response(ApprovalSerializer(approval_get_for(agent=agent, approval_id=pk)).data)


class ApprovalDecisionView(APIView):
    permission_classes = [IsStaff]

    @extend_schema(request=DecisionRequestSerializer, responses=ApprovalSerializer,
                   summary="Staff decide: allow_once / allow_always / deny (409 when already decided, 410 when expired)")
    def post(self, request, pk):
        data = validated(DecisionRequestSerializer, request.data)
        rule = data.get("rule") or {}
        expires = rule.get("expires_in_seconds")
        req = svc.approval_decide(
            approval_id=pk, decision=data["decision"], actor=request.user, note=data["note"],
            rule_match=rule.get("match", RuleMatch.EXACT), rule_pattern=rule.get("pattern"),
            rule_user_only=rule.get("user_only", False),
            rule_expires_at=timezone.now() + timedelta(seconds=expires) if expires else None,
        )
        return Response(ApprovalSerializer(req).data)


class ApprovalExecuteView(APIView):
    @extend_schema(request=ExecuteApprovedSerializer, responses=ExecuteResponseSerializer,
                   summary="Run the approved call, exactly once",
                   description="200 with the normal execute result; 409 when not approved, already used or the "
                               "arguments differ; 410 when the approval expired.")
    def post(self, request, pk):
        data = validated(ExecuteApprovedSerializer, request.data or {})
        outcome = svc.approval_execute(approval_id=pk, agent=_scope(request), arguments=data.get("arguments"))
        return Response(outcome.as_dict())


class ApprovalCancelView(APIView):
    @extend_schema(request=None, responses=ApprovalSerializer, summary="Withdraw a pending request")
    def post(self, request, pk):
        return Response(ApprovalSerializer(svc.approval_cancel(approval_id=pk, agent=_scope(request))).data)


class PendingChangeListView(ListAPIView):
    serializer_class = PendingChangeSerializer

    @extend_schema(summary="File changes held in review/audit mode: an agent sees its own, staff sees all",
                   parameters=[OpenApiParameter(n, str) for n in ("status", "session_key", "tool_name", "agent")])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        return pending_change_list_for(agent=_scope(self.request), filters=self.request.query_params)


class PendingChangeDecisionView(APIView):
    permission_classes = [IsStaff]

    @extend_schema(request=ChangeDecisionSerializer, responses=PendingChangeSerializer,
                   summary="Staff accept (apply now) or reject one held change")
    def post(self, request, pk):
        data = validated(ChangeDecisionSerializer, request.data)
        change = svc.pending_change_decide(change_id=pk, accept=data["decision"] == "accept", actor=request.user)
        return Response(PendingChangeSerializer(change).data)
