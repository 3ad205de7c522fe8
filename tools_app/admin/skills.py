"""Admin for skills (docs/skills.md): the list with usage counts (annotated in the list query, no query per row),
enable / disable actions, a preview of the instructions and the file list. Skills are published by agents
(`publish_skill`), so there is no add form; edits, actions and deletes go through `tools_app.services.skills`."""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, Max
from django.utils.html import format_html, format_html_join

from goclaw.errors import ApplicationError
from tools_app.admin.base import ServiceAdmin
from tools_app.models.skills import Skill
from tools_app.services import skills as svc

PREVIEW_MAX_CHARS = 20_000


class SkillForm(forms.ModelForm):
    """The service's checks on the form, so a bad edit is a form error rather than a failed save (the service
    repeats them for every other caller)."""

    class Meta:
        model = Skill
        fields = ["description", "tags", "agent", "enabled", "content"]

    def clean(self):
        cleaned = super().clean()
        for field, message in svc.skill_problems({k: cleaned[k] for k in ("description", "content")
                                                  if k in cleaned}).items():
            self.add_error(field, message)
        if "tags" in cleaned:
            try:
                cleaned["tags"] = svc.skill_tags_normalize(cleaned["tags"])
            except svc.SkillInvalid as exc:
                self.add_error("tags", exc.message)
        if "agent" in self.changed_data and "agent" in cleaned:
            taken = Skill.objects.filter(slug=self.instance.slug, agent=cleaned["agent"]).exclude(pk=self.instance.pk)
            if taken.exists():
                self.add_error("agent", f"that scope already has a skill {self.instance.slug}")
        return cleaned


@admin.register(Skill)
class SkillAdmin(ServiceAdmin):
    form = SkillForm
    list_display = ["slug", "name", "scope", "version", "enabled", "use_count", "last_used_at", "updated_at"]
    list_filter = ["enabled", ("agent", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["slug", "name", "description"]
    readonly_fields = ["slug", "name", "version", "use_count", "last_used_at", "content_preview", "file_list",
                       "source_path", "published_by", "created_at", "updated_at"]
    fieldsets = [
        (None, {"fields": ["slug", "name", "description", "tags", "agent", "enabled", "version"]}),
        ("Instructions", {"fields": ["content_preview", "content"]}),
        ("Files", {"fields": ["file_list"]}),
        ("Record", {"fields": ["use_count", "last_used_at", "source_path", "published_by", "created_at",
                               "updated_at"]}),
    ]
    actions = ["enable_selected", "disable_selected"]

    def get_queryset(self, request):
        return (super().get_queryset(request).select_related("agent")
                .annotate(use_count=Count("uses"), last_used_at=Max("uses__at")))

    def has_add_permission(self, request):
        return False  # agents publish skills from their workspace with publish_skill

    # --- display ---------------------------------------------------------------------------------------------------
    @admin.display(description="scope")
    def scope(self, obj: Skill) -> str:
        return obj.agent.key if obj.agent_id else "every agent"

    @admin.display(description="uses", ordering="use_count")
    def use_count(self, obj: Skill) -> int:
        return getattr(obj, "use_count", 0)

    @admin.display(description="last used", ordering="last_used_at")
    def last_used_at(self, obj: Skill):
        return getattr(obj, "last_used_at", None)

    @admin.display(description="preview")
    def content_preview(self, obj: Skill) -> str:
        """The instructions as the agent receives them (escaped text, never rendered HTML)."""
        text = obj.content or ""
        cut = "\n[… cut for the preview]" if len(text) > PREVIEW_MAX_CHARS else ""
        return format_html('<pre style="white-space: pre-wrap; max-height: 32em; overflow: auto">{}{}</pre>',
                           text[:PREVIEW_MAX_CHARS], cut)

    @admin.display(description="files")
    def file_list(self, obj: Skill) -> str:
        files = obj.files or {}
        if not files:
            return "none"
        return format_html("<ul>{}</ul>", format_html_join(
            "", "<li><code>{}</code> ({} bytes)</li>", ((path, len(text.encode("utf-8"))) for path, text in files.items())))

    # --- writes through the services ------------------------------------------------------------------------------
    def save_model(self, request, obj, form, change):
        changes = {name: form.cleaned_data[name] for name in form.changed_data if name in svc.EDITABLE}
        try:
            svc.skill_update(actor=request.user, skill=obj, **changes)
        except ApplicationError as exc:
            messages.error(request, exc.message)

    def delete_with_service(self, request, queryset) -> int:
        count = 0
        for skill in queryset:
            svc.skill_delete(actor=request.user, skill=skill)
            count += 1
        return count

    @admin.action(description="Enable selected skills", permissions=["change"])
    def enable_selected(self, request, queryset):
        count = svc.skill_set_enabled(actor=request.user, skills=queryset, enabled=True)
        self.message_user(request, f"{count} skill(s) enabled.", messages.SUCCESS)

    @admin.action(description="Disable selected skills", permissions=["change"])
    def disable_selected(self, request, queryset):
        count = svc.skill_set_enabled(actor=request.user, skills=queryset, enabled=False)
        self.message_user(request, f"{count} skill(s) disabled.", messages.SUCCESS)
