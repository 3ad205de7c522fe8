"""Policy specs and profiles: malformed lists are form errors, unknown names are warnings after saving."""
from __future__ import annotations

from django.contrib import admin

from tools_app.admin.base import CheckedForm, ServiceAdmin
from tools_app.models import ToolPolicy, ToolProfile
from tools_app.services.policy import (SpecCheck, policy_content_check, policy_spec_check, tool_policy_delete, tool_policy_save,
                                       tool_profile_check, tool_profile_delete, tool_profile_save)


class ToolPolicyForm(CheckedForm):
    class Meta:
        model = ToolPolicy
        fields = "__all__"

    def run_check(self) -> SpecCheck:
        data = self.cleaned_data
        check = policy_spec_check(allow=data.get("allow", []), deny=data.get("deny", []), also_allow=data.get("also_allow", []))
        for kind in ("resources", "prompts"):
            policy_content_check(kind, data.get(kind), check=check)
        return check


class ToolProfileForm(CheckedForm):
    class Meta:
        model = ToolProfile
        fields = "__all__"

    def run_check(self) -> SpecCheck:
        return tool_profile_check(self.cleaned_data.get("tools", []))


@admin.register(ToolPolicy)
class ToolPolicyAdmin(ServiceAdmin):
    form = ToolPolicyForm
    list_display = ["__str__", "scope", "agent", "provider", "group_key", "profile", "enabled", "updated_at"]
    list_filter = ["scope", "enabled", "provider"]
    search_fields = ["agent__key", "provider", "group_key", "note"]
    autocomplete_fields = ["agent"]

    def save_with_service(self, request, obj):
        return tool_policy_save(actor=request.user, policy=obj)[1]

    def delete_with_service(self, request, queryset):
        return tool_policy_delete(actor=request.user, queryset=queryset)


@admin.register(ToolProfile)
class ToolProfileAdmin(ServiceAdmin):
    form = ToolProfileForm
    list_display = ["name", "description"]
    search_fields = ["name"]

    def save_with_service(self, request, obj):
        return tool_profile_save(actor=request.user, profile=obj)[1]

    def delete_with_service(self, request, queryset):
        return tool_profile_delete(actor=request.user, queryset=queryset)
