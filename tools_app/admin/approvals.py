"""Admin for approvals: the live "Pending approvals" queue (decide: allow once / allow always / deny), past
decisions, allow-always rules (revoke), tool permissions and held file changes (accept / reject).
Every action is a thin call into tools_app.services.approvals."""
from __future__ import annotations

import json
from datetime import timedelta

from django.contrib import admin, messages
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from goclaw.authz import admin_permission, person_may, person_required
from goclaw.errors import ApplicationError
from tools_app.admin.base import CheckedForm, ServiceAdmin
from tools_app.models import ApprovalRequest, ApprovalRule, PendingChange, ToolPermission
from tools_app.selectors import approval_queue
from tools_app.services.approvals import (approval_decide, approval_rule_description, approval_rule_preview,
                                          approval_rule_revoke, canonical_arguments)
from tools_app.execution import pending_change_decide
from tools_app.services.policy import SpecCheck, tool_permission_check, tool_permission_delete, tool_permission_save

_PLACEHOLDER_ID = "00000000-0000-0000-0000-000000000000"
VIEW_APPROVALS = "tools_app.view_approvalrequest"
DECIDE_APPROVALS = "tools_app.decide_approvalrequest"


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(admin.ModelAdmin):
    list_display = ["requested_at", "agent", "tool_name", "short_summary", "status", "decision", "decided_by", "decided_at",
                    "expires_at", "consumed_at"]
    list_filter = ["status", "decision", "tool_name", "agent", "requested_at"]
    search_fields = ["agent__key", "tool_name", "summary", "session_key", "user_id"]
    date_hierarchy = "requested_at"
    list_select_related = ["agent", "decided_by"]
    readonly_fields = [f.name for f in ApprovalRequest._meta.fields] + ["why_and_risk", "notifications"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # a request changes only by a decision (the queue, its actions, the API), never by a form save

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="why asked / risk")
    def why_and_risk(self, obj):
        lines, risk, _ = approval_why_and_risk(obj)
        return format_html("{}<ul>{}</ul>", risk, format_html_join("", "<li>{}</li>", ((line,) for line in lines or [obj.reason])))

    @admin.display(description="notifications")
    def notifications(self, obj):
        rows = obj.notification_deliveries.select_related("channel").order_by("channel__name")
        return format_html_join(", ", "{}: {} ({} attempts)", ((d.channel.name, d.status, d.attempts) for d in rows)) or "none"

    @admin.display(description="summary")
    def short_summary(self, obj):
        return obj.summary.splitlines()[0][:120] if obj.summary else ""

    def get_urls(self):
        queue = person_required(VIEW_APPROVALS)(self.queue_view)
        decide = person_required(GET=(VIEW_APPROVALS,), POST=(DECIDE_APPROVALS,))(self.decide_view)
        urls = [
            path("queue/", self.admin_site.admin_view(queue), name="tools_app_approvalrequest_queue"),
            path("<uuid:pk>/decide/", self.admin_site.admin_view(decide), name="tools_app_approvalrequest_decide"),
        ]
        return urls + super().get_urls()

    def queue_view(self, request):
        pending = list(approval_queue())
        for req in pending:
            req.arguments_json = json.dumps(req.arguments, indent=2, ensure_ascii=False, sort_keys=True)
            req.why_lines, req.risk_line, req.risk_level = approval_why_and_risk(req)
            req.rule_pattern_default = req.details.get("command") or canonical_arguments(req.arguments)
            req.decide_url = reverse("admin:tools_app_approvalrequest_decide", args=[req.pk])
        context = {
            **self.admin_site.each_context(request), "title": "Pending approvals", "pending": pending, "opts": self.model._meta,
            "decide_url_template": reverse("admin:tools_app_approvalrequest_decide", args=[_PLACEHOLDER_ID]),
            "placeholder_id": _PLACEHOLDER_ID, "can_decide": person_may(request.user, DECIDE_APPROVALS),
        }
        return TemplateResponse(request, "admin/tools_app/approval_queue.html", context)

    def decide_view(self, request, pk):
        """allow_once / deny decide at once; allow_always first shows what the rule would cover (confirm page) and
        decides only when that page is confirmed."""
        queue = redirect("admin:tools_app_approvalrequest_queue")
        if request.method != "POST":
            return queue
        post = request.POST
        match = post.get("rule_match") or "exact"
        decision = post.get("decision", "")
        try:
            hours = int(post["rule_expires_hours"]) if post.get("rule_expires_hours") else None
            rule = {"rule_match": match, "rule_pattern": post.get("rule_pattern") if match != "exact" else None,
                    "rule_user_only": bool(post.get("rule_user_only")),
                    "rule_expires_at": timezone.now() + timedelta(hours=hours) if hours else None}
            if decision == "allow_always" and not post.get("confirm"):
                preview = approval_rule_preview(approval_id=pk, match=rule["rule_match"], pattern=rule["rule_pattern"],
                                                user_only=rule["rule_user_only"], expires_at=rule["rule_expires_at"])
                return self._confirm_rule(request, pk, preview, post)
            req = approval_decide(approval_id=pk, decision=decision, actor=request.user, note=post.get("note", ""), **rule)
        except ApplicationError as exc:
            messages.error(request, exc.message)
        except ValueError:
            messages.error(request, "the rule expiry must be a whole number of hours")
        else:
            messages.success(request, f"{req.get_decision_display()}: {req.agent.key} {req.tool_name}")
        return queue


    def _confirm_rule(self, request, pk, preview: dict, post):
        req = ApprovalRequest.objects.select_related("agent").get(pk=pk)
        context = {
            **self.admin_site.each_context(request), "title": "Confirm allow always", "opts": self.model._meta,
            "req": req, "preview": preview, "decide_url": reverse("admin:tools_app_approvalrequest_decide", args=[pk]),
            "fields": {name: post.get(name, "") for name in ("rule_match", "rule_pattern", "rule_expires_hours", "note")},
            "user_only": bool(post.get("rule_user_only")),
        }
        return TemplateResponse(request, "admin/tools_app/approval_queue_confirm.html", context)


_RISK_LEVELS = frozenset({"high", "medium", "low"})


def approval_why_and_risk(req: ApprovalRequest) -> tuple[list[str], str, str]:
    """The queue's why lines, risk line and level (requests from before these were recorded show their reason)."""
    details = req.details if isinstance(req.details, dict) else {}
    why = details.get("why") if isinstance(details.get("why"), dict) else {}
    lines = [line for line in why.get("lines", []) if isinstance(line, str)] if isinstance(why.get("lines"), list) else []
    risk = details.get("risk") if isinstance(details.get("risk"), dict) else {}
    line = risk.get("line") if isinstance(risk.get("line"), str) else ""
    level = risk.get("level") if risk.get("level") in _RISK_LEVELS else ""
    return lines, line, level


@admin.register(ApprovalRule)
class ApprovalRuleAdmin(admin.ModelAdmin):
    list_display = ["agent", "tool_name", "match", "pattern_short", "covers_short", "user_id", "use_count",
                    "last_used_at", "expires_at", "revoked_at", "created_by", "created_at"]
    list_filter = ["match", "tool_name", "agent", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["agent__key", "tool_name", "pattern", "user_id"]
    list_select_related = ["agent", "created_by", "created_from"]
    readonly_fields = [f.name for f in ApprovalRule._meta.fields if f.name != "description"] + ["covers"]
    exclude = ["description"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False  # rules come from "allow always" decisions, bound to what was approved

    @admin.display(description="pattern")
    def pattern_short(self, obj):
        return obj.pattern[:120]

    @admin.display(description="covers")
    def covers(self, obj):
        return approval_rule_description(obj)

    @admin.display(description="covers")
    def covers_short(self, obj):
        text = approval_rule_description(obj)
        return text if len(text) <= 160 else text[:160] + "…"

    @admin.action(description="Revoke selected rules", permissions=["change"])
    def revoke(self, request, queryset):
        for rule in queryset:
            approval_rule_revoke(rule=rule, actor=request.user)
        self.message_user(request, f"Revoked {queryset.count()} rule(s).", messages.SUCCESS)


class ToolPermissionForm(CheckedForm):
    class Meta:
        model = ToolPermission
        fields = "__all__"

    def run_check(self):
        tool = self.cleaned_data.get("tool")
        return tool_permission_check(tool) if tool else SpecCheck()  # a missing name is already a field error


@admin.register(ToolPermission)
class ToolPermissionAdmin(ServiceAdmin):
    form = ToolPermissionForm
    list_display = ["tool", "permission", "scope", "agent", "mode", "note", "updated_at"]
    list_filter = ["permission", "scope", "mode"]
    search_fields = ["tool", "agent__key", "note"]
    autocomplete_fields = ["agent"]

    def save_with_service(self, request, obj):
        return tool_permission_save(actor=request.user, permission=obj)[1]

    def delete_with_service(self, request, queryset):
        return tool_permission_delete(actor=request.user, queryset=queryset)


@admin.register(PendingChange)
class PendingChangeAdmin(admin.ModelAdmin):
    list_display = ["created_at", "agent", "session_key", "tool_name", "path", "status", "decided_by", "decided_at"]
    list_filter = ["status", "tool_name", "agent"]
    search_fields = ["agent__key", "path", "session_key"]
    list_select_related = ["agent", "decided_by"]
    # The exact call is sealed (and erased once decided): the admin shows only the scrubbed copy.
    exclude = ["sealed_arguments", "arguments"]
    readonly_fields = [f.name for f in PendingChange._meta.fields if f.name not in ("sealed_arguments", "arguments")] + [
        "arguments_scrubbed"]
    actions = ["accept", "reject"]

    @admin.display(description="arguments (scrubbed)")
    def arguments_scrubbed(self, obj):
        return json.dumps(obj.arguments, indent=2, ensure_ascii=False, sort_keys=True)

    def has_add_permission(self, request):
        return False

    def _decide(self, request, queryset, accept: bool):
        results = {"accepted": 0, "rejected": 0, "failed": 0}
        for change_id in queryset.order_by("created_at").values_list("pk", flat=True):
            try:
                change = pending_change_decide(change_id=change_id, accept=accept, actor=request.user)
                results[change.status] += 1
            except ApplicationError as exc:
                messages.warning(request, exc.message)
        self.message_user(request, ", ".join(f"{n} {k}" for k, n in results.items() if n) or "nothing to do")

    has_decide_permission = admin_permission("tools_app.decide_pendingchange")

    @admin.action(description="Accept (apply) selected changes", permissions=["decide"])
    def accept(self, request, queryset):
        self._decide(request, queryset, True)

    @admin.action(description="Reject selected changes", permissions=["decide"])
    def reject(self, request, queryset):
        self._decide(request, queryset, False)
