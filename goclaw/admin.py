from django.contrib import admin

from goclaw.models import WorkerHeartbeat

admin.site.site_header = "goclaw"
admin.site.site_title = "goclaw admin"
admin.site.index_title = "Tool governance"


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(admin.ModelAdmin):
    list_display = ["name", "beat_at", "pid", "host"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
