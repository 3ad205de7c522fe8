"""Admin for MCP tasks (docs/mcp-server.md, "Tasks"): read-only, for watching calls that wait for a person as MCP
tasks. The approval is decided in the approval queue; the task follows it. Sealed arguments and results stay out."""
from __future__ import annotations

from django.contrib import admin

from mcp_app.models import MCPTask


@admin.register(MCPTask)
class MCPTaskAdmin(admin.ModelAdmin):
    list_display = ["id", "agent", "tool_name", "status", "approval", "created_at", "updated_at", "expires_at"]
    list_filter = ["status", "agent"]
    search_fields = ["id", "agent__key", "tool_name", "approval__id"]
    list_select_related = ["agent", "approval", "approval__agent"]
    fields = readonly_fields = ["id", "agent", "approval", "tool_name", "status", "status_message", "error",
                                "created_at", "updated_at", "expires_at"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # the purge forgets tasks once they expire
