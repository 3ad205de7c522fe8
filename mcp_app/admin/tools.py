"""Admin for MCP tools: the list by server / status / flagged, and a review page per tool showing the diff of its
pinned and its listed definition with the scanner's flags, approved or rejected through
`mcp_app.services.tools` (the approval is bound to the definition the reviewer saw)."""
from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from goclaw.authz import person_required
from goclaw.errors import ApplicationError
from mcp_app.admin.servers import badge
from mcp_app.choices import ToolStatus
from mcp_app.models import MCPTool
from mcp_app.services.tools import mcp_tool_approve, mcp_tool_diff, mcp_tool_reject

STATUS_COLOURS = {ToolStatus.APPROVED: "#2e7d32", ToolStatus.PENDING: "#ef6c00", ToolStatus.QUARANTINED: "#c62828",
                  ToolStatus.REJECTED: "#616161"}


def diff_lines(lines: list[str]) -> list[tuple[str, str]]:
    """(css class, line) for a unified diff: added, removed, hunk headers, file headers, context."""
    marked = []
    for line in lines:
        if line.startswith(("+++", "---")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "ctx"
        marked.append((kind, line))
    return marked


class FlaggedFilter(admin.SimpleListFilter):
    title = "scanner flags"
    parameter_name = "flagged"

    def lookups(self, request, model_admin):
        return [("yes", "flagged"), ("no", "not flagged")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.exclude(flags=[])
        if self.value() == "no":
            return queryset.filter(flags=[])
        return queryset


@admin.register(MCPTool)
class MCPToolAdmin(admin.ModelAdmin):
    list_display = ["name", "server", "status_badge", "flagged", "present", "changed_at", "reviewed_by", "review_link"]
    list_filter = ["server", "status", FlaggedFilter, "present"]
    search_fields = ["name", "description", "server__name"]
    list_select_related = ["server"]
    actions = ["approve_selected", "reject_selected"]

    def has_add_permission(self, request):
        return False  # tools come from the servers' listings

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj: MCPTool):
        return badge(obj.get_status_display(), STATUS_COLOURS.get(obj.status, "#757575"))

    @admin.display(description="flagged", boolean=True)
    def flagged(self, obj: MCPTool) -> bool:
        return bool(obj.flags)

    @admin.display(description="review")
    def review_link(self, obj: MCPTool):
        return format_html('<a href="{}">Review…</a>', reverse("admin:mcp_app_mcptool_review", args=[obj.pk]))

    # --- the review page (also what a row's change link opens) --------------------------------------------------
    def get_urls(self):
        review = person_required(GET=("mcp_app.view_mcptool",), POST=("mcp_app.change_mcptool",))(self.review_view)
        return [path("<int:pk>/review/", self.admin_site.admin_view(review), name="mcp_app_mcptool_review"),
                *super().get_urls()]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        return redirect("admin:mcp_app_mcptool_review", pk=object_id)

    def review_view(self, request, pk):
        """GET shows the diff and the flags; POST approves (bound to the definition shown) or rejects."""
        tool = get_object_or_404(MCPTool.objects.select_related("server"), pk=pk)
        if not self.has_view_permission(request, tool):
            raise PermissionDenied
        if request.method == "POST":
            if not self.has_change_permission(request, tool):
                raise PermissionDenied
            decision = request.POST.get("decision")
            try:
                if decision == "approve":
                    mcp_tool_approve(actor=request.user, tool=tool, expected_hash=request.POST.get("expected_hash") or None)
                    messages.success(request, f"Approved {tool}: agents granted {tool.server.name} may use it.")
                elif decision == "reject":
                    mcp_tool_reject(actor=request.user, tool=tool, note=request.POST.get("note", "")[:4000])
                    messages.success(request, f"Rejected {tool}: agents do not see it.")
                else:
                    messages.error(request, "choose approve or reject")
            except ApplicationError as exc:
                messages.error(request, exc.message)
            return redirect("admin:mcp_app_mcptool_review", pk=tool.pk)
        diff = mcp_tool_diff(tool)
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "title": f"Review {tool}",
                   "tool": tool, "diff": diff, "description_diff": diff_lines(diff["description"]),
                   "schema_diff": diff_lines(diff["input_schema"]), "can_review": self.has_change_permission(request, tool),
                   "prefixed_name": tool.server.prefix + tool.name,
                   "server_url": reverse("admin:mcp_app_mcpserver_change", args=[tool.server_id])}
        return TemplateResponse(request, "admin/mcp_app/mcptool/review.html", context)

    # --- bulk actions ----------------------------------------------------------------------------------------------
    def _review(self, request, queryset, decide, verb: str) -> None:
        done = 0
        for tool in queryset.select_related("server"):
            try:
                decide(tool)
                done += 1
            except ApplicationError as exc:
                messages.warning(request, exc.message)
        self.message_user(request, f"{verb} {done} tool(s).", messages.SUCCESS if done else messages.INFO)

    @admin.action(description="Approve selected tools (pin their listed definitions)", permissions=["change"])
    def approve_selected(self, request, queryset):
        self._review(request, queryset, lambda tool: mcp_tool_approve(actor=request.user, tool=tool), "Approved")

    @admin.action(description="Reject selected tools", permissions=["change"])
    def reject_selected(self, request, queryset):
        self._review(request, queryset, lambda tool: mcp_tool_reject(actor=request.user, tool=tool), "Rejected")
