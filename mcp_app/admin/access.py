"""Admin for MCP access requests: pending first, reviewed in bulk through a page asking for the review note (the
grant is written in the same transaction as the approval, by `mcp_app.services.grants`); a request's page shows
the tools asked for against what the server offers."""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import Case, IntegerField, Value, When
from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join

from goclaw.authz import admin_permission
from goclaw.errors import ApplicationError
from mcp_app.admin.forms import add_service_error
from mcp_app.admin.servers import badge
from mcp_app.admin.tools import STATUS_COLOURS
from mcp_app.choices import AccessScope, AccessStatus
from mcp_app.models import MCPAccessRequest, MCPTool
from mcp_app.services import grants as svc

REQUEST_COLOURS = {AccessStatus.PENDING: "#ef6c00", AccessStatus.APPROVED: "#2e7d32",
                   AccessStatus.REJECTED: "#c62828", AccessStatus.WITHDRAWN: "#757575"}


class AccessRequestForm(forms.ModelForm):
    """Staff asking on someone's behalf (the request still needs a review)."""

    class Meta:
        model = MCPAccessRequest
        fields = ["scope", "server", "agent", "user_id", "tool_allow", "reason"]

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("scope") == AccessScope.AGENT and not cleaned.get("agent"):
            self.add_error("agent", "an agent-scope request names the agent")
        if cleaned.get("scope") == AccessScope.USER and not (cleaned.get("user_id") or "").strip():
            self.add_error("user_id", "a user-scope request names the user")
        server = cleaned.get("server")
        if server is not None:
            try:
                cleaned["tool_allow"] = svc.tool_names(cleaned.get("tool_allow"), field="tool_allow", server=server,
                                                       nullable=True)
            except ApplicationError as exc:
                add_service_error(self, exc)
            user_id = cleaned.get("user_id", "") if cleaned.get("scope") == AccessScope.USER else ""
            if MCPAccessRequest.objects.filter(scope=cleaned.get("scope"), server=server, agent=cleaned.get("agent"),
                                               user_id=user_id, status=AccessStatus.PENDING).exists():
                self.add_error(None, "the same request is already pending")
        return cleaned


@admin.register(MCPAccessRequest)
class MCPAccessRequestAdmin(admin.ModelAdmin):
    form = AccessRequestForm
    list_display = ["created_at", "status_badge", "scope", "server", "agent", "user_id", "requested_tools",
                    "requested_by", "reviewed_by", "reviewed_at"]
    list_filter = ["status", "scope", "server", "agent"]
    search_fields = ["server__name", "agent__key", "user_id", "requested_by", "reason"]
    list_select_related = ["server", "agent"]
    actions = ["approve_selected", "reject_selected"]
    shown = ["scope", "server", "agent", "user_id", "requested_against_offered", "reason", "status", "requested_by",
             "reviewed_by", "reviewed_at", "review_note", "created_at"]

    def get_queryset(self, request):
        pending_first = Case(When(status=AccessStatus.PENDING, then=Value(0)), default=Value(1),
                             output_field=IntegerField())
        return super().get_queryset(request).annotate(pending_first=pending_first).order_by("pending_first", "-created_at")

    def get_fields(self, request, obj=None):
        return self.shown if obj is not None else AccessRequestForm.Meta.fields

    def get_readonly_fields(self, request, obj=None):
        return self.shown if obj is not None else []  # a request is decided, not edited

    def has_delete_permission(self, request, obj=None):
        return False  # the record of who asked and who decided stays

    def save_model(self, request, obj, form, change):
        if change:
            return
        user_id = (obj.user_id or "") if obj.scope == AccessScope.USER else ""
        created = svc.access_request_create(requested_by=request.user.get_username(), scope=obj.scope,
                                            server=obj.server, agent=obj.agent, user_id=user_id,
                                            tool_allow=form.cleaned_data.get("tool_allow"), reason=obj.reason or "")
        obj.pk = created.pk
        obj._state.adding = False

    # --- display ---------------------------------------------------------------------------------------------------
    @admin.display(description="status", ordering="status")
    def status_badge(self, obj: MCPAccessRequest):
        return badge(obj.get_status_display(), REQUEST_COLOURS.get(obj.status, "#757575"))

    @admin.display(description="tools asked for")
    def requested_tools(self, obj: MCPAccessRequest) -> str:
        return ", ".join(obj.tool_allow) if obj.tool_allow is not None else "all"

    @admin.display(description="tools asked for / offered")
    def requested_against_offered(self, obj: MCPAccessRequest):
        """Each requested name marked offered (with its review status) or unknown; then what else the server has."""
        offered = {tool.name: tool for tool in MCPTool.objects.filter(server_id=obj.server_id).order_by("name")}
        asked = obj.tool_allow if obj.tool_allow is not None else sorted(offered)
        rows = []
        for name in asked:
            tool = offered.get(name)
            if tool is None:
                rows.append((name, format_html('<span class="tool-unknown" style="color:#c62828">{}</span>',
                                               "unknown: the server does not offer it")))
            else:
                state = "offered" if tool.present else "no longer listed"
                rows.append((name, format_html('<span class="tool-offered">{}</span> {}', state,
                                               badge(tool.get_status_display(), STATUS_COLOURS.get(tool.status, "#757575")))))
        header = "all tools of the server" if obj.tool_allow is None else f"{len(asked)} tool(s)"
        listed = format_html_join("", "<li><code>{}</code> — {}</li>", rows) or format_html("<li>{}</li>",
                                                                                           "the server lists no tools yet")
        others = sorted(set(offered) - set(asked))
        tail = format_html("<p>Also offered: {}</p>", ", ".join(others)) if others else ""
        return format_html('<p>{}</p><ul id="requested-tools">{}</ul>{}', header, listed, tail)

    # --- bulk review through a page asking for the note ---------------------------------------------------------
    def _review(self, request, queryset, decision: str):
        pending = queryset.filter(status=AccessStatus.PENDING)
        if request.POST.get("confirm"):
            note, done = request.POST.get("note", "")[:4000], 0
            for access_request in pending.select_related("server", "agent"):
                try:
                    svc.access_request_review(actor=request.user, request=access_request, decision=decision, note=note)
                    done += 1
                except ApplicationError as exc:
                    messages.warning(request, f"request {access_request.pk}: {exc.message}")
            verb = "Approved" if decision == "approve" else "Rejected"
            self.message_user(request, f"{verb} {done} access request(s).", messages.SUCCESS if done else messages.INFO)
            return None
        context = {**self.admin_site.each_context(request), "opts": self.model._meta,
                   "title": f"{decision.capitalize()} access requests", "requests": pending.select_related("server", "agent"),
                   "skipped": queryset.exclude(status=AccessStatus.PENDING).count(), "decision": decision,
                   "action": f"{decision}_selected", "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
                   "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME}
        return TemplateResponse(request, "admin/mcp_app/mcpaccessrequest/review_confirm.html", context)

    # Reviewing (the actions; the change page, which only shows a request) needs review_mcpaccessrequest.
    has_review_permission = admin_permission("mcp_app.review_mcpaccessrequest")

    def has_change_permission(self, request, obj=None):
        return self.has_review_permission(request, obj)

    @admin.action(description="Approve selected requests (creates or updates the grants)…", permissions=["review"])
    def approve_selected(self, request, queryset):
        return self._review(request, queryset, "approve")

    @admin.action(description="Reject selected requests…", permissions=["review"])
    def reject_selected(self, request, queryset):
        return self._review(request, queryset, "reject")

