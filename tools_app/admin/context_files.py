"""Admin for context files (docs/context-files.md): agent-level and per-user files edited in a markdown editor (a
textarea with a server-rendered preview), the history of every file with coloured diffs, and "restore this version".
Saves, deletes and restores go through `tools_app.services.context_files`, so each is a versioned write by the person.
"""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import mark_safe

from goclaw.authz import person_may, person_required
from goclaw.errors import ApplicationError
from goclaw.markdown import markdown_to_html  # the preview: CommonMark without raw HTML, then sanitized
from tools_app.admin.base import ReadOnlyAdmin, ServiceAdmin
from tools_app.models import Agent
from tools_app.models.context_files import BOOTSTRAP_NAME, AgentContextFile, ContextFileVersion, UserContextFile
from tools_app.selectors_context import context_file_versions
from tools_app.services import context_files as svc

PREVIEW_MAX_CHARS = svc.CONTEXT_FILE_MAX_CHARS


def diff_lines(diff: str) -> list[tuple[str, str]]:
    """(css class, line) for a unified diff, so the history shows additions, removals and hunks in colour."""
    out = []
    for line in diff.splitlines():
        if line.startswith(("+++", "---")):
            out.append(("diff-file", line))
        elif line.startswith("@@"):
            out.append(("diff-hunk", line))
        elif line.startswith("+"):
            out.append(("diff-add", line))
        elif line.startswith("-"):
            out.append(("diff-del", line))
        else:
            out.append(("diff-same", line))
    return out


# --- the file admins ------------------------------------------------------------------------------------------------
class ContextFileForm(forms.ModelForm):
    content = forms.CharField(required=False, strip=False, max_length=svc.CONTEXT_FILE_MAX_CHARS,
                              widget=forms.Textarea(attrs={"rows": 24, "cols": 100, "class": "context-file-editor",
                                                           "spellcheck": "false"}))

    def clean(self):
        """The service's own check (name, user id, size, NUL), so a bad value is a form error, not a failed save."""
        cleaned = super().clean()
        name = cleaned.get("name", getattr(self.instance, "name", ""))
        user_id = cleaned.get("user_id", getattr(self.instance, "user_id", ""))
        if name == BOOTSTRAP_NAME and user_id and self.instance._state.adding and not cleaned.get("content"):
            self.add_error("content", "an empty BOOTSTRAP.md for a user means their first run is completed: "
                                      "there is nothing to add")
        elif name:
            try:
                svc.context_file_check(name, user_id or "", cleaned.get("content") or "")
            except ApplicationError as exc:
                field = next(iter(exc.details or {}), None) if isinstance(exc.details, dict) else None
                self.add_error(field if field in self.fields else None, exc.message)
        return cleaned


class ContextFileAdminBase(ServiceAdmin):
    """The editor, preview and history shared by the agent-level and the per-user file admins."""

    form = ContextFileForm
    change_form_template = "admin/tools_app/contextfile/change_form.html"
    readonly_fields = ["created_at", "updated_at"]
    list_select_related = ["agent"]
    scope_fields: tuple[str, ...] = ("agent", "name")

    @admin.display(description="size")
    def size(self, obj) -> str:
        return f"{len(obj.content)} characters"

    def get_readonly_fields(self, request, obj=None):
        # Which file a row is never changes: a rename would rewrite another file's history.
        return [*self.scope_fields, *self.readonly_fields] if obj is not None else self.readonly_fields

    def save_with_service(self, request, obj) -> list[str]:  # pragma: no cover - save_model is overridden
        raise NotImplementedError

    def save_model(self, request, obj, form, change):
        svc.context_file_write(agent=obj.agent, name=obj.name, content=form.cleaned_data.get("content") or "",
                               user_id=getattr(obj, "user_id", ""), actor=svc.ContextActor.of_person(request.user))
        row = type(obj)._default_manager.filter(**{f: getattr(obj, f) for f in ("agent", "name", *self._user_field())}).first()
        if row is not None:
            obj.pk, obj._state.adding = row.pk, False

    def _user_field(self) -> tuple[str, ...]:
        return ("user_id",) if "user_id" in self.scope_fields else ()

    def delete_with_service(self, request, queryset) -> int:
        for row in queryset.select_related("agent"):
            svc.context_file_delete(agent=row.agent, name=row.name, user_id=getattr(row, "user_id", ""),
                                    actor=svc.ContextActor.of_person(request.user))
        return 0

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        context["preview_url"] = reverse("admin:tools_app_contextfile_preview")
        form = context.get("adminform").form if context.get("adminform") is not None else None
        text = form["content"].value() if form is not None and "content" in form.fields else getattr(obj, "content", "")
        context["live_preview"] = markdown_to_html(text or "")  # the same render the live preview asks for
        if obj is not None and obj.pk:
            context["history_url"] = _history_url(obj.agent_id, obj.name, getattr(obj, "user_id", ""))
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)

    def history_view(self, request, object_id, extra_context=None):
        """The file's versions with their diffs (replaces the admin's log-entry history)."""
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied  # before the lookup: whether an id exists is not for people without the permission
        obj = self.get_object(request, object_id)
        if obj is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        return HttpResponseRedirect(_history_url(obj.agent_id, obj.name, getattr(obj, "user_id", "")))


@admin.register(AgentContextFile)
class AgentContextFileAdmin(ContextFileAdminBase):
    list_display = ["agent", "name", "size", "updated_at"]
    list_filter = ["name", "agent"]
    search_fields = ["agent__key", "content"]
    fields = ["agent", "name", "content", "created_at", "updated_at"]

    def get_urls(self):
        preview = person_required("tools_app.view_agentcontextfile")(self.preview_view)
        return [path("preview/", self.admin_site.admin_view(preview), name="tools_app_contextfile_preview"),
                *super().get_urls()]

    def preview_view(self, request):
        """The server-rendered preview of the editor's text (the change form's live preview asks for it)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not (self.has_view_or_change_permission(request)
                or request.user.has_perm("tools_app.change_usercontextfile")):
            return HttpResponse(status=403)
        return HttpResponse(markdown_to_html(request.POST.get("content", "")[:PREVIEW_MAX_CHARS]),
                            content_type="text/html; charset=utf-8")


@admin.register(UserContextFile)
class UserContextFileAdmin(ContextFileAdminBase):
    list_display = ["agent", "user_id", "name", "size", "updated_at"]
    list_filter = ["name", "agent"]
    search_fields = ["agent__key", "user_id", "content"]
    fields = ["agent", "user_id", "name", "content", "created_at", "updated_at"]
    scope_fields = ("agent", "user_id", "name")


# --- history and restore --------------------------------------------------------------------------------------------
def _history_url(agent_id: int, name: str, user_id: str) -> str:
    url = reverse("admin:tools_app_contextfileversion_file_history", args=[agent_id, name])
    return f"{url}?{urlencode({'user_id': user_id})}" if user_id else url


def _may_restore(request, user_id: str) -> bool:
    model = "usercontextfile" if user_id else "agentcontextfile"
    return person_may(request.user, f"tools_app.change_{model}")


@admin.register(ContextFileVersion)
class ContextFileVersionAdmin(ReadOnlyAdmin):
    """Every write to every context file, read-only; each version links to its file's history and can be
    restored."""

    list_display = ["created_at", "agent", "user_id", "name", "actor_label", "deleted", "restored_from"]
    list_filter = ["actor_kind", "name", "deleted", "agent"]
    search_fields = ["agent__key", "user_id", "actor_name"]
    list_select_related = ["agent"]
    fields = ["agent", "user_id", "name", "actor_label", "created_at", "deleted", "restored_from", "previous_hash",
              "coloured_diff", "content"]
    readonly_fields = fields
    change_form_template = "admin/tools_app/contextfileversion/change_form.html"

    @admin.display(description="by")
    def actor_label(self, obj: ContextFileVersion) -> str:
        return obj.actor

    @admin.display(description="diff")
    def coloured_diff(self, obj: ContextFileVersion) -> str:
        return format_html('<pre class="context-diff">{}</pre>', mark_safe("\n".join(
            format_html('<span class="{}">{}</span>', cls, line) for cls, line in diff_lines(obj.diff))))


    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            context["history_url"] = _history_url(obj.agent_id, obj.name, obj.user_id)
            context["restore_url"] = reverse("admin:tools_app_contextfileversion_restore", args=[obj.pk])
            context["may_restore"] = _may_restore(request, obj.user_id)
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)

    def get_urls(self):
        history = person_required("tools_app.view_contextfileversion")(self.file_history_view)
        # Restoring is a write to the file: change_agentcontextfile or change_usercontextfile, checked per version.
        restore = person_required("tools_app.view_contextfileversion")(self.restore_view)
        return [path("file/<int:agent_id>/<str:name>/", self.admin_site.admin_view(history),
                     name="tools_app_contextfileversion_file_history"),
                path("<uuid:version_id>/restore/", self.admin_site.admin_view(restore),
                     name="tools_app_contextfileversion_restore"),
                *super().get_urls()]

    def file_history_view(self, request, agent_id: int, name: str):
        """One file's versions, newest first, each with its coloured diff and a restore button."""
        if not self.has_view_permission(request):
            return HttpResponse(status=403)
        agent = get_object_or_404(Agent, pk=agent_id)
        user_id = request.GET.get("user_id", "")
        versions = list(context_file_versions(agent, name, user_id)[:200])
        rows = [{"version": v, "diff": diff_lines(v.diff), "current": i == 0} for i, v in enumerate(versions)]
        model = UserContextFile if user_id else AgentContextFile
        current = model._default_manager.filter(agent=agent, name=name, **({"user_id": user_id} if user_id else {})).first()
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "agent": agent, "name": name,
                   "user_id": user_id, "rows": rows, "may_restore": _may_restore(request, user_id),
                   "title": f"History of {name} ({agent.key}{', user ' + user_id if user_id else ', agent-level'})",
                   "current_url": reverse(f"admin:tools_app_{model._meta.model_name}_change", args=[current.pk])
                   if current is not None else ""}
        return TemplateResponse(request, "admin/tools_app/contextfileversion/history.html", context)

    def restore_view(self, request, version_id):
        """POST: write the version's text back as this person (itself a new version)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        version = get_object_or_404(ContextFileVersion.objects.select_related("agent"), pk=version_id)
        if not _may_restore(request, version.user_id):
            return HttpResponse(status=403)
        try:
            change = svc.context_file_restore(version=version, actor=svc.ContextActor.of_person(request.user))
        except ApplicationError as exc:
            messages.error(request, exc.message)
        else:
            if change.version is None:
                messages.info(request, f"{version.name} already has the text of version {version.pk}: nothing changed.")
            else:
                messages.success(request, f"Restored {version.name} to version {version.pk} "
                                          f"(recorded as version {change.version.pk}).")
        return HttpResponseRedirect(_history_url(version.agent_id, version.name, version.user_id))
