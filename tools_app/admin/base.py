"""What the admin screens share: saves and deletes go through services; sealed env fields are write-only."""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import Model, QuerySet

from goclaw.admin import ReadOnlyAdmin  # noqa: F401  (the tools admin screens' read-only base)
from tools_app.services.custom_tools import env_problems
from tools_app.services.policy import SpecCheck


class ServiceAdmin(admin.ModelAdmin):
    """Saves and deletes call the model's services (validation, cache invalidation in every process), never
    `Model.save()` / `delete()` directly; a save's warnings (unknown tool names) are shown after it."""

    def save_with_service(self, request, obj: Model) -> list[str]:  # pragma: no cover - overridden
        raise NotImplementedError

    def delete_with_service(self, request, queryset: QuerySet) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def save_model(self, request, obj, form, change):
        for warning in self.save_with_service(request, obj):
            messages.warning(request, warning)

    def delete_model(self, request, obj):
        self.delete_with_service(request, type(obj)._default_manager.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        self.delete_with_service(request, queryset)


class SealedEnvAdmin(ServiceAdmin):
    """A ServiceAdmin for rows with a sealed env edited through a SealedEnvForm: the form's fields and env changes go
    to the model's create / update service (named by `create_row` / `update_row`); a new row takes only set values."""

    editable: tuple[str, ...] = ()

    def create_row(self, actor, env: dict[str, str], fields: dict) -> Model:  # pragma: no cover - overridden
        raise NotImplementedError

    def update_row(self, actor, row: Model, env: dict[str, str | None] | None, fields: dict) -> Model:  # pragma: no cover
        raise NotImplementedError

    def save_model(self, request, obj, form, change):
        fields = {name: form.cleaned_data[name] for name in self.editable if name in form.cleaned_data}
        env = form.env_changes()
        if change:
            row = self.update_row(request.user, obj, env or None, fields)
        else:
            row = self.create_row(request.user, {k: v for k, v in env.items() if v is not None}, fields)
        obj.pk = row.pk
        obj._state.adding = False


class CheckedForm(forms.ModelForm):
    """Runs the service's spec check in clean(), so a malformed list is a form error rather than a failed save
    (the service repeats the check for every other caller)."""

    def run_check(self) -> SpecCheck:  # pragma: no cover - overridden
        raise NotImplementedError

    def clean(self):
        cleaned = super().clean()
        check = self.run_check()
        if check.errors:
            raise forms.ValidationError(check.errors)
        return cleaned


class WriteOnlyTextarea(forms.Textarea):
    """Never renders a value: a form shown again after an error must not echo the secrets typed into it."""

    def format_value(self, value):
        return None


class SealedEnvForm(forms.ModelForm):
    """A model form with write-only env changes for a row whose env is sealed (custom tools, credentialed binaries):
    `env_set` takes NAME=value lines (never filled in again), `env_unset` removes names. After clean(),
    `env_changes()` is what to hand to the row's update service."""

    env_set = forms.CharField(
        required=False, label="Set env variables", widget=WriteOnlyTextarea(attrs={"rows": 3, "autocomplete": "off"}),
        help_text="NAME=value, one per line. Write-only: values are encrypted and never shown again.")
    env_unset = forms.MultipleChoiceField(required=False, label="Unset env variables",
                                          widget=forms.CheckboxSelectMultiple)

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
        return cleaned
