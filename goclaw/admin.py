from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django_q.admin import resubmit_task

from goclaw.models import AuditCheckpoint, AuditPurge, WorkerHeartbeat

admin.site.site_header = "goclaw"
admin.site.site_title = "goclaw admin"
admin.site.index_title = "Tool governance"


_history_view = admin.ModelAdmin.history_view


def _history_view_checked(self, request, object_id, extra_context=None):
    """Django's history page looks the object up before it checks the permission, so a person without any
    permission on the model learnt whether an id exists (a "does not exist" redirect instead of a 403). Every
    ModelAdmin checks the model permission first (docs/permissions.md)."""
    if not self.has_view_or_change_permission(request):
        raise PermissionDenied
    return _history_view(self, request, object_id, extra_context)


admin.ModelAdmin.history_view = _history_view_checked

# django_q's "resubmit" action (its task and failure lists) runs a stored task again: like every action here it needs
# a permission beyond seeing the list, the change permission of that list's model.
resubmit_task.allowed_permissions = ("change",)


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(admin.ModelAdmin):
    list_display = ["name", "beat_at", "pid", "host"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class ReadOnlyAdmin(admin.ModelAdmin):
    """A record people read but never add, edit or delete in the admin (logs, histories; actions may still call
    services)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class AppendOnlyAdmin(ReadOnlyAdmin):
    """An audit table (docs/audit-integrity.md): nobody, superusers included, adds, edits or deletes its rows here;
    the database refuses it too, and `audit_verify` would notice. Only the retention purge removes rows."""

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions


@admin.register(AuditCheckpoint)
class AuditCheckpointAdmin(AppendOnlyAdmin):
    list_display = ["chain_seq", "created_at", "window_start", "chain_hash"]
    readonly_fields = ["chain_seq", "created_at", "window_start", "heads", "chain_hash"]
    exclude = ["chain"]


@admin.register(AuditPurge)
class AuditPurgeAdmin(AppendOnlyAdmin):
    list_display = ["created_at", "table", "cutoff", "removed"]
    list_filter = ["table"]
