"""Admin for the MCP endpoint's client sessions (docs/mcp-server.md): read-only, for watching who is connected (a
session ends by the client's DELETE, idleness, or its token's revocation)."""
from __future__ import annotations

from django.contrib import admin

from mcp_app.models import MCPServerSession


@admin.register(MCPServerSession)
class MCPServerSessionAdmin(admin.ModelAdmin):
    list_display = ["session_id", "agent", "client_name", "protocol_version", "created_at", "last_seen_at"]
    list_filter = ["agent"]
    search_fields = ["session_id", "agent__key"]
    list_select_related = ["agent"]
    readonly_fields = ["session_id", "agent", "token", "context", "protocol_version", "client_info",
                       "catalog_fingerprint", "notified_fingerprint", "created_at", "last_seen_at"]

    @admin.display(description="client")
    def client_name(self, obj: MCPServerSession) -> str:
        info = obj.client_info or {}
        return f"{info.get('name', '')} {info.get('version', '')}".strip()

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # processes keep session rows until a session ends through the service
