"""Admin screens for agents, tokens and the invocation audit. Actions are thin calls into services."""
from __future__ import annotations

import json

from django.contrib import admin, messages
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path

from goclaw.admin import AppendOnlyAdmin
from goclaw.authz import admin_permission, person_required
from tools_app.admin.base import ServiceAdmin
from tools_app.calls import CallContext
from tools_app.models import Agent, AgentToken, AuditEvent, StoredToolOutput, ToolInvocation
from tools_app.selectors import tool_catalog_explain
from tools_app.selectors_audit import PAYLOAD_FIELDS, output_masked, payload_masked, payloads_visible
from tools_app.services.audit import audit_payload_viewed
from tools_app.services.agents import agent_delete, agent_save, token_issue, token_revoke


class AgentTokenInline(admin.TabularInline):
    model = AgentToken
    extra = 0
    can_delete = False
    fields = ["name", "prefix", "expires_at", "revoked", "last_used_at", "created_at"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False  # tokens are issued with the action, which shows the secret once


@admin.register(Agent)
class AgentAdmin(ServiceAdmin):
    list_display = ["key", "display_name", "agent_type", "provider", "model", "sandbox_profile", "enabled", "updated_at"]
    list_filter = ["agent_type", "enabled", "provider", "sandbox_profile"]
    search_fields = ["key", "display_name"]
    inlines = [AgentTokenInline]
    actions = ["issue_token"]
    change_form_template = "admin/tools_app/agent_change_form.html"

    def save_with_service(self, request, obj):
        agent_save(agent=obj, actor=request.user)
        return []

    def delete_with_service(self, request, queryset):
        return agent_delete(queryset=queryset, actor=request.user)

    def get_urls(self):
        explain = person_required("tools_app.view_agent", "tools_app.view_toolpolicy")(self.explain_view)
        return [path("<int:agent_id>/explain/", self.admin_site.admin_view(explain), name="tools_app_agent_explain"),
                *super().get_urls()]

    def explain_view(self, request, agent_id: int):
        """Which tools this agent ends up with, and which policy step decided each one."""
        agent = get_object_or_404(Agent, pk=agent_id)
        try:
            depth = max(0, min(16, int(request.GET.get("depth") or 0)))
        except ValueError:
            depth = 0
        call = CallContext(user_id=request.GET.get("user_id", ""), provider=request.GET.get("provider", ""),
                           channel=request.GET.get("channel", ""), chat_id=request.GET.get("chat_id", ""), subagent_depth=depth)
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "original": agent,
                   "title": f"Tool policy for {agent.key}", "explanation": tool_catalog_explain(agent, call), "query": request.GET}
        return TemplateResponse(request, "admin/tools_app/agent_explain.html", context)

    has_issue_token_permission = admin_permission("tools_app.add_agenttoken")  # a token acts as the agent

    @admin.action(description="Issue a new API token (shown once)", permissions=["issue_token"])
    def issue_token(self, request, queryset):
        issued = [(agent, token_issue(agent=agent, name="admin", actor=request.user)[1]) for agent in queryset]
        return TemplateResponse(request, "admin/tools_app/token_issued.html",
                                {**self.admin_site.each_context(request), "issued": issued, "title": "Agent tokens issued"})


@admin.register(AgentToken)
class AgentTokenAdmin(admin.ModelAdmin):
    list_display = ["__str__", "agent", "name", "expires_at", "revoked", "last_used_at", "created_at"]
    list_filter = ["revoked", "agent"]
    search_fields = ["agent__key", "name", "prefix"]
    readonly_fields = ["agent", "prefix", "token_hash", "last_used_at", "created_at", "created_by", "revoked_at"]
    fields = ["agent", "name", "prefix", "expires_at", "revoked", "revoked_at", "last_used_at", "created_at", "created_by"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke(self, request, queryset):
        for token in queryset:
            token_revoke(token=token)
        self.message_user(request, f"Revoked {queryset.count()} token(s).", messages.SUCCESS)


class PayloadLookupsAdmin(AppendOnlyAdmin):
    """An audit table whose `payload_lookup_fields` hold payloads: a person without tools_app.view_payload may not
    filter on them either. Django's changelist accepts a lookup on any local field from the query string
    (`?arguments__icontains=…`, `?content__startswith=…`), and whether a row comes back reads a masked payload a
    character at a time; such a lookup is refused (400) like any other disallowed one."""

    payload_lookup_fields: tuple[str, ...] = ()

    def lookup_allowed(self, lookup, value, request=None):
        field = lookup.split("__", 1)[0]
        if field in self.payload_lookup_fields and not payloads_visible(getattr(request, "user", None)):
            return False
        return super().lookup_allowed(lookup, value, request)


@admin.register(ToolInvocation)
class ToolInvocationAdmin(PayloadLookupsAdmin):
    """The raw audit table; the console's audit search (full text, export, a call's links) is the reader's page."""

    list_display = ["created_at", "agent_key", "tool_name", "status", "observed", "duration_ms", "result_size", "sandbox",
                    "session_key", "user_id", "audit_details"]
    list_filter = ["status", "observed", "tool_name", "agent_key", "sandbox_backend", "created_at"]
    search_fields = ["agent_key", "tool_name", "session_key", "user_id", "error", "request_id"]
    readonly_fields = ["audit_details"]
    date_hierarchy = "created_at"
    list_select_related = False
    show_full_result_count = False
    payload_lookup_fields = PAYLOAD_FIELDS

    # --- payloads: shown as stored (and the read recorded) only with tools_app.view_payload ----------------------
    def get_search_fields(self, request):
        # Searching the error text would let a person without view_payload read it a character at a time.
        fields = super().get_search_fields(request)
        return fields if payloads_visible(request.user) else [f for f in fields if f not in PAYLOAD_FIELDS]

    def get_readonly_fields(self, request, obj=None):
        masked = () if payloads_visible(request.user) else tuple(f"{name}_masked" for name in PAYLOAD_FIELDS)
        return [*super().get_readonly_fields(request, obj), *masked]

    def get_fields(self, request, obj=None):
        fields = super().get_fields(request, obj)
        if payloads_visible(request.user):
            return fields
        masked = {name: f"{name}_masked" for name in PAYLOAD_FIELDS}
        return [masked.get(name, name) for name in fields if name not in masked.values()]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        response = super().change_view(request, object_id, form_url, extra_context)
        if response.status_code == 200 and payloads_visible(request.user):
            audit_payload_viewed(person=request.user, invocation_ids=[object_id], where="admin", target=object_id)
        return response

    @admin.display(description="arguments")
    def arguments_masked(self, obj: ToolInvocation):
        return json.dumps(payload_masked(obj.arguments), indent=2, ensure_ascii=False)

    @admin.display(description="error")
    def error_masked(self, obj: ToolInvocation) -> str:
        return payload_masked(obj.error)

    @admin.display(description="observe reasons")
    def observe_reasons_masked(self, obj: ToolInvocation):
        return json.dumps(payload_masked(obj.observe_reasons), ensure_ascii=False)

    @admin.display(description="sandbox", ordering="sandbox_backend")
    def sandbox(self, obj: ToolInvocation) -> str:
        """Where the call's processes ran; a profile with the sandbox off shows as the host."""
        if not obj.sandbox_backend:
            return "—"
        label = "host (sandbox off)" if obj.sandbox_backend == "host" else obj.sandbox_backend
        return f"{label} · {obj.sandbox_profile}" if obj.sandbox_profile else label

    @admin.display(description="details")
    def audit_details(self, obj: ToolInvocation) -> str:
        """The console's page for this call: its approval, held change, stored output and events."""
        from django.urls import reverse  # the console is reached by URL name only: tools_app never imports it
        from django.utils.html import format_html

        return format_html('<a href="{}">details</a>', reverse("console:audit_detail", args=[obj.pk]))


@admin.register(StoredToolOutput)
class StoredToolOutputAdmin(PayloadLookupsAdmin):
    list_display = ["id", "agent_key", "tool_name", "created_at"]
    list_filter = ["tool_name"]
    search_fields = ["agent_key", "id"]
    payload_lookup_fields = ("content",)

    # The content is a payload: hidden without tools_app.view_payload, its reads recorded with it.
    def get_readonly_fields(self, request, obj=None):
        hidden = () if payloads_visible(request.user) else ("content_hidden",)
        return [*super().get_readonly_fields(request, obj), *hidden]

    def get_fields(self, request, obj=None):
        fields = super().get_fields(request, obj)
        if payloads_visible(request.user):
            return fields
        return ["content_hidden" if name == "content" else name for name in fields if name != "content_hidden"]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        response = super().change_view(request, object_id, form_url, extra_context)
        if response.status_code == 200 and payloads_visible(request.user):
            calls = ToolInvocation.objects.filter(output_id=object_id).values_list("pk", flat=True)
            audit_payload_viewed(person=request.user, invocation_ids=calls, output_ids=[object_id], where="admin",
                                 target=f"output:{object_id}")
        return response

    @admin.display(description="content")
    def content_hidden(self, obj: StoredToolOutput) -> str:
        return output_masked(obj.content)


@admin.register(AuditEvent)
class AuditEventAdmin(AppendOnlyAdmin):
    """Decisions, payload reads, exports: what people did to governed state, append-only like the invocations."""

    list_display = ["created_at", "kind", "actor", "target"]
    list_filter = ["kind", "created_at"]
    search_fields = ["kind", "actor", "target"]
    date_hierarchy = "created_at"
    show_full_result_count = False
