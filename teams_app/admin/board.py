"""Admin for the team board: teams (created and changed through `teams_app.services.teams`, so the lead's member row
always exists; teammates edited inline; archive / reactivate; a link to the live board), tasks (read-only: status and
owner change only through the cancel / retry / unblock actions, which call the task services as the person), and
the read-only event log and mailbox. Every write is a thin call into a service, recorded as "user:<name>"."""
from __future__ import annotations

from typing import Any, Callable

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, Q
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from goclaw.authz import admin_permission
from goclaw.errors import ApplicationError
from teams_app.actors import Actor
from teams_app.choices import ACTIVE_STATUSES, MemberRole, TeamStatus
from teams_app.models import (Team, TaskAttachment, TaskComment, TeamEvent, TeamMember, TeamMessage, TeamTask,
                              task_identifier)
from teams_app.services import tasks as task_services
from teams_app.services import teams as team_services
from tools_app.admin.base import ReadOnlyAdmin

TEAM_FIELDS = ("name", "lead", "description", "status", "blocker_escalation", "lock_minutes", "stale_after_minutes",
               "review_stale_after_minutes")
SETTINGS = ("blocker_escalation", "lock_minutes", "stale_after_minutes", "review_stale_after_minutes")


def board_url(team_id: int) -> str:
    """The live board page (teams_app/urls.py); the literal path while that page is not mounted."""
    try:
        return reverse("teams:board", args=[team_id])
    except NoReverseMatch:
        return f"/teams/{team_id}/board/"


# --- teams ---------------------------------------------------------------------------------------------------------
class TeamForm(forms.ModelForm):
    """The team's own fields. Checks the services repeat (a name taken in any letter case) are made here too, so
    they show on the form instead of failing the save."""

    class Meta:
        model = Team
        fields = list(TEAM_FIELDS)

    def clean_name(self) -> str:
        name = (self.cleaned_data.get("name") or "").strip()
        if not name:
            raise forms.ValidationError("a team needs a name")
        taken = Team.objects.filter(name__iexact=name)
        if self.instance.pk:
            taken = taken.exclude(pk=self.instance.pk)
        if taken.exists():
            raise forms.ValidationError(f"a team named {name!r} already exists")
        return name


class TeammateForm(forms.ModelForm):
    role = forms.ChoiceField(choices=[(MemberRole.MEMBER, "member"), (MemberRole.REVIEWER, "reviewer")])

    class Meta:
        model = TeamMember
        fields = ["agent", "role"]


class TeammateFormSet(forms.BaseInlineFormSet):
    """The members and reviewers (the lead is the team's `lead` field, so its row is not edited here)."""

    def get_queryset(self):
        return super().get_queryset().exclude(role=MemberRole.LEAD).select_related("agent")

    def clean(self):
        super().clean()
        lead_id = getattr(self.instance, "lead_id", None)
        for form in self.forms:
            data = getattr(form, "cleaned_data", None) or {}
            if data.get("DELETE") or not data.get("agent"):
                continue
            if lead_id is not None and data["agent"].pk == lead_id and form.has_changed():
                form.add_error("agent", "this agent is the team's lead; choose another lead first")


class TeammateInline(admin.TabularInline):
    model = TeamMember
    form = TeammateForm
    formset = TeammateFormSet
    extra = 1
    verbose_name = "teammate"
    verbose_name_plural = "teammates (the lead is set above)"


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    form = TeamForm
    inlines = [TeammateInline]
    list_display = ["name", "lead", "status", "open_tasks", "member_count", "board_link", "updated_at"]
    list_filter = ["status"]
    search_fields = ["name", "description", "lead__key"]
    list_select_related = ["lead"]
    readonly_fields = ["board_link", "task_counter", "created_by", "created_at", "updated_at"]
    actions = ["archive_selected", "reactivate_selected"]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(
            open_task_count=Count("tasks", filter=Q(tasks__status__in=ACTIVE_STATUSES), distinct=True),
            member_total=Count("members", distinct=True))

    def get_fieldsets(self, request, obj=None):
        team = ["name", "lead", "description"] + (["status"] if obj is not None else [])
        fieldsets = [(None, {"fields": team}), ("Board settings", {"fields": list(SETTINGS)})]
        if obj is not None:
            fieldsets.append(("Record", {"fields": ["board_link", "task_counter", "created_by", "created_at",
                                                    "updated_at"]}))
        return fieldsets

    def has_delete_permission(self, request, obj=None):
        return False  # archive instead: the board and its history stay readable

    # --- display ---------------------------------------------------------------------------------------------------
    @admin.display(description="open tasks", ordering="open_task_count")
    def open_tasks(self, obj: Team) -> int:
        return getattr(obj, "open_task_count", 0)

    @admin.display(description="members", ordering="member_total")
    def member_count(self, obj: Team) -> int:
        return getattr(obj, "member_total", 0)

    @admin.display(description="board")
    def board_link(self, obj: Team) -> str:
        if not obj.pk:
            return "-"
        return format_html('<a class="team-board-link" href="{}">Open the live board</a>', board_url(obj.pk))

    # --- writes through the services ------------------------------------------------------------------------------
    def save_model(self, request, obj, form, change):
        actor = Actor.for_user(request.user)
        data = form.cleaned_data
        if not change:
            team = team_services.team_create(
                actor=actor, name=data["name"], lead=data["lead"], description=data.get("description") or "",
                **{key: data[key] for key in SETTINGS if key in data})
            obj.pk = team.pk
            obj._state.adding = False
            return
        changed = {key: data[key] for key in TEAM_FIELDS if key in form.changed_data}
        if changed:
            team_services.team_update(actor=actor, team=obj, **changed)

    def save_formset(self, request, form, formset, change):
        """Teammates through team_member_set / team_member_remove; rows left as they were are not touched."""
        if formset.model is not TeamMember:
            return super().save_formset(request, form, formset, change)
        actor, team = Actor.for_user(request.user), form.instance
        for row in formset.deleted_forms:
            if row.instance.pk:
                team_services.team_member_remove(actor=actor, team=team, agent=row.instance.agent)
        for row in formset.forms:
            data = getattr(row, "cleaned_data", None) or {}
            if row in formset.deleted_forms or not data.get("agent") or not row.has_changed():
                continue
            if row.instance.pk and row.instance.agent_id != data["agent"].pk:
                team_services.team_member_remove(actor=actor, team=team, agent=row.instance.agent)
            team_services.team_member_set(actor=actor, team=team, agent=data["agent"], role=data["role"])
        formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []

    def _set_status(self, request, queryset, status: str, verb: str) -> None:
        actor, done = Actor.for_user(request.user), 0
        for team in queryset.select_related("lead"):
            if team.status == status:
                continue
            try:
                team_services.team_update(actor=actor, team=team, status=status)
                done += 1
            except ApplicationError as exc:
                messages.error(request, f"{team.name}: {exc.message}")
        self.message_user(request, f"{verb} {done} team(s).", messages.SUCCESS if done else messages.INFO)

    @admin.action(description="Archive selected teams (their boards become read-only)", permissions=["change"])
    def archive_selected(self, request, queryset):
        self._set_status(request, queryset, TeamStatus.ARCHIVED, "Archived")

    @admin.action(description="Reactivate selected teams", permissions=["change"])
    def reactivate_selected(self, request, queryset):
        self._set_status(request, queryset, TeamStatus.ACTIVE, "Reactivated")


# --- tasks ---------------------------------------------------------------------------------------------------------
class _ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class TaskCommentInline(_ReadOnlyInline):
    model = TaskComment
    fields = readonly_fields = ["created_at", "kind", "author", "content"]


class TaskAttachmentInline(_ReadOnlyInline):
    model = TaskAttachment
    fields = readonly_fields = ["created_at", "path", "size", "note", "created_by"]


class TaskEventInline(_ReadOnlyInline):
    model = TeamEvent
    fields = readonly_fields = ["created_at", "event_type", "actor", "data"]
    verbose_name_plural = "events"


def _task_fields() -> list[str]:
    return ["identifier", "team", "subject", "description", "status", "priority", "owner", "blocked_by_list",
            "progress", "result", "question", "created_by", "lock_expires_at", "user_id", "channel", "chat_id",
            "created_at", "updated_at", "completed_at", "board_link"]


@admin.register(TeamTask)
class TeamTaskAdmin(admin.ModelAdmin):
    """Read-only: a task changes through the board's services (the actions here, the board page, the API, tools)."""

    list_display = ["identifier", "subject_short", "team", "status", "owner", "priority", "progress", "updated_at"]
    list_filter = ["team", "status", "owner"]
    search_fields = ["subject"]
    list_select_related = ["team", "owner"]
    inlines = [TaskCommentInline, TaskAttachmentInline, TaskEventInline]
    actions = ["cancel_selected", "retry_selected", "unblock_selected"]

    def get_fields(self, request, obj=None):
        return _task_fields()

    def get_readonly_fields(self, request, obj=None):
        return _task_fields()

    def has_add_permission(self, request):
        return False  # the lead (or a person through the API / board) creates tasks

    def has_change_permission(self, request, obj=None):
        return False  # a view-only page: the actions (cancel, retry, unblock) are the way to change a task

    def has_delete_permission(self, request, obj=None):
        return False  # cancel instead: the audit stays

    # --- display ---------------------------------------------------------------------------------------------------
    @admin.display(description="id", ordering="number")
    def identifier(self, obj: TeamTask) -> str:
        return obj.identifier

    @admin.display(description="subject", ordering="subject")
    def subject_short(self, obj: TeamTask) -> str:
        return obj.subject if len(obj.subject) <= 80 else obj.subject[:79] + "…"

    @admin.display(description="progress", ordering="progress_percent")
    def progress(self, obj: TeamTask) -> str:
        return f"{obj.progress_percent}%" + (f" · {obj.progress_step}" if obj.progress_step else "")

    @admin.display(description="blocked by")
    def blocked_by_list(self, obj: TeamTask) -> str:
        numbers = obj.blocked_by.order_by("number").values_list("number", flat=True)
        return ", ".join(task_identifier(n) for n in numbers) or "-"

    @admin.display(description="board")
    def board_link(self, obj: TeamTask) -> str:
        return format_html('<a class="team-board-link" href="{}">Open the live board</a>', board_url(obj.team_id))

    # --- actions: one service call per task, as the person, reported per task -------------------------------------
    def _each(self, request, queryset, verb: str, run: Callable[[Actor, TeamTask], Any]) -> None:
        actor, done = Actor.for_user(request.user), []
        for task in queryset.select_related("team", "team__lead", "owner").order_by("team", "number"):
            try:
                run(actor, task)
                done.append(f"{task.team.name} {task.identifier}")
            except ApplicationError as exc:
                messages.error(request, f"{task.team.name} {task.identifier}: {exc.message}")
        if done:
            self.message_user(request, f"{verb}: {', '.join(done)}.", messages.SUCCESS)
        else:
            self.message_user(request, f"No task was {verb.lower()}.", messages.INFO)

    # The page is view-only (has_change_permission is False); the actions need what the board's actions need.
    has_act_permission = admin_permission("teams_app.change_teamtask")

    @admin.action(description="Cancel selected tasks", permissions=["act"])
    def cancel_selected(self, request, queryset):
        reason = f"cancelled by {request.user.get_username()} in the admin"
        self._each(request, queryset, "Cancelled",
                   lambda actor, task: task_services.task_cancel(actor=actor, task=task, reason=reason))

    @admin.action(description="Retry selected tasks (failed, stale, cancelled or completed → pending)", permissions=["act"])
    def retry_selected(self, request, queryset):
        self._each(request, queryset, "Retried", lambda actor, task: task_services.task_retry(actor=actor, task=task))

    @admin.action(description="Unblock selected tasks (blocked → pending, unfinished dependencies dropped)",
                  permissions=["act"])
    def unblock_selected(self, request, queryset):
        self._each(request, queryset, "Unblocked",
                   lambda actor, task: task_services.task_unblock(actor=actor, task=task))


# --- the event log and the mailbox (read-only) ---------------------------------------------------------------------
@admin.register(TeamEvent)
class TeamEventAdmin(ReadOnlyAdmin):
    """The board's audit log: who (agent:<key>, user:<name>, system) did what to which task."""

    list_display = ["created_at", "team", "task_ref", "event_type", "actor"]
    list_filter = ["event_type", "team", "created_at"]
    search_fields = ["actor"]
    list_select_related = ["team", "task"]
    date_hierarchy = "created_at"

    @admin.display(description="task", ordering="task__number")
    def task_ref(self, obj: TeamEvent) -> str:
        return obj.task.identifier if obj.task_id else "-"


@admin.register(TeamMessage)
class TeamMessageAdmin(ReadOnlyAdmin):
    """The mailbox, one row per recipient; `read at` is the read receipt."""

    list_display = ["created_at", "team", "sender", "recipient", "kind", "text_short", "read_at"]
    list_filter = ["kind", "team", ("read_at", admin.EmptyFieldListFilter)]
    search_fields = ["sender", "recipient__key", "text"]
    list_select_related = ["team", "recipient"]

    @admin.display(description="text")
    def text_short(self, obj: TeamMessage) -> str:
        return obj.text if len(obj.text) <= 80 else obj.text[:79] + "…"
