"""Admin for agent grants and user grants, saved through `mcp_app.services.grants`. An agent grant's
config_overrides and a user grant's credentials may hold secrets: they are write-only (names shown, never values)."""
from __future__ import annotations

import json

from django import forms
from django.contrib import admin
from django.utils.html import format_html_join

from goclaw.errors import ApplicationError
from mcp_app.admin.forms import add_service_error, parse_lines, write_only_lines
from mcp_app.models import MCPAgentGrant, MCPUserGrant
from mcp_app.services import grants as svc
from mcp_app.services.common import headers_problems
from tools_app.admin.base import ServiceAdmin, WriteOnlyTextarea
from tools_app.services.custom_tools import env_problems

GRANT_FIELDS = ["server", "agent", "enabled", "tool_allow", "tool_deny", "expires_at"]


class GrantForm(forms.ModelForm):
    """Checks the tool lists with the service's rules (names with the server's prefix are accepted)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "tool_allow" in self.fields:
            self.fields["tool_allow"].help_text = 'a JSON list of tool names; empty: every tool'
            self.fields["tool_deny"].help_text = 'a JSON list of tool names; deny always wins'

    def clean(self):
        cleaned = super().clean()
        server = cleaned.get("server") if "server" in self.fields else self.instance.server  # read-only on change
        if server is None:
            return cleaned
        try:
            cleaned["tool_allow"] = svc.tool_names(cleaned.get("tool_allow"), field="tool_allow", server=server,
                                                   nullable=True)
            cleaned["tool_deny"] = svc.tool_names(cleaned.get("tool_deny") or [], field="tool_deny", server=server,
                                                  nullable=False)
        except ApplicationError as exc:
            add_service_error(self, exc)
        return cleaned


class AgentGrantForm(GrantForm):
    config_overrides_json = forms.CharField(
        required=False, label="Replace config overrides", widget=WriteOnlyTextarea(attrs={"rows": 3, "autocomplete": "off"}),
        help_text='JSON {"env": {…}, "headers": {…}, "args_suffix": […], "timeout": 30}. Write-only: empty keeps the '
                  "current overrides, {} clears them.")

    class Meta:
        model = MCPAgentGrant
        fields = GRANT_FIELDS

    def clean_config_overrides_json(self):
        text = self.cleaned_data.get("config_overrides_json") or ""
        if not text.strip():
            return None
        try:
            overrides = json.loads(text)
        except json.JSONDecodeError:
            raise forms.ValidationError("not valid JSON") from None  # never echo it: it may hold secrets
        if problem := svc.overrides_problem(overrides):
            raise forms.ValidationError(problem)
        return overrides


def _server_and_agent_fixed(obj) -> list[str]:
    return ["server", "agent"] if obj is not None else []  # a grant's identity; a new pair is a new grant


@admin.register(MCPAgentGrant)
class MCPAgentGrantAdmin(ServiceAdmin):
    form = AgentGrantForm
    list_display = ["agent", "server", "enabled", "tool_allow", "tool_deny", "expires_at", "granted_by", "updated_at"]
    list_filter = ["enabled", "server", "agent"]
    search_fields = ["agent__key", "server__name"]
    list_select_related = ["agent", "server"]
    fields = [*GRANT_FIELDS, "overrides_shown", "config_overrides_json", "granted_by", "created_at", "updated_at"]

    def get_readonly_fields(self, request, obj=None):
        return [*_server_and_agent_fixed(obj), "overrides_shown", "granted_by", "created_at", "updated_at"]

    @admin.display(description="config overrides (names only)")
    def overrides_shown(self, obj: MCPAgentGrant) -> str:
        return json.dumps(obj.overrides_summary or {}, sort_keys=True) if obj.pk else "-"

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        grant = svc.agent_grant_set(actor=request.user, server=obj.server, agent=obj.agent,
                                    tool_allow=data.get("tool_allow"), tool_deny=data.get("tool_deny") or [],
                                    expires_at=data.get("expires_at"), enabled=bool(data.get("enabled")),
                                    config_overrides=data.get("config_overrides_json"))
        obj.pk = grant.pk
        obj._state.adding = False

    def delete_with_service(self, request, queryset):
        for grant in queryset.select_related("agent", "server"):
            svc.agent_grant_revoke(actor=request.user, grant=grant)


class UserGrantForm(GrantForm):
    credential_headers = write_only_lines("Set credential headers", "Name: value, one per line (e.g. Authorization: "
                                                                    "Bearer …). Write-only, never shown again.")
    credential_env = write_only_lines("Set credential env", "NAME=value, one per line. Write-only, never shown again.")
    credentials_unset = forms.MultipleChoiceField(required=False, label="Remove credentials",
                                                  widget=forms.CheckboxSelectMultiple)

    class Meta:
        model = MCPUserGrant
        fields = ["server", "agent", "user_id", "enabled", "tool_allow", "tool_deny", "expires_at"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        names = self.instance.credentials_names or {}
        self.fields["credentials_unset"].choices = [(f"{kind}:{name}", f"{kind}: {name}")
                                                    for kind in ("headers", "env") for name in names.get(kind, [])]

    def credentials(self) -> dict | None:
        return getattr(self, "_credentials", None)

    def clean(self):
        cleaned = super().clean()
        changes: dict[str, dict[str, str | None]] = {"headers": {}, "env": {}}
        for choice in cleaned.get("credentials_unset") or []:
            kind, _, name = choice.partition(":")
            changes[kind][name] = None
        changes["headers"].update(parse_lines(self, "credential_headers", ":"))
        changes["env"].update(parse_lines(self, "credential_env", "="))
        if problem := headers_problems(changes["headers"], allow_unset=True):
            self.add_error("credential_headers", problem)
        if problem := env_problems(changes["env"], allow_unset=True):
            self.add_error("credential_env", problem)
        self._credentials = {kind: values for kind, values in changes.items() if values} or None
        return cleaned


@admin.register(MCPUserGrant)
class MCPUserGrantAdmin(ServiceAdmin):
    form = UserGrantForm
    list_display = ["user_id", "agent_shown", "server", "enabled", "tool_allow", "tool_deny", "credentials_shown",
                    "expires_at", "granted_by"]
    list_filter = ["enabled", "server", "agent"]
    search_fields = ["user_id", "agent__key", "server__name"]
    list_select_related = ["agent", "server"]
    fields = ["server", "agent", "user_id", "enabled", "tool_allow", "tool_deny", "expires_at", "credentials_shown",
              "credential_headers", "credential_env", "credentials_unset", "granted_by", "created_at", "updated_at"]

    def get_readonly_fields(self, request, obj=None):
        fixed = ["server", "agent", "user_id"] if obj is not None else []
        return [*fixed, "credentials_shown", "granted_by", "created_at", "updated_at"]

    @admin.display(description="agent")
    def agent_shown(self, obj: MCPUserGrant) -> str:
        return obj.agent.key if obj.agent_id else "every agent"

    @admin.display(description="credentials set")
    def credentials_shown(self, obj: MCPUserGrant) -> str:
        names = obj.credentials_names or {}
        pairs = [(kind, name) for kind in ("headers", "env") for name in names.get(kind, [])]
        return format_html_join(", ", "{}: {} (set)", pairs) or "none"

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        grant = svc.user_grant_set(actor=request.user, server=obj.server, agent=obj.agent, user_id=obj.user_id,
                                   tool_allow=data.get("tool_allow"), tool_deny=data.get("tool_deny") or [],
                                   expires_at=data.get("expires_at"), enabled=bool(data.get("enabled")),
                                   credentials=form.credentials())
        obj.pk = grant.pk
        obj._state.adding = False

    def delete_with_service(self, request, queryset):
        for grant in queryset.select_related("server"):
            svc.user_grant_revoke(actor=request.user, grant=grant)
