"""Admin for hosted agents: LLM providers (the API key write-only: set or cleared, never shown again; saves and deletes
through runtime_app.services.providers) and sessions with their messages (read-only: runs change them, people read
them). Model permissions govern every page (docs/permissions.md)."""
from __future__ import annotations

from django import forms
from django.contrib import admin

from goclaw.admin import ReadOnlyAdmin
from runtime_app.models import LLMProvider, Session, SessionMessage
from runtime_app.services import providers as svc
from tools_app.admin.base import ServiceAdmin

# The service names problems as the API and the document do; the form's fields are the model's.
_FORM_FIELDS = {"timeout": "timeout_seconds"}


class LLMProviderForm(forms.ModelForm):
    """The provider plus its write-only API key: never rendered back, not even after a form error. clean() runs the
    service's checks, so a refused URL or a rename of a provider agents use shows on its field."""

    api_key = forms.CharField(required=False, label="Set API key", max_length=svc.MAX_API_KEY_CHARS,
                              widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
                              help_text="Write-only: sealed at rest and never shown again. Empty: keep the current one.")
    clear_api_key = forms.BooleanField(required=False, label="Remove the API key")
    # Not a URLField: Django's URL validator refuses single-label hosts such as http://ollama:11434/v1.
    base_url = forms.CharField(max_length=500, label="Base URL",
                               help_text="e.g. https://api.openai.com/v1, https://api.anthropic.com, "
                                         "http://127.0.0.1:11434/v1. Loopback, private, link-local and CGNAT addresses "
                                         "are refused unless private networks are allowed below; cloud metadata "
                                         "addresses always")

    class Meta:
        model = LLMProvider
        fields = ["name", "kind", "base_url", "model", "timeout_seconds", "max_concurrent", "allow_private_network",
                  "enabled"]

    def _get_validation_exclusions(self):
        # the model's URL validator would refuse single-label hosts: the service checks base_url (see clean())
        return {*super()._get_validation_exclusions(), "base_url"}

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        provider = LLMProvider(pk=self.instance.pk, **{name: cleaned.get(name) for name in svc.EDITABLE})
        problems = svc.provider_problems(provider, api_key=cleaned.get("api_key") or None,
                                         clear_api_key=bool(cleaned.get("clear_api_key")))
        stored = LLMProvider.objects.filter(pk=self.instance.pk).values_list("name", flat=True).first() \
            if self.instance.pk else None
        if conflict := svc.provider_conflict(provider, old_name=stored):
            problems.setdefault("name", conflict.message)
        for name, message in problems.items():
            target = _FORM_FIELDS.get(name, name)
            self.add_error(target if target in self.fields else None, message)
        return cleaned


@admin.register(LLMProvider)
class LLMProviderAdmin(ServiceAdmin):
    form = LLMProviderForm
    list_display = ["name", "kind", "base_url", "model", "max_concurrent", "allow_private_network", "enabled",
                    "has_key"]
    list_filter = ["kind", "enabled", "allow_private_network"]
    search_fields = ["name", "base_url", "model"]
    readonly_fields = ["api_key_status", "created_at", "updated_at"]
    fieldsets = [
        (None, {"fields": ["name", "kind", "base_url", "model", "enabled"]}),
        ("Limits", {"fields": ["timeout_seconds", "max_concurrent", "allow_private_network"]}),
        ("API key (write-only)", {"fields": ["api_key_status", "api_key", "clear_api_key"]}),
        ("Record", {"fields": ["created_at", "updated_at"]}),
    ]

    @admin.display(description="API key", boolean=True)
    def has_key(self, obj: LLMProvider) -> bool:
        return obj.has_api_key

    @admin.display(description="API key")
    def api_key_status(self, obj: LLMProvider) -> str:
        return "set" if obj.has_api_key else "not set"

    def save_model(self, request, obj, form, change):
        svc.provider_save(actor=request.user, provider=obj, api_key=form.cleaned_data.get("api_key") or None,
                          clear_api_key=bool(form.cleaned_data.get("clear_api_key")))

    def delete_with_service(self, request, queryset) -> int:
        providers = list(queryset)
        for provider in providers:
            svc.provider_delete(actor=request.user, provider=provider)
        return len(providers)

    def get_deleted_objects(self, objs, request):
        """A provider agents still run on is listed as protected: the delete page refuses it (the service would)."""
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        for provider in objs:
            protected += [f"agent {key} (runs on {provider.name})" for key in svc.agents_naming(provider.name)]
        return deleted, counts, perms_needed, protected


class SessionMessageInline(admin.TabularInline):
    """A session's messages in order, read-only."""

    model = SessionMessage
    fk_name = "session"
    ordering = ["seq"]
    extra = 0
    can_delete = False
    show_change_link = False
    fields = ["seq", "role", "content", "tool_calls", "tool_name", "tool_call_id", "verdict", "is_error",
              "invocation_id", "approval_id", "child", "tokens_in", "tokens_out", "created_at"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Session)
class SessionAdmin(ReadOnlyAdmin):
    list_display = ["key", "agent", "status", "user_id", "depth", "iterations", "tokens", "updated_at"]
    list_filter = ["status", "agent", "channel"]
    search_fields = ["key", "user_id"]
    list_select_related = ["agent"]
    inlines = [SessionMessageInline]
    readonly_fields = ["id", "key", "agent", "status", "end_reason", "error", "result", "user_id", "channel", "chat_id",
                       "parent", "depth", "label", "task", "sync", "iterations", "max_iterations", "retries",
                       "tokens_in", "tokens_out", "waiting_approval", "announced", "lease_owner", "lease_until",
                       "created_by", "created_at", "updated_at", "ended_at"]
    fields = readonly_fields

    @admin.display(description="tokens (in / out)")
    def tokens(self, obj: Session) -> str:
        return f"{obj.tokens_in} / {obj.tokens_out}"
