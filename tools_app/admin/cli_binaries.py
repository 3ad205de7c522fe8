"""Admin for credentialed CLI binaries: edit with the service's checks (the path checked as a call would check it),
the env write-only (names shown as set, with the last change). Presets are added with `manage.py cli_binary_preset`.
Saves and deletes go through `tools_app.services.cli_binaries`."""
from __future__ import annotations

from django import forms
from django.contrib import admin
from django.utils.html import format_html_join

from tools_app.admin.base import ServiceAdmin
from tools_app.admin.custom_tools import WriteOnlyTextarea
from tools_app.models import SecureCLIBinary
from tools_app.services import cli_binaries as svc
from tools_app.services.custom_tools import env_problems


class SecureCLIBinaryForm(forms.ModelForm):
    """The definition plus write-only env changes (`env_set`: NAME=value lines never shown again; `env_unset`)."""

    env_set = forms.CharField(
        required=False, label="Set env variables", widget=WriteOnlyTextarea(attrs={"rows": 3, "autocomplete": "off"}),
        help_text="NAME=value, one per line. Write-only: values are encrypted and never shown again.")
    env_unset = forms.MultipleChoiceField(required=False, label="Unset env variables",
                                          widget=forms.CheckboxSelectMultiple)

    class Meta:
        model = SecureCLIBinary
        fields = list(svc.EDITABLE)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["env_unset"].choices = [(name, name) for name in (self.instance.env_names or [])]

    def env_changes(self) -> dict[str, str | None]:
        return getattr(self, "_env_changes", {})

    def clean(self):
        cleaned = super().clean()
        changes: dict[str, str | None] = {name: None for name in cleaned.get("env_unset") or []}
        for number, line in enumerate((cleaned.get("env_set") or "").splitlines(), 1):
            if not line.strip():
                continue
            name, sep, value = line.partition("=")
            if not sep:
                self.add_error("env_set", f"line {number}: write NAME=value")  # never echo the line: it may be a value
                continue
            changes[name.strip()] = value
        if problem := env_problems(changes, allow_unset=True):
            self.add_error("env_set", problem)
        self._env_changes = changes
        fields = {name: cleaned.get(name, getattr(self.instance, name, None)) for name in svc.EDITABLE}
        fields["tips"] = fields.get("tips") or ""
        fields["deny_args"] = fields.get("deny_args") or []
        fields["deny_verbose"] = fields.get("deny_verbose") or []
        for field, message in svc.cli_binary_problems(fields).items():
            if field in self.fields and field not in self.errors:
                self.add_error(field, message)
        return cleaned


@admin.register(SecureCLIBinary)
class SecureCLIBinaryAdmin(ServiceAdmin):
    form = SecureCLIBinaryForm
    list_display = ["name", "path", "agent", "enabled", "timeout_seconds", "env_status", "env_changed_at"]
    list_filter = ["enabled", "agent"]
    search_fields = ["name", "path"]
    readonly_fields = ["env_status", "env_changed_at", "created_at", "updated_at"]
    fieldsets = [
        (None, {"fields": ["name", "path", "agent", "enabled", "timeout_seconds", "tips"]}),
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

    def save_model(self, request, obj, form, change):
        fields = {name: form.cleaned_data[name] for name in svc.EDITABLE if name in form.cleaned_data}
        env = form.env_changes()
        if change:
            row = svc.cli_binary_update(actor=request.user, binary=obj, env=env or None, **fields)
        else:
            row = svc.cli_binary_create(actor=request.user, env={k: v for k, v in env.items() if v is not None},
                                        **fields)
        obj.pk = row.pk
        obj._state.adding = False

    def delete_with_service(self, request, queryset):
        for row in queryset:
            svc.cli_binary_delete(actor=request.user, binary=row)
