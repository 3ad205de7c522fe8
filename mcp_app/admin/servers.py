"""Admin for MCP servers and launchers: the form runs the service's whole check (launcher allowlist, URL rules,
prefix) so problems show on their fields; headers and env are write-only; actions test the connection (list tools)
and reconnect. Saves go through `mcp_app.services.servers`."""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from goclaw.authz import person_may
from mcp_app.admin.forms import parse_lines, write_only_lines
from mcp_app.launch_args import launcher_refusal
from mcp_app.selectors import servers_with_tool_counts
from mcp_app.choices import HealthState
from mcp_app.models import MCPLauncher, MCPServer
from mcp_app.services import connections
from mcp_app.services import servers as svc
from tools_app.admin.base import SealedEnvForm, ServiceAdmin

STATE_COLOURS = {HealthState.CONNECTED: "#2e7d32", HealthState.DEGRADED: "#ef6c00",
                 HealthState.DISCONNECTED: "#c62828", HealthState.COOLDOWN: "#6a1b1b", HealthState.UNKNOWN: "#757575"}


def badge(text: str, colour: str):
    return format_html('<span style="background:{};color:#fff;padding:1px 7px;border-radius:8px;'
                       'white-space:nowrap">{}</span>', colour, text)


class MCPServerForm(SealedEnvForm):
    """The server's settings with write-only header and env changes; clean() runs the service's check of the whole
    definition, so a refused launcher or a private URL is shown on its field."""

    headers_set = write_only_lines("Set headers", "Name: value, one per line. Write-only: values are encrypted and "
                                                  "never shown again.")
    headers_unset = forms.MultipleChoiceField(required=False, label="Unset headers", widget=forms.CheckboxSelectMultiple)
    url = forms.URLField(required=False, max_length=2000, assume_scheme="https",
                         help_text="sse / streamable-http: the endpoint URL")

    class Meta:
        model = MCPServer
        fields = ["name", "display_name", "transport", "command", "args", "url", "allow_private_network",
                  "tool_prefix", "timeout_seconds", "enabled", "sandbox_profile", "review_new_tools"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["headers_unset"].choices = [(name, name) for name in (self.instance.headers_names or [])]
        if "args" in self.fields:
            self.fields["args"].help_text = 'stdio: a JSON list, e.g. ["server.py", "--flag"]'

    def headers_changes(self) -> dict[str, str | None]:
        return getattr(self, "_headers_changes", {})

    def definition(self) -> dict:
        """The fields the service takes, from the form (or the row, for fields not on the form)."""
        data = {name: self.cleaned_data.get(name, getattr(self.instance, name, None)) for name in svc.EDITABLE}
        data["args"] = data.get("args") or []
        for text in ("display_name", "command", "url", "tool_prefix"):
            data[text] = data.get(text) or ""
        return data

    def clean(self):
        cleaned = super().clean()
        changes: dict[str, str | None] = {name: None for name in cleaned.get("headers_unset") or []}
        changes.update(parse_lines(self, "headers_set", ":"))
        if problem := svc.headers_problems(changes, allow_unset=True):
            self.add_error("headers_set", problem)
        self._headers_changes = changes
        if "env_set" not in self.errors and (problem := svc.server_env_problem(self.instance.env_names,
                                                                                self.env_changes())):
            self.add_error("env_set", problem)
        data = {**self.definition(), "name": cleaned.get("name") or self.instance.name}
        for field, message in svc.server_problems(data).items():
            if field in self.fields and field not in self.errors:
                self.add_error(field, message)
            elif field not in self.fields:
                self.add_error(None, f"{field}: {message}")
        prefix = data["tool_prefix"] or "mcp_" + str(data["name"]).replace("-", "_") + "__"
        if any(other.prefix == prefix for other in MCPServer.objects.exclude(pk=self.instance.pk)
               .only("name", "tool_prefix")):
            self.add_error("tool_prefix", f"another server already uses the tool prefix {prefix}")
        return cleaned


@admin.register(MCPServer)
class MCPServerAdmin(ServiceAdmin):
    form = MCPServerForm
    list_display = ["name", "transport", "state_badge", "last_ok_at", "approved_count", "quarantined_count",
                    "pending_count", "enabled"]
    list_filter = ["transport", "state", "enabled"]
    search_fields = ["name", "display_name", "url", "command"]
    actions = ["test_connection", "reconnect"]
    health = ["state_badge", "last_ok_at", "last_checked_at", "last_error", "attempts", "next_attempt_at", "listed_at"]
    fieldsets = [
        (None, {"fields": ["name", "display_name", "transport", "enabled", "prefix_shown", "tool_prefix",
                           "review_new_tools", "tools_link"]}),
        ("stdio", {"fields": ["command", "args", "sandbox_profile"]}),
        ("HTTP (SSE / streamable HTTP)", {"fields": ["url", "allow_private_network"]}),
        ("Headers (write-only)", {"fields": ["headers_status", "headers_set", "headers_unset"]}),
        ("Environment (write-only)", {"fields": ["env_status", "env_set", "env_unset"]}),
        ("Health", {"fields": health}),
        ("Record", {"fields": ["timeout_seconds", "created_by", "created_at", "updated_at"]}),
    ]

    def get_readonly_fields(self, request, obj=None):
        fixed = ["prefix_shown", "tools_link", "headers_status", "env_status", *self.health, "created_by", "created_at",
                 "updated_at"]
        return fixed + (["name"] if obj is not None else [])  # the name is the server's identity

    def get_queryset(self, request):
        return servers_with_tool_counts()

    # --- display ---------------------------------------------------------------------------------------------------
    @admin.display(description="state", ordering="state")
    def state_badge(self, obj: MCPServer):
        return badge(obj.get_state_display(), STATE_COLOURS.get(obj.state, "#757575"))

    @admin.display(description="approved")
    def approved_count(self, obj):
        return getattr(obj, "tools_approved", 0)

    @admin.display(description="quarantined")
    def quarantined_count(self, obj):
        count = getattr(obj, "tools_quarantined", 0)
        return badge(str(count), "#c62828") if count else 0

    @admin.display(description="pending")
    def pending_count(self, obj):
        count = getattr(obj, "tools_pending", 0)
        return badge(str(count), "#ef6c00") if count else 0

    @admin.display(description="tool names start with")
    def prefix_shown(self, obj: MCPServer):
        return obj.prefix if obj.name else "-"

    @admin.display(description="tools")
    def tools_link(self, obj: MCPServer):
        if not obj.pk:
            return "-"
        url = reverse("admin:mcp_app_mcptool_changelist") + f"?server__id__exact={obj.pk}"
        return format_html('<a href="{}">This server\'s tools</a>', url)

    @admin.display(description="headers")
    def headers_status(self, obj: MCPServer):
        return format_html_join(", ", "{} (set)", ((n,) for n in obj.headers_names or [])) or "none set"

    @admin.display(description="env")
    def env_status(self, obj: MCPServer):
        return format_html_join(", ", "{} (set)", ((n,) for n in obj.env_names or [])) or "none set"

    # --- writes through the services ------------------------------------------------------------------------------
    def save_model(self, request, obj, form, change):
        fields = {name: value for name, value in form.definition().items()}
        headers, env = form.headers_changes(), form.env_changes()
        if change:
            row = svc.server_update(actor=request.user, server=obj, headers=headers or None, env=env or None, **fields)
        else:
            row = svc.server_create(actor=request.user, name=form.cleaned_data["name"],
                                    headers={k: v for k, v in headers.items() if v is not None} or None,
                                    env={k: v for k, v in env.items() if v is not None} or None, **fields)
        obj.pk = row.pk
        obj._state.adding = False

    def delete_with_service(self, request, queryset):
        for server in queryset:
            svc.server_delete(actor=request.user, server=server)

    # --- actions (network I/O: outside any transaction, in the connection services) -----------------------------
    def _report(self, request, server: MCPServer, result: dict) -> None:
        if not result["ok"]:
            messages.error(request, f"{server.name}: {result['error']}")
            return
        changes = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in sorted(result["changes"].items()) if names)
        messages.success(request, f"{server.name}: {len(result['tools'])} tool(s) found: "
                                  f"{', '.join(result['tools']) or 'none'}. Changes: {changes or 'none'}.")

    @admin.action(description="Test connection (list tools)", permissions=["change"])
    def test_connection(self, request, queryset):
        for server in queryset:
            self._report(request, server, connections.server_tools_refresh(server))

    @admin.action(description="Reconnect", permissions=["change"])
    def reconnect(self, request, queryset):
        for server in queryset:
            self._report(request, server, connections.server_reconnect(server))


class MCPLauncherForm(forms.ModelForm):
    """A launcher's command is checked as the service checks it: no shell, exec wrapper or interpreter without an
    argument model may be enabled."""

    class Meta:
        model = MCPLauncher
        fields = ["command", "description", "denied_args", "enabled"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "denied_args" in self.fields:
            self.fields["denied_args"].help_text = (
                'for a program goclaw has no argument model of: arguments refused, e.g. ["--eval"]. python, node, '
                "npx, npm, uv, uvx, pipx, deno, bun and bunx are judged by their own models (docs/mcp.md)")

    def clean(self):
        cleaned = super().clean()
        command = cleaned.get("command") or self.instance.command
        if command and cleaned.get("enabled") and (why := launcher_refusal(command)):
            self.add_error("command" if "command" in self.fields and "command" not in self.errors else None, why)
        return cleaned

    def clean_command(self):
        command = self.cleaned_data["command"]
        if any(ch in command for ch in "\x00\r\n ") or "/" in command and not command.startswith("/"):
            raise forms.ValidationError("a launcher is a bare program name or an absolute path")
        return command

    def clean_denied_args(self):
        value = self.cleaned_data.get("denied_args") or []
        if not isinstance(value, list) or not all(isinstance(a, str) and a for a in value):
            raise forms.ValidationError('a JSON list of arguments, e.g. ["-c"]')
        return value


MANAGE_LAUNCHERS = "mcp_app.manage_mcplauncher"


@admin.register(MCPLauncher)
class MCPLauncherAdmin(ServiceAdmin):
    """Launchers are never deleted here (no service removes one): disable a launcher instead."""

    form = MCPLauncherForm
    list_display = ["command", "description", "denied_args", "enabled", "created_at"]
    list_filter = ["enabled"]
    search_fields = ["command", "description"]

    def get_readonly_fields(self, request, obj=None):
        return ["command"] if obj is not None else []  # the command is the launcher's identity

    def has_delete_permission(self, request, obj=None):
        return False

    # A launcher decides what programs MCP servers may start: writing one needs manage_mcplauncher as well.
    def has_add_permission(self, request):
        return super().has_add_permission(request) and person_may(request.user, MANAGE_LAUNCHERS)

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and person_may(request.user, MANAGE_LAUNCHERS)

    def save_model(self, request, obj, form, change):
        row = svc.launcher_set(actor=request.user, command=obj.command, description=obj.description or "",
                               denied_args=list(obj.denied_args or []), enabled=obj.enabled)
        obj.pk = row.pk
        obj._state.adding = False
