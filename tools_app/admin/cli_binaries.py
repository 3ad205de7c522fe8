"""Admin for credentialed CLI binaries: edit with the service's checks (the path checked as a call would check it),
the env write-only (names shown as set, with the last change). Presets are added with `manage.py cli_binary_preset`.
Saves and deletes go through `tools_app.services.cli_binaries`."""
from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html_join

from goclaw.authz import person_may
from tools_app.admin.base import SealedEnvAdmin, SealedEnvForm
from tools_app.models import SecureCLIBinary
from tools_app.services import cli_binaries as svc


class SecureCLIBinaryForm(SealedEnvForm):
    """The definition plus write-only env changes (see SealedEnvForm), checked as the service checks it."""

    class Meta:
        model = SecureCLIBinary
        fields = list(svc.EDITABLE)

    def clean(self):
        cleaned = super().clean()
        fields = {name: cleaned.get(name, getattr(self.instance, name, None)) for name in svc.EDITABLE}
        fields["tips"] = fields.get("tips") or ""
        fields["deny_args"] = fields.get("deny_args") or []
        fields["deny_verbose"] = fields.get("deny_verbose") or []
        fields["risk_acknowledged"] = bool(fields.get("risk_acknowledged"))
        for field, message in svc.cli_binary_problems(fields).items():
            if field in self.fields and field not in self.errors:
                self.add_error(field, message)
        return cleaned


MANAGE_BINARIES = "tools_app.manage_credentialed_binaries"


@admin.register(SecureCLIBinary)
class SecureCLIBinaryAdmin(SealedEnvAdmin):
    form = SecureCLIBinaryForm
    list_display = ["name", "path", "agent", "enabled", "risk_acknowledged", "timeout_seconds", "env_status",
                    "env_changed_at"]
    list_filter = ["enabled", "risk_acknowledged", "agent"]
    search_fields = ["name", "path"]
    readonly_fields = ["env_status", "env_changed_at", "created_at", "updated_at"]
    fieldsets = [
        (None, {"fields": ["name", "path", "agent", "enabled", "timeout_seconds", "tips"]}),
        ("Risk", {"fields": ["risk_acknowledged"],
                  "description": "Programs that can start other programs or print their environment (shells, "
                                 "interpreters, env, xargs, find, busybox, git, make, cat, …) are refused unless you "
                                 "accept the risk here: an agent could make them print the credentials in forms the "
                                 "scrubber does not recognise."}),
        ("Refused arguments", {"fields": ["deny_args", "deny_verbose"]}),
        ("Environment (write-only)", {"fields": ["env_status", "env_changed_at", "env_set", "env_unset"]}),
        ("Record", {"fields": ["created_at", "updated_at"]}),
    ]

    @admin.display(description="env")
    def env_status(self, obj: SecureCLIBinary) -> str:
        """Which variables are set: names only, never values."""
        names = obj.env_names or []
        if not names:
            return "none set"
        return format_html_join(", ", "{} (set)", ((name,) for name in names))

    editable = svc.EDITABLE

    def create_row(self, actor, env, fields):
        return svc.cli_binary_create(actor=actor, env=env, **fields)

    def update_row(self, actor, row, env, fields):
        return svc.cli_binary_update(actor=actor, binary=row, env=env, **fields)

    def delete_with_service(self, request, queryset):
        for row in queryset:
            svc.cli_binary_delete(actor=request.user, binary=row)

    # A credentialed binary runs with secrets an agent never sees: writing one needs manage_credentialed_binaries too.
    def has_add_permission(self, request):
        return super().has_add_permission(request) and person_may(request.user, MANAGE_BINARIES)

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and person_may(request.user, MANAGE_BINARIES)

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and person_may(request.user, MANAGE_BINARIES)
