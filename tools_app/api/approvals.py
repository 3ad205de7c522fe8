"""Approval API: agents long-poll and resume their approved calls; staff decide. Thin: parse, call a service, render."""
from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from goclaw.api import (ClosedBody, IsStaff, StrictBooleanField, StrictCharField, StrictIntegerField, agent_of,
                        error_responses, validated, validated_query)
from tools_app.api.serializers import EXECUTE_RESPONSES, execute_http_status
from tools_app.choices import ApprovalDecision, ApprovalStatus, PendingChangeStatus, RuleMatch
from tools_app.models import ApprovalRequest, PendingChange
from tools_app.selectors import approval_get_for, approval_list_for, pending_change_list_for
from tools_app.services import approvals as svc
from tools_app import execution


class ApprovalSerializer(serializers.ModelSerializer):
    agent = serializers.SlugRelatedField(slug_field="key", read_only=True)
    decided_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = ApprovalRequest
        fields = ["id", "agent", "user_id", "session_key", "channel", "tool_name", "arguments", "args_hash", "summary",
                  "details", "reason", "status", "decision", "decided_by", "decided_at", "note", "requested_at",
                  "expires_at", "consumed_at", "invocation_id"]


class RuleRequestSerializer(serializers.Serializer):
    match = serializers.ChoiceField(choices=RuleMatch.choices, default=RuleMatch.EXACT)
    pattern = serializers.JSONField(required=False, allow_null=True, default=None,
                                    help_text="exec: a command prefix or glob; other tools: an object of argument globs")
    user_only = StrictBooleanField(default=False, help_text="only for the user of this request")
    expires_in_seconds = StrictIntegerField(required=False, min_value=60, allow_null=True, default=None)


class DecisionRequestSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=ApprovalDecision.choices)
    note = StrictCharField(required=False, allow_blank=True, max_length=500, default="")
    rule = RuleRequestSerializer(required=False, help_text="allow_always only: how wide the rule is (exact by default)")


class ExecuteApprovedSerializer(ClosedBody, serializers.Serializer):
    arguments = serializers.DictField(required=False, allow_null=True, default=None,
                                      help_text="the exact arguments; needed when the stored copy had values redacted")


class PendingChangeSerializer(serializers.ModelSerializer):
    agent = serializers.SlugRelatedField(slug_field="key", read_only=True)
    decided_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = PendingChange
        fields = ["id", "agent", "user_id", "session_key", "tool_name", "path", "summary", "status", "decided_by",
                  "decided_at", "result", "invocation_id", "created_at"]


class ChangeDecisionSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=["accept", "reject"])


def _filter(max_length: int | None = None, **kwargs) -> StrictCharField:
    return StrictCharField(required=False, allow_blank=True, max_length=max_length, **kwargs)


class ApprovalFilterSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=ApprovalStatus.choices, required=False)
    decision = serializers.ChoiceField(choices=ApprovalDecision.choices, required=False)
    tool_name = _filter()
    session_key = _filter()
    user_id = _filter()
    agent = _filter(64, help_text="staff: only this agent's requests (an agent sees only its own anyway)")


class ApprovalWaitSerializer(serializers.Serializer):
    wait = StrictIntegerField(required=False, min_value=0, max_value=60, default=0,
                              help_text="seconds to wait while the request is pending (0-60)")


class PendingChangeFilterSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=PendingChangeStatus.choices, required=False)
    session_key = _filter()
    tool_name = _filter()
    agent = _filter(64, help_text="staff: only this agent's changes (an agent sees only its own anyway)")


def _scope(request):
    """Agents see their own approvals; staff see all (agent=None)."""
    return agent_of(request)


class ApprovalListView(ListAPIView):
    serializer_class = ApprovalSerializer
    staff_permissions = {"GET": ("tools_app.view_approvalrequest",)}

    @extend_schema(parameters=[ApprovalFilterSerializer], summary="Approval requests: an agent sees its own, staff sees all")
    def get(self, request, *args, **kwargs):
        self.filters = validated_query(ApprovalFilterSerializer, request)
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        return approval_list_for(agent=_scope(self.request), filters=self.filters)


class ApprovalDetailView(APIView):
    staff_permissions = {"GET": ("tools_app.view_approvalrequest",)}

    @extend_schema(responses=ApprovalSerializer, summary="One approval request; ?wait=N long-polls up to 60 s for the decision",
                   parameters=[ApprovalWaitSerializer])
    def get(self, request, pk):
        wait = validated_query(ApprovalWaitSerializer, request)["wait"]
        agent = _scope(request)
        approval_get_for(agent=agent, approval_id=pk)  # 404 before waiting on someone else's request
        if wait > 0:
            svc.approval_wait(approval_id=pk, seconds=wait)
        return Response(ApprovalSerializer(approval_get_for(agent=agent, approval_id=pk)).data)


class ApprovalDecisionView(APIView):
    permission_classes = [IsStaff]
    staff_permissions = {"POST": ("tools_app.decide_approvalrequest",)}

    @extend_schema(request=DecisionRequestSerializer, summary="Staff decide: allow_once / allow_always / deny",
                   responses={200: ApprovalSerializer, **error_responses({
                       400: "invalid fields, or a rule that does not fit the call (invalid_rule)",
                       409: "the request was already decided (approval_already_decided)",
                       410: "the request expired before the decision; the call was denied (approval_expired)"})})
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
        body = ApprovalSerializer(req).data
        if req.rule is not None:  # allow_always: the rule created and, in `covers`, exactly what it allows
            body["rule"] = svc.approval_rule_payload(req.rule)
        return Response(body)


class ApprovalExecuteView(APIView):
    staff_permissions = {"POST": ("tools_app.execute_as_agent",)}  # staff run the approved call as its agent

    @extend_schema(request=ExecuteApprovedSerializer, summary="Run the approved call, exactly once",
                   description="The normal execute result: 200 (the tool's own failure is in-band, as on execute), or "
                               "202 when the call, checked again now, must wait for a person.",
                   responses={**EXECUTE_RESPONSES, **error_responses({
                       400: "invalid fields, or the stored arguments were redacted and must be resent (arguments_required)",
                       409: "not approved (approval_not_approved), already used (approval_already_used) or other "
                            "arguments than the approved ones (arguments_mismatch)",
                       410: "the approval expired; the call was denied (approval_expired)"})})
    def post(self, request, pk):
        data = validated(ExecuteApprovedSerializer, request.data)
        outcome = execution.approval_execute(approval_id=pk, agent=_scope(request), arguments=data.get("arguments"))
        return Response(outcome.as_dict(), status=execute_http_status(outcome))


class ApprovalCancelView(APIView):
    staff_permissions = {"POST": ("tools_app.decide_approvalrequest",)}

    @extend_schema(request=None, summary="Withdraw a pending request",
                   responses={200: ApprovalSerializer, **error_responses({409: "the request is not pending (approval_not_pending)"})})
    def post(self, request, pk):
        return Response(ApprovalSerializer(svc.approval_cancel(approval_id=pk, agent=_scope(request))).data)


class PendingChangeListView(ListAPIView):
    serializer_class = PendingChangeSerializer
    staff_permissions = {"GET": ("tools_app.view_pendingchange",)}

    @extend_schema(summary="File changes held in review/audit mode: an agent sees its own, staff sees all",
                   parameters=[PendingChangeFilterSerializer])
    def get(self, request, *args, **kwargs):
        self.filters = validated_query(PendingChangeFilterSerializer, request)
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        return pending_change_list_for(agent=_scope(self.request), filters=self.filters)


class PendingChangeDecisionView(APIView):
    permission_classes = [IsStaff]
    staff_permissions = {"POST": ("tools_app.decide_pendingchange",)}

    @extend_schema(request=ChangeDecisionSerializer, summary="Staff accept (apply now) or reject one held change",
                   responses={200: PendingChangeSerializer, **error_responses({
                       409: "the change was already decided (pending_change_already_decided), or the file no longer "
                            "matches what was recorded (arguments_mismatch)"})})
    def post(self, request, pk):
        data = validated(ChangeDecisionSerializer, request.data)
        change = execution.pending_change_decide(change_id=pk, accept=data["decision"] == "accept", actor=request.user)
        return Response(PendingChangeSerializer(change).data)
