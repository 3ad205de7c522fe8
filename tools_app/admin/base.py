"""What the admin screens that edit agents and policy data share: saves and deletes go through services."""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import Model, QuerySet

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
