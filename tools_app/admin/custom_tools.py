"""Admin for custom tools: edit with the service's checks shown on the form, a preview of the rendered command, the env
write-only (names shown as set, with the last change), import / export, and a "try it" page that runs the tool as a
chosen agent through the normal pipeline. Saves and deletes go through `tools_app.services.custom_tools`."""
from __future__ import annotations

import json

from django.contrib import admin, messages
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from goclaw.authz import person_required
from goclaw.errors import ApplicationError
from tools_app import pipeline
from tools_app.admin.base import SealedEnvAdmin, SealedEnvForm
from tools_app.calls import ToolCall
from tools_app.custom_tools import TemplateError, compile_template, render_command, sample_arguments
from tools_app.models import Agent, CustomTool
from tools_app.security.scrub import scrub_text
from tools_app.services import custom_tools as svc


class CustomToolForm(SealedEnvForm):
    """The definition plus write-only env changes (see SealedEnvForm); clean() runs the service's whole check,
    collisions included."""

    class Meta:
        model = CustomTool
        fields = ["name", "description", "parameters", "command", "timeout_seconds", "working_dir", "agent", "enabled",
                  "group", "requires_approval", "always_require_approval"]

    def clean(self):
        cleaned = super().clean()
        fields = {name: cleaned.get(name, getattr(self.instance, name, None)) for name in svc.EDITABLE}
        fields["working_dir"] = fields.get("working_dir") or ""
        fields["group"] = fields.get("group") or "custom"
        for field, message in svc.custom_tool_check(fields, exclude_pk=self.instance.pk if not self._state_adding
                                                    else None).items():
            if field in self.fields and field not in self.errors:
                self.add_error(field, message)
        if "env_set" not in self.errors and (problem := svc.tool_env_problems(self.env_changes(), allow_unset=True)):
            self.add_error("env_set", problem)
        return cleaned

    @property
    def _state_adding(self) -> bool:
        return self.instance._state.adding


@admin.register(CustomTool)
class CustomToolAdmin(SealedEnvAdmin):
    form = CustomToolForm
    list_display = ["name", "agent", "group", "enabled", "timeout_seconds", "env_status", "updated_at"]
    list_filter = ["enabled", "group", "agent"]
    search_fields = ["name", "description", "command"]
    readonly_fields = ["command_preview", "env_status", "env_changed_at", "created_by", "created_at", "updated_at",
                       "try_link"]
    fieldsets = [
        (None, {"fields": ["name", "description", "agent", "enabled", "group"]}),
        ("Command", {"fields": ["parameters", "command", "command_preview", "working_dir", "timeout_seconds"]}),
        ("Approval", {"fields": ["requires_approval", "always_require_approval"]}),
        ("Environment (write-only)", {"fields": ["env_status", "env_changed_at", "env_set", "env_unset"]}),
        ("Record", {"fields": ["try_link", "created_by", "created_at", "updated_at"]}),
    ]
    actions = ["export_selected"]
    change_list_template = "admin/tools_app/customtool_change_list.html"

    # --- display ---------------------------------------------------------------------------------------------------
    @admin.display(description="env")
    def env_status(self, obj: CustomTool) -> str:
        """Which variables are set: names only, never values."""
        names = obj.env_names or []
        if not names:
            return "none set"
        return format_html_join(", ", "{} (set)", ((name,) for name in names))

    @admin.display(description="rendered with sample arguments")
    def command_preview(self, obj: CustomTool) -> str:
        if not obj.pk:
            return "saved tools show a preview here"
        samples = sample_arguments(obj.parameters)
        try:
            command = render_command(obj.command, samples)
            script = compile_template(obj.command).script
        except TemplateError as exc:
            return str(exc)
        return format_html("<code>{}</code><br><small>arguments: {}</small><br><small>the process runs "
                           "<code>{}</code> with each argument in its GOCLAW_ARG_ variable</small>", command,
                           json.dumps(samples, ensure_ascii=False), script)

    @admin.display(description="try it")
    def try_link(self, obj: CustomTool) -> str:
        if not obj.pk:
            return "-"
        return format_html('<a href="{}">Run this tool as an agent…</a>',
                           reverse("admin:tools_app_customtool_try", args=[obj.pk]))

    # --- writes through the services ------------------------------------------------------------------------------
    editable = svc.EDITABLE

    def create_row(self, actor, env, fields):
        return svc.custom_tool_create(actor=actor, env=env, **fields)

    def update_row(self, actor, row, env, fields):
        return svc.custom_tool_update(actor=actor, tool=row, env=env, **fields)

    def delete_with_service(self, request, queryset):
        for tool in queryset:
            svc.custom_tool_delete(actor=request.user, tool=tool)

    @admin.action(description="Export selected as JSON (no env values)", permissions=["view"])
    def export_selected(self, request, queryset):
        data = svc.custom_tool_export(ids=list(queryset.values_list("pk", flat=True)))
        response = HttpResponse(json.dumps(data, indent=2, ensure_ascii=False), content_type="application/json")
        response["Content-Disposition"] = 'attachment; filename="custom-tools.json"'
        return response

    # --- extra pages -----------------------------------------------------------------------------------------------
    def get_urls(self):
        import_view = person_required("tools_app.add_customtool", "tools_app.change_customtool")(self.import_view)
        # Trying a tool runs it as an agent (the pipeline, the audit row): the right to act as an agent.
        try_view = person_required(GET=("tools_app.view_customtool",),
                                   POST=("tools_app.view_customtool", "tools_app.execute_as_agent"))(self.try_view)
        return [path("import/", self.admin_site.admin_view(import_view), name="tools_app_customtool_import"),
                path("<uuid:tool_id>/try/", self.admin_site.admin_view(try_view), name="tools_app_customtool_try"),
                *super().get_urls()]

    def _page(self, request, template: str, title: str, **context) -> TemplateResponse:
        return TemplateResponse(request, template, {**self.admin_site.each_context(request), "opts": self.model._meta,
                                                    "title": title, **context})

    def import_view(self, request):
        """Paste or upload the JSON format; all or nothing, every problem listed with its position."""
        problems, text = [], ""
        if request.method == "POST":
            upload = request.FILES.get("file")
            text = upload.read().decode("utf-8", "replace") if upload else request.POST.get("json", "")
            try:
                report = svc.custom_tool_import(actor=request.user, data=json.loads(text))
            except json.JSONDecodeError as exc:
                problems = [f"not JSON: {exc}"]
            except ApplicationError as exc:
                details = exc.details if isinstance(exc.details, dict) else {}
                problems = details.get("problems") or [exc.message]
            else:
                self.message_user(request, f"Imported: created {', '.join(report['created']) or 'none'}; "
                                           f"updated {', '.join(report['updated']) or 'none'}.", messages.SUCCESS)
                return HttpResponseRedirect(reverse("admin:tools_app_customtool_changelist"))
        # The pasted text is shown again only on failure and without env values (they are write-only).
        return self._page(request, "admin/tools_app/customtool_import.html", "Import custom tools",
                          problems=problems, text=_without_env(text))

    def try_view(self, request, tool_id):
        """Run the tool as a chosen agent through the normal pipeline (policy, hooks, approvals, scrubbing, audit)."""
        tool = get_object_or_404(CustomTool, pk=tool_id)
        agents = Agent.objects.filter(pk=tool.agent_id) if tool.agent_id else Agent.objects.filter(enabled=True)
        arguments_text = request.POST.get("arguments") or json.dumps(sample_arguments(tool.parameters), indent=2)
        chosen, outcome, problem, command = request.POST.get("agent", ""), None, "", ""
        if request.method == "POST":
            agent = agents.filter(key=chosen).first() if "\x00" not in chosen else None
            try:
                arguments = json.loads(arguments_text)
            except json.JSONDecodeError as exc:
                arguments, problem = None, f"arguments are not JSON: {exc}"
            if agent is None:
                problem = problem or "choose an agent that has this tool"
            elif not isinstance(arguments, dict):
                problem = problem or "arguments must be a JSON object"
            else:
                try:
                    command = scrub_text(render_command(tool.command, arguments))
                except TemplateError as exc:
                    command = str(exc)
                outcome = pipeline.execute(ToolCall(agent, tool.name, arguments, channel="admin",
                                                    user_id=f"admin:{request.user.get_username()}"))
        return self._page(request, "admin/tools_app/customtool_try.html", f"Try {tool.name}", original=tool,
                          agents=agents, chosen=chosen, arguments=arguments_text, outcome=outcome, problem=problem,
                          command=command)


def _without_env(text: str) -> str:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return ""  # unparsable text might hold a value: do not echo it
    for entry in data if isinstance(data, list) else [data]:
        if isinstance(entry, dict) and isinstance(entry.get("env"), dict):
            entry["env"] = {name: "" for name in entry["env"]}
    return json.dumps(data, indent=2, ensure_ascii=False)
