"""Admin for sandbox profiles, with a self-test that shows, probe by probe, what the sandbox held."""
from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.template.response import TemplateResponse
from django.utils.html import format_html

from sandbox_app.models import SandboxProfile
from sandbox_app.selftest import sandbox_selftest_run


def platform_paths() -> dict[str, str]:
    """Real paths of this instance that no sandboxed process may reach."""
    paths = {"data directory": str(settings.DATA_DIR), "workspaces": str(settings.WORKSPACES_DIR),
             "checkout": str(settings.BASE_DIR), "home of root": "/root"}
    socket_dir = settings.DATABASES["default"].get("HOST") or ""
    if socket_dir.startswith("/"):
        paths["database socket directory"] = socket_dir
    return paths


@admin.register(SandboxProfile)
class SandboxProfileAdmin(admin.ModelAdmin):
    list_display = ["name", "isolation", "network_display", "timeout_seconds", "memory_mb", "max_processes",
                    "is_default", "selftest"]
    list_filter = ["backend", "mode", "network", "is_default"]
    search_fields = ["name", "description"]
    readonly_fields = ["selftest_at", "selftest_ok", "created_at", "updated_at"]
    actions = ["run_selftest"]
    fieldsets = [
        (None, {"fields": ["name", "description", "is_default"]}),
        ("Isolation", {"fields": ["backend", "mode", "network", "network_local", "image", "ro_binds"]}),
        ("Limits", {"fields": ["timeout_seconds", "cpu_seconds", "memory_mb", "max_processes", "max_open_files",
                               "max_file_mb"]}),
        ("Self-test", {"fields": ["selftest_at", "selftest_ok"]}),
    ]

    @admin.display(description="isolation")
    def isolation(self, obj: SandboxProfile) -> str:
        if not obj.sandboxed:
            return format_html('<strong style="color:#ba2121">{}</strong>', "host — sandbox off")
        return f"{obj.backend} ({obj.mode})"

    @admin.display(description="network")
    def network_display(self, obj: SandboxProfile) -> str:
        if obj.network == "off":
            return "off"
        return "on, local addresses reachable" if obj.network_local else "on, public only"

    @admin.display(description="self-test", boolean=True)
    def selftest(self, obj: SandboxProfile):
        return obj.selftest_ok

    @admin.action(description="Run the self-test (probes what the sandbox holds)", permissions=["change"])
    def run_selftest(self, request, queryset):
        reports = [(profile, sandbox_selftest_run(profile=profile, hostile_paths=platform_paths()))
                   for profile in queryset[:5]]
        return TemplateResponse(request, "admin/sandbox_app/selftest.html",
                                {**self.admin_site.each_context(request), "opts": self.model._meta,
                                 "title": "Sandbox self-test", "reports": reports})
