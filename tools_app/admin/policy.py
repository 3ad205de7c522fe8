"""Policy specs and profiles: malformed lists are form errors, unknown names are warnings after saving."""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages

from tools_app.models import ToolPolicy, ToolProfile
from tools_app.services.policy import SpecCheck, policy_list_check, policy_spec_check


class _CheckedForm(forms.ModelForm):
    """Runs the spec check in clean(); keeps the warnings for the admin to show after saving."""

    warnings: list[str]

    def run_check(self) -> SpecCheck:  # pragma: no cover - overridden
        raise NotImplementedError

    def clean(self):
        cleaned = super().clean()
        check = self.run_check()
        if check.errors:
            raise forms.ValidationError(check.errors)
        self.warnings = check.warnings
        return cleaned


class ToolPolicyForm(_CheckedForm):
    class Meta:
        model = ToolPolicy
        fields = "__all__"

    def run_check(self) -> SpecCheck:
        data = self.cleaned_data
        return policy_spec_check(allow=data.get("allow", []), deny=data.get("deny", []), also_allow=data.get("also_allow", []))


class ToolProfileForm(_CheckedForm):
    class Meta:
        model = ToolProfile
        fields = "__all__"

    def run_check(self) -> SpecCheck:
        return policy_list_check("tools", self.cleaned_data.get("tools", []), allow_star=True)


class _WarnOnSave(admin.ModelAdmin):
    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        for warning in getattr(form, "warnings", []):
            messages.warning(request, warning)


@admin.register(ToolPolicy)
class ToolPolicyAdmin(_WarnOnSave):
    form = ToolPolicyForm
    list_display = ["__str__", "scope", "agent", "provider", "group_key", "profile", "enabled", "updated_at"]
    list_filter = ["scope", "enabled", "provider"]
    search_fields = ["agent__key", "provider", "group_key", "note"]
    autocomplete_fields = ["agent"]


@admin.register(ToolProfile)
class ToolProfileAdmin(_WarnOnSave):
    form = ToolProfileForm
    list_display = ["name", "description"]
    search_fields = ["name"]
